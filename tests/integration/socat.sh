#!/usr/bin/env bash
# socat moving a 64 MiB random file over TCP, both ends under the shim.
#   usage: socat.sh upload|fork
#   upload: one TCP-LISTEN receiver writes what one sender sends
#   fork:   TCP-LISTEN,fork server sends the file to every client: two clients
#           at once, then a third; each forked child serves one connection
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need socat

mode=${1:?usage: socat.sh upload|fork}
random_file "$TMP/in" 64M
size=$(file_size "$TMP/in")
port=$(free_port)

case $mode in
upload)
  # -u: one direction only, TCP -> file. The receiver exits at the sender's EOF.
  start_server socat-recv "$port" socat -u "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" "CREATE:$TMP/out"
  run 60 socat -u "OPEN:$TMP/in" "TCP:127.0.0.1:$port"
  wait_server socat-recv
  same_file "$TMP/in" "$TMP/out"
  conns=2 bulk=2 bytes=$size procs=2
  ;;
fork)
  # -U: one direction only, second address -> first: each forked child opens
  # the file and sends it to its client.
  start_server socat-fork "$port" socat -U "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "OPEN:$TMP/in"
  # Two downloads at once (two live children), bounded like run().
  pids=()
  for i in 1 2; do
    timeout -k 5 60 "${SHIM[@]}" socat -u "TCP:127.0.0.1:$port" "CREATE:$TMP/out$i" </dev/null &
    pids+=($!)
  done
  for i in 1 2; do
    rc=0
    wait "${pids[i - 1]}" || rc=$?
    ((rc == 0)) || fail "concurrent download $i: socat exited with status $rc (124 = timed out), expected 0"
  done
  run 60 socat -u "TCP:127.0.0.1:$port" "CREATE:$TMP/out3"
  for i in 1 2 3; do same_file "$TMP/in" "$TMP/out$i"; done
  # The children exit by themselves once their client is served; the parent
  # listens until told to stop; socat exits with 128+signal.
  stop_server socat-fork TERM 143
  conns=6 bulk=6 bytes=$((3 * size)) procs=6
  ;;
*) fail "unknown mode '$mode'" ;;
esac
log "moved $bytes bytes byte-exact"

check_stats conns="$conns" bulk="$bulk" bytes="$bytes" procs="$procs"
log PASS
