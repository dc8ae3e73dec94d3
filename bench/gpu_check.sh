#!/usr/bin/env bash
# One device call: GPU tests (engine primitives, every op x mode x dtype x chunks
# x transport against float64; on one GPU again with two ranks on it), then the
# PyTorch peers on the default sweep.
# Usage on the GPU machine, from the repo root: bash bench/gpu_check.sh
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/gpu_before.csv" 2>&1
# On one GPU the multi-rank cases skip; a second pass runs them with two ranks
# on that GPU (config ranks_per_gpu: copies stand in for NCCL between them),
# and a third the tp 2 x dp 2 meshes' tests with four.
passes=(1)
[ "$(nvidia-smi -L | wc -l)" = 1 ] && passes+=(2 4)
for ranks in "${passes[@]}"; do
  for t in .device/bin/*_gpu_test; do
    name=$(basename "$t")
    [ "$ranks" = 4 ] && [[ "$name" != mesh_gpu_test && "$name" != dynamic_step_gpu_test ]] && continue
    [ "$ranks" = 1 ] || name="$name-ranks$ranks"
    OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout 300 "$t" --gtest_brief=1 > "$OUT/$name.log" 2>&1
    echo "$name exit $? : $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
    grep -E 'Failure|FAILED|error' "$OUT/$name.log" | head -20
  done
done
if [ "${RUN_PEERS:-1}" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 400 torchrun --nproc_per_node="$(nvidia-smi -L | wc -l)" bench/peers/torch_tp.py --json "$OUT/torch_peers.json" > "$OUT/torch_peers.log" 2>&1
  echo "torch peers exit $?"; grep -vE "^\[|Warning|warn" "$OUT/torch_peers.log" | tail -20
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/gpu_after.csv" 2>&1
