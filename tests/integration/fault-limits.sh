#!/usr/bin/env bash
# Resource limits and a reset control connection, both ends under the shim.
#   usage: fault-limits.sh nofile|as|shm-full|reset
#   nofile:   the client runs with an RLIMIT_NOFILE that leaves room for
#             its socket and nothing more: no ring can be made or mapped
#   as:       the client runs with RLIMIT_AS of 800 MB and rings of 1 GiB:
#             the ring cannot be mapped
#   shm-full: both ends run in a private mount namespace whose /dev/shm is a
#             256 KiB tmpfs, smaller than one 512 KiB ring (needs root and
#             unshare; skipped otherwise, with the reason)
#   reset:    a live upgraded connection whose TCP socket is destroyed under
#             it (ss -K, a reset to the peer); skipped if the kernel lacks
#             socket destruction (CONFIG_INET_DIAG_DESTROY)
# nofile, as, shm-full: the stream (8 MiB each way) must be verified at
# both ends, like TCP, and the client's stats must count the connection in
# tcp_no_resources (and none in conn_shm). reset: both ends must end with
# an error (a reset, an abort, a broken pipe or EOF) within 10 s, nothing
# hangs, and no ring segment is left.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: fault-limits.sh nofile|as|shm-full|reset}
needs_rings "limits are the shim's business: nothing to check without it" "no ring is ever made, so no limit can bite"

# pair PREFIX_SERVER PREFIX_CLIENT BYTES: server and client (each prefix a
# string of words, may be empty), client in the foreground; sets SRC, CRC.
pair() {
  local ps=$1 pc=$2 bytes=$3 port spid
  rm -f "$TMP/ready"
  mkfifo "$TMP/ready"
  shim_at "$TMP/server.stats"
  # shellcheck disable=SC2086 # the prefixes are word lists
  $ps "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 --timeout 60 3>"$TMP/ready" \
    >"$TMP/server.log" 2>&1 &
  spid=$!
  LIVE+=("$spid")
  port=
  read -r -t 20 port <"$TMP/ready" || true
  [[ -n $port ]] || fail "the server reported no port: $(cat "$TMP/server.log")"
  shim_at "$TMP/client.stats"
  CRC=0
  # shellcheck disable=SC2086
  timeout -k 5 60 $pc "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$port" --bytes "$bytes" --bidir \
    --timeout 50 >"$TMP/client.log" 2>&1 || CRC=$?
  SRC=0
  wait "$spid" || SRC=$?
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
  shm-full)
    [[ $(id -u) == 0 ]] || skip "a private /dev/shm needs root"
    command -v unshare >/dev/null || skip "unshare is not installed"
    # The rest of this script, again, inside a mount namespace of its own.
    if [[ -z ${R2S_IN_NS:-} ]]; then
      rc=0
      # shellcheck disable=SC2016 # $0 is for the inner shell
      R2S_IN_NS=1 unshare -m bash -c 'mount --make-rprivate / && mount -t tmpfs -o size=256k r2s-test /dev/shm &&
        exec bash "$0" shm-full' "$0" || rc=$?
      ((rc == 0)) || exit "$rc"
      log PASS
      exit 0
    fi
    pair "" "" 8M
    like_tcp
    ;;
  reset)
    command -v ss >/dev/null || skip "ss is not installed"
    rm -f "$TMP/ready"
    mkfifo "$TMP/ready"
    shim_at "$TMP/server.stats"
    "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 --timeout 60 3>"$TMP/ready" \
      >"$TMP/server.log" 2>&1 &
    spid=$!
    LIVE+=("$spid")
    port=
    read -r -t 20 port <"$TMP/ready" || true
    [[ -n $port ]] || fail "the server reported no port"
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
