#!/usr/bin/env bash
# What plain Linux TCP does at resets, urgent data and readiness, asserted
# with both ends of each connection in one process
# (tests/integration/tcp_exact_peer.py, which describes each case): an
# application must see exactly that under the shim, whatever path its
# connection took. Every call is bounded: a hang fails with the call and
# what TCP does there.
#   writer-reset:      a reader closes with the writer's bytes unread (TCP
#                      resets): the writer's sends fail with ECONNRESET or
#                      EPIPE within 10 s of the close, never block for good
#   data-before-reset: a 25-byte request, then an abortive close: the
#                      server reads the 25 bytes, then ECONNRESET, then b''
#   oobinline-hello:   SO_OOBINLINE set after accept (before or after the
#                      client's bytes came) or on a client whose server speaks
#                      first: each reads its peer's bytes and no other; an
#                      application's own urgent byte comes inline at its mark
#   oob-signalled:     an urgent byte sent right after accept: select()'s
#                      exceptfds, POLLPRI, EPOLLPRI, then recv(MSG_OOB)
#   write-after-close: writes to a peer that closed (FIN): the 1st succeeds,
#                      the 2nd fails with EPIPE or ECONNRESET (every one of
#                      200 plain rounds here); asserted by the 5th
#   epoll-add-ready:   a connection whose request is in, added to (or
#                      enabled in) an epoll set another thread already waits
#                      on: the waiter wakes with EPOLLIN within 1 s
#   epoll-after-close: a connection closed without EPOLL_CTL_DEL leaves the
#                      epoll set: nothing of it is reported, not even to a
#                      new connection on its descriptor number
#   recv-untouched:    a read writes the bytes it returns into the caller's
#                      buffers and no other byte (recvmsg_into, recv_into),
#                      also the first read after the peer's switch mark
#   buffer-sizes:      SO_SNDBUF and SO_RCVBUF the application set bound
#                      what a writer has in flight, as TCP's do, and a
#                      writer blocked on them fails when its reader closes
# The cases are races as much as states: each runs 6 rounds (epoll-add-ready
# 8), alternating blocking sockets and socket timeouts. Under the shim with
# upgrades (shm variant) they run twice, with the variant's R2SOCK_UPGRADE
# and with it unset (the default policy, auto), and a failure names each
# policy that failed. The connections are short or end in resets: their
# bytes need not go through shared memory; where a case depends on the path,
# the path is asserted from the stats.
#   usage: tcp-exact.sh writer-reset|data-before-reset|oobinline-hello|oob-signalled|write-after-close|epoll-add-ready|epoll-after-close|buffer-sizes|recv-untouched
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/tcp_exact_peer.py
CASE=${1:?usage: tcp-exact.sh CASE (see above)}
case $CASE in
  writer-reset | data-before-reset | oobinline-hello | oob-signalled | write-after-close | epoll-after-close | recv-untouched) ROUNDS=6 ;;
  epoll-add-ready) ROUNDS=8 ;;
  buffer-sizes) ROUNDS=4 ;;
  *) fail "unknown case '$CASE'" ;;
esac

# The policies to run: plain (no shim), the tcp variant's `never`, or the
# shm variant's value and then the default.
if [[ -z $R2SOCK_LIB ]]; then
  policies=(plain)
elif [[ ${R2SOCK_UPGRADE:-auto} == never ]]; then
  policies=(never)
elif [[ -z ${R2SOCK_UPGRADE:-} ]]; then
  policies=(default)
else
  policies=("${R2SOCK_UPGRADE:-auto}" default)
fi

# attempt POLICY: one run of the case (its output in $TMP/POLICY.out, its
# stats in $TMP/POLICY.stats); a failure is noted in FAILED, not fatal, so
# that every policy is tried. 40 s each: the peer's own bounds end a hung
# round within 25 s.
FAILED=()
attempt() {
  local policy=$1 rc=0 out=$TMP/$1.out line
  local pol=(env)
  case $policy in
    default) pol=(env -u R2SOCK_UPGRADE) ;;
    plain | never) ;;
    *) pol=(env R2SOCK_UPGRADE="$policy") ;;
  esac
  shim_at "$TMP/$policy.stats"
  timeout -k 5 40 "${pol[@]}" "${SHIM_AT[@]}" "$PY" "$PEER" "$CASE" --rounds "$ROUNDS" >"$out" 2>&1 || rc=$?
  line=$(grep "^tcp_exact_peer $CASE: " "$out" | tail -n 1 || true)
  if ((rc == 0)) && [[ $line == *": OK "* ]]; then
    log "$policy: $line"
    return 0
  fi
  if ((rc == 124 || rc == 137)); then
    line="timed out after 40 s; last: ${line:-$(tail -n 1 "$out")}"
  elif [[ $line != *FAIL* ]]; then
    line="exit status $rc; its output: $(tail -n 3 "$out")"
  fi
  log "$policy: $line"
  case $policy in
    plain) policy="no shim" ;;
    default) policy="R2SOCK_UPGRADE unset (auto)" ;;
    *) policy="R2SOCK_UPGRADE=$policy" ;;
  esac
  FAILED+=("[$policy] ${line#"tcp_exact_peer $CASE: "}")
}

shm_snapshot
for policy in "${policies[@]}"; do
  attempt "$policy"
done
if ((${#FAILED[@]})); then
  msg=$(printf '%s\n' "${FAILED[@]}")
  fail "${#FAILED[@]} of ${#policies[@]} runs failed:"$'\n'"$msg"
fi

# conn_seen: both ends of every connection are in the one process.
conns=0
for policy in "${policies[@]}"; do
  n=$(sed -n "s/^tcp_exact_peer $CASE: OK rounds=[0-9]* conns=\([0-9]*\)\$/\1/p" "$TMP/$policy.out")
  conns=$((conns + 2 * n))
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/$policy.stats" >>"$STATS"
done
check_stats conns=$conns procs=${#policies[@]}

# The path each case met, where it depends on the policy:
#   epoll-add-ready: 4 answers of 32 KiB pass the default's 64 KiB, so under
#     either policy every end is on shared memory: the last request is in a
#     ring when the connection is added;
#   buffer-sizes, epoll-after-close: 96 KiB each way first, so under either
#     policy every end is on shared memory (the rings honour the sizes; a
#     carried socket outlives its close in the shim's descriptors);
#   writer-reset (now): some writers (a third to a half seen) send into a
#     ring before the reader closes: the reset is met behind one;
#   data-before-reset (default): 25-byte connections stay on TCP: the reset
#     is kernel TCP's, as on a connection that never upgraded.
if [[ -n $R2SOCK_LIB ]]; then
  for policy in "${policies[@]}"; do
    shm=$(STATS=$TMP/$policy.stats stats_sum conn_shm)
    seen=$(STATS=$TMP/$policy.stats stats_sum conn_seen)
    case $CASE:$policy in
      *:never) ;;
      epoll-add-ready:* | buffer-sizes:* | epoll-after-close:*)
        ((shm == seen)) ||
          fail "$policy: expected every connection end on shared memory, saw conn_shm=$shm of conn_seen=$seen" ;;
      writer-reset:default) ;;
      writer-reset:*)
        ((shm >= 1)) || fail "$policy: expected some writers on shared memory before the reset, saw conn_shm=0" ;;
      data-before-reset:default)
        ((shm == 0)) || fail "$policy: expected its 25-byte connections on TCP (conn_shm=0), saw conn_shm=$shm" ;;
    esac
    log "$policy: conn_shm=$shm of conn_seen=$seen"
  done
fi
[[ -z $R2SOCK_LIB ]] || shm_check_leaks
log PASS
