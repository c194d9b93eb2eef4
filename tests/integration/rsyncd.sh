#!/usr/bin/env bash
# rsync against an rsync daemon, both under the shim: a 16 MiB download and
# a 16 MiB upload, byte-exact, rsync exiting 0 both times. rsync's side
# that receives files reads the connection in one process and writes it in
# another, which the upgrade protocol cannot follow (README, "fork"): on
# any other port the transfer ended in a reset. The daemon's port, 873, is
# in R2SOCK_SKIP_PORTS by default, so the connections stay on TCP (asserted
# from the client's stats: tcp_disabled), whatever R2SOCK_UPGRADE says.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
need rsync
(($(id -u) == 0)) || skip "the daemon's port, 873, needs root"
[[ -z $(ss -Hltn "( sport = :873 )") ]] || skip "port 873 is in use on this host (a listener)"
port=873

mkdir -p "$TMP/src" "$TMP/dst" "$TMP/up"
random_file "$TMP/src/big" 16M
size=$(file_size "$TMP/src/big")
cat >"$TMP/rsyncd.conf" <<CONF
address = 127.0.0.1
port = $port
use chroot = no
pid file = $TMP/rsyncd.pid
[m]
path = $TMP/src
read only = yes
uid = root
gid = root
[up]
path = $TMP/up
read only = no
uid = root
gid = root
CONF

shm_snapshot
start_server_at rsyncd "$port" "$TMP/server-stats" rsync --daemon --no-detach --config="$TMP/rsyncd.conf"
run_to_at "$TMP/down.out" 60 "$TMP/client-stats" rsync -a "rsync://127.0.0.1:$port/m/big" "$TMP/dst/"
same_file "$TMP/src/big" "$TMP/dst/big"
run_to_at "$TMP/up.out" 60 "$TMP/client-stats" rsync -a "$TMP/src/big" "rsync://127.0.0.1:$port/up/"
same_file "$TMP/src/big" "$TMP/up/big"
log "moved 2 x $size bytes byte-exact through an rsync daemon"
stop_server rsyncd
[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }

STATS=$TMP/client-stats
seen=$(stats_sum conn_seen) shm=$(stats_sum conn_shm) disabled=$(stats_sum tcp_disabled) failed=$(stats_sum tcp_failed)
log "client: conn_seen=$seen conn_tcp=$(stats_sum conn_tcp) conn_shm=$shm tcp_disabled=$disabled" \
  "tcp_failed=$failed"
# conn_seen=2 also proves that the client wrote its stats: a missing file sums to 0.
((seen == 2)) || fail "expected the client to count its 2 connections (conn_seen=2), saw $seen"
((shm == 0 && failed == 0)) || fail "expected no connection upgraded or failed, saw conn_shm=$shm tcp_failed=$failed"
if [[ ${R2SOCK_UPGRADE:-auto} != never ]]; then
  ((disabled >= 2)) || fail "expected both connections kept on TCP by R2SOCK_SKIP_PORTS (tcp_disabled >= 2), saw $disabled"
fi
shm_check_leaks
log PASS
