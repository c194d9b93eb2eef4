#!/usr/bin/env bash
# An end with no ring to offer answers its peer's switch while its socket is
# full (tests/integration/interlude_full_peer.py). The client may use only
# RDMA, on a device that does not exist; the server switches at once and
# then reads nothing for a second, while the client's thread fills the
# socket. The client's shim reads the server's handshake then, and its
# answer (the interlude: mark, HANDSHAKE without offers, DECLINE, PLAIN)
# cannot go: it must go before the client's next bytes, once there is room,
# and the server's direction must go back to plain TCP. Both streams are
# checked at both ends; the client's log must say it told the server, the
# server's that its direction went plain (tcp_unreachable), the client's
# stats tcp_no_device. Before the fix the client's answer waited for a
# moment with room that its own writer never left (seen in the rxe guest:
# the server's direction stayed on DATA frames, reading ahead of them for
# the client's handshake). Needs the shim with rings (skipped otherwise).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
needs_rings "nothing to answer without the shim" "no end switches, so none answers"

PEER=$(dirname "$0")/interlude_full_peer.py
port=$(free_port)
start_server_at server "$port" "$TMP/server.stats" env R2SOCK_LOG=debug "$PY" "$PEER" server --port "$port"
run_to_at "$TMP/client.out" 60 "$TMP/client.stats" "${NO_OFFER[@]}" R2SOCK_LOG=debug "$PY" "$PEER" client \
  --port "$port"
wait_server server 30
grep -q "^interlude_full_peer server: received=$((4 << 20)) sent=$(((64 << 10) + (1 << 20)))\$" "$TMP/server.log" ||
  fail "the server did not check the client's stream: $(grep interlude_full_peer "$TMP/server.log")"
grep -q "^interlude_full_peer client: received=$(((64 << 10) + (1 << 20))) sent=$((4 << 20))\$" "$TMP/client.out" ||
  fail "the client did not check the server's stream: $(grep interlude_full_peer "$TMP/client.out")"
check_no_offer_answered interlude-full "$TMP/client.stats" "$TMP/client.out" "$TMP/server.stats" "$TMP/server.log"
log "the client told the server once there was room; the server's direction went back to plain TCP"
cat "$TMP/server.stats" "$TMP/client.stats" >>"$STATS"
check_stats conns=2 bytes=$(((4 << 20) + (64 << 10) + (1 << 20))) procs=2
log PASS
