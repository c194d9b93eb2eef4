#!/usr/bin/env bash
# A blocked read sleeps while its peer is idle, before and after the switch:
# a server waiting for its client's request (its link still in PROBE) and a
# client waiting for the reply (its link past the server's hello, PREMARK)
# each block in recv() for PAUSE seconds (tests/integration/idle_peer.py).
# Each must use under a quarter of that time in CPU, and under the shim each
# end must have slept in the kernel (waits_sleep > 0). Before the fix, a
# wait whose events the link did not own yet took "not mine" for "look
# again" and polled the socket at full CPU: waits_sleep stayed 0 and the
# reader used most of its wait in CPU (1.1 of 3 s on a loaded machine).
# A sleeping reader uses almost none, whatever the load, so the CPU bound
# cannot fail a correct shim; a busy one can pass it only on a machine so
# loaded that it gets under a quarter of a core, hence waits_sleep as well.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/idle_peer.py
PAUSE=1.5
SHIM=()
port=$(free_port)
shim_at "$TMP/server.stats"
start_server server "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --pause "$PAUSE"
shim_at "$TMP/client.stats"
run_to "$TMP/client.out" 30 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --pause "$PAUSE"
wait_server server 20
for end in server client; do
  [[ $end == server ]] && out=$TMP/server.log || out=$TMP/client.out
  line=$(grep "^idle_peer $end: waited=" "$out" || true)
  [[ -n $line ]] || fail "the $end printed no wait: $(tail -n 3 "$out")"
  log "$line"
  read -r waited used < <(sed -E 's/.*waited=([0-9.]+) cpu=([0-9.]+)/\1 \2/' <<<"$line")
  awk -v w="$waited" -v p="$PAUSE" 'BEGIN { exit !(w >= p / 2) }' ||
    fail "the $end's recv returned after $waited s: it should have waited for its peer's pause of $PAUSE s"
  awk -v w="$waited" -v c="$used" 'BEGIN { exit !(c < w / 4) }' ||
    fail "the $end used $used s of CPU in a recv blocked for $waited s: it polled instead of sleeping"
  if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]]; then
    sleeps=$(STATS=$TMP/$end.stats stats_sum waits_sleep)
    ((sleeps > 0)) || fail "the $end's shim never slept in the kernel (waits_sleep=0) during a $waited s wait"
    log "$end: waits_sleep=$sleeps"
  fi
done
[[ -z $R2SOCK_LIB ]] || cat "$TMP/server.stats" "$TMP/client.stats" >>"$STATS"
check_stats conns=2 bytes=128 procs=2
log PASS
