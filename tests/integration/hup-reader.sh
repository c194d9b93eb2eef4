#!/usr/bin/env bash
# A reader that ends a stream at a short read and a POLLHUP, as libuv (and
# so node) does (tests/integration/hup_reader.py): 4 connections echo
# 4 MiB each, 3 rounds, each client shutting down its direction once it
# wrote everything. The shim ended a read where a DATA frame ended, and
# where the receive direction moved into the ring, although more bytes
# were there: with the peer's FIN behind them, the reader took the short
# read for the end and lost the rest (node's echo under the shim lost the
# last 32-256 KiB of a connection in about 2 runs of 5, both policies).
# Asserted: every connection reads back exactly what it sent, no protocol
# error is counted, and under R2SOCK_UPGRADE=now connections went into
# rings (so reads crossed from frames into them; a connection may also end
# before its switch completes, and stay on frames).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
r2s_python
CONNS=4 BYTES=$((4 << 20)) ROUNDS=3
run 90 "$PY" "$(dirname "$0")/hup_reader.py" --conns "$CONNS" --bytes "$BYTES" --rounds "$ROUNDS" >"$TMP/out"
cat "$TMP/out" >&2
grep -q "^hup_reader: OK " "$TMP/out" || fail "hup_reader did not report OK"
check_stats conns=$((2 * CONNS * ROUNDS)) bulk=$((2 * CONNS * ROUNDS)) bytes=$((2 * CONNS * ROUNDS * BYTES)) procs=1
proto=$(stats_sum reset_protocol)
((proto == 0)) || fail "a protocol error was counted (reset_protocol=$proto)"
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-auto} == now ]]; then
  shm=$(stats_sum conn_shm)
  log "connection ends on shared memory: $shm of $((2 * CONNS * ROUNDS))"
  ((shm >= 1)) || fail "expected connection ends on shared memory, saw conn_shm=$shm"
fi
log PASS
