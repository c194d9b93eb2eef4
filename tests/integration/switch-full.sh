#!/usr/bin/env bash
# The sender's shim learns of the peer's ring while its socket is full of
# DATA frames the peer has not read, and the application then shuts its side
# down (tests/integration/switch_full_peer.py): every byte the server's
# writes took must reach the client before the end of the stream. Before the
# fix the server's shim queued its RING frame behind the full socket and
# went on into the ring; the shutdown's FIN then cut the frame off, and the
# client, never told to read its ring, saw the end of the stream after the
# DATA frames (21900 of 546188 bytes, in 4 of 4 runs): the premature EOF of
# the 1000-connection test under load. Now nothing goes into the ring until
# the RING frame is all in the kernel. Two runs, chunks of 100 and 300 bytes.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/switch_full_peer.py
SHIM=()
total=0 i=0
for chunk in 100 300; do
  i=$((i + 1))
  port=$(free_port)
  shim_at "$TMP/server-$i.stats"
  start_server "server-$i" "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --chunk "$chunk"
  shim_at "$TMP/client-$i.stats"
  run_to "$TMP/client-$i.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port"
  wait_server "server-$i" 30
  sent=$(sed -n 's/^switch_full_peer server: sent=\([0-9]*\)$/\1/p' "$TMP/server-$i.log")
  got=$(sed -n 's/^switch_full_peer client: received=\([0-9]*\)$/\1/p' "$TMP/client-$i.out")
  [[ -n $sent && -n $got ]] ||
    fail "run $i: no counts: $(tail -n 2 "$TMP/server-$i.log") / $(tail -n 2 "$TMP/client-$i.out")"
  ((got == sent)) || fail "run $i (chunks of $chunk): the server's writes took $sent bytes, the client received $got"
  log "run $i (chunks of $chunk): $sent bytes sent and received"
  total=$((total + sent))
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/server-$i.stats" "$TMP/client-$i.stats" >>"$STATS"
done
check_stats conns=4 bytes=$total procs=4
log PASS
