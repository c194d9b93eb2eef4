#!/usr/bin/env bash
# iperf3 client and one-off server, both under the shim, in one of several
# modes; checks iperf3's own JSON accounting and the shim's statistics.
#   usage: iperf3.sh default|reverse|bidir|parallel|zerocopy|len1k
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need iperf3
r2s_python

mode=${1:?usage: iperf3.sh default|reverse|bidir|parallel|zerocopy|len1k}
streams=1
exact_bytes=""   # set when the client was told to send an exact amount
case $mode in
  default)  opts=(-t 2) ;;
  reverse)  opts=(-t 2 -R) ;;
  bidir)    opts=(-t 2 --bidir); streams=2 ;;   # one data stream per direction
  parallel) opts=(-t 2 -P 4); streams=4 ;;
  # -Z sends with sendfile(2); -n bounds the amount sent (see the check below).
  zerocopy) opts=(-Z -n 1G); exact_bytes=$((1 << 30)) ;;
  # Small writes: 1 KiB per send/recv call.
  len1k)    opts=(-l 1K -n 256M); exact_bytes=$((256 << 20)) ;;
  *) fail "unknown mode '$mode'" ;;
esac

port=$(free_port)
start_server iperf3-server "$port" iperf3 -s -1 -B 127.0.0.1 -p "$port"
run 60 iperf3 -c 127.0.0.1 -p "$port" --json "${opts[@]}" >"$TMP/client.out"
# -1: the server exits by itself once the test is over.
wait_server iperf3-server

# iperf3's receiver stops counting when the test ends and closes its data
# sockets without draining them, so "received" falls short of "sent" by up to
# what was in flight: socket buffers of both ends per stream, plus slack for
# the shim's own rings. More than that means bytes went missing.
read -r _ _ wmem_max </proc/sys/net/ipv4/tcp_wmem
read -r _ _ rmem_max </proc/sys/net/ipv4/tcp_rmem
inflight=$((wmem_max + rmem_max + (4 << 20)))

"$PY" - "$TMP/client.out" "$inflight" "$exact_bytes" >"$TMP/counts.out" <<'EOF' ||
import json, sys
path, inflight, exact = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    j = json.load(open(path))
except ValueError as e:
    sys.exit(f"FAIL: iperf3 --json output is not JSON: {e}")
if "error" in j:
    sys.exit(f"FAIL: iperf3 reported an error: {j['error']}")
end = j["end"]
pairs = [("sum_sent", "sum_received")]
if "sum_sent_bidir_reverse" in end:
    pairs.append(("sum_sent_bidir_reverse", "sum_received_bidir_reverse"))
total_sent = total_received = 0
for s_key, r_key in pairs:
    sent, received = end[s_key]["bytes"], end[r_key]["bytes"]
    nstreams = max(1, sum(1 for s in end["streams"]
                          if s.get("sender", {}).get("sender") == end[s_key]["sender"]))
    if received <= 0:
        sys.exit(f"FAIL: {r_key}: expected bytes received > 0, saw {received}")
    if received > sent:
        sys.exit(f"FAIL: {r_key}: received {received} bytes, more than the {sent} sent")
    if sent - received > inflight * nstreams:
        sys.exit(f"FAIL: {r_key}: received {received} of {sent} bytes sent; the gap "
                 f"{sent - received} exceeds what can be in flight ({inflight} x {nstreams} streams)")
    total_sent += sent
    total_received += received
# iperf3 3.12 can overshoot -n: its send loop (iperf_send) stops a burst of
# up to "multisend" (10) blocks only from the inner per-stream loop, so the
# outer loop sends on until the burst is spent. The overshoot is therefore a
# whole number of blocks, fewer than 10; a shim that lost, duplicated or
# miscounted bytes would not produce that shape.
if exact:
    exact = int(exact)
    blksize = j["start"]["test_start"]["blksize"]
    over = total_sent - exact
    if over < 0 or over % blksize != 0 or over // blksize >= 10:
        sys.exit(f"FAIL: -n {exact}: iperf3 reports {total_sent} bytes sent; expected "
                 f"{exact} plus fewer than 10 whole {blksize}-byte blocks")
print(total_sent, total_received)
EOF
  fail "iperf3's JSON output does not hold up (see above)"
read -r sent received <"$TMP/counts.out"
log "iperf3 $mode: sent=$sent received=$received"

# Both processes count the control connection and every data stream.
check_stats conns=$((2 * (1 + streams))) bulk=$((2 * streams)) bytes="$received" procs=2
log PASS
