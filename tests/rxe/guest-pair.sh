#!/bin/bash
# rxe.pair, in BOTH guests of scripts/rxe/run-pair ($ROLE a = server side
# 10.77.1.1, b = client side 10.77.1.2), each with rxe0 on its eth0:
#   1. the link between them works (ping)
#   2. ib_write_bw b -> a over RoCEv2 moves data (bandwidth > 0, a's rxe0
#      received and b's sent thousands of packets)
#   3. iperf3 b -> a without the shim (baseline figure), then with
#      LD_PRELOAD=$R2SOCK_LIB R2SOCK_UPGRADE=now on both ends and the
#      default transport choice: two hosts, so RDMA. Each side's process
#      upgraded both connections to RDMA (conn_rdma >= 2), >= 90 % of its
#      payload went over RDMA, and rxe0 carried it (packet counters).
#   4. the stream checker across the hosts, both directions at once, bytes
#      verified, over RDMA.
#   5. iperf2 b -> a under the shim, over RDMA. iperf2's server sends a
#      28-byte reply that its client reads only when its test ends; when the
#      reply leaves before the server's direction reaches the ring, it goes
#      in a DATA frame, in front of every doorbell the server sends later.
#      The client's writer must read it ahead to reach them (docs/
#      protocol.md, "Application bytes in front of control frames"), or the
#      socket stays readable and each of its sleeps returns at once: 10,407
#      to 14,350 sleeps in 3 s runs that hit it (2 runs in 3), against 65 to
#      2,335 in runs that did not and with the read-ahead. So at most 6,000.
# Skipped (3, 4, 5) when R2SOCK_LIB is empty.
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"
SRV=10.77.1.1
DUR=${R2SOCK_RXE_DUR:-3}
PERF="-d rxe0 -x 1 -F --report_gbits -p 18515 -D $DUR"

say "I am $ROLE: $MY_IP, peer $PEER_IP"
barrier boot || finish
# the first packets also resolve ARP; bounded retry instead of a fixed sleep.
# busybox's ping: iputils-ping is often not installed, busybox-static is
# (the initramfs needs it).
step "ping $PEER_IP" wait_for 30 busybox ping -c 1 -W 1 "$PEER_IP"

rxe_snap bw
if xpair ib_write_bw 18515 "ib_write_bw $PERF" "ib_write_bw $PERF $SRV" && [ "$ROLE" = b ]; then
  bw=$(ib_bw_gbps "$LOGDIR/ib_write_bw.b.log")
  if positive "$bw"; then say "ib_write_bw b->a: $bw Gb/s"; else fail "ib_write_bw reported no bandwidth ('$bw')"; fi
fi
rxe_delta bw
if [ "$ROLE" = a ]; then rxe_expect bw rcvd_pkts 1000; else rxe_expect bw sent_pkts 1000; fi

iperf_pair() { # NAME ENV...: iperf3 server on a, client on b, both with ENV
  local name=$1; shift
  local envs=""
  [ $# -gt 0 ] && envs="env$(printf ' %q' "$@") "
  xpair "$name" 5201 "${envs}iperf3 -s -1 -B $SRV -p 5201" "${envs}iperf3 -c $SRV -p 5201 -t $DUR -f m" || return 1
  [ "$ROLE" = b ] && say "$name b->a: $(iperf3_rate "$LOGDIR/$name.b.log") Mbit/s"
  return 0
}
iperf_pair iperf3_plain

if [ -z "${R2SOCK_LIB:-}" ]; then
  skip "iperf3 under the shim" "R2SOCK_LIB is empty (libr2sock.so not built); only the RDMA part ran"
elif [ ! -r "$R2SOCK_LIB" ]; then
  fail "R2SOCK_LIB=$R2SOCK_LIB does not exist (build the r2sock target first)"
else
  stats=/xfer/stats.$ROLE  # one file per guest: two 9p clients must not append to one file
  rm -f "$stats"
  rxe_snap shim
  iperf_pair iperf3_shim LD_PRELOAD="$R2SOCK_LIB" R2SOCK_UPGRADE=now R2SOCK_STATS=1 R2SOCK_STATS_FILE="$stats"
  rxe_delta shim
  say "stats written by the shim:"; sed 's/^/    /' "$stats" 2>/dev/null
  step "iperf3: both connections upgraded to RDMA" r2s_stats_check "$stats" 1 conn_rdma 2
  step "iperf3: >= 90 % of the payload over RDMA" r2s_stats_share "$stats" rdma 90
  if [ "$ROLE" = a ]; then rxe_expect shim rcvd_pkts 1000; else rxe_expect shim sent_pkts 1000; fi

  sc=${R2SOCK_BUILD:-}/tests/progs/stream_check
  rm -f "$stats.sc"
  env="env LD_PRELOAD=$R2SOCK_LIB R2SOCK_UPGRADE=now R2SOCK_STATS=1 R2SOCK_STATS_FILE=$stats.sc"
  xpair stream 7000 "$env $sc server --host $SRV --port 7000 --once --timeout 90" \
    "$env $sc client --host $SRV --port 7000 --bytes 16M --bidir --timeout 90"
  step "stream checker: upgraded to RDMA" r2s_stats_check "$stats.sc" 1 conn_rdma 1

  rm -f "$stats.i2"
  env="env LD_PRELOAD=$R2SOCK_LIB R2SOCK_UPGRADE=now R2SOCK_STATS=1 R2SOCK_STATS_FILE=$stats.i2"
  xpair iperf2 5001 "$env iperf -s -P 1 -B $SRV -p 5001" "$env iperf -c $SRV -p 5001 -t $DUR -l 131072" &&
    [ "$ROLE" = b ] && say "iperf2 b->a: $(awk '/bits\/sec/ {v = $(NF-1) " " $NF} END {print v}' "$LOGDIR/iperf2.b.log")"
  step "iperf2: upgraded to RDMA" r2s_stats_check "$stats.i2" 1 conn_rdma 1
  [ "$ROLE" = b ] && step "iperf2: the client's writer sleeps until woken" r2s_stats_check "$stats.i2" 1 waits_sleep 0 6000
fi
finish
