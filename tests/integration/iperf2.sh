#!/usr/bin/env bash
# iperf 2 (blocking sockets, a thread per connection) client and server under
# the shim. Unlike iperf3, iperf 2's server reads to EOF, so its byte count
# must equal the client's exactly.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need iperf

port=$(free_port)
# -y C: one CSV line per finished test:
#   date,local addr,local port,peer addr,peer port,id,interval,bytes,bits/s
start_server iperf-server "$port" iperf -s -B 127.0.0.1 -p "$port" -y C
run 30 iperf -c 127.0.0.1 -p "$port" -t 2 -y C >"$TMP/client.out"

csv_bytes() { awk -F, 'NF >= 9 && $8 ~ /^[0-9]+$/ { print $8; exit }' "$1"; }
sent=$(csv_bytes "$TMP/client.out")
[[ -n $sent ]] || fail "expected a CSV report line from the iperf client, saw: $(head -c 300 "$TMP/client.out")"
# The server prints its report once the client's connection has closed.
deadline=$((SECONDS + 10))
until received=$(csv_bytes "$TMP/iperf-server.log") && [[ -n $received ]]; do
  ((SECONDS < deadline)) || fail "expected a CSV report line from the iperf server within 10 s, saw: $(head -c 300 "$TMP/iperf-server.log")"
  sleep 0.05
done
((sent > 0)) || fail "expected the iperf client to send > 0 bytes, saw $sent"
((received == sent)) || fail "expected the server to receive exactly the $sent bytes sent, saw $received"
log "iperf2: $sent bytes sent and received"

stop_server iperf-server INT
# One connection, both ends.
check_stats conns=2 bulk=2 bytes="$sent" procs=2
log PASS
