#!/bin/bash
# One fuzz.* test: fuzzes for a fixed time from a fresh copy of the seeds, so
# a run never edits the tree and never starts from another run's corpus.
#   run-fuzz.sh TARGET SEED_DIR WORK_DIR SECONDS [GEN_SEEDS NAME]
# GEN_SEEDS NAME: also start from what the seed generator writes today for
# NAME (frame or ring; it writes none for the others). Fails on any crash, leak, timeout or out-of-memory,
# naming the reproducer and showing the report.
set -euo pipefail
target=$1 seeds=$2 work=$3 secs=$4 gen=${5:-} name=${6:-}
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts" "$work/gen/frame" "$work/gen/ring"
cp "$seeds"/* "$work/corpus/"
if [ -n "$gen" ]; then
  "$gen" "$work/gen/frame" "$work/gen/ring"
  for f in "$work/gen/$name"/*; do
    [ -e "$f" ] || continue
    cp "$f" "$work/corpus/gen-$(basename "$f")"
  done
fi
# UBSan stops at the first report (no recovery in these builds); show where.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
rc=0
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1 || rc=$?
grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
  "$work/fuzz.log" || true
if [ $rc != 0 ]; then
  # The report is at the end of the log; the input is in artifacts/.
  tail -n 60 "$work/fuzz.log"
  for f in "$work"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "reproducer: $f ($(stat -c %s "$f") bytes): $target $f"
    od -An -tx1 -v "$f" | head -n 8
  done
  echo "fuzz: $(basename "$target") failed (exit $rc); full log: $work/fuzz.log"
  exit 1
fi
