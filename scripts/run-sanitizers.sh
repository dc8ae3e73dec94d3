#!/usr/bin/env bash
# The host test suite under sanitizers, and fuzzing of what the daemon and
# overlapctl parse. The sanitizer suite and a long fuzz run are slower than
# run-tests.sh and not part of CI; CI runs fuzz-brief.
#
#   bash scripts/run-sanitizers.sh                # AddressSanitizer + UndefinedBehaviorSanitizer: build-asan/, ctest -LE gpu
#   bash scripts/run-sanitizers.sh fuzz [S] [T..] # libFuzzer (clang): each target (or those named) S seconds
#                                                 # (default 300) on its corpus
#   bash scripts/run-sanitizers.sh fuzz-brief     # CI: every target 20 s (FUZZ_SECONDS) on its corpus
#   FUZZ_RUNS=10000000 bash scripts/run-sanitizers.sh fuzz 0 job_spec  # a number of inputs instead
#
# The fuzz targets (tests/fuzz/, docs/DEVELOPMENT.md "Fuzzing") are built
# with ASan, UBSan and libFuzzer into build-fuzz/ (only they are built). Each
# runs in libFuzzer's fork mode (one worker), which goes on past a failure and
# counts them (with FUZZ_RUNS, in one process that stops at the first): a crash
# or sanitizer report, a timeout (an input that runs past FUZZ_TIMEOUT_S,
# default 5) and an out-of-memory (past FUZZ_RSS_MB, default 2048) are all
# failures. Inputs are at most 1 MiB (the daemon's max_spec_bytes) for the
# targets that read a graph or a config, 4096 bytes for the others
# (FUZZ_MAX_LEN for all), and the graph targets get a dictionary of boundary
# integers (scripts/fuzz-options.sh). It starts from
# tests/fuzz/corpus/T and tests/fuzz/regressions/T and writes new inputs, and
# each failing input, under build-fuzz/fuzz-runs/T/ (never into the
# repository: docs/DEVELOPMENT.md says how to keep them). A line per target gives executions, exec/s, seconds, crashes,
# timeouts, OOMs and the inputs it added; the script exits 1 when any target
# failed.
#
# ThreadSanitizer is left out on purpose: Debian's abseil and gRPC are not
# built with it, so it cannot see absl::Mutex's ordering and reports every
# access the scheduler guards with one (docs/DEVELOPMENT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-asan}
case "$mode" in
  asan | fuzz | fuzz-brief) ;;
  *) echo "usage: $0 [asan | fuzz [seconds] [target...] | fuzz-brief]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh --test

# shellcheck source=scripts/fuzz-options.sh
. scripts/fuzz-options.sh
fuzz_targets=(job_spec graph_sizes daemon_config hf_config byte_size calibration tuning_row pinned_graph job_row peer_message)

build_fuzzers() {
  command -v clang++ > /dev/null || { echo "fuzz needs clang++ (apt-get install clang)" >&2; exit 2; }
  local san="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
  # -O1 and line tables only: a third of the build time of RelWithDebInfo's
  # -O2 -g, and stack traces still name file and line. No NDEBUG: asserts stay.
  cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
    -DOVERLAP_ENABLE_CUDA=OFF -DOVERLAP_BUILD_TESTS=OFF -DOVERLAP_BUILD_FUZZERS=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="$san" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
  cmake --build build-fuzz -j"$(nproc)" --target "${fuzz_targets[@]/%/_fuzz}"
}

# Runs target $1 for $2 seconds (or FUZZ_RUNS inputs); prints its line; fails
# when the target did.
run_fuzzer() {
  local target=$1 seconds=$2
  local work=build-fuzz/fuzz-runs/$target
  rm -rf "$work/artifacts"
  mkdir -p "$work/new" "$work/artifacts"
  local dirs=(tests/fuzz/corpus/"$target")
  [ -d tests/fuzz/regressions/"$target" ] && dirs+=(tests/fuzz/regressions/"$target")
  local before
  before=$(find "$work/new" -type f | wc -l)
  # Fork mode goes on past a failure and counts them; FUZZ_RUNS runs that many
  # inputs in one process instead, stopping at the first failure.
  local how=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$seconds")
  [ -n "${FUZZ_RUNS:-}" ] && how=(-runs="$FUZZ_RUNS" -print_final_stats=1)
  local rc=0 start=$SECONDS
  local dict
  dict=$(fuzz_dict_args "$target")
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-fuzz/"$target"_fuzz "${how[@]}" -timeout="${FUZZ_TIMEOUT_S:-5}" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len="$(fuzz_max_len "$target")" $dict \
    -artifact_prefix="$work/artifacts/" "$work/new" "${dirs[@]}" > "$work/log" 2>&1 || rc=$?
  local time=$((SECONDS - start))
  # What each failure left: libFuzzer names the input crash-, leak-, timeout- or oom-<sha1>.
  count() { find "$work/artifacts" -type f -name "$1-*" | wc -l; }
  local crashes=$(($(count crash) + $(count leak))) timeouts ooms runs rate status
  timeouts=$(count timeout)
  ooms=$(count oom)
  if [ -n "${FUZZ_RUNS:-}" ]; then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$work/log")
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$work/log")
  else
    # The fork mode's last status line: "#RUNS: cov: .. exec/s N oom/timeout/crash: O/T/C ..".
    status=$(grep -E '^#[0-9]+: cov:' "$work/log" | tail -1 || true)
    runs=$(sed -nE 's/^#([0-9]+):.*/\1/p' <<< "$status")
    rate=$(sed -nE 's/.* exec\/s ([0-9]+) .*/\1/p' <<< "$status")
    local o t c
    IFS=/ read -r o t c < <(sed -nE 's/.*oom\/timeout\/crash: ([0-9]+\/[0-9]+\/[0-9]+).*/\1/p' \
      <<< "$status") || true
    ooms=$((ooms > ${o:-0} ? ooms : ${o:-0}))
    timeouts=$((timeouts > ${t:-0} ? timeouts : ${t:-0}))
    crashes=$((crashes > ${c:-0} ? crashes : ${c:-0}))
  fi
  local added=$(($(find "$work/new" -type f | wc -l) - before))
  printf '%-14s %12s %9s %8s %8s %9s %6s %7s\n' "$target" "${runs:-?}" "${rate:-?}" "$time" \
    "$crashes" "$timeouts" "$ooms" "$added"
  if [ "$rc" -ne 0 ] || [ $((ooms + timeouts + crashes)) -gt 0 ] || [ -z "$runs" ]; then
    echo "  $target FAILED (exit $rc; failing inputs in $work/artifacts/; log $work/log):" >&2
    grep -E 'ERROR|FUZZ_CHECK|SUMMARY|runtime error|Test unit written' "$work/log" | head -20 >&2 || true
    return 1
  fi
}

fuzz() {
  local seconds=$1
  shift
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=("${fuzz_targets[@]}")
  build_fuzzers
  printf '%-14s %12s %9s %8s %8s %9s %6s %7s\n' target executions exec/s seconds crashes timeouts OOMs added
  local failed=0
  for target in "${targets[@]}"; do
    run_fuzzer "$target" "$seconds" || failed=1
  done
  if [ "$failed" -ne 0 ]; then
    echo "fuzz: a target failed; keep its input under tests/fuzz/regressions/<target>/ once fixed" >&2
    exit 1
  fi
}

case "$mode" in
  asan)
    san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    cmake -S . -B build-asan -DOVERLAP_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS="-O1 $san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san"
    cmake --build build-asan -j"$(nproc)"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure -LE gpu -j2
    ;;
  fuzz)
    shift
    seconds=${1:-300}
    [ $# -gt 0 ] && shift
    fuzz "$seconds" "$@"
    ;;
  fuzz-brief)
    fuzz "${FUZZ_SECONDS:-20}"
    ;;
esac
