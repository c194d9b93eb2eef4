#!/usr/bin/env bash
# What docs/security.md promises about shared memory, checked on live
# connections, both ends under the shim with R2SOCK_UPGRADE=now.
#   usage: security.sh other-user|private-shm|names
#   other-user: the server runs as `nobody` (setpriv), the client as root:
#               neither can open the other's ring by name (mode 0600, and
#               a segment of another owner is refused), so each asks for it
#               by descriptor (FETCH) and gets it as a sealed memfd over a
#               Unix socket (docs/protocol.md, "Rings by file descriptor").
#               During a stream of MIB MiB each way, each process maps exactly
#               two rings, both memfds, and no r2s ring name of either is
#               left in /dev/shm; at the end both count conn_shm=1 and
#               rings_by_fd=1, none in tcp_other_user, and their debug logs
#               say they asked and handed over once. Before (2026-11-27)
#               such connections went back to plain TCP (tcp_other_user).
#               Needs root (skipped otherwise, with the reason).
#   private-shm: the same for a server with a /dev/shm of its own (a mount
#               namespace with its own tmpfs there, as in a container that
#               shares the host's network): the names are not found
#               (ENOENT). Before, both directions stayed on DATA frames
#               for the whole connection (tcp_no_resources).
#   names:      during a live upgraded connection no /dev/shm/r2s-* name of
#               either end is left (unlinked once both hold the ring); the
#               rings each process maps (found in /proc/PID/maps) are named
#               /r2s-PID-<24 hex digits> (96 random bits), are mode 0600 and
#               owned by the process's user; and nothing the shim logs at
#               the default level, nor at info, names a segment or prints an
#               address.
# MIB: the stream only keeps the connection live while the maps and
# /dev/shm are looked at: 256 MiB, or 64 under TSan, whose stream of them
# still lasts several times as long as the plain build's of 256.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: security.sh other-user|private-shm|names}
needs_rings "nothing to check without the shim" "no shared memory is ever made"

# start_server PREFIX...: stream_check server under the shim, stats and log
# in a directory anybody may write (the server may run as nobody).
OUT=$TMP/out
MIB=256
[[ ${R2S_SANITIZER_RT:-} != *libtsan* ]] || MIB=64
mkdir -p "$OUT"
chmod 1777 "$TMP" "$OUT"
serve() {
  SC_DIR=$OUT sc_server "$OUT/server.stats" "$@" -- --timeout 60
  SPID=$SC_PID PORT=$SC_PORT
}

case $mode in
  other-user | private-shm)
    if [[ $mode == other-user ]]; then
      [[ $(id -u) == 0 ]] || skip "running one end as nobody needs root"
      command -v setpriv >/dev/null || skip "setpriv is not installed"
      setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$R2SOCK_LIB" ||
        skip "user nobody cannot read $R2SOCK_LIB (a parent directory is not world-searchable)"
      as_server=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
      # shellcheck disable=SC2016 # expanded by the inner shell
      as_server=(unshare -m --propagation private sh -c 'mount -t tmpfs -o size=64m none /dev/shm && exec "$@"' sh)
      "${as_server[@]}" true 2>/dev/null || skip "cannot make a mount namespace with its own /dev/shm here"
    fi
    serve "${as_server[@]}" env R2SOCK_LOG=debug
    shim_at "$OUT/client.stats"
    R2SOCK_LOG=debug "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$PORT" --bytes "${MIB}M" --bidir \
      --timeout 60 >"$OUT/client.log" 2>&1 &
    CPID=$!
    LIVE+=("$CPID")
    # Each end maps its own ring and the peer's, both memfds, once upgraded.
    deadline=$((SECONDS + 20))
    until (($(grep -c '/memfd:r2s-ring' "/proc/$SPID/maps" 2>/dev/null || true) >= 2 &&
      $(grep -c '/memfd:r2s-ring' "/proc/$CPID/maps" 2>/dev/null || true) >= 2)); do
      ((SECONDS < deadline)) || fail "the two ends did not map two memfd rings each within 20 s"
      kill -0 "$CPID" 2>/dev/null || fail "the client ended before it was upgraded: $(tail -n 5 "$OUT/client.log")"
      sleep 0.01
    done
    for pid in "$SPID" "$CPID"; do
      n=$(grep -c '/memfd:r2s-ring' "/proc/$pid/maps" || true)
      named=$(grep -c ' /dev/shm/r2s-[0-9]' "/proc/$pid/maps" || true)
      ((n == 2 && named == 0)) || fail "pid $pid maps $n memfd rings and $named named ones (expected 2 and 0)"
      # the server's /dev/shm may be its own: look at it as it sees it.
      # Only these two processes' names: other tests may run beside this one.
      left=$(find "/proc/$pid/root/dev/shm/" /dev/shm/ -maxdepth 1 \( -name "r2s-$SPID-*" -o -name "r2s-$CPID-*" \) \
        -printf '%f ' 2>/dev/null)
      [[ -z $left ]] || fail "ring names left in a /dev/shm during the live connection: $left"
    done
    wait "$CPID" || fail "the client failed: $(tail -n 5 "$OUT/client.log")"
    rc=0
    wait "$SPID" || rc=$?
    ((rc == 0)) || fail "the server failed with $rc: $(tail -n 5 "$OUT/server.log")"
    for end in server client; do
      for want in conn_shm=1 rings_by_fd=1 tcp_other_user=0 tcp_no_resources=0; do
        got=$(STATS=$OUT/$end.stats stats_sum "${want%=*}")
        ((got == ${want#*=})) || fail "the $end counted ${want%=*}=$got (expected ${want#*=})"
      done
      for line in "asked for it by descriptor" "handed our ring to the peer by descriptor"; do
        n=$(grep -c "$line" "$OUT/$end.log" || true)
        ((n == 1)) || fail "the $end's debug log should say '$line' once, saw $n"
      done
    done
    log "$mode: $MIB MiB each way verified over two memfd rings per end, no ring name left, rings_by_fd=1 each"
    ;;
  names)
    serve env R2SOCK_LOG=info
    shim_at "$OUT/client.stats"
    R2SOCK_LOG=info "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$PORT" --bytes "${MIB}M" --bidir \
      --timeout 60 >"$OUT/client.log" 2>&1 &
    CPID=$!
    LIVE+=("$CPID")
    # Both ends map two rings each once upgraded.
    deadline=$((SECONDS + 20))
    # (rings only: r2s-stat-PID is the live statistics segment, checked below)
    until (($(grep -c ' /dev/shm/r2s-[0-9]' "/proc/$SPID/maps" 2>/dev/null || true) >= 2 &&
      $(grep -c ' /dev/shm/r2s-[0-9]' "/proc/$CPID/maps" 2>/dev/null || true) >= 2)); do
      ((SECONDS < deadline)) || fail "the two ends did not map two rings each within 20 s"
      kill -0 "$CPID" 2>/dev/null || fail "the client ended before it was upgraded: $(cat "$OUT/client.log")"
      sleep 0.01
    done
    # The names go once both hold the ring; the RING frames that say so
    # follow at once (bounded wait, not a timing claim).
    left=
    for _ in $(seq 1 200); do
      left=$(find /dev/shm -maxdepth 1 \( -name "r2s-$SPID-*" -o -name "r2s-$CPID-*" \) -printf '%f ')
      [[ -z $left ]] && break
      sleep 0.01
    done
    [[ -z $left ]] || fail "ring names still in /dev/shm during the live connection: $left"
    for pid in "$SPID" "$CPID"; do
      while read -r range _ _ _ _ path rest; do
        [[ $path == /dev/shm/r2s-* ]] || continue
        name=${path#/dev/shm/}
        if [[ $name == r2s-stat-* ]]; then
          # The live statistics segment: named by pid on purpose (r2sock-stat
          # finds it), never mapped by another process for writing; it must
          # be this process's own, linked, and private to its user.
          [[ $name == "r2s-stat-$pid" ]] || fail "pid $pid maps another process's statistics segment $name"
          st=$(stat -L -c '%a %u' "/proc/$pid/map_files/$range")
          [[ $st == "600 $(id -u)" ]] || fail "statistics segment $name: mode and owner '$st', expected '600 $(id -u)'"
          continue
        fi
        [[ $name =~ ^r2s-[0-9]+-[0-9a-f]{24}$ ]] || fail "ring name $name is not r2s-PID-<24 hex digits>"
        [[ $rest == "(deleted)" ]] || fail "ring $name of pid $pid is still linked"
        st=$(stat -L -c '%a %u' "/proc/$pid/map_files/$range")
        [[ $st == "600 $(id -u)" ]] || fail "ring $name: mode and owner '$st', expected '600 $(id -u)'"
      done <"/proc/$pid/maps"
    done
    log "names: 4 rings mapped, all r2s-PID-<96 random bits>, mode 0600, owned by us, none left in /dev/shm"
    wait "$CPID" || fail "the client failed: $(cat "$OUT/client.log")"
    wait "$SPID" || fail "the server failed: $(cat "$OUT/server.log")"
    (($(STATS=$OUT/client.stats stats_sum conn_shm) == 1)) || fail "the connection was not upgraded"
    grep -h '^r2sock\[' "$OUT/server.log" "$OUT/client.log" >"$OUT/shim.lines" || true
    if grep -Ei 'r2s-[0-9]|0x[0-9a-f]{6,}|rkey|/dev/shm' "$OUT/shim.lines"; then
      fail "the shim logged a segment name, an address or a key at info level (lines above)"
    fi
    log "names: $(wc -l <"$OUT/shim.lines") shim log lines at info level, none naming a segment or an address"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
LIVE=()
log PASS
