#!/usr/bin/env bash
# A server that greets first, and whose shim switches only after its greeting
# (R2SOCK_UPGRADE=G on the server, under R2SOCK_UPGRADE=now): the greeting
# lies in front of its switch mark and handshake. The client sends N bytes
# before it reads anything (tests/integration/greeting_peer.py). Its shim,
# which waits for that handshake, reads the greeting ahead into the link's
# bounded buffer (docs/protocol.md, "Application bytes in front of control
# frames"); the application then finds it through select, FIONREAD,
# MSG_PEEK, MSG_DONTWAIT and MSG_WAITALL reads, byte for byte. Two runs.
#   usage: read-ahead.sh within|beyond|peek-past
#   within: a 16 KiB greeting; under now the client's N bytes must go
#           through shared memory (>= 90%). Before the buffer existed they
#           all went as TCP frames.
#   beyond: a 256 KiB greeting, more than the buffer holds: the client's
#           shim cannot reach the handshake and goes on with TCP frames;
#           only the bytes, in order, are asserted, so 32 MiB: four times
#           the largest ring, many times the socket buffers.
#   peek-past: a 96 KiB greeting that the client peeks whole before it
#           sends (its shim's sender then reads 64 KiB of it ahead, the
#           rest stays in the socket), then reads with one read of the
#           peeked length, which must return all of it: the read continues
#           past the buffer's end (before the fix, it returned 65536).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/greeting_peer.py
mode=${1:?usage: read-ahead.sh within|beyond|peek-past}
N=$((128 << 20))
client_opts=()
case $mode in
  within) G=$((16 << 10)) ;;
  beyond) G=$((256 << 10)) N=$((32 << 20)) ;;
  peek-past) G=$((96 << 10)) N=$((8 << 20)) client_opts=(--peek-first) ;;
  *) fail "unknown mode '$mode'" ;;
esac
server_env=()
[[ ${R2SOCK_UPGRADE:-} == now ]] && server_env=(R2SOCK_UPGRADE=$G)
SHIM=()
shm_snapshot
for i in 1 2; do
  port=$(free_port)
  shim_at "$TMP/server-$i.stats"
  start_server "server-$i" "$port" "${SHIM_AT[@]}" "${server_env[@]}" "$PY" "$PEER" server --port "$port" \
    --seed "$i" --greeting "$G" --bytes "$N"
  shim_at "$TMP/client-$i.stats"
  run_to "$TMP/client-$i.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --seed "$i" \
    --greeting "$G" --bytes "$N" "${client_opts[@]}"
  wait_server "server-$i" 30
  got=$(grep '^greeting_peer server:' "$TMP/server-$i.log" || true)
  [[ $got == "greeting_peer server: received=$N" ]] || fail "run $i: the server printed '$got', expected received=$N"
  grep -q "^greeting_peer client: sent=$N greeting=$G\$" "$TMP/client-$i.out" ||
    fail "run $i: the client did not report sent=$N greeting=$G: $(tail -n 3 "$TMP/client-$i.out")"
  if [[ $mode == within && -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} == now ]]; then
    shm_tx=$(STATS=$TMP/client-$i.stats stats_sum bytes_shm_tx)
    ((shm_tx * 10 >= N * 9)) ||
      fail "run $i: expected >= 90% of the client's $N bytes through shared memory, saw bytes_shm_tx=$shm_tx"
    log "run $i: client bytes_shm_tx=$shm_tx of $N"
  fi
  cat "$TMP/server-$i.stats" "$TMP/client-$i.stats" >>"$STATS"
  log "run $i: $N bytes one way, the $G-byte greeting the other, both byte-exact"
done
check_stats conns=4 bytes=$((2 * (N + G))) procs=4
shm_check_leaks
log PASS
