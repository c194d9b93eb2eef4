#!/usr/bin/env bash
# A connection that never upgrades because its peer is plain must cost
# what plain TCP costs: the shim end's system calls on it are counted with
# strace. N connections, one after another, a verified 1000-byte request
# and response each (rr_check), under the policy a user gets who sets
# nothing (the shm variant; the tcp variant runs R2SOCK_UPGRADE=never):
#   client: the shim connects to a plain server. It names no address it
#           was given (connect() named the peer: no getpeername; one
#           getsockname a connection, for the stats segment), sends its
#           hello (under never: none), makes no probe on its writes before
#           the policy could switch, and decides the peer is plain on its
#           first read with one urgent peek and no SIOCATMARK: at most one
#           recv(MSG_OOB|MSG_PEEK) per connection.
#   server: the shim accepts from a plain client. accept() gave the peer's
#           address and the listener (bound to 127.0.0.1) our own: two
#           getsockname calls in all (rr_check's own, which reports its
#           port, and the shim's of the listener, at listen) and at most one
#           getpeername (the listener's, for the stats segment: ENOTCONN).
#           It never sends its hello to a client that sent none, and its
#           first read decides as the client's does.
# Deterministic counts only: how often a read waits (a peek that finds
# nothing, then poll) depends on scheduling, and is not asserted.
#   usage: plain-peer-calls.sh client|server
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

end=${1:?usage: plain-peer-calls.sh client|server}
[[ -n $R2SOCK_LIB ]] || skip "nothing to count without the shim"
need strace
strace -f -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here (ptrace not allowed)"
RR=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/rr_check
[[ -x $RR ]] || fail "rr_check not built: expected it at $RR (set R2SOCK_BUILD to the build dir)"
[[ ${R2SOCK_UPGRADE:-} == never ]] || unset R2SOCK_UPGRADE # the default policy
N=20 B=1000
port=$(free_port)
SHIM=()
shim_at "$TMP/$end.stats"
trace=(strace -f -qq -e "trace=network,ioctl" -o "$TMP/$end.strace")
server=("${PLAIN[@]}") client=("${PLAIN[@]}")
if [[ $end == server ]]; then server=("${trace[@]}" "${SHIM_AT[@]}"); else client=("${trace[@]}" "${SHIM_AT[@]}"); fi
start_server rr "$port" "${server[@]}" "$RR" server --port "$port" --conns $N --bytes $B --timeout 60
run_to "$TMP/client.out" 90 "${client[@]}" "$RR" client --port "$port" --conns $N --bytes $B --timeout 60
wait_server rr 30
grep -q "rr_check client: OK conns=$N/$N verified=$((N * B))" "$TMP/client.out" ||
  fail "the client did not verify all $N responses: $(tail -n 3 "$TMP/client.out")"
grep -q "rr_check server: OK conns=$N/$N verified=$((N * B))" "$TMP/rr.log" ||
  fail "the server did not verify all $N requests: $(tail -n 3 "$TMP/rr.log")"
upgraded=$(STATS=$TMP/$end.stats stats_sum conn_shm)
((upgraded == 0)) || fail "the $end counts $upgraded connections on shm: its peer was plain"

# count NAME REGEX: the traced calls that match.
count() { grep -cE "$2" "$TMP/$end.strace" || true; }
# at_most WHAT COUNT MAX: one line of the log, or the failure.
at_most() {
  (($2 <= $3)) || fail "the $end made $2 $1 for $N connections (at most $3 expected): $(grep -m 3 -E "$4" "$TMP/$end.strace")"
  log "$end: $2 $1 for $N connections (at most $3)"
}
hellos=$N
[[ ${R2SOCK_UPGRADE:-} == never || $end == server ]] && hellos=0
urgent_peeks=$N
[[ ${R2SOCK_UPGRADE:-} == never ]] && urgent_peeks=0
gsn=$N gpn=0
[[ $end == server ]] && gsn=2 gpn=1
at_most "SIOCATMARK calls" "$(count atmark 'SIOCATMARK')" 0 'SIOCATMARK'
at_most "urgent peeks" "$(count peek 'MSG_OOB\|MSG_PEEK')" $urgent_peeks 'MSG_OOB\|MSG_PEEK'
at_most "urgent sends" "$(count oob '^[0-9]+ +send[a-z]*\(.*MSG_OOB')" $hellos 'send[a-z]*\(.*MSG_OOB'
at_most "getpeername calls" "$(count gpn 'getpeername\(')" $gpn 'getpeername\('
at_most "getsockname calls" "$(count gsn 'getsockname\(')" $gsn 'getsockname\('
log PASS
