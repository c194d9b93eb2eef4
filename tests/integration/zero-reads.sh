#!/usr/bin/env bash
# Reads of no bytes on a carried connection: both ends of a checked stream
# (tests/progs stream_check --zero-reads) slip one before each of their
# reads: read and readv with no iovec or empty ones, recv, recvfrom and
# recvmsg of no bytes, MSG_PEEK and MSG_DONTWAIT of none, recvmmsg of one
# empty message. Each must answer as Linux does (0, EAGAIN when nonblocking
# and nothing is queued, recvmmsg 1) and take no byte; every byte of both
# directions must arrive, with no premature end of the stream.
#   usage: zero-reads.sh ring|frames
#   ring:   both ends as this user: the connection upgrades (the shm
#           variant asserts the bulk went through shared memory). Before
#           the fix an empty read in front of RING set the link's end of
#           stream, and the ring's first empty moment then ended it early
#           ("premature EOF in the data").
#   frames: the server runs as nobody (setpriv), so neither end may map the
#           other's ring and both directions stay in DATA frames over TCP,
#           where empty reads fall inside frames; both ends must count the
#           connection in tcp_other_user and none in conn_shm. Needs root
#           and the shim with rings (skipped otherwise, with the reason).
# Three streams, one per I/O style of stream_check (blocking with a sender
# thread, poll, edge-triggered epoll), both directions at once.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: zero-reads.sh ring|frames}
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
BYTES=32M
as_server=()
case $mode in
  ring) ;;
  frames)
    needs_rings "nothing to check without the shim" "no ring is ever offered, so no DATA frame is sent"
    [[ $(id -u) == 0 ]] || skip "running the server as nobody needs root"
    command -v setpriv >/dev/null || skip "setpriv is not installed"
    setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$R2SOCK_LIB" ||
      skip "user nobody cannot read $R2SOCK_LIB (a parent directory is not world-searchable)"
    as_server=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    # The server's stats file and log must be writable by nobody.
    chmod 1777 "$TMP"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac

shm_snapshot
n=0
for io in block poll nonblock-epoll-et; do
  port=$(free_port)
  n=$((n + 1))
  shim_at "$TMP/server-$io.stats"
  SHIM=()
  start_server "sc-$io" "$port" "${as_server[@]}" "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port "$port" \
    --mode "$io" --timeout 50
  shim_at "$TMP/client-$io.stats"
  run_to "$TMP/client-$io.out" 60 "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$port" --mode "$io" \
    --bytes "$BYTES" --bidir --halfclose --zero-reads --seed "$((40 + n))" --timeout 50
  wait_server "sc-$io" 20
  grep -q "stream_check client: OK .*flags=halfclose,bidir,zero-reads" "$TMP/client-$io.out" ||
    fail "$io: the client did not report OK with zero-reads: $(cat "$TMP/client-$io.out")"
  grep -q "stream_check server: OK .*flags=halfclose,bidir,zero-reads" "$TMP/sc-$io.log" ||
    fail "$io: the server did not report OK with zero-reads: $(cat "$TMP/sc-$io.log")"
  log "$io: $(grep -h 'stream_check client' "$TMP/client-$io.out")"
  if [[ $mode == frames ]]; then
    for end in server client; do
      ou=$(STATS=$TMP/$end-$io.stats stats_sum tcp_other_user)
      shm=$(STATS=$TMP/$end-$io.stats stats_sum conn_shm)
      ((ou == 1 && shm == 0)) ||
        fail "$io: the $end should count the connection in tcp_other_user (saw $ou) and none in conn_shm (saw $shm)"
    done
  fi
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/server-$io.stats" "$TMP/client-$io.stats" >>"$STATS"
done
bytes=$(numfmt --from=iec "$BYTES")
check_stats conns=$((2 * n)) bulk=$((2 * n)) bytes=$((2 * n * bytes)) procs=$((2 * n))
shm_check_leaks
log PASS
