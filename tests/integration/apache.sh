#!/usr/bin/env bash
# Debian's apache2 with the event MPM (its listener thread and 2 processes
# of 25 workers; KeepAlive on, 100 requests a connection; EnableSendfile
# on; own configuration, tests/integration/apache-lib.sh) serving a 1 KiB
# file to `ab -k -c 16 -n 20000` and a 1 MiB one to curl, all under the
# shim. Asserted: ab completes within 60 s with 20000 complete requests,
# none failed, no non-2xx response and some keep-alive ones; curl downloads
# the 1 MiB random file byte-exact (through sendfile); apache stops
# gracefully (SIGWINCH) with all its processes and logs no error. No timing
# is asserted, but the bound is the point: apache's listener thread waits in
# epoll_wait while its workers re-add keep-alive connections, and a wake-up
# lost there costs a request up to the keep-alive timeout (5 s), which
# would take this run far past its bound.
# Statistics: check_stats (with R2SOCK_EXPECT_PATH=tcp nothing upgraded);
# with R2SOCK_UPGRADE=now connections went through shared memory
# (conn_shm > 0, summed) and none was reset for a protocol error
# (reset_protocol=0). Run as root, apache serves as www-data and the clients
# run as root: upgraded ends take their peer's ring by descriptor, none
# stays on TCP for being another user's (tcp_other_user=0).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/apache-lib.sh
source "$(dirname "$0")/apache-lib.sh"
need apache2 ab curl
# As in nginx.sh: curl makes no progress with a sanitizer runtime preloaded.
[[ -z ${R2S_SANITIZER_RT:-} ]] || skip "curl hangs under a preloaded sanitizer runtime ($R2S_SANITIZER_RT), shim or not"

if [[ $(id -u) == 0 ]]; then
  id www-data >/dev/null 2>&1 || skip "apache started as root serves as www-data, and there is no user www-data"
  # apache's children (www-data) read the files and append their stats line.
  chmod 755 "$TMP"
  touch "$STATS"
  chmod 666 "$STATS"
fi

port=$(free_port)
mkdir -p "$TMP/www"
random_file "$TMP/www/small.txt" 1K
random_file "$TMP/www/big.bin" 1M
chmod -R a+rX "$TMP/www"
apache_conf "$TMP/apache.conf" "$TMP" "$port" 100
start_server apache "$port" "${APACHE[@]}" -f "$TMP/apache.conf"

# The report on stdout, into a file (-q: no progress lines); ab's errors,
# like run's own message, stay on stderr.
run 60 ab -q -k -c 16 -n 20000 "http://127.0.0.1:$port/small.txt" >"$TMP/ab.out"
ab_field() { sed -n "s/^$1: *\([0-9]*\).*/\1/p" "$TMP/ab.out"; }
complete=$(ab_field 'Complete requests') failed=$(ab_field 'Failed requests')
non2xx=$(ab_field 'Non-2xx responses') keepalive=$(ab_field 'Keep-Alive requests')
total=$(ab_field 'Total transferred')
[[ $complete == 20000 ]] || fail "ab: expected 'Complete requests: 20000', saw '${complete:-none}'"
[[ $failed == 0 ]] || fail "ab: expected 'Failed requests: 0', saw '${failed:-none}': $(grep -A3 '^Failed requests' "$TMP/ab.out")"
[[ ${non2xx:-0} == 0 ]] || fail "ab: expected no non-2xx responses, saw $non2xx"
((${keepalive:-0} > 0)) || fail "ab -k: expected some keep-alive requests, saw '${keepalive:-none}'"
[[ $total =~ ^[0-9]+$ ]] || fail "ab: no 'Total transferred' line in its report"
log "ab: $complete requests ($keepalive keep-alive), $total bytes, $(sed -n 's/^Requests per second: *//p' "$TMP/ab.out")"

run 30 curl -sS --fail -o "$TMP/big.got" "http://127.0.0.1:$port/big.bin"
same_file "$TMP/www/big.bin" "$TMP/big.got"

# SIGWINCH: graceful stop; the children finish and exit, then the parent.
stop_server apache WINCH
if grep -E '\[[a-z_]*:(emerg|alert|crit|error)\]' "$TMP/apache-error.log"; then
  fail "expected no emerg/alert/crit/error line in apache's error log (see above)"
fi

# At least ab's 16 connections and curl's, both ends of each; curl's is the
# bulk one that must be upgraded. Processes: apache's parent and its 2
# children, ab, curl.
big=$(file_size "$TMP/www/big.bin")
check_stats conns=$((2 * 17)) bulk=2 bytes=$((total + big)) procs=5
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE-} == now ]]; then
  shm=$(stats_sum conn_shm) resets=$(stats_sum reset_protocol)
  ((shm > 0)) || fail "R2SOCK_UPGRADE=now: expected connections through shared memory (conn_shm > 0, summed), saw conn_shm=0"
  ((resets == 0)) || fail "expected no connection reset for a protocol error, saw reset_protocol=$resets"
  if [[ $(id -u) == 0 ]]; then
    byfd=$(stats_sum rings_by_fd) other=$(stats_sum tcp_other_user)
    ((other == 0 && byfd == shm)) ||
      fail "apache as www-data: expected every upgraded end to take its ring by descriptor and none to stay on TCP as another user's, saw conn_shm=$shm rings_by_fd=$byfd tcp_other_user=$other"
  fi
  log "upgraded connection ends: $shm of $(stats_sum conn_seen), reset_protocol=0"
fi
log PASS
