#!/bin/bash
# The benchmark's helpers, apart from a benchmark run: bench-memcpy prints
# one positive rate per size asked for and rejects bad arguments; bench-plot
# and bench-plot-rdma turn a medians file into their three PNGs under their
# stable names (bench-plot-rdma also with figures missing, as a failed run
# leaves them), and fail on a missing one. No figure is judged: the rates
# depend on the machine.
set -euo pipefail
memcpy=$1 plot=$2 plot_rdma=$3
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
# pngs WHO PREFIX: the three charts PREFIX-{throughput,latency,ratio}.png
# exist, are PNGs and are not empty
pngs() {
  local f png
  for f in throughput latency ratio; do
    png=$2-$f.png
    [[ -s $png ]] || fail "$1 wrote no $png"
    [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG"
    (($(stat -c %s "$png") > 10000)) || fail "$png is $(stat -c %s "$png") bytes: an empty chart?"
  done
}
"$plot" "$tmp/same-host.dat" "$tmp/out" >"$tmp/plot.log" 2>&1 || fail "bench-plot failed: $(cat "$tmp/plot.log")"
pngs bench-plot "$tmp/out/same-host"
if "$plot" "$tmp/missing.dat" "$tmp/out2" >/dev/null 2>&1; then fail "bench-plot succeeded without its .dat"; fi
echo "bench_helpers: bench-plot ok"

# the layout scripts/bench-rdma writes; "-": a figure no run produced
cat >"$tmp/rdma-pair.dat" <<'DAT'
# fixture: r2sock RDMA benchmark, setup pair, medians over 2 rounds
# 2026-01-01 00:00 UTC; test CPU, 2 CPUs
# bytes ib_gbps tcp_gbps r2_gbps rs_gbps r2_over_ib r2_over_tcp r2_over_rs tcp_cpu_s_per_gb r2_cpu_s_per_gb tcp_over_r2_cpu tcp_guest_cpu_s_per_gb r2_guest_cpu_s_per_gb tcp_over_r2_guest_cpu
64 0.01 0.02 0.005 0.004 0.5 0.25 1.25 300 500 0.6 400 700 0.57
1024 0.1 0.2 - 0.05 - - - 30 - - 40 - -
16384 0.3 0.5 0.2 0.1 0.67 0.4 2.0 5 6 0.83 7 9 0.78
131072 0.4 0.6 0.3 0.12 0.75 0.5 2.5 4 5 0.8 6 8 0.75
1048576 0.45 0.6 0.35 0.12 0.78 0.58 2.92 4 4.5 0.89 6 7 0.86


# bytes ib_typ_us ib_p99_us tcp_p50_us tcp_p99_us r2_p50_us r2_p99_us ib_over_r2_p50 tcp_over_r2_p50 tcp_over_r2_p99
64 200 9000 210 3000 2000 15000 0.1 0.105 0.2
1024 220 9500 230 3500 - - - - -
16384 400 12000 500 5000 2500 17000 0.16 0.2 0.29
DAT
"$plot_rdma" "$tmp/rdma-pair.dat" "$tmp/out" rdma-pair >"$tmp/plot.log" 2>&1 ||
  fail "bench-plot-rdma failed: $(cat "$tmp/plot.log")"
pngs bench-plot-rdma "$tmp/out/rdma-pair"
if "$plot_rdma" "$tmp/missing.dat" "$tmp/out2" x >/dev/null 2>&1; then fail "bench-plot-rdma succeeded without its .dat"; fi
echo "bench_helpers: bench-plot-rdma ok"
