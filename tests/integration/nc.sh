#!/usr/bin/env bash
# shellcheck disable=SC2016 # the sh -c scripts take their arguments as $1, $2
# OpenBSD netcat moving a 64 MiB random file each way, both ends under the
# shim: client -> listener, then listener -> client. -N shuts down the
# sending side at EOF so that the receiver sees the end of the stream.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need nc

random_file "$TMP/in" 64M
size=$(file_size "$TMP/in")

# Upload: the listener writes what it receives and exits at EOF.
port=$(free_port)
start_server nc-recv "$port" sh -c 'exec nc -l 127.0.0.1 "$1" >"$2"' nc "$port" "$TMP/up"
run 60 nc -N 127.0.0.1 "$port" <"$TMP/in"
wait_server nc-recv
same_file "$TMP/in" "$TMP/up"

# Download: the listener sends the file and shuts down its side at EOF.
port=$(free_port)
start_server nc-send "$port" sh -c 'exec nc -N -l 127.0.0.1 "$1" <"$2"' nc "$port" "$TMP/in"
run 60 sh -c 'exec nc -d 127.0.0.1 "$1" >"$2"' nc "$port" "$TMP/down"
wait_server nc-send
same_file "$TMP/in" "$TMP/down"
log "moved 2 x $size bytes byte-exact"

check_stats conns=4 bulk=4 bytes=$((2 * size)) procs=4
log PASS
