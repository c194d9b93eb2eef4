#!/usr/bin/env bash
# A nonblocking send(MSG_OOB) while the sender's socket is full
# (tests/integration/oob_full_peer.py): as in switch-full.sh, the server's
# shim learns of the client's ring while its socket is full of DATA frames
# the client has not read, so its RING frame waits in the shim; then the
# server tries the urgent byte '!' without blocking until one is taken, and
# writes on. Its shim queues a PLAIN frame for the urgent byte, which cannot
# leave either: the try gets EAGAIN. The client reads late, with
# SO_OOBINLINE (the urgent byte stays in the stream at its place), and must
# receive exactly the bytes the server's writes took, in order.
# Two runs: `write` first writes on behind the refused urgent byte until 8
# writes have taken bytes (the first only once the client reads), then
# retries it; `oob` only retries the urgent byte. Before the fix the queued
# PLAIN frame did not stop the direction: writes went on into the ring
# behind the frame's offset, and each retry of the urgent byte queued
# another PLAIN frame. `write` failed in 5 runs of 5: the client received
# 87453 of 88237 bytes, differing from byte 21901 on (the 800 bytes of the
# 8 writes lost in the ring, 16 bytes of the second PLAIN frame read as
# data); `oob` in 3 of 3: send(MSG_OOB) failed with ENOBUFS once the
# repeated frames filled the shim's control queue.
# Under the shim with rings, asserts that the case was reached: the server's
# direction was in the ring (its debug log says so), the urgent
# byte was refused at least once, plain writes behind it were refused too
# (`write`), and the server's direction went back to TCP by a PLAIN frame
# (oob_fallbacks=1).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/oob_full_peer.py
SHIM=()
total=0 i=0
for mode in write oob; do
  i=$((i + 1))
  port=$(free_port)
  shim_at "$TMP/server-$i.stats"
  start_server "server-$i" "$port" "${SHIM_AT[@]}" R2SOCK_LOG=debug "$PY" "$PEER" server --port "$port" --mode "$mode" \
    --record "$TMP/sent-$i" --stuck "$TMP/stuck-$i"
  shim_at "$TMP/client-$i.stats"
  run_to "$TMP/client-$i.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --save "$TMP/got-$i" --stuck "$TMP/stuck-$i"
  wait_server "server-$i" 30
  said=$(grep '^oob_full_peer server:' "$TMP/server-$i.log" || true)
  [[ $said =~ wrote=([0-9]+)\ oob_eagain=([0-9]+)\ after_writes=([0-9]+)/([0-9]+)$ ]] ||
    fail "run $i ($mode): the server said '$said'"
  sent=${BASH_REMATCH[1]} eagain=${BASH_REMATCH[2]} took=${BASH_REMATCH[3]} tries=${BASH_REMATCH[4]}
  got=$(file_size "$TMP/got-$i")
  diff=$(cmp "$TMP/sent-$i" "$TMP/got-$i" 2>&1) ||
    fail "run $i ($mode): the server's writes took $sent bytes, the client received $got: $diff ($said)"
  if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} == now ]]; then
    back=$(STATS=$TMP/server-$i.stats stats_sum oob_fallbacks)
    grep -q "debug: send direction now in the peer's shm ring" "$TMP/server-$i.log" ||
      fail "run $i ($mode): the case was missed: the server's send direction never reached the client's ring ($said)"
    refused=1
    [[ $mode != write ]] || refused=$((tries - took))
    ((eagain > 0 && refused > 0 && back == 1)) ||
      fail "run $i ($mode): the case was missed: expected the urgent byte refused at least once, writes behind it refused ($mode), and one PLAIN fallback of the server, saw oob_eagain=$eagain writes=$took/$tries oob_fallbacks=$back ($said)"
  fi
  log "run $i ($mode): $sent bytes with the urgent byte in place ($said)"
  total=$((total + sent))
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/server-$i.stats" "$TMP/client-$i.stats" >>"$STATS"
done
check_stats conns=4 bytes=$total procs=4
log PASS
