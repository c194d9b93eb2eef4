#!/usr/bin/env bash
# TCP Fast Open, client and server under the shim, in a network namespace
# of the test's own with TFO on for both sides (net.ipv4.tcp_fastopen=3;
# the host's default, 1, lets only clients ask). With TCP_FASTOPEN_CONNECT
# (curl --tcp-fastopen), connect() sends nothing and the application's
# first write leaves in the SYN; a hello sent at connect() rode there too,
# where the kernel keeps no urgent pointer, and the server read the shim's
# byte as the first of the application's: every connection after the
# first (the one that fetches the cookie) came out wrong. Such a
# connection now stays on TCP and counts as tcp_fastopen. sendto with
# MSG_FASTOPEN connects inside the send and was never greeted.
#   usage: fastopen.sh connect|sendto
# Asserted: every byte of 4 connections of 1 MiB each arrives as sent,
# the namespace's kernel counted Fast Open connections whose SYN carried
# data (TcpExtTCPFastOpenPassive, so the case is the one above), and under
# an upgrading policy each connect()ed client end counts tcp_fastopen.
# Needs root for the namespace (skipped otherwise).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
how=${1:?usage: fastopen.sh connect|sendto}
[[ $how == connect || $how == sendto ]] || fail "usage: fastopen.sh connect|sendto"
[[ $(id -u) == 0 ]] || skip "a network namespace of the test's own needs root"
need ip nstat
unshare -n true 2>/dev/null || skip "cannot make a network namespace here (unshare -n)"
PEER=$(dirname "$0")/fastopen_peer.py
CONNS=4

shim_at "$TMP/stats"
# shellcheck disable=SC2016 # expanded by the inner shell
run_to "$TMP/peer.out" 60 unshare -n bash -c '
  ip link set lo up && sysctl -qw net.ipv4.tcp_fastopen=3 && nstat -n && "$@" && nstat -az TcpExtTCPFastOpenPassive' \
  _ "${SHIM_AT[@]}" "$PY" "$PEER" --how "$how" --conns "$CONNS"
grep -q "^fastopen_peer: OK how=$how conns=$CONNS " "$TMP/peer.out" || fail "the peer did not report OK: $(tail -n 3 "$TMP/peer.out")"
passive=$(awk '$1 == "TcpExtTCPFastOpenPassive" { print $2 }' "$TMP/peer.out")
((${passive:-0} >= 1)) || fail "no connection carried data in its SYN (TcpExtTCPFastOpenPassive=${passive:-none}): not the case under test"
log "byte-exact over $CONNS connections, $passive with data in the SYN"
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }
STATS=$TMP/stats
fastopen=$(stats_sum tcp_fastopen) proto=$(stats_sum reset_protocol)
log "stats: tcp_fastopen=$fastopen reset_protocol=$proto"
((proto == 0)) || fail "a protocol error was counted (reset_protocol=$proto)"
if [[ $how == connect && ${R2SOCK_UPGRADE:-auto} != never ]]; then
  ((fastopen == CONNS)) || fail "expected each of the $CONNS client ends to count tcp_fastopen, saw $fastopen"
fi
log PASS
