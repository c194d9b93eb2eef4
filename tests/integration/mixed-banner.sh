#!/usr/bin/env bash
# "Server speaks first" (SMTP, FTP, SSH, redis replicas...): the server sends
# a banner the moment it accepts, before reading anything, then echoes; the
# client reads the whole banner before it sends its first byte. Under the
# protocol the banner races the hellos: the client's first read must still
# return the banner and nothing else, with or without a shim on either end.
#   usage: mixed-banner.sh shim-server|shim-client|both
#   shim-server: server under the shim, plain client
#   shim-client: plain server, client under the shim
#   both:        both under the shim (these two may upgrade: the path is
#                checked only against R2SOCK_EXPECT_PATH, like every test)
# Two connections one after the other (8 MiB and 1 KiB echoed); banner and
# echo byte-exact. A plain peer sees at most one POLLPRI from the shim's hello
# (docs/protocol.md, "What a plain peer sees"); nothing here polls for it.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

mode=${1:?usage: mixed-banner.sh shim-server|shim-client|both}
PEER=$(dirname "$0")/banner_peer.py
shim_at "$STATS"
case $mode in
shim-server) server=("${SHIM_AT[@]}") client=("${PLAIN[@]}") ;;
shim-client) server=("${PLAIN[@]}") client=("${SHIM_AT[@]}") ;;
both) server=("${SHIM_AT[@]}") client=("${SHIM_AT[@]}") ;;
*) fail "unknown mode '$mode'" ;;
esac

shm_snapshot
random_file "$TMP/in1" 8M
random_file "$TMP/in2" 1K
port=$(free_port)
SHIM=()
start_server banner "$port" "${server[@]}" "$PY" "$PEER" server --port "$port" --conns 2 --banner-bytes 2000 --seed 7
for i in 1 2; do
  run_to "$TMP/client$i.out" 40 "${client[@]}" "$PY" "$PEER" client --port "$port" --in "$TMP/in$i" --out "$TMP/out$i" \
    --banner-bytes 2000 --seed 7
  same_file "$TMP/in$i" "$TMP/out$i"
  log "connection $i: $(cat "$TMP/client$i.out")"
done
wait_server banner 20
size=$(( $(file_size "$TMP/in1") + $(file_size "$TMP/in2") ))

case $mode in
both) check_stats conns=4 bulk=2 bytes="$size" procs=3 ;;
shim-server) check_tcp_only "$STATS" conns=2 bulk=2 bytes="$size" procs=1 ;;
shim-client) check_tcp_only "$STATS" conns=2 bulk=2 bytes="$size" procs=2 ;;
esac
shm_check_leaks
log PASS
