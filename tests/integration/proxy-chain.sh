#!/usr/bin/env bash
# A proxy chain, every process under the shim:
#   wrk/curl -> haproxy (mode http, keep-alive both sides) -> nginx
# haproxy holds connections on both sides of itself in one process, all
# under the shim, and forwards each request and response from one to the
# other while both move: what it reads from an accepted connection it
# writes to a connected one, and back, in one event loop (nbthread 2 by
# default); it closes and opens connections while others are busy (wrk's
# first connection, which wrk closes at once and haproxy answers with a
# 400 it logs as <BADREQ>; idle server connections it lets go). The test
# asserts, for each of
#   wrk -t2 -c16 on a 1 KiB file   (R2S_PROXY_SECS, default 20 s)
#   wrk -t1 -c4  on a 256 KiB file (5 s)
# that wrk saw no socket error (connect, read, write, timeout all 0), no
# response other than 2xx, and every body byte-exact (a lua hook compares
# each one with the file); requests > 0; then that curl fetches a 4 MiB
# random file through the chain byte-exact; that haproxy and nginx stop
# cleanly (no alert in nginx's error log, both exit 0); and that no shim in
# the chain reset a connection: every stats line has reset_protocol=0 and
# no log says `connection reset:` (a reset between honest peers is a bug
# of ours, whatever the path). In the shm variant (R2SOCK_UPGRADE=now) both
# hops must move into shared memory: haproxy's own connection lines
# (R2SOCK_LOG=info) show accepted (frontend) and connected (backend)
# connections with path=shm, its stats line has conn_shm > 0, so has every
# nginx worker that took a connection, and the clients' lines have
# conn_shm > 0.
#   R2S_PROXY_SECS  seconds of the 1 KiB wrk run (default 20; 60 for the
#                   minute-long soak by hand)
#   R2S_PROXY_LOG   R2SOCK_LOG of every process in the chain (default info;
#                   debug adds each connection's switch steps to the logs)
#   R2S_PROXY_THREADS  haproxy's nbthread (default 2)
# Every log is kept on failure with R2S_KEEP_TMP=1; the lines around a
# reset are printed in the failure message.
secs=${R2S_PROXY_SECS:-20}
[[ $secs =~ ^[1-9][0-9]{0,3}$ ]] || { echo "R2S_PROXY_SECS must be 1-9999 seconds, not '$secs'" >&2; exit 1; }
# The servers outlive both wrk runs, the downloads and the stops.
((secs + 60 <= ${R2S_SERVER_LIFETIME:-110})) || R2S_SERVER_LIFETIME=$((secs + 60))
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need haproxy nginx wrk curl
# As nginx.sh: curl makes no progress with only a sanitizer runtime
# preloaded, shim or not.
[[ -z ${R2S_SANITIZER_RT:-} ]] || skip "curl hangs under a preloaded sanitizer runtime ($R2S_SANITIZER_RT), shim or not"
loglevel=${R2S_PROXY_LOG:-info}
threads=${R2S_PROXY_THREADS:-2}
[[ $threads =~ ^[1-9]$ ]] || fail "R2S_PROXY_THREADS must be 1-9, not '$threads'"
LOGENV=(env R2SOCK_LOG="$loglevel")

p1=$(free_port)   # haproxy's frontend
p2=$(free_port)   # nginx
mkdir -p "$TMP/www" "$TMP/nginx-temp"
random_file "$TMP/www/1k.bin" 1K
random_file "$TMP/www/256k.bin" 256K
random_file "$TMP/www/4m.bin" 4M

# error_log at info: nginx reports its clients' (haproxy's) connection
# errors, e.g. a failed send, at that level only.
cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
user root;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log info;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  keepalive_timeout 120s;
  client_body_temp_path $TMP/nginx-temp/body;
  proxy_temp_path $TMP/nginx-temp/proxy;
  fastcgi_temp_path $TMP/nginx-temp/fastcgi;
  uwsgi_temp_path $TMP/nginx-temp/uwsgi;
  scgi_temp_path $TMP/nginx-temp/scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$p2;
    root $TMP/www;
    location = /status { stub_status; }
  }
}
EOF

# Nothing goes to syslog: haproxy logs to its stderr ($TMP/haproxy.log),
# and only the requests that ended abnormally (dontlog-normal), each with
# its termination state (e.g. SD: the server's side ended mid-response).
# Keep-alive on both sides (haproxy's default), http-reuse at its default
# (safe). The timeouts exceed the runs: no connection is closed for
# idleness.
cat >"$TMP/haproxy.cfg" <<EOF
global
  nbthread $threads
  maxconn 256
  pidfile $TMP/haproxy.pid
  log stderr format raw local0 info
defaults
  mode http
  log global
  option httplog
  option dontlog-normal
  option http-keep-alive
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  timeout http-request 10s
frontend fe
  bind 127.0.0.1:$p1
  maxconn 128
  default_backend be
backend be
  server nginx 127.0.0.1:$p2 maxconn 64
EOF
run 10 haproxy -c -q -f "$TMP/haproxy.cfg"

start_server nginx "$p2" "${LOGENV[@]}" nginx -p "$TMP" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf"
# -db: stay in the foreground, one process (no master-worker).
start_server haproxy "$p1" "${LOGENV[@]}" haproxy -db -f "$TMP/haproxy.cfg"
# The servers' own pids (`env` execs them: the child of `timeout`), and
# nginx's workers: their stats lines are told apart by pid.
hap_pid=$(pgrep -P "$(server_pid haproxy)") || fail "expected haproxy as the child of pid $(server_pid haproxy), found none"
ngx_master=$(pgrep -P "$(server_pid nginx)") || fail "expected nginx's master as the child of pid $(server_pid nginx), found none"
workers=$(pgrep -d ' ' -P "$ngx_master") || fail "expected nginx's workers under its master $ngx_master, found none"
read -ra ngx_workers <<<"$workers"
log "haproxy pid $hap_pid on 127.0.0.1:$p1; nginx master $ngx_master, workers $workers on 127.0.0.1:$p2"

# Every response is checked here: a status other than 2xx, or a body other
# than the file's bytes, counts. wrk's threads each run their own lua state:
# done() sums their counters. wrk reports errors only when there are some;
# done() prints them all.
cat >"$TMP/check.lua" <<'EOF'
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  local f = assert(io.open(args[1], "rb"))
  want = f:read("*a")
  f:close()
  non2xx, badbody = 0, 0
end
function response(status, headers, body)
  if status < 200 or status > 299 then non2xx = non2xx + 1 end
  if body ~= want then badbody = badbody + 1 end
end
function done(summary, latency, requests)
  local n, b = 0, 0
  for _, t in ipairs(threads) do n = n + t:get("non2xx"); b = b + t:get("badbody") end
  local e = summary.errors
  io.write(string.format("R2S requests=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d non2xx=%d badbody=%d rps=%d\n",
    summary.requests, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout, n, b,
    math.floor(summary.requests * 1e6 / summary.duration)))
end
EOF
# wrk_check NAME FILE THREADS CONNS SECS
wrk_check() {
  local name=$1 file=$2 t=$3 c=$4 d=$5 out=$TMP/wrk-$1.out url line kv
  url=http://127.0.0.1:$p1/$file
  run $((d + 20)) "${LOGENV[@]}" wrk -t"$t" -c"$c" -d"${d}s" -s "$TMP/check.lua" "$url" -- "$TMP/www/$file" >"$out" 2>&1
  line=$(grep '^R2S ' "$out") || fail "expected wrk's summary line in $out, found none"
  local -A w=()
  # shellcheck disable=SC2086 # split key=value words on purpose
  for kv in ${line#R2S }; do w[${kv%%=*}]=${kv#*=}; done
  ((w[requests] > 0)) || fail "wrk $name: expected requests > 0, saw ${w[requests]}"
  # haproxy logs only the sessions that ended abnormally: they say which
  # side ended first (e.g. SD: the server's, mid-response).
  ((w[connect] + w[read] + w[write] + w[timeout] == 0)) ||
    fail "wrk $name: expected no socket errors, saw connect=${w[connect]} read=${w[read]} write=${w[write]} timeout=${w[timeout]}; haproxy logged: $(grep -v '^r2sock\[' "$TMP/haproxy.log" | grep -v '<BADREQ>' | head -n 5)"
  ((w[status] + w[non2xx] == 0)) || fail "wrk $name: expected only 2xx responses, saw ${w[non2xx]} others (${w[status]} >= 400)"
  ((w[badbody] == 0)) || fail "wrk $name: expected every body equal to $file, saw ${w[badbody]} that differ"
  log "wrk $name (-t$t -c$c -d${d}s): ${w[requests]} requests, ${w[rps]} requests/s, ${w[bytes]} bytes, no errors"
  wrk_bytes=$((wrk_bytes + w[bytes]))
}
wrk_bytes=0
wrk_check 1k 1k.bin 2 16 "$secs"
wrk_check 256k 256k.bin 1 4 5
clients=$((16 + 4))

run 30 "${LOGENV[@]}" curl -sS --fail -o "$TMP/4m.got" "http://127.0.0.1:$p1/4m.bin" 2>"$TMP/curl.out"
same_file "$TMP/www/4m.bin" "$TMP/4m.got"
clients=$((clients + 1))
log "curl: 4 MiB through the chain, byte-exact"

# nginx's count of the connections it accepted (haproxy's, and this one):
# "Active connections: N / server accepts handled requests / A H R".
run 30 curl -sS --fail -o "$TMP/status.out" "http://127.0.0.1:$p2/status"
read -r accepts handled _ < <(sed -n 3p "$TMP/status.out")
[[ $accepts == "$handled" ]] || fail "expected nginx to handle every accepted connection, accepts=$accepts handled=$handled"
log "nginx: $accepts connections accepted (haproxy's, and the status request's)"

# SIGUSR1: haproxy's soft stop (closes its idle connections, exits 0);
# SIGQUIT: nginx's graceful one.
stop_server haproxy USR1
stop_server nginx QUIT
if grep -E '\[(alert|crit|emerg)\]' "$TMP/nginx-error.log"; then
  fail "expected no alert/crit/emerg in nginx's error log (see above)"
fi

# Nobody reset a connection: no shim says so in any log (nginx's workers
# write theirs to the error log), and no stats line counts one.
resets=$(grep -h -B 20 -A 5 'connection reset' "$TMP"/*.log "$TMP"/*.out 2>/dev/null | cut -c1-400 || true)
[[ -z $resets ]] || fail "expected no connection reset by the shim, saw (with the lines around it):
$resets"

# stats_of PID KEY: KEY in the stats line of process PID (empty if none).
stats_of() {
  [[ -f $STATS ]] || return 0
  awk -v p="r2sock[$1]" -v k="$2" '$1 == p && $2 == "stats:" {
      for (i = 3; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == k) print substr($i, n + 1) } }' "$STATS"
}

# Frontend ends: wrk's and curl's connections, at both ends. Backend ends:
# every connection nginx accepted, at both ends (the status request's
# included). The bulk: all of them but the status request's. Every byte wrk
# counted crossed both hops, and so did curl's copy of the 4 MiB file.
big=$(file_size "$TMP/www/4m.bin")
check_stats conns=$((2 * clients + 2 * accepts)) bulk=$((2 * clients + 2 * (accepts - 1))) \
  bytes=$((wrk_bytes + big)) procs=$((2 + 2 + 1 + ${#ngx_workers[@]}))
if [[ -n $R2SOCK_LIB ]]; then
  bad=$(grep -v ' reset_protocol=0 ' "$STATS" || true)
  [[ -z $bad ]] || fail "expected reset_protocol=0 in every stats line, saw: $bad"
  [[ -n $(stats_of "$hap_pid" conn_seen) ]] || fail "expected a stats line from haproxy (pid $hap_pid), found none"
  for w in "${ngx_workers[@]}"; do
    [[ -n $(stats_of "$w" conn_seen) ]] || fail "expected a stats line from nginx's worker $w, found none"
  done
  summary="haproxy conn_seen=$(stats_of "$hap_pid" conn_seen) conn_shm=$(stats_of "$hap_pid" conn_shm)"
  for w in "${ngx_workers[@]}"; do summary+="; nginx worker $w conn_seen=$(stats_of "$w" conn_seen) conn_shm=$(stats_of "$w" conn_shm)"; done
  log "per process: $summary"
fi
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE-} == now ]]; then
  # haproxy's side of each hop, from its own connection lines.
  fe_shm=$(grep -c "info: conn [0-9]* server 127\.0\.0\.1:$p1 -> .* path=shm " "$TMP/haproxy.log" || true)
  be_shm=$(grep -c "info: conn [0-9]* client .* -> 127\.0\.0\.1:$p2 path=shm " "$TMP/haproxy.log" || true)
  if [[ $loglevel == info || $loglevel == debug ]]; then
    ((fe_shm > 0 && be_shm > 0)) ||
      fail "R2SOCK_UPGRADE=now: expected haproxy's accepted (frontend) and connected (backend) connections on shm, saw $fe_shm and $be_shm with path=shm in its log"
  fi
  hshm=$(stats_of "$hap_pid" conn_shm)
  ((hshm > 0)) || fail "R2SOCK_UPGRADE=now: expected haproxy's conn_shm > 0, saw $hshm"
  wshm=0
  for w in "${ngx_workers[@]}"; do
    s=$(stats_of "$w" conn_seen) m=$(stats_of "$w" conn_shm)
    ((s == 0 || m > 0)) || fail "R2SOCK_UPGRADE=now: expected nginx's worker $w, which took $s connections, to have conn_shm > 0, saw $m"
    wshm=$((wshm + m))
  done
  ((wshm > 0)) || fail "R2SOCK_UPGRADE=now: expected conn_shm > 0 in nginx's workers, saw $wshm"
  # The clients: every line that is neither haproxy's nor nginx's.
  cshm=$(awk -v skip=" r2sock[$hap_pid] r2sock[$ngx_master] $(printf 'r2sock[%s] ' "${ngx_workers[@]}")" '
      $2 == "stats:" && index(skip, " " $1 " ") == 0 {
        for (i = 3; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == "conn_shm") s += substr($i, n + 1) } }
      END { print s + 0 }' "$STATS")
  ((cshm > 0)) || fail "R2SOCK_UPGRADE=now: expected conn_shm > 0 in wrk's and curl's lines, saw $cshm"
  log "both hops on shm: haproxy frontend $fe_shm, backend $be_shm connections (its log), conn_shm: haproxy $hshm, nginx workers $wshm, clients $cshm"
fi
log PASS
