#!/usr/bin/env bash
# memcached with memcslap load (set, get, mget; several threads, one
# connection each), all under the shim; the server's own counters must show
# every operation arriving and every get hitting.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need memcached memcslap
r2s_python

threads=4
# memcslap --execute-number: operations per thread. Each connection's
# first bytes cross TCP until both ends' programs have read the other's
# handshake; with memcached's two workers busy serving the other
# connections' large mget answers that took up to 10 ms, and at 1,000 the
# whole mget run lasts about 20 ms: up to 18% of the bytes went over TCP
# (2 runs in 8), against the bulk check's 90% on shm.
per_thread=4000

port=$(free_port)
# -U 0: no UDP; -u root: memcached refuses to run as root otherwise.
start_server memcached "$port" memcached -l 127.0.0.1 -p "$port" -U 0 -m 64 -t 2 -u root

slap() {
  local test=$1
  run 60 memcslap --servers="127.0.0.1:$port" --test="$test" --concurrency=$threads \
    --execute-number=$per_thread >"$TMP/memcslap-$test.out" 2>&1
  # memcslap reports failed operations but still exits 0.
  if grep -Eiq 'error|fail' "$TMP/memcslap-$test.out"; then
    fail "expected no errors from memcslap --test=$test, saw: $(grep -Ei 'error|fail' "$TMP/memcslap-$test.out" | head -n 3)"
  fi
}
slap set
slap get    # first loads $per_thread keys on one connection, then gets
slap mget

# The server's counters, read over one more connection under the shim.
cat >"$TMP/stats.py" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        sys.exit("FAIL: memcached closed the connection before END")
    buf += chunk
s.sendall(b"quit\r\n")
s.close()
for line in buf.decode().splitlines():
    if line.startswith("STAT "):
        _, k, v = line.split(" ", 2)
        print(k, v)
EOF
run 30 "$PY" "$TMP/stats.py" "$port" >"$TMP/server-stats.out"
mc_stat() {
  local v
  v=$(awk -v k="$1" '$1 == k { print $2 }' "$TMP/server-stats.out")
  [[ -n $v ]] || fail "memcached stats lack $1"
  echo "$v"
}
expect_stat() {
  local v
  v=$(mc_stat "$1")
  [[ $v == "$2" ]] || fail "expected memcached $1 = $2 ($3), saw $v"
}
ops=$((threads * per_thread))
# set: $ops sets; get and mget: $per_thread loading sets each.
expect_stat cmd_set $((ops + 2 * per_thread)) "memcslap sets"
expect_stat get_misses 0 "every key was set before it was read"
hits=$(mc_stat get_hits)
((hits >= 2 * ops)) || fail "expected get_hits >= $((2 * ops)) (get and mget tests), saw $hits"
expect_stat get_hits "$(mc_stat cmd_get)" "every get hits"
conns=$(mc_stat total_connections)
net_in=$(mc_stat bytes_read)
net_out=$(mc_stat bytes_written)
stop_server memcached TERM
log "memcached: cmd_set=$(mc_stat cmd_set) get_hits=$hits total_connections=$conns read=$net_in written=$net_out"

# total_connections also counts the listening socket. The stats connection's
# own bytes are not all in the server's counters yet, which only helps.
check_stats conns=$((2 * (conns - 1))) bulk=$((2 * threads)) bytes=$((net_in + net_out)) procs=5
log PASS
