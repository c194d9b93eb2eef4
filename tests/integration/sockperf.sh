#!/usr/bin/env bash
# sockperf TCP ping-pong (one connection, small messages, blocking recvfrom on
# both ends) under the shim: every message must come back, none lost,
# duplicated or reordered, and a latency must be reported.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need sockperf

msg_size=64
port=$(free_port)
start_server sockperf-server "$port" sockperf sr --tcp -i 127.0.0.1 -p "$port"
# --mps: sockperf sizes its sequence numbers from the message rate it
# expects; at "max" it assumes far fewer round trips than shared memory
# gives (over a million a second) and stops with "_seqN > m_maxSequenceNo".
run 30 sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 2 -m "$msg_size" --mps 10000000 >"$TMP/client.out" 2>&1
stop_server sockperf-server INT

out=$TMP/client.out
# sockperf colours some lines; strip escape sequences before matching.
sed -i 's/\x1b\[[0-9;]*m//g' "$out"
if grep -Eiq 'error|fail' "$out"; then
  fail "expected no errors from sockperf pp, saw: $(grep -Ei 'error|fail' "$out" | head -n 3)"
fi
grep -q 'dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' "$out" ||
  fail "expected 0 dropped/duplicated/out-of-order messages, saw: $(grep 'dropped messages' "$out" || echo 'no such line')"
latency=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' "$out")
[[ -n $latency ]] || fail "expected 'Summary: Latency is X usec' in sockperf output, found none"
median=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$out")
[[ -n $median ]] || fail "expected a 'percentile 50.000' line in sockperf output, found none"
# The [Total Run] line counts all messages, warm-up included; every message
# sent but at most the one in flight when the timer fired must have returned.
read -r sent received < <(sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\); ReceivedMessages=\([0-9]*\).*/\1 \2/p' "$out")
[[ -n ${received:-} ]] || fail "expected a '[Total Run] ... SentMessages=N; ReceivedMessages=M' line, found none"
((received > 0 && sent - received <= 1 && received <= sent)) ||
  fail "expected ReceivedMessages = SentMessages (at most 1 in flight) and > 0, saw sent=$sent received=$received"
log "sockperf: latency avg=${latency}us median=${median}us messages=$received"

# One connection, both ends; each message crossed it once in each direction.
check_stats conns=2 bulk=2 bytes=$((received * msg_size)) procs=2
log PASS
