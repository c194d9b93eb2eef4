#!/usr/bin/env bash
# redis-server (own config, no persistence) with clients, all under the shim.
#   usage: redis.sh benchmark|bigvalue|bgsave
#   benchmark: redis-benchmark -n 5000 -q, every test must report a rate
#              (100 requests for each of its 50 connections in each test)
#   bigvalue:  redis-cli SET/GET of a 1 MiB random binary value, byte-exact
#   bgsave:    BGSAVE forks the server while client connections are live;
#              those connections (and new ones) must keep working afterwards
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need redis-server redis-cli
r2s_python

mode=${1:?usage: redis.sh benchmark|bigvalue|bgsave}

# resp: a minimal RESP client (used under the shim) for the bgsave case and
# for reading the server's own counters at the end of every mode.
cat >"$TMP/resp.py" <<'EOF'
import os, socket, sys, time

class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.rd = self.sock.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def reply(self):
        line = self.rd.readline()
        if not line.endswith(b"\r\n"):
            raise SystemExit(f"FAIL: connection closed mid-reply (got {line!r})")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise SystemExit(f"FAIL: redis error reply: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rd.read(n + 2)
            if len(data) != n + 2:
                raise SystemExit(f"FAIL: short bulk reply: {len(data)} of {n + 2} bytes")
            return data[:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise SystemExit(f"FAIL: unexpected reply line {line!r}")

    def info(self, section):
        text = self.cmd("INFO", section).decode()
        return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)

def expect(what, want, got):
    if want != got:
        g = got if not isinstance(got, bytes) or len(got) < 80 else f"{len(got)} bytes"
        w = want if not isinstance(want, bytes) or len(want) < 80 else f"{len(want)} bytes"
        raise SystemExit(f"FAIL: {what}: expected {w!r}, got {g!r}")

def bgsave(port):
    nkeys, size = 64, 64 << 10
    values = [os.urandom(size) for _ in range(nkeys)]
    main, idle = Conn(port), Conn(port)
    for i, v in enumerate(values):
        expect(f"SET k{i}", "OK", main.cmd("SET", f"k{i}", v))
    expect("PING on the idle connection", "PONG", idle.cmd("PING"))
    # The fork happens while both connections (and their shim state) are live.
    expect("BGSAVE", "Background saving started", main.cmd("BGSAVE"))
    deadline, during = time.monotonic() + 30, 0
    while True:
        # Keep writing while the child runs: the parent's sockets stay in use.
        expect("SET during BGSAVE", "OK", main.cmd("SET", f"during{during}", values[during % nkeys]))
        during += 1
        p = main.info("persistence")
        if p["rdb_bgsave_in_progress"] == "0":
            break
        if time.monotonic() > deadline:
            raise SystemExit("FAIL: BGSAVE still in progress after 30 s")
    expect("rdb_last_bgsave_status", "ok", p["rdb_last_bgsave_status"])
    # After the child has exited (and closed its copies of the sockets) the
    # parent's connections must still carry data in both directions.
    for i, v in enumerate(values):
        expect(f"GET k{i} after BGSAVE (main connection)", v, main.cmd("GET", f"k{i}"))
    expect("PING on the idle connection after BGSAVE", "PONG", idle.cmd("PING"))
    expect("GET k0 on the idle connection after BGSAVE", values[0], idle.cmd("GET", "k0"))
    expect("SET after BGSAVE", "OK", idle.cmd("SET", "after", values[1]))
    fresh = Conn(port)
    expect("DBSIZE on a new connection", nkeys + during + 1, fresh.cmd("DBSIZE"))
    expect("GET after on a new connection", values[1], fresh.cmd("GET", "after"))
    print(f"bgsave: {nkeys} keys of {size} bytes, {during} writes during the fork", file=sys.stderr)

def counters(port):
    s = Conn(port).info("stats")
    # The server's own view: connections accepted (this one included) and
    # bytes it read and wrote.
    print(s["total_connections_received"], s["total_net_input_bytes"], s["total_net_output_bytes"])

if __name__ == "__main__":
    {"bgsave": bgsave, "counters": counters}[sys.argv[1]](int(sys.argv[2]))
EOF

port=$(free_port)
cat >"$TMP/redis.conf" <<EOF
port $port
bind 127.0.0.1
daemonize no
save ""
appendonly no
dir $TMP
dbfilename dump.rdb
logfile ""
EOF
start_server redis-server "$port" redis-server "$TMP/redis.conf"

case $mode in
benchmark)
  need redis-benchmark
  run 90 redis-benchmark -h 127.0.0.1 -p "$port" -n 5000 -q >"$TMP/bench.out" 2>&1
  # -q prints progress lines ending in \r and one final line per test:
  # "NAME: 12345.67 requests per second, p50=0.503 msec".
  tr '\r' '\n' <"$TMP/bench.out" | grep -v '^ *$' >"$TMP/bench.lines" || true
  if grep -Eiq 'error|ERR ' "$TMP/bench.lines"; then
    fail "expected no errors from redis-benchmark, saw: $(grep -Ei 'error|ERR ' "$TMP/bench.lines" | head -n 3)"
  fi
  # A test's label is everything before the first ": " (some have spaces,
  # as in "MSET (10 keys)"); each label seen must have a final line with a
  # non-zero rate.
  missing=$(awk -F': ' 'NF > 1 { seen[$1] = 1; if ($2 ~ /^[0-9]+\.[0-9]+ requests per second/ && $2 + 0 > 0) final[$1] = 1 }
                       END { for (t in seen) if (!(t in final)) print t }' "$TMP/bench.lines")
  [[ -z $missing ]] || fail "expected a final non-zero 'requests per second' line for every test, missing for: $missing"
  ntests=$(grep -Ec ': [0-9]+\.[0-9]+ requests per second' "$TMP/bench.lines")
  ((ntests >= 10)) || fail "expected redis-benchmark to run its default tests (>= 10), saw $ntests"
  log "redis-benchmark: $ntests tests reported requests per second"
  # Many connections of modest size: no claim on how many an upgrade policy
  # covers, but together they carry the bytes.
  bulk=0
  ;;
bigvalue)
  random_file "$TMP/value" 1M
  run 30 redis-cli -h 127.0.0.1 -p "$port" -x SET big <"$TMP/value" >"$TMP/set.out"
  [[ $(cat "$TMP/set.out") == OK ]] || fail "expected OK from SET of a 1 MiB value, got '$(head -c 200 "$TMP/set.out")'"
  run 30 redis-cli -h 127.0.0.1 -p "$port" STRLEN big >"$TMP/strlen.out"
  [[ $(cat "$TMP/strlen.out") == 1048576 ]] || fail "expected STRLEN big = 1048576, got '$(head -c 200 "$TMP/strlen.out")'"
  run 30 redis-cli -h 127.0.0.1 -p "$port" --raw GET big >"$TMP/got.out"
  # --raw prints the bulk string verbatim followed by one newline.
  [[ $(tail -c 1 "$TMP/got.out" | od -An -c | tr -d ' ') == '\n' ]] || fail "expected redis-cli --raw output to end in a newline"
  head -c -1 "$TMP/got.out" >"$TMP/got"
  same_file "$TMP/value" "$TMP/got"
  log "1 MiB value stored and read back byte-exact"
  bulk=4   # the SET and the GET connection, both ends
  ;;
bgsave)
  run 60 "$PY" "$TMP/resp.py" bgsave "$port"
  grep -q 'Background saving terminated with success' "$TMP/redis-server.log" ||
    fail "expected 'Background saving terminated with success' in the redis log"
  [[ -s $TMP/dump.rdb ]] || fail "expected BGSAVE to write $TMP/dump.rdb"
  bulk=2   # the main connection, both ends
  ;;
*) fail "unknown mode '$mode'" ;;
esac

run 30 "$PY" "$TMP/resp.py" counters "$port" >"$TMP/counters.out"
read -r nconn net_in net_out <"$TMP/counters.out" || true
[[ ${net_out:-} =~ ^[0-9]+$ ]] || fail "expected 'connections bytes_in bytes_out' from INFO stats, got '$(cat "$TMP/counters.out")'"
stop_server redis-server TERM
log "redis: $nconn connections, server read $net_in and wrote $net_out bytes"

# Every connection the server accepted has a client end in a process of ours
# that exited normally; every client read every reply.
check_stats conns=$((2 * nconn)) bulk=$bulk bytes=$((net_in + net_out)) procs=3
log PASS
