#!/bin/bash
# Guest side of scripts/bench-rdma: runs the RDMA benchmark's cases, round
# after round, inside one rxe guest (run-guest: server and client both here,
# loopback through rxe0) or both guests of a pair (run-pair: the server on a,
# the client on b, so every transfer goes b -> a across the two "hosts").
# It only measures and records; the host side makes the table.
#
# Each round runs every case once, in the order of R2S_BENCH_CASES, so that
# drift of a shared machine hits all of them alike. A case is KIND or
# KIND@BYTES, the message size (default: the one in parentheses):
#   ib_bw        ib_write_bw -x 1 -F (RoCE v2 IPv4 GID) -s (64 KiB), -t: at
#                most 8 MiB in flight: Gbit/s
#   ib_lat       ib_write_lat -x 1 -F -s (2 B): typical and p99 one-way, usec
#   ib_slat      ib_send_lat, the same: each message consumes a receive and
#                makes a completion the reader polls for, as a write with
#                immediate (r2sock's data path) does; ib_write_lat's reader
#                polls the buffer's last byte instead
#   {tcp,rs,r2}_iperf3   iperf3 one stream, -l (128 KiB): receiver Gbit/s and
#                        bytes; tcp_ and r2_ also CPU (below)
#   {tcp,rs,r2}_iperf2   iperf2 one stream, -l (128 KiB): sender's (client's)
#                        Gbit/s, and the receiver's as rx_gbps
#   {tcp,r2}_sockperf    sockperf TCP ping-pong -m (64 B): median and p99, usec
# CPU of the tcp_ and r2_ iperf3 runs: cpu_srv_s and cpu_cli_s, user+sys
# seconds of the server's and the client's process (GNU time), and
# guest_cpu_SIDE, the busy (non-idle) seconds of this whole guest from
# /proc/stat over the run: that includes the kernel's work for rxe and TCP,
# which no process is charged with.
# tcp_ = kernel TCP (no preload), rs_ = rsocket (librdmacm's librspreload.so
# on both ends), r2_ = r2sock (libr2sock.so on both ends, R2SOCK_UPGRADE=now;
# in one guest also R2SOCK_TRANSPORT=rdma, since `auto` would pick shared
# memory there). iperf3 stalls under rsocket: that case gets a short timeout
# and a timeout is recorded as "stalled", not as an error.
#
# Records, one a line, in /xfer/results (one guest) or /xfer/results.$ROLE:
#   V ROUND CASE METRIC VALUE        a figure (written where it is measured)
#   S ROUND CASE ok|stalled|error RC  the client's outcome (b, or the guest)
#   P ROUND CASE SIDE procs=N conn_rdma=MIN rdma_share=MIN% rxe_pkts=N
#                                    r2sock cases: from the shim's stats file
#                                    of that side (its processes' lowest
#                                    conn_rdma and RDMA share of payload) and
#                                    rxe0's packet counters during the run
# Settings (the host sets them with run-guest/run-pair -e):
#   R2S_BENCH_ROUNDS (3), R2S_BENCH_DUR (seconds per timed run, 3),
#   R2S_BENCH_LAT_ITERS (ib_write_lat -n, 5000), R2S_BENCH_CASES (every
#   kind once at its default size; scripts/bench-rdma passes its size sweep),
#   R2S_BENCH_LIB (libr2sock.so), R2S_BENCH_RSOCKET (librspreload.so).
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"

ROUNDS=${R2S_BENCH_ROUNDS:-3}
DUR=${R2S_BENCH_DUR:-3}
LAT_ITERS=${R2S_BENCH_LAT_ITERS:-5000}
CASES=${R2S_BENCH_CASES:-ib_bw rs_iperf2 r2_iperf2 tcp_iperf2 tcp_iperf3 r2_iperf3 rs_iperf3 ib_lat ib_slat tcp_sockperf r2_sockperf}
LIB=${R2S_BENCH_LIB:?R2S_BENCH_LIB (libr2sock.so) not set}
RS=${R2S_BENCH_RSOCKET:?R2S_BENCH_RSOCKET (librspreload.so) not set}
SIDE=${ROLE:-s}                       # s: server and client in this guest
if [ -n "$ROLE" ]; then SRV=10.77.1.1; else SRV=$MY_IP; fi
OUT=/xfer/results${ROLE:+.$ROLE}
SYNC=/xfer/sync STATSDIR=/xfer/stats
mkdir -p "$SYNC" "$STATSDIR"
: >> "$OUT"
# A client normally ends DUR s after it connects; what outlasts this is stuck.
CLI_TMO=$((DUR + 40))
# rsocket's iperf3 makes no progress after its first bytes (measured): a few
# seconds past its own end is enough to call it stalled.
STALL_TMO=$((DUR + 8))

record() { echo "$*" >> "$OUT"; }
is_server() { [ "$SIDE" != b ]; }
is_client() { [ "$SIDE" != a ]; }

# server_ready KIND PORT PID: the server listens on PORT: kind "tcp" looks
# with ss (kernel TCP, and r2sock, which keeps the real socket); kind "cm"
# looks for an rdma_cm id in state LISTEN (rsocket listens through rdma_cm,
# invisible to ss). Bounded; gives up early if the server PID died.
server_ready() {
  local kind=$1 port=$2 pid=$3 end=$((SECONDS + 30))
  [ "$kind" = tcp ] && { wait_listen "$port" 30 "$pid"; return; }
  until rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr [0-9.]*:$port "; do
    kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

# run_one ID READY PORT STOP CTMO 'server' 'client': one run of one case. The
# server starts (here, or on a), the client runs once it is ready (here, or
# on b) bounded by CTMO; then the server is stopped with signal STOP, or, if
# STOP is "-", given 20 s to end by itself. Sets CRC (client's exit status,
# on the client side) and SRC (server's, on the server side). In a pair the
# two sides meet through files in /xfer/sync, so the next run starts only
# when both ends of this one are gone.
run_one() {
  local id=$1 ready=$2 port=$3 stop=$4 ctmo=$5 srv=$6 cli=$7 spid x=$SYNC/$1
  local sl=$LOGDIR/$id.server.log cl=$LOGDIR/$id.client.log
  CRC='' SRC=''
  if is_server; then
    timeout -k 3 $((ctmo + 60)) bash -c "$srv" > "$sl" 2>&1 &
    spid=$!
    if server_ready "$ready" "$port" "$spid"; then : > "$x.ready"; else : > "$x.noserver"; fi
  fi
  if is_client; then
    if ! wait_for 60 eval "[ -e $x.ready ] || [ -e $x.noserver ]"; then
      say "$id: the server did not start within 60 s"; CRC=-1
    elif [ -e "$x.noserver" ]; then
      say "$id: the server did not get ready"; CRC=-1
    else
      timeout -k 3 "$ctmo" bash -c "$cli" > "$cl" 2>&1
      CRC=$?
    fi
    : > "$x.clientdone"
  fi
  if is_server; then
    wait_for $((ctmo + 60)) test -e "$x.clientdone" || say "$id: no word from the client"
    if [ "$stop" != - ]; then kill -"$stop" "$spid" 2>/dev/null; fi
    wait_pid "$spid" 20; SRC=$WRC
    : > "$x.serverdone"
  fi
  is_client && { wait_for 60 test -e "$x.serverdone" || say "$id: no word from the server"; }
  return 0
}

# path_check ROUND CASE STATSFILE TAG: the P record of this side's r2sock
# processes (their last stats line each).
path_check() {
  local r=$1 c=$2 f=$3 line
  rxe_delta "$4" > /dev/null
  line=$(awk '
    match($0, /r2sock\[[0-9]+\] stats:/) {
      pid = substr($0, RSTART + 7, RLENGTH - 7); sub(/\].*/, "", pid)
      rd[pid] = 0; on[pid] = 0; all[pid] = 0
      n = split(substr($0, RSTART + RLENGTH), kv, /[ \t]+/)
      for (i = 1; i <= n; i++) {
        if (split(kv[i], p, "=") != 2) continue
        if (p[1] == "conn_rdma") rd[pid] = p[2] + 0
        if (p[1] ~ /^bytes_[a-z]+_(tx|rx)$/) { all[pid] += p[2]; if (p[1] ~ /^bytes_rdma_/) on[pid] += p[2] }
      }
    }
    END {
      np = 0; minrd = -1; minsh = -1
      for (pid in rd) {
        np++; sh = all[pid] ? 100 * on[pid] / all[pid] : 0
        if (minrd < 0 || rd[pid] < minrd) minrd = rd[pid]
        if (minsh < 0 || sh < minsh) minsh = sh
      }
      printf "procs=%d conn_rdma=%d rdma_share=%.1f%%", np, (np ? minrd : 0), (np ? minsh : 0)
    }' "$f" 2>/dev/null)
  record "P $r $c $SIDE ${line:-procs=0 conn_rdma=0 rdma_share=0.0%} rxe_pkts=$(( ${RXE_DELTA[sent_pkts]:-0} + ${RXE_DELTA[rcvd_pkts]:-0} ))"
}

# ---- parsers: LOG -> "METRIC VALUE" lines --------------------------------------
# shellcheck disable=SC2317 # called by name from run_case
parse_ib_bw() { local v; v=$(ib_bw_gbps "$1"); positive "$v" && echo "gbps $v"; }
# ib_write_lat's (and ib_send_lat's) result line: #bytes #iterations t_min
# t_max t_typical t_avg t_stdev p99 p99.9 (one-way, half the round trip, like
# sockperf's figures)
parse_ib_lat() {
  awk '/t_typical/ {h = 1; next} h && $1 ~ /^[0-9]+$/ {print "typ_us " $5; print "p99_us " $8; exit}' "$1"
}
parse_iperf3() {
  jq -er '.end.sum_received | "gbps \(.bits_per_second / 1e9)\nbytes \(.bytes)"' "$1" 2>/dev/null
}
# iperf2 -y C: the client's last CSV line ends with bits per second
parse_iperf2() {
  awk -F, 'NF >= 9 {v = $NF} END {if (v != "") print "gbps " v / 1e9}' "$1"
}
parse_sockperf() {
  sed -n 's/.*percentile 50\.000 = *\([0-9.]*\).*/p50_us \1/p; s/.*percentile 99\.000 = *\([0-9.]*\).*/p99_us \1/p' "$1"
}

# cpu_of FILE: user+sys seconds from GNU time's "-f '%U %S'" output (its last
# line; a command killed by a signal gets a line before it)
cpu_of() { tail -n 1 "$1" 2>/dev/null | awk 'NF == 2 && $1 ~ /^[0-9.]+$/ && $2 ~ /^[0-9.]+$/ {print $1 + $2}'; }
# busy_ticks: this guest's non-idle CPU time so far (user nice system irq
# softirq of /proc/stat's cpu line), in USER_HZ ticks
busy_ticks() { local _ u n s i w q sq; read -r _ u n s i w q sq _ < /proc/stat; echo $((u + n + s + q + sq)); }

# ---- one run of a case ---------------------------------------------------------
# run_case ROUND CASE: sets up the commands of CASE, runs them, records.
run_case() {
  local r=$1 c=$2 port pre='env -u LD_PRELOAD' st='' ready stop=- ctmo=$CLI_TMO srv cli parse
  local id=r$r.$c kind=${2%@*} size='' cpu='' busy0 busy v
  [ "$kind" = "$c" ] || size=${c#*@}
  case $kind in
    ib_*) port=$((18500 + r));;
    *_iperf3) port=$((5200 + r));;
    *_iperf2) port=$((5100 + r));;
    *_sockperf) port=$((11100 + r));;
  esac
  ready=tcp
  case $kind in
    rs_*) pre="env LD_PRELOAD=$RS"; ready=cm;;
    r2_*) st=$STATSDIR/$id.$SIDE
          pre="env LD_PRELOAD=$LIB R2SOCK_UPGRADE=now R2SOCK_STATS=1 R2SOCK_STATS_FILE=$st"
          [ -z "$ROLE" ] && pre+=" R2SOCK_TRANSPORT=rdma";;
  esac
  case $kind in
    ib_bw)
      # At most 8 MiB in flight (perftest's default depth of 128 at its
      # default 64 KiB): at 1 MiB, 128 outstanding writes make rxe under
      # TCG collapse to a twentieth of what a depth of 8 gives (measured:
      # 0.07 against 1.1 Gbit/s), which would be no limit of anything.
      srv="ib_write_bw -d rxe0 -x 1 -F --report_gbits -p $port -D $DUR -s ${size:-65536}"
      srv+=" -t $(( ${size:-65536} >= 65536 ? 8388608 / ${size:-65536} : 128 ))"
      cli="$srv $SRV" parse=parse_ib_bw;;
    ib_lat|ib_slat)
      local lat=ib_write_lat
      [ "$kind" = ib_slat ] && lat=ib_send_lat
      srv="$lat -d rxe0 -x 1 -F -p $port -n $LAT_ITERS ${size:+-s $size}"
      cli="$srv $SRV" parse=parse_ib_lat;;
    *_iperf3)
      # -1: the server ends after one test (its stats get written); a
      # stalled one (rsocket) is stopped once its client gave up
      srv="$pre iperf3 -s -1 -B $SRV -p $port"
      cli="$pre iperf3 -c $SRV -p $port -t $DUR -l ${size:-131072} --json" parse=parse_iperf3
      if [ "$kind" = rs_iperf3 ]; then
        ctmo=$STALL_TMO stop=TERM
      else
        # GNU time outside the preload: it times the program, not itself
        cpu="/usr/bin/time -f %U\ %S -o $LOGDIR/$id.cpu"
        srv="$cpu.srv $srv" cli="$cpu.cli $cli"
      fi;;
    *_iperf2)
      # -P 1: the server ends after one client (its stats get written)
      srv="$pre iperf -s -P 1 -B $SRV -p $port -y C"
      cli="$pre iperf -c $SRV -p $port -t $DUR -l ${size:-131072} -y C" parse=parse_iperf2;;
    *_sockperf)
      # the server runs until SIGINT, its normal way out (stats written)
      srv="$pre sockperf sr --tcp -i $SRV -p $port" stop=INT
      cli="$pre sockperf pp --tcp -i $SRV -p $port -m ${size:-64} -t $DUR --mps 10000000" parse=parse_sockperf;;
    *) say "unknown case $c"; record "S $r $c error unknown-case"; return;;
  esac
  [ -n "$st" ] && { rm -f "$st"; rxe_snap "$id"; }
  busy0=$(busy_ticks)
  run_one "$id" "$ready" "$port" "$stop" "$ctmo" "$srv" "$cli"
  if [ -n "$cpu" ]; then
    busy=$(( $(busy_ticks) - busy0 ))
    record "V $r $c guest_cpu_$SIDE $((busy / 100)).$(printf %02d $((busy % 100)))"
    is_server && v=$(cpu_of "$LOGDIR/$id.cpu.srv") && [ -n "$v" ] && record "V $r $c cpu_srv_s $v"
    is_client && v=$(cpu_of "$LOGDIR/$id.cpu.cli") && [ -n "$v" ] && record "V $r $c cpu_cli_s $v"
  fi
  local shown="" status m v
  if is_client; then
    if [ "$CRC" = 0 ]; then
      status=ok
      while read -r m v; do
        record "V $r $c $m $v"; shown+=" $m=$v"
      done < <("$parse" "$LOGDIR/$id.client.log")
      [ -n "$shown" ] || { status=error; shown=" unparsable output"; }
    elif [ "$kind" = rs_iperf3 ] && [ "$CRC" = 124 ]; then
      status=stalled shown=" no end within ${ctmo}s"
    else
      status=error shown=" client rc $CRC"
    fi
    record "S $r $c $status $CRC"
    if [ "$status" = error ]; then
      say "$id: ERROR:$shown; client log tail:"; tail -n 5 "$LOGDIR/$id.client.log" | sed 's/^/    | /'
      # the shim's own warnings land in the same log (a reset connection
      # spoils iperf3's JSON, say): show them, they are the likely cause
      grep -o 'r2sock\[[0-9]*\]: [a-z]*: .*' "$LOGDIR/$id.client.log" | head -n 3 | sed 's/^/    shim| /'
    fi
  fi
  # iperf2's receiver rate too: its interval ends at EOF, so it also counts
  # how long the sender's close() took to deliver the end of the stream
  if is_server && [ "${kind#*_}" = iperf2 ]; then
    while read -r m v; do record "V $r $c rx_$m $v"; shown+=" rx_$m=$v"; done < <(parse_iperf2 "$LOGDIR/$id.server.log")
  fi
  if [ -n "$st" ]; then
    path_check "$r" "$c" "$st" "$id"
    shown+=" [$SIDE $(tail -n 1 "$OUT" | cut -d' ' -f5-)]"
  fi
  is_server && [ -n "$SRC" ] && [ "$SRC" != 0 ] && shown+=" (server rc $SRC)"
  say "$id:${status:+ $status}$shown"
}

# link_up: in a pair, the other guest answers a ping (bounded). The virtual
# link between the guests has been seen to die under a heavily loaded host
# (every later connection: "No route to host"); the figures after that mean
# nothing, so both guests stop instead of timing out case after case.
link_up() {
  [ -n "$ROLE" ] || return 0
  [ -e "$SYNC/linkdown" ] && return 1
  wait_for 20 busybox ping -c 1 -W 2 "$PEER_IP" > /dev/null && return 0
  : > "$SYNC/linkdown"
  return 1
}

say "bench: $ROUNDS rounds, ${DUR}s runs, cases: $CASES; server $SRV; I am ${ROLE:-both ends}"
[ -n "$ROLE" ] && { barrier boot 120 || exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  for c in $CASES; do
    if ! link_up; then
      say "the link to $PEER_IP is down (round $r, before $c): stopping"
      record "S $r $c error link-down"
      exit 1
    fi
    run_case "$r" "$c"
  done
done
say "bench: done"
exit 0
