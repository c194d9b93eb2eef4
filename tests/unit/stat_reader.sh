#!/bin/bash
# r2sock-stat against segments written here byte by byte (the layout of
# src/statseg_layout.h), so the reader is checked apart from the shim.
#   usage: stat_reader.sh R2SOCK_STAT [read|export|empty]
#   read:   a well-formed segment is listed with its connection, path and
#           bytes; another layout is skipped with a message; one still being
#           made is skipped quietly; a dead pid's and a recycled pid's (start
#           time differs) are removed.
#   export: --json and --prometheus give the segment's exact counters (one
#           beyond 2^53; a gauge, _now, exported as a Prometheus gauge) and
#           its connection, and escape a program name with a
#           double quote, a backslash, a newline and a byte that is not UTF-8
#           (the JSON parses; the Prometheus text passes prom_check.py).
#   empty:  with no segment at all (a private, empty /dev/shm: needs root for
#           unshare -m, else skipped) both print an empty report and exit 0.
# The segments are named after this script's pid (alive, not under the shim)
# or after a process that has exited.
set -euo pipefail
stat=$1 mode=${2:-read}
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
me=$$
seg=/dev/shm/r2s-stat-$me
work=$(mktemp -d)
trap 'rm -rf "$seg" "${dead_seg:-}" "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# write_seg PATH PID LAYOUT MAGIC START_TICKS [PROGRAM]: a header and one
# open connection 127.0.0.1:1234 -> 127.0.0.1:5678 on shm, 1000 bytes sent
# and 2000 received; 16 slots. PROGRAM (default fakeprog) is taken byte for
# byte, up to 31 bytes.
write_seg() {
  python3 - "$@" <<'EOF'
import os, struct, sys
path, pid, layout, magic, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 0), int(sys.argv[5])
program = os.fsencode(sys.argv[6]) if len(sys.argv) > 6 else b"fakeprog"
names = b"conn_seen bytes_tcp_tx bytes_shm_tx waits_sleep tcp_peer_plain doorbells rdma_memory_bytes_now"
stats = [1, 0, 500, 42, 3, 2**63 + 5, 139264] + [0] * 57
hdr = struct.pack("<QIIIIiIQq32sII1024s64Q", 0, layout, 2048, 192, 16, pid, 7, ticks, 0,
                  program[:31], 1, 0, names, *stats)
hdr += b"\0" * (2048 - len(hdr))
def addr(port):
    return struct.pack("<HH16s", 2, port, bytes([127, 0, 0, 1]))
ident = struct.pack("<8Iq", 1, 7, 9, 2, 1, 1, 1, 0, 1) + addr(1234) + addr(5678) + b"\0" * 16
slot = struct.pack("<II", 2, 0) + ident
slot += b"\0" * (128 - len(slot)) + struct.pack("<7Q", 0, 1000, 0, 0, 2000, 0, 3) + b"\0" * 8
data = bytearray(hdr + slot + b"\0" * (192 * 15))
struct.pack_into("<Q", data, 0, magic)  # the magic, stored last by the shim
open(path, "wb").write(data)
EOF
}
MAGIC=0x5441545353325232
ticks=$(sed 's/.*) //' /proc/$me/stat | awk '{print $20}')

# export: the fixture's counters and connection, exact, with a program name
# that has every character the formats must escape.
check_export() {
  local prog l rc gone
  prog=$'q"uo\\te\nnl\xff'
  write_seg "$seg" $me 1 $MAGIC "$ticks" "$prog"
  "$stat" --json -p $me >"$work/out.json" || fail "r2sock-stat --json -p $me failed: $(cat "$work/out.json")"
  /usr/bin/python3 -m json.tool "$work/out.json" >/dev/null || fail "--json is not JSON: $(cat "$work/out.json")"
  /usr/bin/python3 - "$work/out.json" $me "$ticks" <<'EOF' || fail "--json: $(cat "$work/out.json")"
import json, sys
doc, pid, ticks = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
def want(what, got, expected):
    if got != expected:
        sys.exit(f"{what}: expected {expected!r}, got {got!r}")
want("processes", len(doc["processes"]), 1)
p = doc["processes"][0]
want("pid", p["pid"], pid)
want("program", p["program"], 'q"uo\\te\nnl\ufffd')
want("start_ticks", p["start_ticks"], ticks)
want("counters", p["counters"], {"conn_seen": 1, "bytes_tcp_tx": 0, "bytes_shm_tx": 500, "waits_sleep": 42,
                                 "tcp_peer_plain": 3, "doorbells": 2**63 + 5, "rdma_memory_bytes_now": 139264})
want("bytes (500 of ended connections, 1000 of the live one)", p["bytes"],
     {"tx": {"tcp": 0, "shm": 1500, "rdma": 0}, "rx": {"tcp": 0, "shm": 2000, "rdma": 0}})
want("connections_open", p["connections_open"], {"tcp": 0, "shm": 1, "rdma": 0})
want("listeners", p["listeners"], 0)
want("fallbacks", p["fallbacks"], {"peer-plain": 3})
want("connections", len(p["connections"]), 1)
c = p["connections"][0]
want("connection", {k: c[k] for k in ("conn_id", "fd", "state", "role", "path", "reason", "local", "peer", "waits")},
     {"conn_id": 7, "fd": 9, "state": "open", "role": "client", "path": "shm", "reason": None,
      "local": {"family": "ipv4", "address": "127.0.0.1", "port": 1234},
      "peer": {"family": "ipv4", "address": "127.0.0.1", "port": 5678}, "waits": 3})
want("connection bytes", c["bytes"],
     {"tx": {"tcp": 0, "shm": 1000, "rdma": 0}, "rx": {"tcp": 0, "shm": 2000, "rdma": 0}})
EOF
  "$stat" --prometheus -p $me >"$work/out.prom" || fail "r2sock-stat --prometheus -p $me failed"
  # As written: each character escaped, the stray byte replaced by U+FFFD.
  l='pid="'$me'",program="q\"uo\\te\nnl'$'\xef\xbf\xbd''"'
  grep -qF "$l" "$work/out.prom" || fail "expected the labels $l, saw: $(grep -m1 program= "$work/out.prom")"
  /usr/bin/python3 "$(dirname "$0")/prom_check.py" "$work/out.prom" \
    --has "r2sock_bytes_total{$l,path=\"shm\",direction=\"tx\"} 1500" \
    --has "r2sock_bytes_total{$l,path=\"shm\",direction=\"rx\"} 2000" \
    --has "r2sock_bytes_total{$l,path=\"tcp\",direction=\"tx\"} 0" \
    --has "r2sock_connections_open{$l,path=\"shm\"} 1" \
    --has "r2sock_listeners_open{$l} 0" \
    --has "r2sock_fallbacks_total{$l,reason=\"peer-plain\"} 3" \
    --has "r2sock_doorbells_total{$l} 9223372036854775813" \
    --has "r2sock_waits_sleep_total{$l} 42" \
    --has "r2sock_rdma_memory_bytes{$l} 139264" --type r2sock_rdma_memory_bytes=gauge \
    --type r2sock_waits_sleep_total=counter || fail "--prometheus: $(cat "$work/out.prom")"
  ! grep -q rdma_memory_bytes_now "$work/out.prom" || fail "--prometheus exported the gauge by its counter name"
  "$stat" --json --prometheus >/dev/null 2>&1 && fail "--json with --prometheus was accepted"
  # A pid with no segment: the empty report still parses, and the status says so.
  sleep 0 &
  gone=$!
  wait $gone
  rc=0
  "$stat" --json -p $gone >"$work/gone.json" 2>/dev/null || rc=$?
  [[ $rc == 1 ]] || fail "--json -p $gone (no such process): expected status 1, got $rc"
  json_empty "$work/gone.json" || fail "--json -p $gone: expected no process, saw: $(cat "$work/gone.json")"
  echo "stat_reader: --json and --prometheus exact and escaped"
}

# json_empty FILE: a JSON report that lists no process.
json_empty() {
  /usr/bin/python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["processes"] != [])' "$1"
}

# empty: no segment at all, in a private /dev/shm (the machine's may list
# any process under the shim).
check_empty() {
  unshare -m true 2>/dev/null || { echo "SKIP: unshare -m is not permitted (needs root): no private /dev/shm"; exit 77; }
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare -m sh -c 'mount -t tmpfs r2s-empty /dev/shm && "$1" --json >"$2/e.json" && "$1" --prometheus >"$2/e.prom"' \
    sh "$stat" "$work" || fail "r2sock-stat with no segment at all failed (status $?)"
  json_empty "$work/e.json" || fail "expected no process, saw: $(cat "$work/e.json")"
  /usr/bin/python3 "$(dirname "$0")/prom_check.py" "$work/e.prom" >/dev/null || fail "--prometheus with no process"
  [[ ! -s $work/e.prom ]] || fail "expected no Prometheus output with no process, saw: $(cat "$work/e.prom")"
  echo "stat_reader: empty reports with no process"
}

case $mode in
  read) ;;
  export) check_export; exit 0 ;;
  empty) check_empty; exit 0 ;;
  *) fail "unknown mode '$mode' (read, export or empty)" ;;
esac

# A well-formed segment: listed, with its connection.
write_seg "$seg" $me 1 $MAGIC "$ticks"
out=$("$stat" --once -c -p $me) || fail "r2sock-stat -c did not list pid $me: $out"
line=$(grep -E "^ *$me +9 " <<<"$out") || fail "no line for fd 9 of pid $me in: $out"
read -r _ _ l arrow p path sent recv _ _ waits <<<"$line"
[[ $l == 127.0.0.1:1234 && $arrow == "->" && $p == 127.0.0.1:5678 && $path == shm && $sent == 1000 &&
   $recv == 2000 && $waits == 3 ]] || fail "expected '9 127.0.0.1:1234 -> 127.0.0.1:5678 shm 1000 2000 ... 3', saw: $line"
out=$("$stat" --once -p $me) || fail "r2sock-stat did not list pid $me"
# Process view: SENT is the live connection plus the closed ones' bytes (500).
awk -v p=$me '$1 == p && $2 == "fakeprog" && $3 == 1 && $5 == 1 && $8 == 1500 && $9 == 2000 && $12 == 42 { ok = 1 }
  END { exit !ok }' <<<"$out" || fail "expected pid $me fakeprog CONNS 1, SHM 1, SENT 1500, RECV 2000, WAITS 42 in: $out"

# Another layout: skipped, and said so.
write_seg "$seg" $me 99 $MAGIC "$ticks"
err=$("$stat" --once -p $me 2>&1 >/dev/null) && fail "r2sock-stat listed a layout-99 segment"
grep -q "layout 99" <<<"$err" || fail "expected a message naming layout 99, saw: $err"
[[ -e $seg ]] || fail "the live process's segment was removed"

# Still being made (no magic yet): skipped without a word, left alone.
write_seg "$seg" $me 1 0 "$ticks"
err=$("$stat" --once 2>&1 >/dev/null) || fail "r2sock-stat failed on a segment being made: $err"
[[ -z $err ]] || fail "expected no message for a segment being made, saw: $err"
[[ -e $seg ]] || fail "a segment being made was removed"

# A recycled pid (the start time differs): the segment is stale, removed.
write_seg "$seg" $me 1 $MAGIC $((ticks + 1))
"$stat" --once -p $me >/dev/null 2>&1 && fail "r2sock-stat listed a segment whose start time is not its pid's"
[[ ! -e $seg ]] || fail "a recycled pid's segment was left in place"

# A dead pid: removed.
sleep 0 &
dead=$!
wait $dead
dead_seg=/dev/shm/r2s-stat-$dead
write_seg "$dead_seg" $dead 1 $MAGIC 1
"$stat" --once -p $dead >/dev/null 2>&1 && fail "r2sock-stat listed dead pid $dead"
[[ ! -e $dead_seg ]] || fail "dead pid $dead's segment was left in place"
echo "stat_reader: listed, layout skipped, in-progress ignored, stale and dead removed"
