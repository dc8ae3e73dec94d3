#!/usr/bin/env bash
# One single-GPU device call: our cuBLASLt GEMM (GEMM alone, tp = 1) beside
# PyTorch's matmul on the per-rank GEMM shapes of the tp = 2 sweep.
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
shapes="ag_gemm:4096x8192x4096,ag_gemm:8192x8192x14336,ag_gemm:16384x8192x14336,ag_gemm:8192x4096x2048,ag_gemm:16384x8192x3584,gemm_rs:4096x4096x8192,gemm_rs:8192x14336x8192,gemm_rs:16384x14336x8192,gemm_rs:8192x2048x4096,gemm_rs:16384x3584x8192"
source bench/overlapd_util.sh
start_overlapd "$OUT/overlapd.log" ${OVERLAPD_FLAGS:-}
timeout 300 overlapctl --addr "$addr" bench --shapes "$shapes" --repeats 1 --no-verify \
  --json-out "$OUT/gemm_ours.json" 2> "$OUT/bench.err" | tee "$OUT/gemm_ours.txt"
kill -TERM "$pid"; wait "$pid"; echo "overlapd exit $?"
PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc_per_node=1 bench/peers/torch_tp.py \
  --shapes "$shapes" --json "$OUT/gemm_torch.json" > "$OUT/gemm_torch.log" 2>&1
echo "torch exit $?"; grep -E "gemm " "$OUT/gemm_torch.log"
