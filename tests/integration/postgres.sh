#!/usr/bin/env bash
# PostgreSQL 15, the server and every client under the shim, over TCP to
# 127.0.0.1. The postmaster accepts each connection and forks a backend
# that serves it (README, "process model": the backend, which moves the
# bytes, owns the connection), and the backends wait on their sockets with
# epoll. Clients:
#   copy:    psql `\copy` of a 16 MiB text file (base64, one row a line)
#            into a table with an identity column, and `\copy` of the rows
#            back out in id order; the copy must equal the file byte-exact
#   pgbench: `pgbench -i -s 2` (client-side data generation: a COPY of
#            200000 rows), then 4 clients on 2 threads running 200 TPC-B
#            transactions each: 800 processed, 0 failed
#   check:   psql: the accounts', tellers' and branches' balances each add
#            up to the sum of the 800 history rows' deltas, which holds
#            only if every transaction's statements all arrived, once
# PostgreSQL will not run as root: the server runs as user postgres
# (setpriv).
#   usage: postgres.sh [same-user|clients-root]
#   same-user:    every client runs as postgres too.
#   clients-root: the clients run as root, as an administrator's psql
#                 would: every connection end that moved into shared memory
#                 took its peer's ring by descriptor (rings_by_fd =
#                 conn_shm on each side). Before 2026-11-28 such
#                 connections stayed on TCP (tcp_other_user).
# Asserted from the stats,
# each side's in a file of its own: the clients' connections and bytes
# (check_stats: the two copy connections carry the bulk), the server's
# backends count as many connection ends as the clients and, under
# R2SOCK_UPGRADE=now, as many on shared memory; no connection on either
# side stayed on TCP for tcp_other_user; the postmaster, which only accepts
# and closes its copy, counts none. Needs root, user postgres and the
# Debian server binaries (skipped otherwise). Also skipped where PostgreSQL's
# programs hang at start-up with only the sanitizer runtime of a sanitizer
# build preloaded, without the shim: seen on Debian 12 with GCC 12's
# libasan.so.8 and libtsan.so.2, in bindtextdomain(), for any program
# linked with libp11-kit (libpq brings it in through LDAP and GnuTLS; curl
# hangs the same way), so there is no shim to test there.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
PGBIN=/usr/lib/postgresql/15/bin
for p in initdb postgres psql pgbench pg_isready; do
  [[ -x $PGBIN/$p ]] || skip "program '$PGBIN/$p' is not installed"
done
need setpriv base64
clients=${1:-same-user}
[[ $clients == same-user || $clients == clients-root ]] || fail "unknown mode '$clients'"
(($(id -u) == 0)) || skip "running PostgreSQL as user postgres needs root"
id postgres >/dev/null 2>&1 || skip "user postgres does not exist"
as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
if [[ -n $R2SOCK_LIB ]]; then
  "${as_pg[@]}" test -r "$R2SOCK_LIB" ||
    skip "user postgres cannot read $R2SOCK_LIB (a parent directory is not searchable by others)"
fi
if [[ -n ${R2S_SANITIZER_RT-} ]]; then
  rc=0
  timeout -k 2 5 env LD_PRELOAD="$R2S_SANITIZER_RT" "$PGBIN/postgres" --version >/dev/null 2>&1 || rc=$?
  ((rc != 124 && rc != 137)) ||
    skip "postgres --version hangs with only $R2S_SANITIZER_RT preloaded (no shim): the runtime's clash with libp11-kit"
fi

# $TMP is root's (0700): let postgres through to a directory of its own,
# which holds the data directory, the socket, both stats files and the
# files psql reads and writes.
chmod 0711 "$TMP"
PG=$TMP/pg
install -d -o postgres -g postgres -m 0700 "$PG" "$PG/sock"
cd "$PG" # the programs run as postgres start here: the caller's directory may be out of its reach
run_to "$TMP/initdb.out" 60 "${as_pg[@]}" "${PLAIN[@]}" "$PGBIN/initdb" -D "$PG/data" -A trust -U postgres \
  --no-sync --no-locale -E UTF8

head -c 12M /dev/urandom | base64 -w 76 >"$PG/in"
size=$(file_size "$PG/in")
rows=$(wc -l <"$PG/in")

shm_snapshot
SHIM=()
port=$(free_port)
shim_at "$PG/server.stats"
start_server postgres "$port" "${as_pg[@]}" "${SHIM_AT[@]}" "$PGBIN/postgres" -D "$PG/data" -p "$port" -k "$PG/sock" \
  -c listen_addresses=127.0.0.1 -c fsync=off
# The listening socket is there before recovery ends: wait until it
# accepts connections, asking through the Unix socket (no TCP connection).
deadline=$((SECONDS + 30))
until "${as_pg[@]}" "${PLAIN[@]}" "$PGBIN/pg_isready" -q -h "$PG/sock" -p "$port"; do
  ((SECONDS < deadline)) || fail "postgres not accepting connections after 30 s"
  sleep 0.1
done

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres PGSSLMODE=disable PGGSSENCMODE=disable
shim_at "$PG/client.stats"
client=("${as_pg[@]}" "${SHIM_AT[@]}")
[[ $clients == clients-root ]] && client=("${SHIM_AT[@]}")
psql=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1)

start=$SECONDS
run_to "$TMP/copy-in.out" 60 "${client[@]}" "${psql[@]}" \
  -c "create table t (id bigint generated always as identity primary key, line text not null)" \
  -c "\\copy t(line) from '$PG/in'"
run_to "$TMP/copy-out.out" 60 "${client[@]}" "${psql[@]}" -c "\\copy (select line from t order by id) to '$PG/out'"
same_file "$PG/in" "$PG/out"
log "copied $size bytes ($rows rows) in and out byte-exact ($((SECONDS - start)) s)"

start=$SECONDS
run_to "$TMP/pgbench-init.out" 60 "${client[@]}" "$PGBIN/pgbench" -i -s 2
run_to "$TMP/pgbench.out" 60 "${client[@]}" "$PGBIN/pgbench" -c 4 -j 2 -t 200
grep -qx 'number of transactions actually processed: 800/800' "$TMP/pgbench.out" ||
  fail "expected pgbench to process 800/800 transactions: $(grep -E 'processed|failed' "$TMP/pgbench.out")"
grep -q '^number of failed transactions: 0 ' "$TMP/pgbench.out" ||
  fail "expected no failed pgbench transaction: $(grep -E 'processed|failed' "$TMP/pgbench.out")"
log "pgbench: $(grep -E '^(number of transactions actually processed|tps)' "$TMP/pgbench.out" | tr '\n' ' ')($((SECONDS - start)) s)"

run_to "$TMP/check.out" 30 "${client[@]}" "${psql[@]}" -At -c "select count(*), sum(delta),
  (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers),
  (select sum(bbalance) from pgbench_branches) from pgbench_history"
IFS='|' read -r n delta a t b <"$TMP/check.out"
log "history rows=$n sum(delta)=$delta; balances: accounts=$a tellers=$t branches=$b"
((n == 800)) || fail "expected 800 rows in pgbench_history (one per transaction), saw $n"
[[ $a == "$delta" && $t == "$delta" && $b == "$delta" ]] ||
  fail "expected the accounts', tellers' and branches' balances to add up to sum(delta)=$delta, saw $a, $t, $b"

stop_server postgres TERM 0
log "server stopped (smart shutdown, exit status 0)"
[[ -n $R2SOCK_LIB ]] || { check_stats; log PASS; exit 0; }
# Both sides' lines in $STATS too: shown if a check fails, and checked together last.
cat "$PG/server.stats" "$PG/client.stats" >>"$STATS"

# The clients: 3 psql, pgbench -i, and pgbench's first connection and its
# 4 clients, in 5 processes; the copies move the file each way.
conns=9
check_stats_file "$PG/client.stats" conns=$conns bulk=2 bytes="$size" procs=5
# side_sum FILE FILTER KEY: KEY summed over FILE's stats lines FILTER picks
# (postmaster: the line with listeners=1; backends: the others).
side_sum() {
  awk -v which="$2" -v key="$3" '
    { delete v; for (i = 3; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
      pm = v["listeners"] > 0
      if (which == "all" || (which == "postmaster") == pm) s += v[key] }
    END { print s + 0 }' "$1"
}
c_seen=$(side_sum "$PG/client.stats" all conn_seen) c_shm=$(side_sum "$PG/client.stats" all conn_shm)
c_ou=$(side_sum "$PG/client.stats" all tcp_other_user)
pm_lines=$(awk '/ listeners=[1-9]/' "$PG/server.stats" | wc -l)
pm_seen=$(side_sum "$PG/server.stats" postmaster conn_seen) pm_forks=$(side_sum "$PG/server.stats" postmaster forks)
b_lines=$(awk '!/ listeners=[1-9]/' "$PG/server.stats" | wc -l)
b_seen=$(side_sum "$PG/server.stats" backends conn_seen) b_shm=$(side_sum "$PG/server.stats" backends conn_shm)
b_ou=$(side_sum "$PG/server.stats" all tcp_other_user)
log "clients: conn_seen=$c_seen conn_shm=$c_shm tcp_other_user=$c_ou;" \
  "postmaster: conn_seen=$pm_seen forks=$pm_forks; backends: lines=$b_lines conn_seen=$b_seen conn_shm=$b_shm;" \
  "server tcp_other_user=$b_ou"
((c_seen == conns)) || fail "expected the clients to count their $conns connections (conn_seen=$conns), saw $c_seen"
((pm_lines == 1 && pm_seen == 0)) ||
  fail "expected one postmaster stats line (listeners=1) counting no connection (it only accepts and closes its copy), saw $pm_lines line(s), conn_seen=$pm_seen"
((b_lines == conns && b_seen == conns)) ||
  fail "expected $conns backends each counting its connection (conn_seen=$conns in $conns lines), saw conn_seen=$b_seen in $b_lines lines"
((b_shm == c_shm)) || fail "expected the backends' conn_shm to equal the clients' ($c_shm), saw $b_shm"
((c_ou == 0 && b_ou == 0)) ||
  fail "expected no connection on TCP for tcp_other_user, saw clients $c_ou, server $b_ou"
if [[ $clients == clients-root ]]; then
  c_fd=$(side_sum "$PG/client.stats" all rings_by_fd) b_fd=$(side_sum "$PG/server.stats" all rings_by_fd)
  ((c_fd == c_shm && b_fd == b_shm)) ||
    fail "clients as root: expected every upgraded end to take its ring by descriptor, saw clients rings_by_fd=$c_fd of conn_shm=$c_shm, backends $b_fd of $b_shm"
  log "clients as root: $c_shm connections upgraded, each end's ring by descriptor"
fi
# Both sides together: the file went each way, each copy's two ends carry it.
check_stats conns=$((2 * conns)) bulk=4 bytes=$((2 * size)) procs=$((5 + 1 + conns))
shm_check_leaks
log PASS
