#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, as two containers on one
# host with networks of their own: a stream_check pair under the shim, the
# server in one namespace and the client in the other (32 MiB each way,
# every byte compared), must stay on TCP, byte-exact, and say why.
#   usage: netns.sh auto|shm
#   auto: the default transport choice. The peer's address (on the other
#         end of the veth) is not one of this namespace's, so shared memory
#         is not offered (src/transport/shm.c, peer_is_local), and RDMA is
#         (a remote peer) but no device serves the address here: each end
#         counts tcp_no_device.
#   shm:  R2SOCK_TRANSPORT=shm, shared memory asked for by name: each end
#         offers a ring, and each declines the other's, whose host identity
#         (boot id and network namespace, src/hostid.h) differs from its
#         own: each end counts tcp_unreachable.
# Under R2SOCK_UPGRADE=never both ends count tcp_disabled instead. Needs
# root, unshare and ip (skipped otherwise, with the reason).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: netns.sh auto|shm}
case $mode in
  auto) reason=tcp_no_device ;;
  shm) reason=tcp_unreachable; export R2SOCK_TRANSPORT=shm ;;
  *) fail "usage: netns.sh auto|shm" ;;
esac
[[ ${R2SOCK_UPGRADE:-auto} == never ]] && reason=tcp_disabled
[[ $(id -u) == 0 ]] || skip "network namespaces and a veth pair need root"
need ip unshare nsenter
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"

# Two namespaces, each held by a sleep of its own (gone with it, and the
# veth with them), joined by a veth pair named after this test's pid.
VA=r2s$$a VB=r2s$$b
trap 'rc=$?; set +e; trap - ERR; ip link del "$VA" 2>/dev/null; (exit $rc); live_cleanup' EXIT
unshare -n true 2>/dev/null || skip "cannot make a network namespace here (unshare -n)"
mine=$(readlink /proc/self/ns/net)
holders=()
for _ in 1 2; do
  unshare -n sleep "$R2S_SERVER_LIFETIME" &
  LIVE+=("$!")
  holders+=("$!")
done
deadline=$((SECONDS + 10))
for h in "${holders[@]}"; do
  until [[ $(readlink "/proc/$h/ns/net") != "$mine" ]]; do
    ((SECONDS < deadline)) || fail "pid $h did not enter a network namespace of its own in 10 s"
    sleep 0.02
  done
done
[[ $(readlink "/proc/${holders[0]}/ns/net") != $(readlink "/proc/${holders[1]}/ns/net") ]] ||
  fail "the two holders share a network namespace"
ip link add "$VA" type veth peer name "$VB" 2>"$TMP/ip.err" || skip "cannot make a veth pair here: $(cat "$TMP/ip.err")"
ip link set "$VA" netns "${holders[0]}"
ip link set "$VB" netns "${holders[1]}"
in_ns() { local h=$1; shift; nsenter -t "$h" -n -- "$@"; }
in_ns "${holders[0]}" sh -c "ip link set lo up && ip addr add 10.99.0.1/24 dev $VA && ip link set $VA up"
in_ns "${holders[1]}" sh -c "ip link set lo up && ip addr add 10.99.0.2/24 dev $VB && ip link set $VB up"

port=5001 # the namespace is the test's own: no other listener there
shim_at "$TMP/server.stats"
in_ns "${holders[0]}" "${SHIM_AT[@]}" "$SC" server --host 10.99.0.1 --port "$port" --once --timeout 60 \
  >"$TMP/server.log" 2>&1 &
SPID=$!
LIVE+=("$SPID")
deadline=$((SECONDS + 20))
until [[ -n $(in_ns "${holders[0]}" ss -Hltn "sport = :$port") ]]; do
  kill -0 "$SPID" 2>/dev/null || fail "the server exited before listening: $(cat "$TMP/server.log")"
  ((SECONDS < deadline)) || fail "the server does not listen on 10.99.0.1:$port after 20 s"
  sleep 0.05
done
shim_at "$TMP/client.stats"
in_ns "${holders[1]}" timeout -k 5 60 "${SHIM_AT[@]}" "$SC" client --host 10.99.0.1 --port "$port" \
  --bytes 32M --bidir --timeout 60 >"$TMP/client.log" 2>&1 ||
  fail "the client failed: $(tail -n 5 "$TMP/client.log")"
rc=0
wait "$SPID" || rc=$?
((rc == 0)) || fail "the server failed with $rc: $(tail -n 5 "$TMP/server.log")"
grep -q "verified=$((32 << 20))" "$TMP/client.log" || fail "the client did not verify 32 MiB: $(cat "$TMP/client.log")"

if [[ -z $R2SOCK_LIB ]]; then
  log "plain run (R2SOCK_LIB empty): byte-exact across two namespaces, shim statistics not checked"
  exit 0
fi
for end in server client; do
  for want in conn_seen=1 conn_tcp=1 conn_shm=0 conn_rdma=0 "$reason=1"; do
    got=$(STATS=$TMP/$end.stats stats_sum "${want%=*}")
    ((got == ${want#*=})) || fail "the $end counted ${want%=*}=$got (expected ${want#*=}): $(cat "$TMP/$end.stats")"
  done
done
log "$mode: 32 MiB each way compared between two network namespaces over a veth pair; both ends on TCP, $reason"
