#!/usr/bin/env bash
# A relaying middlebox between two shim ends: client (shim) -> socat (plain,
# NOT preloaded) -> server (shim). socat relays the byte stream and drops
# urgent data, so neither end ever sees the other's hello: both must stay on
# TCP (conn_shm = conn_rdma = 0, every byte on tcp) and the data must arrive
# byte-exact, whatever R2SOCK_EXPECT_PATH the suite runs with.
# Runs, each through its own one-shot relay:
#   block-bidir, loop-bidir: stream_check in both directions at once with a
#     half-close (socat -t 30, so that socat keeps relaying the server's half
#     after the client's FIN; its default 0.5 s would cut it)
#   oob: an application's own urgent byte (oob_peer.py, "queued" variant)
#     through the relay: the relay drops it, so the server must see exactly
#     A+B in-band and no urgent byte at all, as in a plain run.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
need socat
r2s_python

SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
PEER=$(dirname "$0")/oob_peer.py
shim_at "$STATS"
SHIM=()

# start_relay NAME LISTEN-PORT TARGET-PORT
start_relay() {
  start_server "$1" "$2" "${PLAIN[@]}" socat -t 30 "TCP-LISTEN:$2,bind=127.0.0.1,reuseaddr" "TCP:127.0.0.1:$3"
}

shm_snapshot
configs=(
  "block-bidir block block 24M"
  "loop-bidir nonblock-epoll-et poll 24M"
)
total=0 conns=0 seed=200
for cfg in "${configs[@]}"; do
  read -r name smode cmode bytes <<<"$cfg"
  sport=$(free_port) rport=$(free_port)
  seed=$((seed + 1))
  start_server "sc-$name" "$sport" "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port "$sport" --mode "$smode" --timeout 30
  start_relay "relay-$name" "$rport" "$sport"
  run_to "$TMP/client-$name.out" 40 "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$rport" --mode "$cmode" \
    --bytes "$bytes" --seed "$seed" --bidir --halfclose --timeout 30
  wait_server "sc-$name" 20
  wait_server "relay-$name" 20
  grep -q "stream_check client: OK" "$TMP/client-$name.out" ||
    fail "$name: client did not report OK: $(cat "$TMP/client-$name.out")"
  grep -q "stream_check server: OK" "$TMP/sc-$name.log" ||
    fail "$name: server did not report OK: $(cat "$TMP/sc-$name.log")"
  log "$name: $(grep -h 'stream_check client' "$TMP/client-$name.out")"
  total=$((total + $(numfmt --from=iec "$bytes")))
  conns=$((conns + 2))
done

NA=20000 NB=30000
sport=$(free_port) rport=$(free_port)
start_server oob "$sport" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$sport" --out "$TMP/oob.got"
start_relay relay-oob "$rport" "$sport"
run_to "$TMP/client-oob.out" 40 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$rport" --seed 9 --a-bytes "$NA" --b-bytes "$NB" \
  --sent-normal "$TMP/oob.sent-normal" --sent-inline "$TMP/oob.sent-inline"
wait_server oob 40
wait_server relay-oob 20
want="oob_peer server: oobinline=0 oob=[] marks=[] after=EINVAL in_band=$((NA + NB))"
got=$(grep '^oob_peer server:' "$TMP/oob.log" || true)
[[ $got == "$want" ]] || fail "oob through the relay: the server observed '$got', expected '$want' (what a plain run observes)"
same_file "$TMP/oob.sent-normal" "$TMP/oob.got"
log "oob: the relay dropped the urgent byte; server observed: $got"
total=$((total + NA + NB))
conns=$((conns + 2))

# With --bidir, each stream_check end sent and received its bytes; the oob
# run moved NA+NB one way. Every process that ran under the shim wrote a line.
check_tcp_only "$STATS" conns="$conns" bulk="$conns" bytes="$total" procs="$conns"
shm_check_leaks
log PASS
