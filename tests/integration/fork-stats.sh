#!/usr/bin/env bash
# Whose account a forked server's connections are in (README, "process
# model": the process that moves bytes on a connection after the fork owns
# it). tests/progs fork_server accepts 4 connections and hands each to a
# child (fork, or fork + exec with --exec) that serves a checked stream;
# the parent only closes its copy. Asserted from the server side's stats
# lines: the parent's (the one with listeners=1) counts no connection at
# all (conn_seen=0, nothing on any path, no tcp_unfinished), and the
# children's add up to conn_seen=4; with R2SOCK_UPGRADE=now, conn_shm=4:
# the children upgrade, after a plain fork with the state they inherited,
# after exec because nothing was ever sent on the socket they found
# (exec-handover.sh has the case where something was).
#   usage: fork-stats.sh fork|exec
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: fork-stats.sh fork|exec}
case $mode in
fork) exec_flag=() ;;
exec) exec_flag=(--exec) ;;
*) fail "unknown mode '$mode'" ;;
esac
N=4
PROGS=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs
[[ -x $PROGS/fork_server && -x $PROGS/stream_check ]] || fail "tests/progs not built under $PROGS"

port=$(free_port)
start_server_at fork-server "$port" "$TMP/server-stats" "$PROGS/fork_server" --host 127.0.0.1 --port "$port" \
  --conns "$N" --mode block "${exec_flag[@]}" --timeout 30
run_to_at "$TMP/client.out" 40 "$TMP/client-stats" "$PROGS/stream_check" client --host 127.0.0.1 --port "$port" \
  --mode block --conns "$N" --bytes 4M --bidir --seed 41 --timeout 30
wait_server fork-server 20
grep -q "stream_check client: OK" "$TMP/client.out" || fail "client: $(tail -n 3 "$TMP/client.out")"
grep -q "fork_server: OK conns=$N children_ok=$N/$N" "$TMP/fork-server.log" ||
  fail "server: $(tail -n 3 "$TMP/fork-server.log")"
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }

# stat FILTER KEY: KEY summed over the server's stats lines FILTER picks
# (parent: the line with listeners=1; children: the others).
stat() {
  awk -v which="$1" -v key="$2" '
    { delete v; for (i = 3; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
      parent = v["listeners"] > 0
      if ((which == "parent") == parent) s += v[key] }
    END { print s + 0 }' "$TMP/server-stats"
}
lines=$(wc -l <"$TMP/server-stats")
((lines == N + 1)) || fail "expected $((N + 1)) server stats lines (parent + $N children), saw $lines"
for k in conn_seen conn_tcp conn_shm conn_rdma tcp_unfinished; do
  v=$(stat parent "$k")
  ((v == 0)) || fail "expected the parent, which only closes its copies, to count nothing: $k=$v"
done
seen=$(stat children conn_seen)
((seen == N)) || fail "expected the children to count the $N connections (conn_seen), saw $seen"
want_path=conn_tcp
[[ ${R2SOCK_UPGRADE-} == now ]] && want_path=conn_shm
v=$(stat children "$want_path")
((v == N)) || fail "expected $want_path=$N summed over the children, saw $v"
log "parent: conn_seen=0; children: conn_seen=$seen $want_path=$v"
log PASS
