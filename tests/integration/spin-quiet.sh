#!/usr/bin/env bash
# A blocked read that polls its ring looks at nothing else (src/stream.c,
# spin_ready): while the ring is polled, the socket carries only frames
# nobody asked for, and each look at it is a system call. The server of
# tests/integration/pingpong_peer.py blocks in recv() for about PAUSE each
# round, polls its ring for R2SOCK_SPIN_US=5000 of it, then sleeps until
# the client's doorbell. Its recvfrom calls are counted with strace (the
# application's reads of a ring never reach the kernel): a wait reads the
# socket when it arms and when its doorbell wakes it, 1 to 3 calls a round
# seen, so at most PER_ROUND a round. Old library: every 64th look read the
# socket, 6,312 recvfrom calls in the 40 rounds (6,261 failed with EAGAIN),
# against 128 (76) now; each traced call costs tens of microseconds, so a
# slower machine makes fewer looks, not more calls.
# shm only (both ends on rings); needs strace, and ptrace allowed.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
needs_rings "nothing to count without the shim" "no ring is ever polled"
need strace
strace -f -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here (ptrace not allowed)"

PEER=$(dirname "$0")/pingpong_peer.py
ROUNDS=40 PAUSE=0.01 PER_ROUND=5
port=$(free_port)
SHIM=()
shim_at "$TMP/server.stats"
start_server server "$port" strace -f -qq -e trace=recvfrom -o "$TMP/server.strace" \
  "${SHIM_AT[@]}" R2SOCK_SPIN_US=5000 "$PY" "$PEER" server --port "$port" --rounds "$ROUNDS"
shim_at "$TMP/client.stats"
run_to "$TMP/client.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --rounds "$ROUNDS" --pause "$PAUSE"
wait_server server 30
grep -q "^pingpong_peer client: rounds=$ROUNDS " "$TMP/client.out" ||
  fail "the client did not finish its rounds: $(tail -n 3 "$TMP/client.out")"
grep -q "^pingpong_peer server: rounds=$ROUNDS " "$TMP/server.log" ||
  fail "the server did not finish its rounds: $(tail -n 3 "$TMP/server.log")"
for end in server client; do
  shm=$(STATS=$TMP/$end.stats stats_sum conn_shm)
  ((shm == 1)) || fail "the $end should count its connection in conn_shm (saw $shm): nothing was polled"
done
calls=$(grep -c 'recvfrom(' "$TMP/server.strace" || true)
failed=$(grep -c 'recvfrom(.*= -1 EAGAIN' "$TMP/server.strace" || true)
log "server: $calls recvfrom calls in $ROUNDS rounds, $failed of them EAGAIN"
((calls <= ROUNDS * PER_ROUND)) ||
  fail "the server made $calls recvfrom calls in $ROUNDS rounds (at most $((ROUNDS * PER_ROUND)) expected): its poll of the ring read the socket"
log PASS
