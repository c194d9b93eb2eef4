#!/usr/bin/env bash
# git over git://: a clone and a push through git daemon, both ends under
# the shim. git daemon hands each connection through two execs: it runs its
# --serve image with the socket as fds 0 and 1, which reads the client's
# request and then runs upload-pack (or receive-pack) on the same socket.
#  - The clone runs with R2SOCK_SKIP_PROGRAMS=none on both ends, so that
#    git's connections take part in the protocol. The --serve image meets
#    the client's hello on its first read; had it switched its send
#    direction there (as a reader of a connection of its own does under
#    R2SOCK_UPGRADE=now), upload-pack, which cannot know that, would write
#    plain TCP where the client then expects frames: the clone ended with
#    "bad frame from the peer" and a reset on both ends. A connection that
#    came through exec switches at its first write instead
#    (src/link/recv.c), and upload-pack, which inherits it with bytes sent,
#    keeps it on TCP (README, "exec").
#  - The push runs with the default R2SOCK_SKIP_PROGRAMS (rsync,git): git
#    push reads the connection while the pack-objects it runs writes it,
#    which the protocol cannot follow once git switched (README, "fork");
#    under R2SOCK_UPGRADE=now with git not skipped it ended in a reset. The
#    client's end must count the push's connection as kept on TCP by the
#    list (tcp_disabled).
# Asserted: the clone (two 8 MiB files and a history) and the push (a
# 4 MiB file) are byte-exact, git fsck passes on both sides, and no
# process of either end counts a protocol error or a failed connection
# (reset_protocol, tcp_failed). The paths are the script's to check (tcp:
# the workers inherit the connection after bytes moved).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
need git
[[ -x $(git --exec-path)/git-daemon ]] || skip "git daemon is not installed"

export GIT_CONFIG_NOSYSTEM=1 HOME=$TMP GIT_AUTHOR_NAME=r2s GIT_AUTHOR_EMAIL=r2s@localhost
export GIT_COMMITTER_NAME=r2s GIT_COMMITTER_EMAIL=r2s@localhost
mkdir -p "$TMP/work" "$TMP/srv"
git -C "$TMP/work" init -q -b main
for i in 1 2 3; do
  printf 'line %s\n' "$i" >>"$TMP/work/notes"
  git -C "$TMP/work" add notes && git -C "$TMP/work" commit -qm "notes $i"
done
random_file "$TMP/work/a" 8M
random_file "$TMP/work/b" 8M
git -C "$TMP/work" add a b && git -C "$TMP/work" commit -qm "two large files"
git clone -q --bare "$TMP/work" "$TMP/srv/r.git"
head=$(git -C "$TMP/work" rev-parse HEAD)

shm_snapshot
port=$(free_port)
start_server_at gitd "$port" "$TMP/server-stats" env R2SOCK_SKIP_PROGRAMS=none git daemon --reuseaddr --listen=127.0.0.1 --port="$port" \
  --base-path="$TMP/srv" --export-all --enable=receive-pack "$TMP/srv"
run_to_at "$TMP/clone.out" 60 "$TMP/clone-stats" env R2SOCK_SKIP_PROGRAMS=none git clone -q "git://127.0.0.1:$port/r.git" "$TMP/clone"
[[ $(git -C "$TMP/clone" rev-parse HEAD) == "$head" ]] || fail "the clone's HEAD is not $head"
for f in a b notes; do same_file "$TMP/work/$f" "$TMP/clone/$f"; done
git -C "$TMP/clone" fsck --no-progress >"$TMP/fsck-clone.out" 2>&1 || fail "git fsck of the clone: $(tail -n 3 "$TMP/fsck-clone.out")"
log "cloned $head byte-exact"

random_file "$TMP/clone/c" 4M
git -C "$TMP/clone" add c && git -C "$TMP/clone" commit -qm "a file pushed"
pushed=$(git -C "$TMP/clone" rev-parse HEAD)
run_to_at "$TMP/push.out" 60 "$TMP/push-stats" git -C "$TMP/clone" push -q origin main
[[ $(git -C "$TMP/srv/r.git" rev-parse main) == "$pushed" ]] || fail "the server's main is not the pushed $pushed"
git -C "$TMP/srv/r.git" show main:c >"$TMP/c.back" || fail "the pushed file cannot be read back"
same_file "$TMP/clone/c" "$TMP/c.back"
git -C "$TMP/srv/r.git" fsck --no-progress >"$TMP/fsck-srv.out" 2>&1 || fail "git fsck of the server: $(tail -n 3 "$TMP/fsck-srv.out")"
log "pushed $pushed byte-exact"
stop_server gitd TERM 143

[[ -n $R2SOCK_LIB ]] || { log "plain run: no stats to check"; log PASS; exit 0; }
for side in clone push server; do
  STATS=$TMP/$side-stats
  seen=$(stats_sum conn_seen) proto=$(stats_sum reset_protocol) failed=$(stats_sum tcp_failed)
  log "$side: conn_seen=$seen reset_protocol=$proto tcp_failed=$failed"
  # A missing stats file sums to 0: each side saw its connections.
  ((seen >= 1)) || fail "expected the $side's processes to count their connections (conn_seen >= 1), saw $seen"
  ((proto == 0 && failed == 0)) || fail "a $side process counted a protocol error or a failed connection"
done
STATS=$TMP/push-stats
disabled=$(stats_sum tcp_disabled)
((disabled >= 1)) || fail "expected git push's connection kept on TCP by R2SOCK_SKIP_PROGRAMS (tcp_disabled >= 1), saw $disabled"
shm_check_leaks
log PASS
