#!/usr/bin/env bash
# python3 -m http.server (HTTP/1.0, one connection per request, blocking
# sockets, socket.sendall of file chunks) and a urllib client, both under the
# shim: the downloads must be byte-exact.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
r2s_python

port=$(free_port)
mkdir -p "$TMP/www"
random_file "$TMP/www/big.bin" 16M
printf 'small file\n' >"$TMP/www/small.txt"

# -u: unbuffered, so the server log is complete even if the test fails.
start_server http.server "$port" "$PY" -u -m http.server "$port" --bind 127.0.0.1 --directory "$TMP/www"

cat >"$TMP/fetch.py" <<'EOF'
import hashlib, sys, urllib.request
url, want_path = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=30) as r:
    if r.status != 200:
        sys.exit(f"FAIL: GET {url}: expected status 200, got {r.status}")
    got = r.read()
want = open(want_path, "rb").read()
if got != want:
    sys.exit(f"FAIL: GET {url}: {len(got)} bytes, sha256 {hashlib.sha256(got).hexdigest()}; "
             f"expected {len(want)} bytes, sha256 {hashlib.sha256(want).hexdigest()}")
print(len(got))
EOF
run 60 "$PY" "$TMP/fetch.py" "http://127.0.0.1:$port/big.bin" "$TMP/www/big.bin" >"$TMP/fetch-big.out"
run 60 "$PY" "$TMP/fetch.py" "http://127.0.0.1:$port/small.txt" "$TMP/www/small.txt" >"$TMP/fetch-small.out"
log "downloaded $(cat "$TMP/fetch-big.out") + $(cat "$TMP/fetch-small.out") bytes byte-exact"

# http.server turns SIGINT into KeyboardInterrupt and exits normally.
stop_server http.server INT
n=$(grep -c '"GET /' "$TMP/http.server.log" || true)
((n == 2)) || fail "expected 2 GET requests in the http.server log, saw $n"

check_stats conns=4 bulk=2 bytes="$(file_size "$TMP/www/big.bin")" procs=3
log PASS
