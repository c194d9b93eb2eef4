#!/usr/bin/env bash
# kill -9 of either end at random points, R2S_TRIALS times (default 50),
# both ends under the shim (the shared-memory transport in the shm variant).
# Each trial picks, from a seeded generator (R2S_TRIAL_SEED, printed):
#   victim: the client (the server is one long-lived stream_check that
#           serves every such trial, so its fds can be watched), or the
#           server (a fresh one for the trial);
#   phase:  handshake (0-20 ms after the connection shows up), mid (a long
#           stream, 100-400 ms in), close (a 4 MiB stream that ends around
#           the kill: 0-600 ms in, so some kills land while it closes and
#           some after it ended).
# Asserts for every trial:
#   - the survivor notices within R2S_NOTICE_BOUND_S (10 s: a liveness bound
#     on a noisy machine, not a timing claim) with EOF, ECONNRESET or EPIPE,
#     or had finished its stream correctly before the kill landed;
#   - the long-lived server's fd count returns to what it was before the
#     trial (no leaked socket, ring or reaper fd);
# and at the end: no /dev/shm/r2s-* segment left once all are gone, the
# long-lived server survived every trial, and the time-to-notice
# distribution (median, max) is printed.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
TRIALS=${R2S_TRIALS:-50}
SEED=${R2S_TRIAL_SEED:-20261122}
BOUND_S=${R2S_NOTICE_BOUND_S:-10}
[[ $TRIALS =~ ^[0-9]+$ && $SEED =~ ^[0-9]+$ && $BOUND_S =~ ^[0-9]+$ ]] || fail "R2S_TRIALS, R2S_TRIAL_SEED, R2S_NOTICE_BOUND_S must be integers"
RANDOM=$SEED
R2SOCK_EXPECT_PATH= # a killed connection may die before any upgrade

trap live_cleanup EXIT

# start_sc NAME ARGS...: a shim'd stream_check server in the background;
# sets SPID and SPORT.
start_sc() {
  local name=$1
  shift
  rm -f "$TMP/ready"
  mkfifo "$TMP/ready"
  shim_at "$TMP/$name.stats"
  R2SOCK_LOG=info "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 "$@" 3>"$TMP/ready" \
    >"$TMP/$name.log" 2>&1 &
  SPID=$!
  LIVE+=("$SPID")
  SPORT=
  read -r -t 20 SPORT <"$TMP/ready" || true
  [[ -n $SPORT ]] || fail "server $name reported no port: $(cat "$TMP/$name.log")"
}

# client NAME PORT BYTES SEED: a shim'd client in the background; sets CPID.
client() {
  shim_at "$TMP/$1.stats"
  "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$2" --mode block --bytes "$3" --bidir --seed "$4" \
    --timeout 60 >"$TMP/$1.log" 2>&1 &
  CPID=$!
  LIVE+=("$CPID")
}

nfds() { { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null || true; } | wc -l; }
# The shim's info line for a connection, written when the application
# closes it: stream_check closes a connection as soon as it failed (its
# error lines come only at exit).
closed_conns() { grep -c 'info: conn [0-9]* server ' "$1" || true; }
established_from() { [[ -n $(ss -Htn state established "( dport = :$1 )") ]]; }

# The long-lived server: one connection per kill-client trial.
plan=()
nclient=0
for ((i = 1; i <= TRIALS; i++)); do
  v=$((RANDOM % 2)) p=$((RANDOM % 3))
  victim=$([[ $v == 0 ]] && echo client || echo server)
  phase=(handshake mid close)
  plan+=("$victim ${phase[$p]}")
  [[ $victim == client ]] && nclient=$((nclient + 1))
done
log "seed $SEED: $TRIALS trials, $nclient kill the client (long-lived server), $((TRIALS - nclient)) kill the server"
shm_snapshot
if ((nclient)); then
  start_sc main --conns "$nclient" --mode block --timeout 600
  MAIN=$SPID MAIN_PORT=$SPORT
  sleep 0.2
  base_fds=$(nfds "$MAIN")
  log "long-lived server pid $MAIN on port $MAIN_PORT with $base_fds fds"
fi

TIMES=() survived=0 finished_first=0 served=0
for ((i = 1; i <= TRIALS; i++)); do
  read -r victim phase <<<"${plan[$((i - 1))]}"
  case $phase in
    handshake) bytes=64G delay_ms=$((RANDOM % 21)) ;;
    mid) bytes=64G delay_ms=$((100 + RANDOM % 301)) ;;
    close) bytes=4M delay_ms=$((RANDOM % 601)) ;;
  esac
  tag="trial $i ($victim, $phase, +${delay_ms} ms)"
  if [[ $victim == client ]]; then
    port=$MAIN_PORT slog=$TMP/main.log
    closed0=$(closed_conns "$slog")
  else
    start_sc "srv-$i" --conns 1 --mode block --timeout 60
    port=$SPORT slog=$TMP/srv-$i.log
  fi
  client "cli-$i" "$port" "$bytes" "$((700 + i))"
  deadline=$((SECONDS + 10))
  until established_from "$port"; do
    kill -0 "$CPID" 2>/dev/null || break
    ((SECONDS < deadline)) || fail "$tag: no connection after 10 s"
    sleep 0.002
  done
  sleep "$(printf '0.%03d' "$delay_ms")"
  vpid=$([[ $victim == client ]] && echo "$CPID" || echo "$SPID")
  shm_note_pid "$vpid"
  t_kill=$(us_now)
  kill -KILL "$vpid" 2>/dev/null || true
  # The survivor: the client process, or the server's log line for this connection.
  end_us=$((t_kill + BOUND_S * 1000000))
  noticed=
  if [[ $victim == server ]]; then
    while kill -0 "$CPID" 2>/dev/null; do
      (($(us_now) < end_us)) || fail "$tag: the client still runs ${BOUND_S} s after the server was killed: $(cat "$TMP/cli-$i.log")"
      sleep 0.005
    done
    t_end=$(us_now)
    crc=0
    wait "$CPID" || crc=$?
    wait "$SPID" 2>/dev/null || true
    out=$(cat "$TMP/cli-$i.log")
    if ((crc == 0)); then
      finished_first=$((finished_first + 1))
      log "$tag: the client had finished its stream before the kill"
    else
      ((crc == 1)) || fail "$tag: the client exited with $crc (expected 1, or 0 if it finished first): $out"
      [[ $out =~ (Connection\ reset\ by\ peer|Broken\ pipe|premature\ EOF) ]] ||
        fail "$tag: the client's error is not EOF, a reset or a broken pipe: $out"
      noticed=$(((t_end - t_kill) / 1000))
    fi
  else
    crc=0
    wait "$CPID" || crc=$?
    while (($(closed_conns "$slog") == closed0)); do
      (($(us_now) < end_us)) || fail "$tag: the server did not close the killed client's connection within ${BOUND_S} s (client status $crc): $(tail -n 5 "$slog")"
      sleep 0.005
    done
    t_end=$(us_now)
    if ((crc == 0)); then
      finished_first=$((finished_first + 1))
      log "$tag: the client had finished its stream before the kill"
    else
      ((crc == 137)) || fail "$tag: the client exited with $crc before the kill: $(cat "$TMP/cli-$i.log")"
      noticed=$(((t_end - t_kill) / 1000))
    fi
    served=$((served + 1))
    ((served == nclient)) && break_fds=1 || break_fds=0
    ((break_fds)) || kill -0 "$MAIN" 2>/dev/null || fail "$tag: the long-lived server died: $(tail -n 20 "$slog")"
    # Its fds come back to what they were (the reaper may hold one briefly).
    deadline=$((SECONDS + 5))
    while ((!break_fds && $(nfds "$MAIN") != base_fds)); do
      ((SECONDS < deadline)) || fail "$tag: the server has $(nfds "$MAIN") fds, $base_fds before: a leak: $(ls -l "/proc/$MAIN/fd")"
      sleep 0.05
    done
  fi
  survived=$((survived + 1))
  [[ -n $noticed ]] && TIMES+=("$noticed")
  log "$tag: survivor ok${noticed:+, noticed after $noticed ms}"
done
if ((nclient)); then
  rc=0
  wait "$MAIN" || rc=$?
  ((rc == 0 || rc == 1)) || fail "the long-lived server exited with $rc (a crash?): $(tail -n 20 "$TMP/main.log")"
  bad=$(grep '^stream_check server: conn [0-9]*: ' "$TMP/main.log" | grep -Ev 'Connection reset by peer|Broken pipe|premature EOF' || true)
  [[ -z $bad ]] || fail "the long-lived server saw errors other than EOF, a reset or a broken pipe: $bad"
  ! grep -Eq 'Sanitizer|runtime error:' "$TMP"/*.log || fail "a sanitizer report: $(grep -El 'Sanitizer|runtime error:' "$TMP"/*.log)"
fi
LIVE=()
shm_check_leaks
if ((${#TIMES[@]})); then
  sorted=$(printf '%s\n' "${TIMES[@]}" | sort -n)
  median=$(sed -n "$(((${#TIMES[@]} + 1) / 2))p" <<<"$sorted")
  max=$(tail -n 1 <<<"$sorted")
  log "time to notice (ms) over ${#TIMES[@]} kills that landed on a live stream: median $median, max $max"
fi
log "$TRIALS trials run, $survived survivors ended correctly ($finished_first had finished their stream before the kill)"
log PASS
