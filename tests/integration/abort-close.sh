#!/usr/bin/env bash
# An application's abortive close (SO_LINGER on with 0 s, then close) reaches
# the peer as a reset, as on TCP: the server (tests/integration/abort_peer.py)
# answers a request with all the connection takes while the client does not
# read, then closes that way; the client reads only afterwards and must get
# a prefix of the server's bytes and then ECONNRESET, never the end of the
# stream. Before the fix the shim handed every carried socket to its reaper
# at close for an orderly end, so the peer saw a clean EOF. Under the shim
# with upgrades (shm variant) both ends must count the connection on shared
# memory, so the reset is checked behind the ring's bytes. Two runs.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/abort_peer.py
N=$((1 << 20))
SHIM=()
total=0
for i in 1 2; do
  port=$(free_port)
  shim_at "$TMP/server-$i.stats"
  start_server "server-$i" "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --bytes "$N"
  shim_at "$TMP/client-$i.stats"
  run_to "$TMP/client-$i.out" 30 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --bytes "$N" --after 1
  wait_server "server-$i" 20
  grep -q "^abort_peer server: sent=[0-9]* closed=abort" "$TMP/server-$i.log" ||
    fail "run $i: the server did not close abortively: $(tail -n 3 "$TMP/server-$i.log")"
  line=$(grep "^abort_peer client: received=" "$TMP/client-$i.out" || true)
  [[ $line == *" end=reset" ]] ||
    fail "run $i: the client should end with ECONNRESET after the server's abortive close: ${line:-$(tail -n 3 "$TMP/client-$i.out")}"
  log "run $i: $(grep -h '^abort_peer server' "$TMP/server-$i.log"), $line"
  got=${line#*received=}
  got=${got%% *}
  total=$((total + got))
  if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]]; then
    for end in server client; do
      shm=$(STATS=$TMP/$end-$i.stats stats_sum conn_shm)
      ((shm == 1)) || fail "run $i: the $end should count its connection on shared memory, saw conn_shm=$shm"
    done
  fi
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/server-$i.stats" "$TMP/client-$i.stats" >>"$STATS"
done
check_stats conns=4 procs=4
log "PASS ($total bytes read before the resets)"
