#!/usr/bin/env bash
# Resource limits, a missing device and a reset control connection, both
# ends under the shim.
#   usage: fault-limits.sh nofile|as|shm-full|shm-tight|no-device|reset
#   nofile:   the client runs with an RLIMIT_NOFILE that leaves room for
#             its socket and nothing more: no ring can be made or mapped
#   as:       the client runs with RLIMIT_AS of 800 MB and rings of 1 GiB:
#             the ring cannot be mapped
#   shm-full: both ends run in a private mount namespace whose /dev/shm is a
#             64 KiB tmpfs, smaller than the first 68 KiB of a ring its
#             owner reserves (needs root and unshare; skipped otherwise,
#             with the reason)
#   shm-tight: the same with 320 KiB: room for the first part of both
#             rings (and both processes' stats segments, up to 64 KiB
#             each) but never for all of either (512 KiB), whose rest each
#             producer reserves in doubling steps as its bytes go on
#   no-device: one end may use only RDMA, on a device that does not exist,
#             so it has no ring to offer; the other end switches and
#             offers its own. Run twice, the client and then the server
#             without the device. The end without it must tell its peer
#             (the urgent-data interlude: a HANDSHAKE without offers,
#             DECLINE, PLAIN; its log says so), and the peer must send its
#             direction back to plain TCP (its log says so, its stats count
#             tcp_unreachable); no ring on either end, 8 MiB each way
#             verified. Before 2026-11-27 the peer never heard of it and
#             sent DATA frames for the whole connection, reading ahead of
#             them for a HANDSHAKE that never came.
#   reset:    a live upgraded connection whose TCP socket is destroyed under
#             it (ss -K, a reset to the peer); skipped if the kernel lacks
#             socket destruction (CONFIG_INET_DIAG_DESTROY)
# nofile, as, shm-full: the stream (8 MiB each way) must be verified at
# both ends, like TCP, and the client's stats must count the connection in
# tcp_no_resources (and none in conn_shm). shm-tight: the stream verified
# at both ends, and each end's stats must count the connection in conn_shm,
# its send direction sent back to TCP (room_fallbacks=1) once it filled the
# part of the ring that could be reserved, the rest over TCP, and its log
# the warning. reset: both ends must end with
# an error (a reset, an abort, a broken pipe or EOF) within 10 s, nothing
# hangs, and no ring segment is left.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: fault-limits.sh nofile|as|shm-full|shm-tight|no-device|reset}
needs_rings "limits are the shim's business: nothing to check without it" "no ring is ever made, so no limit can bite"

# pair PREFIX_SERVER PREFIX_CLIENT BYTES: server and client (each prefix a
# string of words, may be empty), client in the foreground; sets SRC, CRC.
pair() {
  local ps=$1 pc=$2 bytes=$3
  # shellcheck disable=SC2086 # the prefixes are word lists
  sc_server "$TMP/server.stats" $ps -- --timeout 60
  shim_at "$TMP/client.stats"
  CRC=0
  # shellcheck disable=SC2086
  timeout -k 5 60 $pc "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$SC_PORT" --bytes "$bytes" --bidir \
    --timeout 50 >"$TMP/client.log" 2>&1 || CRC=$?
  SRC=0
  wait "$SC_PID" || SRC=$?
}

# like_tcp: both ends verified every byte; the client counted no_resources.
like_tcp() {
  ((CRC == 0 && SRC == 0)) ||
    fail "$mode: expected both ends to verify the stream like TCP, got client $CRC, server $SRC: $(cat "$TMP/client.log" "$TMP/server.log")"
  local nr shm
  nr=$(STATS=$TMP/client.stats stats_sum tcp_no_resources)
  shm=$(STATS=$TMP/client.stats stats_sum conn_shm)
  ((nr == 1 && shm == 0)) ||
    fail "$mode: expected the client's stats to say tcp_no_resources=1 conn_shm=0, saw $nr and $shm: $(cat "$TMP/client.stats")"
  log "$mode: 8 MiB each way verified on TCP; the client counted tcp_no_resources=$nr"
}

shm_snapshot
case $mode in
  nofile)
    [[ -z ${R2S_SANITIZER_RT:-} ]] || skip "a sanitizer runtime needs more fds to start than this limit leaves: RLIMIT_NOFILE cannot be tested under it"
    # The client keeps only fds 0-2 (ctest and bash leave others open; bash's
    # own script fd 255 is close-on-exec), then fd 3 is its socket and the
    # last one it may have.
    cat >"$TMP/closefds" <<'EOF'
#!/bin/bash
for f in /proc/$$/fd/*; do
  f=${f##*/}
  ((f > 2 && f != 255)) && eval "exec $f>&-"
done
exec "$@"
EOF
    chmod +x "$TMP/closefds"
    pair "" "$TMP/closefds prlimit --nofile=4:4 --" 8M
    like_tcp
    ;;
  as)
    [[ -z ${R2S_SANITIZER_RT:-} ]] || skip "a sanitizer runtime reserves terabytes of address space: RLIMIT_AS cannot be tested under it"
    export R2SOCK_RING_SIZE=1G
    pair "" "prlimit --as=800000000 --" 8M
    like_tcp
    ;;
  shm-full | shm-tight)
    [[ $(id -u) == 0 ]] || skip "a private /dev/shm needs root"
    command -v unshare >/dev/null || skip "unshare is not installed"
    # The rest of this script, again, inside a mount namespace of its own.
    if [[ -z ${R2S_IN_NS:-} ]]; then
      size=64k
      [[ $mode == shm-tight ]] && size=320k
      rc=0
      # shellcheck disable=SC2016 # $0 is for the inner shell
      R2S_IN_NS=1 unshare -m bash -c 'mount --make-rprivate / && mount -t tmpfs -o size="$1" r2s-test /dev/shm &&
        exec bash "$0" "$2"' "$0" "$size" "$mode" || rc=$?
      ((rc == 0)) || exit "$rc"
      log PASS
      exit 0
    fi
    pair "" "" 8M
    if [[ $mode == shm-full ]]; then
      like_tcp
    else
      ((CRC == 0 && SRC == 0)) ||
        fail "shm-tight: expected both ends to verify the stream, got client $CRC, server $SRC: $(cat "$TMP/client.log" "$TMP/server.log")"
      for end in client server; do
        shm=$(STATS=$TMP/$end.stats stats_sum conn_shm)
        back=$(STATS=$TMP/$end.stats stats_sum room_fallbacks)
        ring=$(STATS=$TMP/$end.stats stats_sum bytes_shm_tx)
        tcp=$(STATS=$TMP/$end.stats stats_sum bytes_tcp_tx)
        # The producer fills what is reserved, then goes back to TCP: the
        # ring carried exactly one of the reservation steps (64, 128 or
        # 256 KiB; 64 KiB when the stats segments took their 64 KiB each).
        ((shm == 1 && back == 1 && ring >= 65536 && ring <= 262144 && (ring & (ring - 1)) == 0 && tcp > 0)) ||
          fail "shm-tight: expected the $end's stats to say conn_shm=1 room_fallbacks=1, a reserved step of the ring (64 to 256 KiB) through it and the rest over TCP, saw $shm, $back, ring $ring, tcp $tcp: $(cat "$TMP/$end.stats")"
        grep -q "no room in /dev/shm for more of a ring" "$TMP/$end.log" ||
          fail "shm-tight: the $end did not say why it went back to TCP: $(cat "$TMP/$end.log")"
        log "shm-tight: the $end sent $ring bytes through the ring, then $tcp over TCP (room_fallbacks=$back)"
      done
    fi
    ;;
  no-device)
    bare="${NO_OFFER[*]} R2SOCK_LOG=debug"
    for lacking in client server; do
      if [[ $lacking == client ]]; then
        pair "env R2SOCK_LOG=debug" "$bare" 8M
        other=server
      else
        pair "$bare" "env R2SOCK_LOG=debug" 8M
        other=client
      fi
      ((CRC == 0 && SRC == 0)) ||
        fail "no-device ($lacking): expected both ends to verify the stream, got client $CRC, server $SRC: $(cat "$TMP/client.log" "$TMP/server.log")"
      shm=$(STATS=$TMP/client.stats stats_sum conn_shm)
      shm=$((shm + $(STATS=$TMP/server.stats stats_sum conn_shm)))
      ((shm == 0)) || fail "no-device ($lacking): expected no ring on either end, saw conn_shm=$shm"
      check_no_offer_answered "no-device ($lacking)" "$TMP/$lacking.stats" "$TMP/$lacking.log" \
        "$TMP/$other.stats" "$TMP/$other.log"
      log "no-device ($lacking): the $lacking told the $other, whose direction went back to plain TCP; 8 MiB each way verified"
      cat "$TMP/client.stats" "$TMP/server.stats" >>"$TMP/all.stats"
      rm -f "$TMP/client.stats" "$TMP/server.stats"
    done
    ;;
  reset)
    command -v ss >/dev/null || skip "ss is not installed"
    sc_server "$TMP/server.stats" -- --timeout 60
    spid=$SC_PID port=$SC_PORT
    shim_at "$TMP/client.stats"
    "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$port" --bytes 64G --bidir --timeout 60 \
      >"$TMP/client.log" 2>&1 &
    cpid=$!
    LIVE+=("$cpid")
    sleep 0.5 # well into the stream, through the rings by now
    t0=$(us_now)
    out=$(ss -K -tn state established "( sport = :$port )" 2>&1) || true
    sleep 0.2
    if ss -Htn state established "( sport = :$port )" | grep -q .; then
      skip "ss -K destroyed nothing (kernel without CONFIG_INET_DIAG_DESTROY?): $out"
    fi
    for p in "$cpid" "$spid"; do
      rc=0
      end=$((SECONDS + 10))
      while kill -0 "$p" 2>/dev/null; do
        ((SECONDS < end)) || fail "reset: pid $p still runs 10 s after its connection was destroyed"
        sleep 0.01
      done
      wait "$p" || rc=$?
      ((rc == 1)) || fail "reset: pid $p exited with $rc, expected 1 (an error reported)"
    done
    ms=$((($(us_now) - t0) / 1000))
    for f in client server; do
      grep -Eq "conn [0-9]+: .*(Connection reset by peer|Software caused connection abort|Broken pipe|premature EOF)" \
        "$TMP/$f.log" || fail "reset: the $f's error is not a reset, an abort, a broken pipe or EOF: $(cat "$TMP/$f.log")"
      log "reset: $f: $(grep -E 'conn [0-9]+: ' "$TMP/$f.log" | head -n 1)"
    done
    shm=$(STATS=$TMP/client.stats stats_sum conn_shm)
    ((shm == 1)) || fail "reset: the connection was not on shared memory when it was reset (conn_shm=$shm)"
    log "reset: both ends ended within $ms ms of the reset"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
LIVE=()
shm_check_leaks
log PASS
