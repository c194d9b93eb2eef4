#!/usr/bin/env bash
# What R2SOCK_UPGRADE's default (auto: after 64 KiB moved) does to a user's
# connections. The shm variant runs its programs with the variable unset;
# the tcp variant (never) checks the same programs and bytes in
# pass-through.
#   short: 200 connections, one after another, each a verified request and
#          response of 1000 bytes (rr_check). Under the default no ring is
#          made for them: at both ends every connection stays on TCP and is
#          counted as tcp_short, and every byte went over TCP. Before the
#          default changed each one set up and tore down two rings, which
#          made it 4-5x slower than kernel TCP here. Neither end hands a
#          close to the reaper (closes_reaped=0): the server read the
#          client's end of stream first, and the client, which closes
#          first, had the server's sized hello, which promises no switch
#          before 64 KiB moved, and moved 2000 bytes.
#   short-now-server: the same, with the server under R2SOCK_UPGRADE=now.
#          Its hello promises nothing and it switches as soon as it reads:
#          the client must finish every close in the background (N), the
#          server none.
#   short-past-floor: 33000 bytes each way, the client under
#          R2SOCK_UPGRADE=1G. No end switches (the server's count passes
#          64 KiB only with its last write), but the client moved more than
#          the server's hello promised to wait for, so it cannot know: it
#          hands every close to the reaper.
#   long:  one 128 MiB stream each way (stream_check --bidir). It must
#          still leave TCP: both ends count conn_shm=1, each sent at least
#          two thirds of its bytes through shared memory, and the two ends
#          sent at least 64 KiB over TCP in all before they switched (each
#          end counts the bytes of both directions). Why not 90% per end: a
#          switch in the middle of a stream leaves the bytes already in the
#          two socket buffers in front of the peer's handshake, and those
#          go on over TCP (0.2 to 2.3 MiB per direction seen here, up to
#          6.5 MiB for both on a loaded host). check_stats still asks 90%
#          of all bytes on shm: with 32 MiB each way, that prefix failed it
#          in 3 runs of 30 beside three busy loops (89.9 %), as once in a
#          local suite; it does not grow with the stream: 128 MiB each way
#          leaves it under 3 % (30 runs of 30 passed beside the same loops).
#   usage: upgrade-default.sh short|short-now-server|short-past-floor|long
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

mode=${1:?usage: upgrade-default.sh short|short-now-server|short-past-floor|long}
PROGS=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs
for p in rr_check stream_check; do
  [[ -x $PROGS/$p ]] || fail "$p not built: expected it at $PROGS/$p (set R2SOCK_BUILD to the build dir)"
done
shimmed=
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-} != never ]]; then
  unset R2SOCK_UPGRADE # what a user gets who sets nothing
  shimmed=1
fi

# end_stat WHO KEY: KEY from the server's line (listeners=1) or the client's.
end_stat() {
  local sel='/ listeners=1 /'
  [[ $1 == client ]] && sel='/ listeners=0 / && !/ conn_seen=0 /'
  awk -v k="$2" "/^r2sock\\[[0-9]+\\] stats:/ && $sel"' {
      for (i = 3; i <= NF; i++) {
        n = index($i, "=")
        if (substr($i, 1, n - 1) == k) { s += substr($i, n + 1); f = 1 }
      }
    } END { if (!f) s = -1; printf "%.0f\n", s }' "$STATS"
}
expect() { # WHO KEY OP VALUE
  local v
  v=$(end_stat "$1" "$2")
  ((v >= 0)) || fail "$1: no $2 in its stats line: $(cat "$STATS")"
  (("v $3 $4")) || fail "$1: expected $2 $3 $4, saw $v"
  log "$1: $2=$v ($3 $4)"
}

port=$(free_port)
case $mode in
  short | short-now-server | short-past-floor)
    N=200 B=1000 server_env=(env) client_env=(env)
    [[ $mode == short-past-floor ]] && B=33000
    # Only where the shim may upgrade: the tcp variant checks the same bytes.
    if [[ -n $shimmed && $mode == short-now-server ]]; then server_env+=(R2SOCK_UPGRADE=now); fi
    if [[ -n $shimmed && $mode == short-past-floor ]]; then client_env+=(R2SOCK_UPGRADE=1G); fi
    start_server rr "$port" "${server_env[@]}" "$PROGS/rr_check" server --port "$port" --conns $N --bytes $B \
      --timeout 60
    run 90 "${client_env[@]}" "$PROGS/rr_check" client --port "$port" --conns $N --bytes $B --timeout 60 \
      >"$TMP/client.out"
    wait_server rr 30
    grep -q "rr_check client: OK conns=$N/$N verified=$((N * B))" "$TMP/client.out" ||
      fail "client did not verify all $N responses: $(cat "$TMP/client.out")"
    grep -q "rr_check server: OK conns=$N/$N verified=$((N * B))" "$TMP/rr.log" ||
      fail "server did not verify all $N requests: $(cat "$TMP/rr.log")"
    check_stats conns=$((2 * N)) bytes=$((2 * N * B)) procs=2
    if [[ -n $shimmed && $mode == short-now-server ]]; then
      # The server switched at once, but the client, under the default,
      # never offered a ring for it: its bytes went in DATA frames over TCP.
      for who in server client; do
        expect $who conn_seen == $N
        expect $who bytes_tcp_tx == $((N * B))
        expect $who bytes_shm_tx == 0
      done
      expect client closes_reaped == $N
      expect server closes_reaped == 0
    elif [[ -n $shimmed ]]; then
      for who in server client; do
        expect $who conn_seen == $N
        expect $who conn_tcp == $N
        [[ $mode == short ]] && expect $who tcp_short == $N
        expect $who conn_shm == 0
        expect $who bytes_tcp_tx == $((N * B))
        expect $who bytes_shm_tx == 0
      done
      # The server read the client's end of the stream before it closed:
      # the kernel's close is enough. The client closes first: only where
      # the server's hello proves no switch mark can follow may it close
      # without the reaper.
      reaped=$N
      [[ $mode == short ]] && reaped=0
      expect client closes_reaped == "$reaped"
      expect server closes_reaped == 0
    fi
    ;;
  long)
    B=$((128 << 20))
    start_server sc "$port" "$PROGS/stream_check" server --host 127.0.0.1 --port "$port" --once --timeout 60
    run 90 "$PROGS/stream_check" client --host 127.0.0.1 --port "$port" --bytes $B --bidir --seed 7 \
      --timeout 60 >"$TMP/client.out"
    wait_server sc 30
    grep -q "stream_check client: OK" "$TMP/client.out" ||
      fail "client did not verify: $(cat "$TMP/client.out")"
    grep -q "stream_check server: OK" "$TMP/sc.log" || fail "server did not verify: $(cat "$TMP/sc.log")"
    check_stats conns=2 bulk=2 bytes=$((2 * B)) procs=2
    if [[ -n $shimmed ]]; then
      for who in server client; do
        expect $who conn_shm == 1
        expect $who tcp_short == 0
        expect $who bytes_shm_tx '>=' $((B * 2 / 3))
      done
      # Each end switches once the two directions together moved 64 KiB:
      # the two ends' sends over TCP add up to at least that.
      tcp=$(($(end_stat server bytes_tcp_tx) + $(end_stat client bytes_tcp_tx)))
      ((tcp >= 65536)) || fail "expected the ends to send >= 65536 bytes over TCP before switching, saw $tcp"
      log "sent over TCP before the switch: $tcp bytes in all (>= 65536)"
    fi
    ;;
  *) fail "unknown mode '$mode' (short|long)" ;;
esac
log "ok"
