#!/usr/bin/env bash
# The service recipe (docs/deploy.md): a server started the way the shipped
# example unit (docs/r2sock-example.service) starts one, with exactly its
# Environment= lines, serves a client under the shim over the path the
# suite expects, as r2sock-stat -c reports it while the connection lives.
#   usage: service.sh
# Where systemd runs the machine (PID 1, and systemd-run answers), the
# server is a transient unit made by systemd-run with those Environment=
# properties. Elsewhere (containers, CI) it is started as systemd would
# start it: `env -i` with only systemd's default PATH and those lines.
# Either way the unit's paths of the installed package are mapped to this
# build: LD_PRELOAD=/usr/lib/r2sock/libr2sock.so to the library under test,
# R2SOCK_CONFIG=/etc/r2sock.conf to a rules file of the test's, which sets
# the policy the suite runs (`upgrade = now`, or `never` in the tcp
# variant: env -i drops the suite's R2SOCK_UPGRADE, the file carries it),
# PORT to a free port. A line the test cannot map or parse fails it: the
# shipped file must stay what the test checks.
# The program is hold_peer.py's server, which compares every byte it gets
# with the seeded stream and holds the connection until the client lets go.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
[[ -n $R2SOCK_LIB ]] || skip "the recipe preloads the library (R2SOCK_LIB is empty)"
r2s_python
SRC=${R2SOCK_SRC:-$(dirname "$0")/../..}
UNIT=$SRC/docs/r2sock-example.service
STAT=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/r2sock-stat
[[ -x $STAT ]] || fail "r2sock-stat not built: expected it at $STAT (set R2SOCK_BUILD to the build dir)"
[[ -r $UNIT ]] || fail "the example unit $UNIT is missing"
PEER=$(cd "$(dirname "$0")" && pwd)/hold_peer.py
BYTES=$((32 << 20))
case ${R2SOCK_UPGRADE:-never} in
  now) policy=now want_path=shm ;;
  never) policy=never want_path="tcp(disabled)" ;;
  *) fail "R2SOCK_UPGRADE must be now or never for this test, not '$R2SOCK_UPGRADE'" ;;
esac
printf '# the rules file of service.sh\nupgrade = %s\n' "$policy" >"$TMP/r2sock.conf"
port=$(free_port)

# The unit's Environment= lines, one NAME=VALUE each, mapped to this build.
unit_env=()
while IFS= read -r line; do
  kv=${line#Environment=}
  [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]\"\'\\%]*$ ]] ||
    fail "$UNIT: cannot read '$line' (one NAME=VALUE per line, no quotes, blanks or specifiers)"
  case $kv in
    LD_PRELOAD=/usr/lib/r2sock/libr2sock.so) kv=LD_PRELOAD=$R2S_PRELOAD ;;
    LD_PRELOAD=*) fail "$UNIT: LD_PRELOAD is not the packaged library: $kv" ;;
    R2SOCK_CONFIG=/etc/r2sock.conf) kv=R2SOCK_CONFIG=$TMP/r2sock.conf ;;
    R2SOCK_CONFIG=*) fail "$UNIT: R2SOCK_CONFIG is not the default file: $kv" ;;
    PORT=*) kv=PORT=$port ;;
  esac
  unit_env+=("$kv")
done < <(grep '^Environment=' "$UNIT")
[[ " ${unit_env[*]} " == *" LD_PRELOAD="* ]] || fail "$UNIT sets no LD_PRELOAD"
log "the unit's environment, mapped: ${unit_env[*]}"
# Under a sanitizer build the suite's options for its runtime (lib.sh: no
# leak report for third-party programs' exit-time leaks) go along: they
# belong to the test's build, not to the unit.
san_env=()
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS; do
  [[ -n ${!v:-} ]] && san_env+=("$v=${!v}")
done
server=("$PY" "$PEER" server --port "$port" --bytes "$BYTES")

systemd_unit=
if [[ -d /run/systemd/system ]] && timeout 20 systemd-run --quiet --wait --collect true 2>/dev/null; then
  systemd_unit=r2s-service-test-$$-$RANDOM
  props=(-p "RuntimeMaxSec=$R2S_SERVER_LIFETIME")
  for kv in "${unit_env[@]}" "${san_env[@]}"; do props+=(-p "Environment=$kv"); done
  systemd-run --quiet --unit "$systemd_unit" "${props[@]}" -- "${server[@]}" ||
    fail "systemd-run could not start the transient unit $systemd_unit"
  trap 'systemctl stop "$systemd_unit" 2>/dev/null; systemctl reset-failed "$systemd_unit" 2>/dev/null; r2s_cleanup' EXIT
  deadline=$((SECONDS + 20))
  until [[ -n $(ss -Hltn "sport = :$port") ]]; do
    ((SECONDS < deadline)) || fail "the unit $systemd_unit does not listen on port $port after 20 s"
    sleep 0.05
  done
  spid=$(systemctl show -p MainPID --value "$systemd_unit")
  log "systemd: transient unit $systemd_unit (pid $spid)"
else
  log "systemd does not run this machine: the server runs as the unit's environment alone (env -i)"
  SHIM_CLIENT=("${SHIM[@]}")
  SHIM=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin "${unit_env[@]}" "${san_env[@]}")
  start_server service "$port" "${server[@]}"
  SHIM=("${SHIM_CLIENT[@]}")
  spid=$(child_of "$(server_pid service)")
fi

# The client holds its connection until its stdin (the fifo) ends: the
# shell keeps the fifo's only writer, fd 3, and closes it to let go.
mkfifo "$TMP/hold"
exec 3<>"$TMP/hold"
timeout -k 5 60 "${SHIM[@]}" "$PY" "$PEER" client --port "$port" --bytes "$BYTES" <"$TMP/hold" 3>&- \
  >"$TMP/client.log" 2>&1 &
R2S_SERVER_PID["hold-client"]=$!
deadline=$((SECONDS + 30))
until grep -q "^hold_peer client: sent=$BYTES$" "$TMP/client.log"; do
  alive "$(server_pid hold-client)" || fail "the client exited before it sent its bytes: $(cat "$TMP/client.log")"
  ((SECONDS < deadline)) || fail "the client did not send $BYTES bytes within 30 s"
  sleep 0.05
done

# The server's connection, as r2sock-stat -c lists it: "path sent recv".
# The path is published by the connection's next call once the shims'
# handshake is through (the server's last read).
deadline=$((SECONDS + 20))
while :; do
  "$STAT" --once -c -p "$spid" >"$TMP/stat.out" 2>&1 || fail "r2sock-stat --once -c -p $spid failed: $(cat "$TMP/stat.out")"
  line=$(awk -v port="$port" '$1 ~ /^[0-9]+$/ && $4 == "->" && $3 ~ ":" port "$" && $6 != "listen" { print $6, $7, $8 }' "$TMP/stat.out")
  [[ $line == negotiating* || $line == "tcp(negotiating)"* || -z $line ]] || break
  ((SECONDS < deadline)) || fail "the server (pid $spid) has no settled connection on port $port after 20 s: $(cat "$TMP/stat.out")"
  sleep 0.1
done
read -r path sent recv <<<"$line"
log "r2sock-stat -c, the server's connection: path $path, sent $sent, received $recv"
[[ $path == "$want_path" ]] || fail "expected the server's connection on $want_path, saw $path: $(cat "$TMP/stat.out")"
((recv >= BYTES)) || fail "expected the server's connection to have received >= $BYTES bytes, saw $recv"

# Let go: the server has compared every byte (it says so, and exits 0).
exec 3>&-
wait "${R2S_SERVER_PID[hold-client]}" || fail "the client failed: $(cat "$TMP/client.log")"
unset 'R2S_SERVER_PID[hold-client]'
if [[ -n $systemd_unit ]]; then
  deadline=$((SECONDS + 20))
  while [[ $(systemctl show -p ActiveState --value "$systemd_unit") == active ]]; do
    ((SECONDS < deadline)) || fail "the unit $systemd_unit still runs 20 s after its client ended"
    sleep 0.1
  done
  st=$(systemctl show -p ExecMainStatus --value "$systemd_unit")
  [[ $st == 0 ]] || fail "the unit's server exited with status $st (journalctl -u $systemd_unit)"
else
  wait_server service 20
  grep -q "^hold_peer server: received=$BYTES$" "$TMP/service.log" ||
    fail "the server did not report $BYTES bytes compared: $(cat "$TMP/service.log")"
fi
log "a server with the example unit's environment: $BYTES bytes compared, on $path"
