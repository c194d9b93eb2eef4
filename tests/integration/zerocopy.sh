#!/usr/bin/env bash
# MSG_ZEROCOPY under the shim: a program that sets SO_ZEROCOPY sends with
# MSG_ZEROCOPY and may not reuse its buffer until the kernel's
# acknowledgements, read from the socket's error queue, cover its sends.
# Only the kernel's TCP makes them. Before, a connection that went into a
# ring got none (the program waited for good), and a read of the error
# queue (recvmsg with MSG_ERRQUEUE) went to the stream, which ended the
# connection with a reset under the default policy. Now the error queue is
# always the kernel's, and a connection whose application set SO_ZEROCOPY
# before its send direction switched sends over TCP (tcp_zerocopy); its
# receive direction may still upgrade.
#   usage: zerocopy.sh before|after   (SO_ZEROCOPY before or right after
#   the client's connect(); the server sets it right after accept())
# Asserted: both ends' bytes arrive intact, every send of both ends is
# acknowledged (zerocopy_peer.py), and under an upgrading policy both ends
# count tcp_zerocopy.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
when=${1:?usage: zerocopy.sh before|after}
[[ $when == before || $when == after ]] || fail "usage: zerocopy.sh before|after"
PEER=$(dirname "$0")/zerocopy_peer.py
shim_at "$TMP/stats"
run_to "$TMP/peer.out" 60 "${SHIM_AT[@]}" "$PY" "$PEER" --when "$when"
line=$(grep '^zerocopy_peer: OK ' "$TMP/peer.out") || fail "the peer did not report OK: $(tail -n 3 "$TMP/peer.out")"
log "$line"
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }
STATS=$TMP/stats
zc=$(stats_sum tcp_zerocopy) proto=$(stats_sum reset_protocol)
log "stats: tcp_zerocopy=$zc reset_protocol=$proto"
((proto == 0)) || fail "a protocol error was counted (reset_protocol=$proto)"
if [[ ${R2SOCK_UPGRADE:-auto} != never ]]; then
  ((zc == 2)) || fail "expected both ends to count tcp_zerocopy, saw $zc"
fi
log PASS
