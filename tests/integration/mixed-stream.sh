#!/usr/bin/env bash
# One end under the shim, the other plain: a checked stream (tests/progs
# stream_check) in both directions must arrive byte-exact, and the shim end
# must stay on TCP: a plain peer sends no hello, so there is nothing to
# upgrade to.
#   usage: mixed-stream.sh shim-server|shim-client
#   shim-server: plain client -> server under the shim
#   shim-client: client under the shim -> plain server
# Each mode runs three streams (three server processes): blocking, both
# directions at once with a half-close; event loops (epoll-et / poll) the
# same; blocking one direction then the other with a small reply.
# Asserted on the shim side: conn_seen >= 3, conn_shm = conn_rdma = 0, and
# every byte it sent or received counted on tcp.
#
# What the plain peer may notice once the shim sends its hello: one POLLPRI
# (and SIGURG with F_SETOWN) per connection, allowed by docs/protocol.md
# ("What a plain peer sees"); stream_check's poll loop asks for POLLIN and
# POLLOUT only, and a peer polling for POLLPRI would see the hello once. Not
# tested: the count of POLLPRI events is not part of what must hold.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: mixed-stream.sh shim-server|shim-client}
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
shim_at "$STATS"

# name server-mode client-mode bytes reply-bytes client-flags...
configs=(
  "block-bidir block block 24M 24M --bidir --halfclose"
  "loop-bidir nonblock-epoll-et poll 24M 24M --bidir --halfclose"
  "block-oneway block block 16M 64K --halfclose"
)

shm_snapshot
total=0 n=0 seed=100
for cfg in "${configs[@]}"; do
  read -r name smode cmode bytes reply flags <<<"$cfg"
  port=$(free_port)
  seed=$((seed + 1))
  case $mode in
  shim-server) server=("${SHIM_AT[@]}") client=("${PLAIN[@]}") ;;
  shim-client) server=("${PLAIN[@]}") client=("${SHIM_AT[@]}") ;;
  *) fail "unknown mode '$mode'" ;;
  esac
  # start_server/run prefix the lib's SHIM; the prefixes above decide.
  SHIM=()
  start_server "sc-$name" "$port" "${server[@]}" "$SC" server --host 127.0.0.1 --port "$port" --mode "$smode" --timeout 30
  # shellcheck disable=SC2086 # flags are words
  run_to "$TMP/client-$name.out" 40 "${client[@]}" "$SC" client --host 127.0.0.1 --port "$port" --mode "$cmode" \
    --bytes "$bytes" --reply-bytes "$reply" --seed "$seed" $flags --timeout 30
  wait_server "sc-$name" 20
  grep -q "stream_check client: OK" "$TMP/client-$name.out" ||
    fail "$name: client did not report OK: $(cat "$TMP/client-$name.out")"
  grep -q "stream_check server: OK" "$TMP/sc-$name.log" ||
    fail "$name: server did not report OK: $(cat "$TMP/sc-$name.log")"
  log "$name: $(grep -h 'stream_check client' "$TMP/client-$name.out")"
  # The smaller of the two directions is what the shim end certainly moved
  # each way.
  c2s=$(numfmt --from=iec "$bytes") s2c=$(numfmt --from=iec "$reply")
  total=$((total + (c2s < s2c ? c2s : s2c)))
  n=$((n + 1))
done

check_tcp_only "$STATS" conns="$n" bulk="$n" bytes="$total" procs="$n"
shm_check_leaks
log PASS
