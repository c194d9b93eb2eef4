#!/usr/bin/env bash
# A wait over sockets whose payload is on kernel TCP sleeps in the kernel at
# once: only a ring can become ready without the kernel, so polling the
# rings for such a socket sees nothing sooner (src/link/ready.c,
# r2s__link_spin_budget). The server of tests/integration/pingpong_peer.py
# waits in select() before each request, as iperf3's server does over its
# control connection, with R2SOCK_SPIN_US=20000 so that a poll would show.
#   short: the default policy (auto) and 128 bytes a round, so the
#          connection never switches (tcp_short): the server must never
#          poll (waits_polled=0) and its rounds must cost it under a
#          quarter of their time in CPU. Old library: each wait polled its
#          20 ms, 0.4-0.6 s of CPU in 30 rounds of 20 ms.
#   rings: the same exchange on shared memory (R2SOCK_UPGRADE=now, the
#          default SPIN_US): the server's select() polls its ring
#          (waits_polled > 0), so the counter the first case reads counts.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
needs_rings "nothing polls without the shim" "no link, nothing polls"

PEER=$(dirname "$0")/pingpong_peer.py
ROUNDS=30 PAUSE=0.02

# pingpong CASE ENV...: one exchange with ENV on both ends; leaves the
# server's output in $TMP/CASE.server.log and its stats in $TMP/CASE.server.stats.
pingpong() {
  local name=$1 port
  shift
  port=$(free_port)
  start_server_at "$name.server" "$port" "$TMP/$name.server.stats" env "$@" "$PY" "$PEER" server \
    --port "$port" --rounds "$ROUNDS" --select
  run_to_at "$TMP/$name.client.out" 60 "$TMP/$name.client.stats" env "$@" "$PY" "$PEER" client \
    --port "$port" --rounds "$ROUNDS" --pause "$PAUSE"
  wait_server "$name.server" 30
  grep -q "^pingpong_peer client: rounds=$ROUNDS " "$TMP/$name.client.out" ||
    fail "$name: the client did not finish its rounds: $(tail -n 3 "$TMP/$name.client.out")"
  grep -q "^pingpong_peer server: rounds=$ROUNDS " "$TMP/$name.server.log" ||
    fail "$name: the server did not finish its rounds: $(tail -n 3 "$TMP/$name.server.log")"
}

pingpong short R2SOCK_UPGRADE=auto R2SOCK_SPIN_US=20000
short=$(STATS=$TMP/short.server.stats stats_sum tcp_short)
((short == 1)) || fail "short: the server's connection should have stayed on TCP as short (tcp_short=$short)"
polled=$(STATS=$TMP/short.server.stats stats_sum waits_polled)
cpu=$(sed -nE 's/^pingpong_peer server: .*cpu=([0-9.]+)$/\1/p' "$TMP/short.server.log")
log "short: the server's select() waits polled $polled times; its rounds took $cpu s of CPU"
((polled == 0)) || fail "short: the server polled $polled times for a connection on TCP (expected 0)"
awk -v c="$cpu" -v w="$(awk -v r=$ROUNDS -v p=$PAUSE 'BEGIN { print r * p }')" 'BEGIN { exit !(c < w / 4) }' ||
  fail "short: the server used $cpu s of CPU in $ROUNDS rounds of $PAUSE s: its waits polled"

pingpong rings R2SOCK_UPGRADE=now
shm=$(STATS=$TMP/rings.server.stats stats_sum conn_shm)
((shm == 1)) || fail "rings: the server's connection should be on shm (conn_shm=$shm)"
polled=$(STATS=$TMP/rings.server.stats stats_sum waits_polled)
log "rings: the server's waits polled $polled times"
((polled > 0)) || fail "rings: the server's select() never polled its ring (waits_polled=0)"
cat "$TMP"/*.stats >>"$STATS"
log PASS
