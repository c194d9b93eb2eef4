#!/usr/bin/env bash
# Reads at the edges of a carried connection (tests/integration/
# read_edges_peer.py), as Linux's TCP answers them (the tcp variant checks
# the peer's expectations against the kernel). The client reads N bytes;
# on the idle connection a blocking read under SO_RCVTIMEO (200 ms) must
# fail with EAGAIN, not sooner; then it lets the server send a tail, waits
# until the tail is queued, shuts its reading down, and must read the tail
# byte for byte, then the end of the stream at once on every later read,
# blocking or not. On the shm variant the tail comes out of the ring
# (asserted from the stats): the reader's poll of the ring
# (r2s__link_spin_rx) must leave a shut-down read to the read itself, which
# hands out the ring's bytes, then the end; and a timeout counts from the
# start of that poll. Two runs.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/read_edges_peer.py
# N: four times the largest ring, so that the bytes before the switch are
# a small prefix and the tail comes out of the ring.
N=$((32 << 20)) T=4096
SHIM=()
shm_snapshot
for i in 1 2; do
  port=$(free_port)
  shim_at "$TMP/server-$i.stats"
  start_server "server-$i" "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --seed "$i" \
    --bytes "$N" --tail "$T"
  shim_at "$TMP/client-$i.stats"
  run_to "$TMP/client-$i.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --seed "$i" \
    --bytes "$N" --tail "$T"
  wait_server "server-$i" 30
  grep -q '^read_edges_peer server: OK$' "$TMP/server-$i.log" ||
    fail "run $i: the server did not report OK: $(tail -n 3 "$TMP/server-$i.log")"
  grep -q "^read_edges_peer client: OK received=$((N + T))\$" "$TMP/client-$i.out" ||
    fail "run $i: the client did not report OK: $(tail -n 3 "$TMP/client-$i.out")"
  # TCP carries a prefix of the stream only (the bytes before the switch):
  # if that prefix ends before the tail, the tail came from the ring.
  if [[ -n $R2SOCK_LIB && ${R2SOCK_EXPECT_PATH:-} == shm ]]; then
    tcp_rx=$(STATS=$TMP/client-$i.stats stats_sum bytes_tcp_rx)
    shm_rx=$(STATS=$TMP/client-$i.stats stats_sum bytes_shm_rx)
    ((shm_rx + tcp_rx == N + T && tcp_rx + T <= N)) ||
      fail "run $i: expected the tail and most of the $N bytes from the ring, saw bytes_shm_rx=$shm_rx bytes_tcp_rx=$tcp_rx"
    log "run $i: client bytes_shm_rx=$shm_rx bytes_tcp_rx=$tcp_rx"
  fi
  cat "$TMP/server-$i.stats" "$TMP/client-$i.stats" >>"$STATS"
  log "run $i: $N bytes, then the $T-byte tail after SO_RCVTIMEO ran out and SHUT_RD, then the end of the stream"
done
check_stats conns=4 bulk=4 bytes=$((2 * (N + T))) procs=4
shm_check_leaks
log PASS
