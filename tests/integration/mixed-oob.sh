#!/usr/bin/env bash
# An application that uses TCP urgent data itself, both ends under the shim
# (tests/integration/oob_peer.py): the client sends A (20000 bytes), one
# urgent byte '!' (MSG_OOB), B (30000 bytes) and half-closes. The shim's own
# hello is urgent data too, and Linux keeps only one urgent byte per
# direction, so this is where a shim could interfere; the server application
# must observe exactly what it observes without the shim (the expectations
# below are what a plain run gives on Linux 6.x), nothing more, nothing less.
#   usage: mixed-oob.sh separate|inline
#   separate: SO_OOBINLINE off (the default): in-band bytes are exactly A+B,
#             recv(MSG_OOB) gives exactly '!', SIOCATMARK is 1 exactly once,
#             at offset 20000, and nothing urgent is left at the end (EINVAL)
#   inline:   SO_OOBINLINE set on the listening socket before listen(): in-band
#             bytes are exactly A+'!'+B, the mark shows at offset 20000 only,
#             recv(MSG_OOB) is EINVAL
# Each runs two variants three times: "queued" (the server reads only once
# the whole stream and the FIN are in) and "sync" (the server acks A and then
# waits for POLLPRI, so the urgent byte arrives while its reader sits at the
# mark). docs/protocol.md: sockets whose application uses urgent data are
# never upgraded, so every connection end must stay on TCP (conn_shm =
# conn_rdma = 0), whatever R2SOCK_EXPECT_PATH says.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

mode=${1:?usage: mixed-oob.sh separate|inline}
PEER=$(dirname "$0")/oob_peer.py
NA=20000 NB=30000
case $mode in
separate)
  srv_flags=()
  want_file=sent-normal
  want="oob_peer server: oobinline=0 oob=[33] marks=[$NA] after=EINVAL in_band=$((NA + NB))"
  ;;
inline)
  srv_flags=(--inline)
  want_file=sent-inline
  want="oob_peer server: oobinline=1 oob=[] marks=[$NA] after=EINVAL in_band=$((NA + NB + 1))"
  ;;
*) fail "unknown mode '$mode'" ;;
esac
shim_at "$STATS"
SHIM=()

shm_snapshot
runs=0
for variant in queued sync; do
  sync=()
  [[ $variant == sync ]] && sync=(--sync)
  for i in 1 2 3; do
    name=$variant-$i
    port=$(free_port)
    start_server "oob-$name" "$port" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" \
      --out "$TMP/$name.got" --a-bytes "$NA" "${srv_flags[@]}" "${sync[@]}"
    run_to "$TMP/client-$name.out" 40 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --seed "$((runs + 5))" \
      --a-bytes "$NA" --b-bytes "$NB" --sent-normal "$TMP/$name.sent-normal" \
      --sent-inline "$TMP/$name.sent-inline" "${sync[@]}"
    wait_server "oob-$name" 40
    got=$(grep '^oob_peer server:' "$TMP/oob-$name.log" || true)
    [[ $got == "$want" ]] ||
      fail "$name: the server application observed '$got', expected '$want' (what a plain run observes)"
    same_file "$TMP/$name.$want_file" "$TMP/$name.got"
    runs=$((runs + 1))
  done
  log "$variant: 3 runs, server observed: $want"
done

check_tcp_only "$STATS" conns=$((2 * runs)) bulk=0 bytes=$((runs * (NA + NB))) procs=$((2 * runs))
shm_check_leaks
log PASS
