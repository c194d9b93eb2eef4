#!/usr/bin/env bash
# Calls a program makes through libc's syscall() instead of the named
# function, and connections passed to another process with SCM_RIGHTS
# (tests/integration/raw_peer.py says what each case does).
#   usage: raw-calls.sh close|io|io_uring|handoff|handoff-raw
# libuv closes every descriptor with syscall(SYS_close). The shim did not
# see those closes: the peer's unread hello made the kernel reset a
# connection closed unread (the peer read ECONNRESET, not the end of the
# stream), and the fd table kept the numbers. Reads and writes made that
# way read the peer's frames as data. libuv also registers its descriptors
# with epoll through an io_uring when it can, which the shim cannot see:
# its waits then slept through the bytes in their rings. And a connection
# a process accepted, passed to a worker and closed was finished by the
# closing process's shim under the worker.
# Asserted: the case's own checks (every byte compared, the end of the
# stream read, not a reset); with the shim upgrading: close and io have no
# protocol error, io moved its bytes over shared memory (R2SOCK_EXPECT_PATH),
# io_uring_setup answered ENOSYS and was counted, and the worker of a
# handoff adopted the passed connection, which went on shared memory at
# both ends.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
r2s_python
how=${1:?usage: raw-calls.sh close|io|io_uring|handoff|handoff-raw}
case $how in close|io|io_uring|handoff|handoff-raw) ;; *) fail "usage: raw-calls.sh close|io|io_uring|handoff|handoff-raw" ;; esac
PEER=$(dirname "$0")/raw_peer.py
BYTES=$((8 << 20))

run 60 "$PY" "$PEER" "$how" --bytes "$BYTES" >"$TMP/out"
cat "$TMP/out" >&2
grep -q "^raw_peer: OK $how" "$TMP/out" || fail "raw_peer did not report OK"
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }
upgrading=0
[[ ${R2SOCK_UPGRADE:-auto} != never ]] && upgrading=1
proto=$(stats_sum reset_protocol) refused=$(stats_sum io_uring_refused)
log "stats: reset_protocol=$proto io_uring_refused=$refused conn_shm=$(stats_sum conn_shm) sockets_adopted=$(stats_sum sockets_adopted)"
((proto == 0)) || fail "a protocol error was counted (reset_protocol=$proto)"
case $how in
  io)
    check_stats conns=2 bulk=2 bytes=$((2 * BYTES)) procs=1 ;;
  io_uring)
    if ((upgrading)); then
      grep -q "setup=ENOSYS" "$TMP/out" || fail "io_uring_setup through syscall() was not refused with ENOSYS"
      ((refused == 1)) || fail "expected io_uring_refused=1, saw $refused"
    else
      ((refused == 0)) || fail "io_uring_setup was refused although no connection may upgrade (io_uring_refused=$refused)"
    fi ;;
  handoff|handoff-raw)
    if ((upgrading)); then
      adopted=$(stats_sum sockets_adopted) shm=$(stats_sum conn_shm)
      ((adopted == 1)) || fail "expected the worker to adopt the passed connection (sockets_adopted=1), saw $adopted"
      ((shm == 2)) || fail "expected the client's and the worker's ends on shared memory (conn_shm=2), saw $shm"
    fi ;;
esac
log PASS
