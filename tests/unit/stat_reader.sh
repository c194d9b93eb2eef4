#!/bin/bash
# r2sock-stat against segments written here byte by byte (the layout of
# src/statseg_layout.h), so the reader is checked apart from the shim: a
# well-formed segment is listed with its connection, path and bytes; another
# layout is skipped with a message; one still being made is skipped quietly;
# a dead pid's and a recycled pid's (start time differs) are removed.
# The segments are named after this script's pid (alive, not under the shim)
# or after a process that has exited.
set -euo pipefail
stat=$1
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
me=$$
seg=/dev/shm/r2s-stat-$me
trap 'rm -f "$seg" "${dead_seg:-}"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# write_seg PATH PID LAYOUT MAGIC START_TICKS: a header and one open
# connection 127.0.0.1:1234 -> 127.0.0.1:5678 on shm, 1000 bytes sent and
# 2000 received; 16 slots.
write_seg() {
  python3 - "$@" <<'EOF'
import struct, sys
path, pid, layout, magic, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 0), int(sys.argv[5])
names = b"conn_seen bytes_tcp_tx bytes_shm_tx waits_sleep"
stats = [1, 0, 500, 42] + [0] * 60
hdr = struct.pack("<QIIIIiIQq32sII1024s64Q", 0, layout, 2048, 192, 16, pid, 4, ticks, 0,
                  b"fakeprog", 1, 0, names, *stats)
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
