#!/usr/bin/env bash
# splice(2) between a pipe and a connection under the shim: a relay that
# moves its bytes with splice only, as haproxy does with splice-request and
# splice-response. Once a peer switched, the kernel's TCP bytes of a
# connection are the shim's frames (or nothing, while the bytes are in a
# ring): a relay whose splices went to the kernel got frame headers among
# the data, or waited for bytes that never came (haproxy: a 32 MiB download
# corrupted under the default policy; cut off, or timed out, under
# R2SOCK_UPGRADE=now). The shim moves a carried connection's bytes for
# splice itself (src/splice.c).
#   usage: splice.sh block|nonblock|haproxy
#   block, nonblock: stream_check client -> splice_relay.py -> stream_check
#     server, 64 MiB each way at once with a half-close, every byte
#     verified at both ends; the relay in one thread per direction with
#     blocking calls, or in one select() loop with SPLICE_F_NONBLOCK
#   haproxy: the same through haproxy in tcp mode with option
#     splice-request and splice-response
# Every process is under the shim. Asserted: both ends report OK (every
# byte verified, in order), the relay moved every byte each way, and no
# shim counted a protocol error (reset_protocol). In the shm variant the
# relay's two connections and both ends went into shared memory
# (R2SOCK_EXPECT_PATH: the bulk of the bytes on shm). 64 MiB, so that what
# crosses TCP before the switches (up to the socket buffers of both hops,
# 12 MiB of 96 MiB seen under load with 24 MiB each way) stays well
# below a tenth.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python
mode=${1:?usage: splice.sh block|nonblock|haproxy}
[[ $mode == haproxy ]] && need haproxy
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
RELAY=$(dirname "$0")/splice_relay.py
BYTES=64M
N=$((64 << 20))

shm_snapshot
sport=$(free_port) rport=$(free_port)
start_server_at sc "$sport" "$TMP/server-stats" "$SC" server --host 127.0.0.1 --port "$sport" --mode block --timeout 60
case $mode in
  block | nonblock)
    start_server_at relay "$rport" "$TMP/relay-stats" "$PY" "$RELAY" --listen "$rport" --to "$sport" --mode "$mode"
    ;;
  haproxy)
    cat >"$TMP/haproxy.cfg" <<CFG
global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option splice-request
  option splice-response
frontend f
  bind 127.0.0.1:$rport
  default_backend b
backend b
  server s1 127.0.0.1:$sport
CFG
    start_server_at relay "$rport" "$TMP/relay-stats" haproxy -f "$TMP/haproxy.cfg" -db
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
run_to_at "$TMP/client.out" 90 "$TMP/client-stats" "$SC" client --host 127.0.0.1 --port "$rport" --mode block \
  --bytes "$BYTES" --seed 77 --bidir --halfclose --timeout 60
wait_server sc 30
grep -q "stream_check client: OK" "$TMP/client.out" || fail "the client did not report OK: $(tail -n 3 "$TMP/client.out")"
grep -q "stream_check server: OK" "$TMP/sc.log" || fail "the server did not report OK: $(tail -n 3 "$TMP/sc.log")"
if [[ $mode == haproxy ]]; then
  stop_server relay USR1 0 # a soft stop: haproxy exits through exit(), which writes its stats
else
  wait_server relay 30
  # stream_check's header and trailer come on top of the payload.
  line=$(grep '^splice_relay: OK ' "$TMP/relay.log") || fail "the relay did not report OK: $(tail -n 3 "$TMP/relay.log")"
  [[ $line =~ up=([0-9]+)\ down=([0-9]+) ]] && ((BASH_REMATCH[1] >= N && BASH_REMATCH[2] >= N)) ||
    fail "the relay did not move $N bytes each way: $line"
fi
log "$(grep -h 'stream_check client' "$TMP/client.out")"
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }
cat "$TMP/server-stats" "$TMP/relay-stats" "$TMP/client-stats" >>"$STATS"
proto=$(stats_sum reset_protocol)
((proto == 0)) || fail "a shim counted a protocol error (reset_protocol=$proto)"
check_stats conns=4 bytes=$((4 * N)) procs=3
shm_check_leaks
log PASS
