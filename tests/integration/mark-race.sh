#!/usr/bin/env bash
# A server that speaks first and then switches: its switch mark replaces its
# hello at position 0 while the client's first read is between the system
# calls that ask for the mark (SIOCATMARK) and for its byte
# (recv(MSG_OOB|MSG_PEEK)). The client must still read the greeting as
# application bytes, never as frames (docs/protocol.md, the receive
# procedure). The server is mark_race_peer.py speaking the protocol by hand,
# plain, sweeping the delay between greeting and mark over 0..80 us, so
# that some of the connections land in that window; the client is under the
# shim and checks every byte of every connection.
# Needs the shim with upgrades on: under R2SOCK_UPGRADE=never (or without
# the shim) the client takes no part in the protocol and would read the
# hand-made frame as data, so the test skips.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
[[ -n $R2SOCK_LIB ]] || skip "the client must run under the shim (R2SOCK_LIB is empty)"
[[ ${R2SOCK_UPGRADE:-never} != never ]] || skip "R2SOCK_UPGRADE=never: the client does not speak the protocol"

PEER=$(dirname "$0")/mark_race_peer.py
N=3000
shim_at "$STATS"
port=$(free_port)
SHIM=()
start_server mark-race "$port" "${PLAIN[@]}" "$PY" "$PEER" server --port "$port" --conns "$N"
run_to "$TMP/client.out" 90 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --conns "$N"
grep -q "^mark_race_peer client: conns=$N bad=0\$" "$TMP/client.out" ||
  fail "expected every connection's bytes right, saw: $(tail -n 5 "$TMP/client.out")"
! grep -q 'connection reset' "$TMP/client.out" || fail "the client's shim reset a connection: $(grep -m 3 'connection reset' "$TMP/client.out")"
wait_server mark-race 20
log "$(tail -n 1 "$TMP/client.out")"
# Each connection's greeting and payload reached the application, none went
# into a ring (the hand-made server offers none).
R2SOCK_EXPECT_PATH=
check_stats conns="$N" bulk=0 bytes=0 procs=1
# 67 bytes per connection: the greeting (37) and the payload (30).
(($(stats_sum bytes_tcp_rx) == N * 67)) || fail "expected $((N * 67)) bytes received over TCP, saw $(stats_sum bytes_tcp_rx)"
log PASS
