#!/usr/bin/env bash
# The GPU tests under compute-sanitizer's memcheck (out-of-bounds and misaligned
# device accesses, CUDA API errors, device memory leaks), at one rank per GPU
# and, on a one-GPU machine, again with two ranks on it.
# Build and pack here:
#   EXTRA_TARGETS="cuda_engine_gpu_test gemm_chain_gpu_test layer_ops_gpu_test layer_step_gpu_test timeline_gpu_test" bash bench/pack-device.sh
# then on the GPU machine (carry .devpack): bash bench/gpu_sanitize.sh
# Exits non-zero when any test fails or memcheck reports anything.
#
# Left out: initcheck, which flags every cuBLASLt output as never written (it
# does not see the TMA stores of the Hopper GEMM kernels), and
# cuda_watchdog_gpu_test, whose hung collective is timed against a deadline.
set -uo pipefail
[ -f .devpack/device.tar.xz ] && tar -xJf .devpack/device.tar.xz
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tests=${TESTS:-"cuda_engine_gpu_test gemm_chain_gpu_test layer_ops_gpu_test layer_step_gpu_test timeline_gpu_test"}
passes=(1)
[ "$(nvidia-smi -L | wc -l)" = 1 ] && passes+=(2)
# This test ends a capture with a stream left out on purpose, which memcheck
# reports as the API error that it is. FILTER narrows the cases (a gtest
# pattern, e.g. FILTER='*fp8*:*Fp8*').
filter="${FILTER:-}-*UnjoinedCaptureFailsAndTheEngineCarriesOn*"
failed=0
for ranks in "${passes[@]}"; do
  for t in $tests; do
    log="$OUT/memcheck-$t-ranks$ranks.log"
    start=$(date +%s)
    OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout "${PER_TEST_S:-300}" \
      compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 --print-limit 50 \
      ".device/bin/$t" --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    # NCCL's init asks for each of its kernels with cudaFuncGetAttributes and
    # skips those not built for this GPU: memcheck reports each such error 209
    # (its own probe, handled inside libnccl). A run whose only reports are
    # those passes.
    if [ "$rc" = 99 ]; then
      total=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log")
      probes=$(awk '/Program hit cudaErrorNoKernelImageForDevice .*cudaFuncGetAttributes/ {hit = 4; next}
                    hit > 0 && /libnccl/ {n++; hit = 0; next} {if (hit > 0) hit--} END {print n + 0}' "$log")
      if [ -n "$total" ] && [ "$total" -gt 0 ] && [ "$total" = "$probes" ] &&
         grep -q 'LEAK SUMMARY: 0 bytes' "$log" && ! grep -q '^\[  FAILED' "$log"; then
        echo "$t ranks=$ranks: $probes NCCL kernel probes at communicator init, not errors"
        rc=0
      fi
    fi
    [ "$rc" = 0 ] || failed=1
    echo "$t ranks=$ranks exit $rc, $(( $(date +%s) - start )) s:" \
      "$(grep -E '^\[  (PASSED|FAILED)|ERROR SUMMARY|LEAK SUMMARY' "$log" | tr '\n' ' ')"
    grep -E '^========= +(at |Invalid|Program hit|Leaked)' "$log" | sort | uniq -c | head -10
  done
done
exit $failed
