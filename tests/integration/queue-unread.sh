#!/usr/bin/env bash
# What a writer may queue before its reader reads (tests/integration/
# queue_unread_peer.py): one process drives both ends of a connection, so
# it reads only once its write has returned. Kernel TCP lets a writer queue
# its send buffer, which it tunes up to net.ipv4.tcp_wmem's largest, before
# it blocks; the test queues three quarters of that (at most 3 MiB): a
# blocking write one way, then both ways at once, then a nonblocking writer
# that must get that much in before EAGAIN, then a quarter of it in writes
# of 64 bytes followed by a shutdown (the reader must find every byte, then
# the end of the stream). Every byte is compared. Under
# the shim the bytes go through the ring (the shm variant asserts it from
# the stats): a 512 KiB ring blocked the first write for good. The tcp
# variant (and a plain run) checks the expectation against the kernel.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/queue_unread_peer.py
read -r _ _ wmax </proc/sys/net/ipv4/tcp_wmem || fail "cannot read /proc/sys/net/ipv4/tcp_wmem"
Q=$((wmax * 3 / 4))
((Q > 3 << 20)) && Q=$((3 << 20))
((Q >= 64 << 10)) || skip "net.ipv4.tcp_wmem's largest send buffer is $wmax bytes: too small to tell"
shm_snapshot
shim_at "$STATS"
run_to "$TMP/peer.out" 90 "${SHIM_AT[@]}" "$PY" "$PEER" run --queue "$Q"
grep -q "^queue_unread_peer: OK queued=$Q " "$TMP/peer.out" ||
  fail "the peer did not report OK: $(tail -n 3 "$TMP/peer.out")"
log "$(grep '^queue_unread_peer: OK' "$TMP/peer.out")"
# Four connections, both ends in one process; Q each way in total in the
# first two, at least Q in the third, Q/4 in the fourth.
check_stats conns=8 bulk=8 bytes=$((3 * Q + Q / 4)) procs=1
