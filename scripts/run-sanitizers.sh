#!/usr/bin/env bash
# The host test suite under sanitizers, and a fuzzing run of what the daemon
# parses. Slower than run-tests.sh (a second full build), so not part of CI.
#
#   bash scripts/run-sanitizers.sh           # AddressSanitizer + UndefinedBehaviorSanitizer: build-asan/, ctest -LE gpu
#   bash scripts/run-sanitizers.sh fuzz [S]  # libFuzzer (clang) for S seconds (default 300) on layer
#                                            # graphs, the config, byte sizes and model config.json files
#
# ThreadSanitizer is left out on purpose: Debian's abseil and gRPC are not
# built with it, so it cannot see absl::Mutex's ordering and reports every
# access the scheduler guards with one (docs/DEVELOPMENT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-asan}
case "$mode" in
  asan | fuzz) ;;
  *) echo "usage: $0 [asan | fuzz [seconds]]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh

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
    seconds=${2:-300}
    command -v clang++ > /dev/null || { echo "fuzz needs clang++ (apt-get install clang)" >&2; exit 2; }
    san="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
    cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
      -DOVERLAP_ENABLE_CUDA=OFF -DOVERLAP_BUILD_TESTS=OFF -DOVERLAP_BUILD_FUZZERS=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-O1 $san" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
    cmake --build build-fuzz -j"$(nproc)" --target job_spec_fuzz
    # Seeds: the graphs and the config we ship. New inputs that reach new code
    # collect in build-fuzz/corpus; a crashing one is written to build-fuzz/.
    mkdir -p build-fuzz/corpus
    cp deploy/graphs/*.yaml deploy/overlapd.yaml build-fuzz/corpus/
    printf '64MiB' > build-fuzz/corpus/bytes-mib
    printf '2 GiB' > build-fuzz/corpus/bytes-gib
    printf '{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2}' \
      > build-fuzz/corpus/config-json
    build-fuzz/job_spec_fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 \
      -rss_limit_mb=4096 -artifact_prefix=build-fuzz/ build-fuzz/corpus
    ;;
esac
