# Host-side helpers shared by build-guest, run-guest and run-pair (source it).
# Nothing here runs inside the guest; the guest side is guest-stage2 and
# guest-lib.sh.

RXE_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The cache lives outside every checkout, so that `git clean` or a fresh build
# dir does not cost another 70 MB download.
VM_DIR=${R2SOCK_VM_DIR:-$HOME/.cache/r2sock-vm}
# Under TCG, `rep movsb` (ERMS/FSRM) and PCLMULQDQ (used by the kernel's crc32
# for the RoCE ICRC) are very slow to emulate; without them ib_write_bw and
# iperf3 run ~2x faster (measured in ../shared/rxe-vm). qemu64 is faster still
# for bandwidth but makes verbs latency millisecond-scale.
VM_CPU=${R2SOCK_VM_CPU:-max,-erms,-fsrm,-pclmulqdq,-vpclmulqdq}

PROG=${PROG:-$(basename "$0")}
# usage_header: the script's leading comment block, as its help text
usage_header() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
note() { echo "$PROG: $*" >&2; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }   # seconds elapsed since a now() value

# The guest's kernel and initramfs come from the cache; it stays a path
# without white space, like every path the kernel command line names.
case $VM_DIR in *[[:space:]]*) die "R2SOCK_VM_DIR must not contain white space: '$VM_DIR'";; esac

# load_guest_conf: read what build-guest produced (KVER, KERNEL, INITRD, KDIR).
load_guest_conf() {
  if [ ! -r "$VM_DIR/guest.conf" ]; then
    note "no guest in $VM_DIR; run $RXE_TOOLS/build-guest first"
    exit 2
  fi
  # shellcheck source=/dev/null
  . "$VM_DIR/guest.conf"
  [ -r "$KERNEL" ] && [ -r "$INITRD" ] && [ -d "$KDIR/lib/modules/$KVER" ] ||
    { note "guest artefacts in $VM_DIR are incomplete; run $RXE_TOOLS/build-guest"; exit 2; }
  command -v qemu-system-x86_64 >/dev/null ||
    { note "qemu-system-x86_64 not found (apt-get install qemu-system-x86, or build-guest --apt)"; exit 2; }
}

# hold_shared_lock: build-guest replaces the unpacked kernel tree (which a
# running guest reads its modules from) only under the exclusive lock, so a
# running guest holds the shared one. fd 8 stays open for our lifetime.
hold_shared_lock() {
  exec 8>>"$VM_DIR/.lock"
  flock -s -w 600 8 || die "waited 600 s for the lock on $VM_DIR/.lock (build-guest running?)"
}

# new_rundir [DIR]: the directory shared read-write with the guest(s) as /xfer,
# the one place where what a guest writes reaches the host.
new_rundir() {
  if [ -n "${1:-}" ]; then
    RUN=$(mkdir -p "$1" && cd "$1" && pwd) || die "cannot create run dir $1"
    # a reused run dir must not leak results of an earlier run into this one
    find "$RUN" -mindepth 1 -delete
  else
    mkdir -p "$VM_DIR/runs"
    RUN=$(mktemp -d "$VM_DIR/runs/run.XXXXXX")
  fi
}

# write_guest_env ID VAR=VALUE...: the settings for guest ID ('' for a single
# guest), read by guest-stage2. Every R2SOCK_* variable of the caller's
# environment is passed through as well (R2SOCK_LIB, R2SOCK_SRC, ...), since the
# guest sees the host's files at the same paths.
write_guest_env() {
  local id=$1; shift
  local f="$RUN/guest${id:+.$id}.env" kv name
  {
    echo "# written by $PROG on the host; sourced by guest-stage2"
    printf 'export R2S_VM_DIR=%q R2S_KVER=%q R2S_KDIR=%q R2S_RXE_TOOLS=%q\n' \
      "$VM_DIR" "$KVER" "$KDIR" "$RXE_TOOLS"
    for kv in "$@"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
    while IFS= read -r name; do
      printf 'export %s=%q\n' "$name" "${!name}"
    done < <(compgen -e | grep '^R2SOCK_' || true)
    for kv in "${EXTRA_ENV[@]}"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
  } > "$f"
}

# boot_guest ID SMP MEM TMO [extra qemu args...]: run one guest to completion.
# The guest powers itself off when its command ends; the host timeout only
# catches a guest that hangs (a stuck kernel, a command past its own
# timeout). Returns qemu's status (124 after the host timeout), or
# NO_BOOT when the guest did not say it was ready within BOOT_LIMIT s, or
# when another guest of the run did not (the file $RUN/no-boot): then its
# qemu is stopped, and the caller may boot the run again (boot_retry).
boot_guest() {
  local id=$1 smp=$2 mem=$3 tmo=$4; shift 4
  local sfx=${id:+.$id}
  # quiet/loglevel: every console line costs time under TCG. panic=-1 +
  # -no-reboot: if PID 1 dies, qemu exits instead of hanging.
  local append="console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off tsc=reliable no_timer_check"
  # R2SOCK_VM_DEBUG=1 (and a second boot after one that did not come up):
  # the kernel's boot messages on the console
  [ -n "${R2SOCK_VM_DEBUG:-}" ] && append="console=ttyS0 loglevel=7 panic=-1 mitigations=off tsc=reliable no_timer_check"
  # The kernel command line splits at white space, and a checkout may have
  # some in its path ("/tmp/r2 sock/main"): stage2 is named by its copy in
  # the run dir, which the guest mounts at /xfer.
  cp "$RXE_TOOLS/guest-stage2" "$RUN/guest-stage2"
  append+=" r2s.stage2=/xfer/guest-stage2 r2s.id=${id:-0}"
  timeout -k 10 "$((tmo + BOOT_MARGIN))" \
    qemu-system-x86_64 -accel tcg,thread=multi -cpu "$VM_CPU" -smp "$smp" -m "$mem" \
      -no-reboot -display none -monitor none -nodefaults \
      -serial file:"$RUN/console$sfx.log" \
      -kernel "$KERNEL" -initrd "$INITRD" -append "$append" \
      -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
      -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
      -fsdev local,id=xfer,path="${RUN//,/,,}",security_model=none \
      -device virtio-9p-pci,fsdev=xfer,mount_tag=xfer \
      "$@" < /dev/null > "$RUN/qemu$sfx.log" 2>&1 &
  # $pid is our child until the `wait` below reaps it, so a signal to it
  # reaches this timeout(1) and no other process
  local pid=$! t0=$SECONDS
  while [ ! -f "$RUN/guest$sfx.boot" ] && kill -0 "$pid" 2>/dev/null; do
    if [ -f "$RUN/no-boot" ] || [ $((SECONDS - t0)) -ge "$BOOT_LIMIT" ]; then
      [ -f "$RUN/no-boot" ] || note "guest${id:+ $id} did not come up within ${BOOT_LIMIT}s"
      : > "$RUN/no-boot"
      kill -TERM "$pid" 2>/dev/null
      wait "$pid"
      return "$NO_BOOT"
    fi
    sleep 0.5
  done
  wait "$pid"
}
# Seconds allowed for boot + setup + power-off on top of the command's own
# timeout. A TCG boot takes ~5-20 s; allow for a loaded machine.
BOOT_MARGIN=${R2SOCK_VM_BOOT_MARGIN:-150}
# A guest not ready (rxe0 up, the command about to start) after this long
# has hung in its boot: under TCG that happens, rarely, with nothing on the
# console; it is no test's failure.
BOOT_LIMIT=${R2SOCK_VM_BOOT_LIMIT:-120}
NO_BOOT=75

# boot_retry: after a boot that did not come up, clear what that boot left in
# the run dir and say that the next one shows the kernel's messages (kept
# from the first in console*.log.no-boot, for a look at where it stopped).
boot_retry() {
  local f
  note "booting again, with the kernel's messages on the console"
  for f in "$RUN"/console*.log; do [ -f "$f" ] && mv -f "$f" "$f.no-boot"; done
  rm -f "$RUN"/guest*.out "$RUN"/guest*.rc "$RUN"/guest*.boot "$RUN"/guest*.end "$RUN"/qemu*.log "$RUN/no-boot"
  export R2SOCK_VM_DEBUG=1
}

# guest_result ID QEMU_RC: print the guest's output; set GRC to its exit
# status (124: timed out, 125: no status at all) and GBOOT to the boot time.
guest_result() {
  local id=$1 qrc=$2 sfx=${1:+.$1}
  GBOOT='?'
  [ -f "$RUN/guest$sfx.out" ] && cat "$RUN/guest$sfx.out"
  [ -f "$RUN/guest$sfx.boot" ] && GBOOT=$(cat "$RUN/guest$sfx.boot")
  if [ -f "$RUN/guest$sfx.rc" ]; then
    GRC=$(cat "$RUN/guest$sfx.rc")
    if [ "$GRC" != 0 ]; then
      # the command's own output is above; the console has the kernel's
      # warnings and the guest's setup log
      note "guest${id:+ $id} command failed (rc $GRC); console log tail:"
      tail -n 25 "$RUN/console$sfx.log" >&2 2>/dev/null
    fi
  else
    if [ "$qrc" = "$NO_BOOT" ]; then
      note "guest${id:+ $id} did not come up, twice; console log tail:"; GRC=125
    elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
      note "guest${id:+ $id} timed out (host-side timeout); console log tail:"; GRC=124
    else
      note "guest${id:+ $id} gave no exit status (qemu rc $qrc); console log tail:"; GRC=125
    fi
    if [ -s "$RUN/console$sfx.log" ]; then tail -n 40 "$RUN/console$sfx.log" >&2
    else note "(the console log is empty; R2SOCK_VM_DEBUG=1 shows the kernel's boot messages)"; fi
    [ -s "$RUN/qemu$sfx.log" ] && { note "qemu said:"; tail -n 10 "$RUN/qemu$sfx.log" >&2; }
  fi
  return 0
}
