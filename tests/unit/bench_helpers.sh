#!/bin/bash
# The benchmark's helpers, apart from a benchmark run: bench-memcpy prints
# one positive rate per size asked for and rejects bad arguments; bench-plot
# turns a medians file into its three PNGs under their stable names, and
# fails on a missing one. No figure is judged: the rates depend on the machine.
set -euo pipefail
memcpy=$1 plot=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$memcpy" 65536 0.01 64 1024 131072) || fail "bench-memcpy exited with status $?"
[[ $(wc -l <<<"$out") == 3 ]] || fail "bench-memcpy: expected 3 lines, got: $out"
awk 'NR == 1 && $1 != 64 || NR == 2 && $1 != 1024 || NR == 3 && $1 != 131072 || !($2 > 0) { bad = 1 }
     END { exit bad }' <<<"$out" || fail "bench-memcpy: expected 'SIZE RATE' with RATE > 0 per size, got: $out"
for bad in "0 0.1 64" "65536 x 64" "65536 0.1 0" "65536 0.1 12k" "65536 0.1"; do
  rc=0
  # shellcheck disable=SC2086 # the arguments are space-separated on purpose
  "$memcpy" $bad >/dev/null 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "bench-memcpy $bad: expected exit status 2 (usage), got $rc"
done
echo "bench_helpers: bench-memcpy ok"

if ! command -v gnuplot >/dev/null; then
  echo "SKIP: gnuplot is not installed (scripts/deps test)"
  exit 77
fi
cat >"$tmp/same-host.dat" <<'DAT'
# fixture: the layout scripts/bench-same-host writes
# 2026-01-01 00:00 UTC; test CPU, 2 CPUs, kernel test
# bytes kernel_gbps shm_gbps memcpy_gbps shm_over_kernel kernel_cpu_s_per_gb shm_cpu_s_per_gb kernel_over_shm_cpu
64 0.2 0.4 50 2.00 40 20 2.00
1024 3 6 280 2.00 2.7 1.8 1.50
16384 13 48 500 3.69 0.6 0.23 2.61
131072 15 140 550 9.33 0.48 0.083 5.78
1048576 23 150 300 6.52 0.32 0.065 4.92


# bytes kernel_p50_us kernel_p99_us shm_p50_us shm_p99_us kernel_over_shm_p50 kernel_over_shm_p99
64 18 40 0.19 0.27 94.7 148
1024 18 41 0.21 0.33 85.7 124
16384 19 45 0.6 1.2 31.7 37.5
DAT
"$plot" "$tmp/same-host.dat" "$tmp/out" >"$tmp/plot.log" 2>&1 || fail "bench-plot failed: $(cat "$tmp/plot.log")"
for f in throughput latency ratio; do
  png=$tmp/out/same-host-$f.png
  [[ -s $png ]] || fail "bench-plot wrote no $png"
  [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
  (($(stat -c %s "$png") > 10000)) || fail "$png is $(stat -c %s "$png") bytes: an empty chart?"
done
if "$plot" "$tmp/missing.dat" "$tmp/out2" >/dev/null 2>&1; then fail "bench-plot succeeded without its .dat"; fi
echo "bench_helpers: bench-plot ok"
