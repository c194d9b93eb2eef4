#!/usr/bin/env bash
# nginx (own config, master + 2 workers, sendfile on) serving static files to
# wrk and curl, all under the shim: wrk must see no socket errors and only
# 2xx, curl must download a 10 MiB random file byte-exact (through sendfile).
#   usage: nginx.sh [root|www-data]
#   root:     the workers run as root (the clients' user).
#   www-data: the workers run as www-data, as Debian's own configuration
#             has them, the clients as root: every connection end that moved
#             into shared memory took its peer's ring by descriptor
#             (rings_by_fd = conn_shm, summed) and none stayed on TCP for
#             being another user's. Before 2026-11-28 they all stayed on TCP
#             (tcp_other_user). Needs root.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need nginx wrk curl
workers=${1:-root}
case $workers in
  root) ;;
  www-data)
    [[ $(id -u) == 0 ]] || skip "workers as www-data need root"
    id www-data >/dev/null 2>&1 || skip "no user www-data"
    # The workers read the files and append their stats line.
    chmod 755 "$TMP"
    touch "$STATS"
    chmod 666 "$STATS"
    ;;
  *) fail "unknown mode '$workers'" ;;
esac
# Checked by hand: curl fetching 10 MiB from python's http.server makes no
# progress in 15 s with only the ASan or the TSan runtime preloaded, no shim.
[[ -z ${R2S_SANITIZER_RT:-} ]] || skip "curl hangs under a preloaded sanitizer runtime ($R2S_SANITIZER_RT), shim or not"

port=$(free_port)
mkdir -p "$TMP/www" "$TMP/nginx-temp"
random_file "$TMP/www/big.bin" 10M
printf 'hello from r2sock integration test\n' >"$TMP/www/small.txt"

# Workers as root can read the 0700 temp dir and append their shim stats
# line to $TMP/stats; as www-data, the directory and file were opened above.
cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
user $workers;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  client_body_temp_path $TMP/nginx-temp/body;
  proxy_temp_path $TMP/nginx-temp/proxy;
  fastcgi_temp_path $TMP/nginx-temp/fastcgi;
  uwsgi_temp_path $TMP/nginx-temp/uwsgi;
  scgi_temp_path $TMP/nginx-temp/scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port;
    root $TMP/www;
    location = /status { stub_status; }
  }
}
EOF
# -e: the error log nginx opens before it has read the config.
start_server nginx "$port" nginx -p "$TMP" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf"

# wrk reports errors only when there are some; a done() hook prints them all.
cat >"$TMP/summary.lua" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("R2S requests=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout))
end
EOF
wrk_check() {
  local url=$1 out=$2
  run 30 wrk -t2 -c10 -d2s -s "$TMP/summary.lua" "$url" >"$out" 2>&1
  local line
  line=$(grep '^R2S ' "$out") || fail "expected wrk's summary line in $out, found none"
  # shellcheck disable=SC2086 # split key=value words on purpose
  local -A w=()
  local kv
  for kv in ${line#R2S }; do w[${kv%%=*}]=${kv#*=}; done
  ((w[requests] > 0)) || fail "wrk $url: expected requests > 0, saw ${w[requests]}"
  ((w[connect] + w[read] + w[write] + w[timeout] == 0)) ||
    fail "wrk $url: expected no socket errors, saw connect=${w[connect]} read=${w[read]} write=${w[write]} timeout=${w[timeout]}"
  ((w[status] == 0)) || fail "wrk $url: expected only 2xx/3xx responses, saw ${w[status]} others"
  log "wrk $url: ${w[requests]} requests, ${w[bytes]} bytes"
  wrk_bytes=$((wrk_bytes + w[bytes]))
}
wrk_bytes=0
wrk_check "http://127.0.0.1:$port/small.txt" "$TMP/wrk-small.out"
wrk_check "http://127.0.0.1:$port/big.bin" "$TMP/wrk-big.out"

run 30 curl -sS --fail -o "$TMP/big.got" "http://127.0.0.1:$port/big.bin"
same_file "$TMP/www/big.bin" "$TMP/big.got"
run 30 curl -sS --fail -o "$TMP/small.got" "http://127.0.0.1:$port/small.txt"
same_file "$TMP/www/small.txt" "$TMP/small.got"

# stub_status: "Active connections: N / server accepts handled requests / A H R".
run 30 curl -sS --fail -o "$TMP/status.out" "http://127.0.0.1:$port/status"
read -r accepts handled _ < <(sed -n 3p "$TMP/status.out")
[[ $accepts == "$handled" ]] || fail "expected nginx to handle every accepted connection, accepts=$accepts handled=$handled"

# SIGQUIT: graceful shutdown, workers finish and exit normally.
stop_server nginx QUIT
if grep -E '\[(alert|crit|emerg)\]' "$TMP/nginx-error.log"; then
  fail "expected no alert/crit/emerg in nginx's error log (see above)"
fi
log "nginx: $accepts connections accepted"

# Both ends of every accepted connection; the bulk ones are wrk's 10 on the
# big file and curl's download of it. Every byte wrk counted crossed the
# loopback, and so did curl's copy of the big file.
big=$(file_size "$TMP/www/big.bin")
check_stats conns=$((2 * accepts)) bulk=$((2 * 11)) bytes=$((wrk_bytes + big)) procs=6
if [[ $workers == www-data && -n $R2SOCK_LIB ]]; then
  shm=$(stats_sum conn_shm) byfd=$(stats_sum rings_by_fd) other=$(stats_sum tcp_other_user)
  ((other == 0 && byfd == shm)) ||
    fail "www-data workers: expected every upgraded end to take its ring by descriptor and none to stay on TCP as another user's, saw conn_shm=$shm rings_by_fd=$byfd tcp_other_user=$other"
  log "www-data workers: $shm upgraded connection ends, each with its ring by descriptor"
fi
log PASS
