#!/bin/bash
# rxe.smoke, inside ONE guest (scripts/rxe/run-guest): the Soft-RoCE device
# works, then programs run under the shim.
#   1. rxe0 exists (ibv_devices, rdma link) and its port is PORT_ACTIVE
#   2. ib_write_bw over RoCEv2 (GID index 1 = IPv4), loopback to 10.77.0.1,
#      moves data (bandwidth > 0 and rxe0's packet counters grew)
#   3. iperf3 without the shim (baseline figure), then with
#      LD_PRELOAD=$R2SOCK_LIB on both ends: iperf3 succeeds and both processes
#      report conn_seen >= 1 in R2SOCK_STATS_FILE. Skipped when R2SOCK_LIB is
#      empty (library not built yet).
# Both ends are in one guest, i.e. one host: once the shim has transports it
# will pick shared memory here, so assertions that payload crossed rxe0 belong
# in the pair test (or need a knob that forces RDMA).
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"
IP=$MY_IP
DUR=${R2SOCK_RXE_DUR:-3}        # seconds per bandwidth run
PERF="-d rxe0 -x 1 -F --report_gbits -p 18515 -D $DUR"

has_rxe0() { ibv_devices | grep -qw rxe0 && rdma link show rxe0/1 | grep -q 'state ACTIVE'; }
step "rxe0 exists" has_rxe0 && rdma link show
port_active() { ibv_devinfo -d rxe0 | tee "$LOGDIR/ibv_devinfo.log" | grep -q PORT_ACTIVE; }
step "ibv_devinfo PORT_ACTIVE" port_active && grep -E 'state|active_mtu' "$LOGDIR/ibv_devinfo.log"

rxe_snap bw
if serve_and_connect ib_write_bw 18515 "ib_write_bw $PERF" "ib_write_bw $PERF $IP"; then
  bw=$(ib_bw_gbps "$LOGDIR/ib_write_bw.client.log")
  if positive "$bw"; then say "ib_write_bw loopback: $bw Gb/s"; else fail "ib_write_bw reported no bandwidth ('$bw')"; fi
fi
rxe_delta bw
# 3 s of 64 KiB writes is thousands of packets even under TCG; the exact
# figure only has to show that the device, not something else, carried them
rxe_expect bw sent_pkts 1000
rxe_expect bw rcvd_pkts 1000

iperf_pair() { # NAME ENV...: iperf3 server and client, both with ENV
  local name=$1; shift
  local envs=""
  [ $# -gt 0 ] && envs="env$(printf ' %q' "$@") "
  serve_and_connect "$name" 5201 "${envs}iperf3 -s -1 -B $IP -p 5201" \
    "${envs}iperf3 -c $IP -p 5201 -t $DUR -f m" || return 1
  say "$name: $(iperf3_rate "$LOGDIR/$name.client.log") Mbit/s"
}
iperf_pair iperf3_plain

if [ -z "${R2SOCK_LIB:-}" ]; then
  skip "iperf3 under the shim" "R2SOCK_LIB is empty (libr2sock.so not built); only the RDMA part ran"
elif [ ! -r "$R2SOCK_LIB" ]; then
  fail "R2SOCK_LIB=$R2SOCK_LIB does not exist (build the r2sock target first)"
else
  rm -f /xfer/stats
  rxe_snap shim
  iperf_pair iperf3_shim LD_PRELOAD="$R2SOCK_LIB" R2SOCK_STATS=1 R2SOCK_STATS_FILE=/xfer/stats
  rxe_delta shim
  say "stats written by the shim:"; sed 's/^/    /' /xfer/stats 2>/dev/null
  step "shim stats: conn_seen >= 1 in server and client" r2s_stats_check /xfer/stats 2 conn_seen 1
fi
finish
