#!/usr/bin/env bash
# 1000 connections at once on 127.0.0.1, both ends under the shim: the
# stream checker (tests/progs) opens all 1000 client sockets before any byte
# moves, then one event loop per end moves a checked stream each way on
# every one, bounded by 25 s (100 s in a sanitizer build, whose 1000-socket
# event loops run several times slower; ctest's own bound is 120 s).
#   usage: conns1000.sh default|peer-shim
#   default:   256 KiB each way with the default policy. Many connections
#              end before their switch completes (by design they then stay
#              on TCP frames); what must hold is every byte, while the
#              server closes 1000 connections together. Under now the
#              client reads the server's hello late and its shim answers
#              with frames after the server has closed (and often after it
#              has exited): both ends verify every byte of all 1000
#              streams, so a reset that cost a stream its tail fails here.
#   peer-shim: 128 KiB each way with R2SOCK_PEER_SHIM=1, so that every
#              connection switches at establishment: 1000 rings at once.
#              The shm variant asserts that all 2 x 1000 ends upgraded.
# Reports (log, peer-shim) the peak rings mapped by the client
# (virtual size), its peak shared and total resident memory, and the
# machine's shared memory in use (/proc/meminfo Shmem, peak minus start:
# both ends' touched ring pages, plus whatever other processes do
# meanwhile), each also per connection.
# RLIMIT_NOFILE is raised to 4096 (1000 sockets + the shim's duplicates).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

N=1000
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
ulimit -n 4096 || fail "cannot raise RLIMIT_NOFILE to 4096 (hard limit $(ulimit -Hn))"
SC_TMO=25
[[ -n ${R2S_SANITIZER_RT:-} ]] && SC_TMO=100
meminfo_shmem() { awk '/^Shmem:/ {print $2}' /proc/meminfo; }

# phase NAME BYTES: one server and one client, both verified; samples the
# client's peaks into rings, mapped, shmem, rss and the machine's shm_grew.
phase() {
  local name=$1 bytes=$2 port cpid pid r k s m rc=0 shm0 shm_peak
  port=$(free_port)
  start_server "sc-$name" "$port" "$SC" server --host 127.0.0.1 --port "$port" --mode nonblock-epoll-et \
    --conns "$N" --timeout "$SC_TMO"
  timeout -k 5 $((SC_TMO + 5)) "${SHIM[@]}" "$SC" client --host 127.0.0.1 --port "$port" --mode nonblock-epoll-et \
    --conns "$N" --bytes "$bytes" --bidir --seed 31 --timeout "$SC_TMO" >"$TMP/client-$name.out" 2>&1 &
  cpid=$!
  rings=0 mapped=0 shmem=0 rss=0
  shm0=$(meminfo_shmem) shm_peak=$shm0
  while kill -0 "$cpid" 2>/dev/null; do
    pid=$(pgrep -P "$cpid" -x stream_check || true)
    if [[ -n $pid && -r /proc/$pid/maps ]]; then
      r=0 k=0
      while read -r range _; do
        r=$((r + 1)) k=$((k + (0x${range#*-} - 0x${range%-*}) / 1024))
      done < <(grep '/r2s-' "/proc/$pid/maps" 2>/dev/null || true)
      read -r s m < <(awk '/^RssShmem:/ {s=$2} /^VmRSS:/ {m=$2} END {print s+0, m+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
      ((r > rings)) && rings=$r
      ((k > mapped)) && mapped=$k
      ((s > shmem)) && shmem=$s
      ((m > rss)) && rss=$m
    fi
    s=$(meminfo_shmem)
    ((s > shm_peak)) && shm_peak=$s
    sleep 0.1
  done
  shm_grew=$((shm_peak - shm0))
  wait "$cpid" || rc=$?
  ((rc == 0)) || fail "$name: client exited with status $rc (expected 0): $(tail -n 3 "$TMP/client-$name.out")"
  wait_server "sc-$name" 20
  grep -q "stream_check client: OK mode=nonblock-epoll-et conns=$N/$N" "$TMP/client-$name.out" ||
    fail "$name: expected the client to verify all $N connections: $(tail -n 3 "$TMP/client-$name.out")"
  grep -q "stream_check server: OK mode=nonblock-epoll-et conns=$N/$N" "$TMP/sc-$name.log" ||
    fail "$name: expected the server to verify all $N connections: $(tail -n 3 "$TMP/sc-$name.log")"
}

which=${1:?usage: conns1000.sh default|peer-shim}
shm_snapshot
if [[ $which == default ]]; then
  phase default 256K
  check_stats conns=$((2 * N)) bytes=$((2 * N * 262144)) procs=2
  log "default: $N connections, every byte verified, conn_shm=$(stats_sum conn_shm) of $((2 * N)) ends"
  shm_check_leaks
  log PASS
  exit 0
fi
[[ $which == peer-shim ]] || fail "unknown phase '$which'"
export R2SOCK_PEER_SHIM=1
phase peer-shim 128K
log "peer-shim: client peaks: $rings ring mappings of $mapped KiB, RssShmem $shmem KiB, VmRSS $rss KiB;" \
  "per connection: $((mapped / N)) KiB of rings mapped, $((shmem / N)) KiB shared resident, $((rss / N)) KiB resident;" \
  "machine Shmem peak +$((shm_grew / 1024)) MiB, $((shm_grew / N)) KiB per connection"
check_stats conns=$((2 * N)) bulk=$((2 * N)) bytes=$((2 * N * 131072)) procs=2
# Under now every end must have upgraded. (The byte share is not asserted:
# each client writes its bytes before its loop reads the server's
# handshake, so about half goes in TCP frames.)
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE-} == now ]]; then
  shm=$(stats_sum conn_shm)
  ((shm == 2 * N)) || fail "peer-shim: expected all $((2 * N)) connection ends on shm (conn_shm), saw $shm"
fi
shm_check_leaks
log PASS
