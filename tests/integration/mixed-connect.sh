#!/usr/bin/env bash
# A server under the shim, a plain client that checks its nonblocking
# connect the way curl does: poll(POLLOUT|POLLPRI), where any POLLPRI means
# failure (tests/integration/connect_peer.py). An accepting shim sends its
# hello only once it has heard the client's (docs/protocol.md, "Hello"), so
# a plain client never sees urgent data: 20 connections must each connect
# without POLLPRI, also 50 ms later, and echo a line; the server end stays
# on TCP (nothing to upgrade to).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/connect_peer.py
N=20
shim_at "$STATS"
shm_snapshot
port=$(free_port)
SHIM=()
start_server connect-server "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --conns "$N"
run_to "$TMP/client.out" 60 "${PLAIN[@]}" "$PY" "$PEER" client --port "$port" --conns "$N"
wait_server connect-server 20
grep -q "connect_peer client: OK conns=$N" "$TMP/client.out" ||
  fail "expected the client to report OK, saw: $(cat "$TMP/client.out")"
grep -q "connect_peer server: OK conns=$N" "$TMP/connect-server.log" ||
  fail "expected the server to report OK, saw: $(cat "$TMP/connect-server.log")"
# Each connection moved one line each way: "line I\n", 150 bytes in all.
check_tcp_only "$STATS" conns="$N" bulk=0 bytes=150 procs=1
shm_check_leaks
log PASS
