#!/usr/bin/env bash
# Runs fuzz targets already built (scripts/run-sanitizers.sh fuzz builds them
# into build-fuzz/) on many cores at once: W independent libFuzzer processes a
# target, each S seconds, all starting from the target's kept corpus and
# regressions. Prints one line a target with the executions of all its
# processes summed, and fails when any process crashed, timed out, ran out of
# memory or leaked. For a machine with more cores than this one: the long
# runs behind docs/DEVELOPMENT.md's fuzzing table.
#
#   bash scripts/fuzz-on-cores.sh SECONDS WORKERS target...
#   FUZZ_BIN=.device/bin FUZZ_OUT=$OUT bash scripts/fuzz-on-cores.sh 500 4 tuning_row pinned_graph
#
# FUZZ_BIN: where the <target>_fuzz binaries are (build-fuzz); FUZZ_OUT: where
# logs, new inputs and failing inputs go (build-fuzz/fuzz-cores). The same
# limits as run-sanitizers.sh: -timeout 5 s, -rss_limit_mb 2048, and each
# target's -max_len and dictionary (scripts/fuzz-options.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 SECONDS WORKERS target..." >&2; exit 2; }
# shellcheck source=scripts/fuzz-options.sh
. scripts/fuzz-options.sh
seconds=$1 workers=$2
shift 2
bin=${FUZZ_BIN:-build-fuzz}
out=${FUZZ_OUT:-build-fuzz/fuzz-cores}

start_target() {
  local target=$1 work=$out/$1
  mkdir -p "$work/artifacts"
  local dirs=(tests/fuzz/corpus/"$target")
  [ -d tests/fuzz/regressions/"$target" ] && dirs+=(tests/fuzz/regressions/"$target")
  for w in $(seq 1 "$workers"); do
    # Each worker its own new-input folder: they fuzz apart, as -jobs would.
    mkdir -p "$work/new-$w"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$bin/${target}_fuzz" -max_total_time="$seconds" -print_final_stats=1 -timeout=5 \
      -rss_limit_mb=2048 -max_len="$(fuzz_max_len "$target")" $(fuzz_dict_args "$target") \
      -seed="$w" -artifact_prefix="$work/artifacts/w$w-" \
      "$work/new-$w" "${dirs[@]}" > "$work/log-$w" 2>&1 &
  done
}

report_target() {
  local target=$1 work=$out/$1
  local runs=0 failed=0 exits=0
  for w in $(seq 1 "$workers"); do
    local n
    n=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$work/log-$w")
    [ -n "$n" ] || failed=1
    runs=$((runs + ${n:-0}))
  done
  count() { find "$work/artifacts" -type f -name "*$1-*" | wc -l; }
  local crashes=$(($(count crash) + $(count leak))) timeouts ooms
  timeouts=$(count timeout)
  ooms=$(count oom)
  printf '%-14s %12s %8s %8s %8s %9s %6s\n' "$target" "$runs" "$workers" "$seconds" \
    "$crashes" "$timeouts" "$ooms"
  if [ "$failed" -ne 0 ] || [ $((crashes + timeouts + ooms)) -gt 0 ]; then
    echo "  $target FAILED (failing inputs in $work/artifacts/, logs $work/log-*)" >&2
    grep -hE 'ERROR|FUZZ_CHECK|SUMMARY|runtime error|Test unit written' "$work"/log-* | head -20 >&2
    return 1
  fi
}

for target in "$@"; do
  [ -x "$bin/${target}_fuzz" ] || { echo "no $bin/${target}_fuzz: build it first" >&2; exit 2; }
  start_target "$target"
done
wait
printf '%-14s %12s %8s %8s %8s %9s %6s\n' target executions workers seconds crashes timeouts OOMs
status=0
for target in "$@"; do report_target "$target" || status=1; done
exit $status
