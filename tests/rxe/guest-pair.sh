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
#   6. lossless failover over a link outage: two checksummed streams
#      (stream_check --bidir, each end paced to at most 3 MiB/s: 32 MiB
#      each way, and 8 MiB up with 32 MiB down, whose client has sent most
#      or all of it by the outage and then only reads) under the shim over
#      RDMA; once they run there (a's rxe0 received 256 packets more) guest
#      a takes eth0 down for OUTAGE (4) s: longer than the queue pair's
#      retries (about 0.5 s on rxe, then it fails), shorter than TCP's
#      patience. A connection must be established when the link goes down
#      and still when it comes back (the outage landed mid-stream); every
#      end exits 0 with every byte verified; the stats count each
#      connection in conn_rdma (it was on RDMA first) and in failovers (it
#      went on over TCP) on each side. Without failover the queue pair's
#      failure resets the connections (ECONNRESET, EPIPE). Soft-RoCE
#      sometimes leaves a queue pair stalled after the outage with no
#      error at all (its requester never sends again): without the shim's
#      liveness check (docs/rdma.md) the streams then hung until the
#      server's 60 s time-out (2 runs in 3).
#   7. the same for iperf3 -t 10 b -> a: both iperf3 ends exit 0, each
#      side's stats count its two connections in conn_rdma and at least
#      one failover.
# Skipped (3 to 7) when R2SOCK_LIB is empty.
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
  xpair "$name" "${IPERF_PORT:-5201}" "${envs}iperf3 -s -1 -B $SRV -p ${IPERF_PORT:-5201}" \
    "${envs}iperf3 -c $SRV -p ${IPERF_PORT:-5201} -t ${IPERF_DUR:-$DUR} -f m" || return 1
  [ "$ROLE" = b ] && say "$name b->a: $(iperf3_rate "$LOGDIR/$name.b.log") Mbit/s"
  return 0
}

# outage_start NAME PORT (on a): in the background, once rxe0 has received
# 256 packets more than now (the step's bytes are on RDMA), take the netdev
# under rxe0 (eth0) down for OUTAGE s, then up, and wait until rxe0's port
# is ACTIVE with its GID again. Its log says whether a connection on PORT
# was established when the link went down and when it came back.
# outage_check NAME: wait for it (bounded) and require both. Until the link
# goes down the job runs builtins only: the step saturates the guest's CPU,
# where each fork costs up to seconds, which would put the outage late in
# the step or after it.
OUTAGE=4
outage_start() {
  local name=$1 port=$2 d base
  d=$(rxe_counters_dir)
  read -r base < "$d/rcvd_pkts"
  (
    p=/sys/class/infiniband/rxe0/ports/1
    # a connection on local port $port is ESTABLISHED (state 01)
    established() {
      local hex _sl loc _rem st _rest
      printf -v hex '%04X' "$port"
      while read -r _sl loc _rem st _rest; do
        [ "${loc#*:}" = "$hex" ] && [ "$st" = 01 ] && return 0
      done < /proc/net/tcp
      return 1
    }
    # read -t on a fifo opened read-write (no writer ever) sleeps without a fork
    mkfifo "/tmp/$name.tick" && exec 9<> "/tmp/$name.tick" || exit 1
    say "waiting for rxe0's rcvd_pkts to pass $((base + 256))"
    end=$((SECONDS + 60))
    until read -r n < "$d/rcvd_pkts" && [ $((n - base)) -ge 256 ]; do
      [ "$SECONDS" -lt "$end" ] || { say "rxe0 received no RDMA traffic within 60 s"; exit 1; }
      read -r -t 0.05 -u 9 _
    done
    say "rcvd_pkts $n"
    established && say "connection on port $port established at the link's fall"
    say "$R2S_NETDEV down for $OUTAGE s"
    ip link set "$R2S_NETDEV" down; sleep "$OUTAGE"; ip link set "$R2S_NETDEV" up
    say "$R2S_NETDEV up"
    established && say "connection on port $port established at the link's return"
    ss -Htni "( sport = :$port )"
    wait_for 30 grep -q ACTIVE "$p/state" &&
      wait_for 30 grep -vq '^0000:0000:0000:0000:0000:0000:0000:0000$' "$p/gids/1"
  ) > "$LOGDIR/$name.outage.log" 2>&1 &
  OUTAGE_PID=$!
}
outage_check() {
  local name=$1 log=$LOGDIR/$1.outage.log
  wait_pid "$OUTAGE_PID" 60
  sed 's/^/    outage| /' "$log"
  [ "$WRC" = 0 ] || { say "the outage did not run to its end (rc $WRC)"; return 1; }
  if ! grep -q "established at the link's fall" "$log" || ! grep -q "established at the link's return" "$log"; then
    say "the outage did not land in the middle of $name"; return 1
  fi
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

  # Last: the outages take the link down under the RDMA connections.
  # Two streams through one server, from two client processes: one with
  # much to send both ways, one whose client has sent most or all of its
  # 8 MiB when the link goes down, and then only reads.
  rm -f "$stats.fo"
  # (info: each end logs its ring's failure and where its stream went on)
  env="env LD_PRELOAD=$R2SOCK_LIB R2SOCK_UPGRADE=now R2SOCK_LOG=info R2SOCK_STATS=1 R2SOCK_STATS_FILE=$stats.fo"
  cli="$env $sc client --host $SRV --port 7001 --bidir --rate 3M --timeout 60"
  [ "$ROLE" = a ] && outage_start stream_outage 7001
  xpair stream_outage 7001 "$env $sc server --host $SRV --port 7001 --conns 2 --rate 3M --timeout 60" \
    "$cli --bytes 32M & p=\$!; $cli --bytes 8M --reply-bytes 32M --seed 2; r=\$?; wait \$p || r=\$?; exit \$r"
  [ "$ROLE" = a ] && step "streams, link outage: it landed mid-stream" outage_check stream_outage
  # a: one process with both connections; b: two with one each
  if [ "$ROLE" = a ]; then np=1 per=2; else np=2 per=1; fi
  step "streams, link outage: on RDMA first" r2s_stats_check "$stats.fo" "$np" conn_rdma "$per"
  step "streams, link outage: failed over to TCP" r2s_stats_check "$stats.fo" "$np" failovers "$per"

  rm -f "$stats.fo3"
  [ "$ROLE" = a ] && outage_start iperf3_outage 5202
  IPERF_PORT=5202 IPERF_DUR=10 iperf_pair iperf3_outage \
    LD_PRELOAD="$R2SOCK_LIB" R2SOCK_UPGRADE=now R2SOCK_LOG=info R2SOCK_STATS=1 R2SOCK_STATS_FILE="$stats.fo3"
  [ "$ROLE" = a ] && step "iperf3, link outage: it landed mid-test" outage_check iperf3_outage
  step "iperf3, link outage: on RDMA first" r2s_stats_check "$stats.fo3" 1 conn_rdma 2
  step "iperf3, link outage: failed over to TCP" r2s_stats_check "$stats.fo3" 1 failovers 1
fi
finish
