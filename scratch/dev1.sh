#!/usr/bin/env bash
# Session 22, device call 1: fp8 per-tensor scales on one H200.
set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > $R/gpu.txt
for ranks in 1 2; do
  OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout 200 cuda_engine_gpu_test > $R/cuda_engine_r$ranks.log 2>&1
  echo "cuda_engine r$ranks rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $R/cuda_engine_r$ranks.log | tr '\n' ' ')"
  OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout 300 layer_ops_gpu_test --gtest_filter='*fp8*:*Fp8*' > $R/layer_ops_fp8_r$ranks.log 2>&1
  echo "layer_ops fp8 r$ranks rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $R/layer_ops_fp8_r$ranks.log | tr '\n' ' ')"
  OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout 200 layer_step_gpu_test > $R/layer_step_r$ranks.log 2>&1
  echo "layer_step r$ranks rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $R/layer_step_r$ranks.log | tr '\n' ' ')"
done
grep -h 'FAILED\|Failure' $R/*.log | head -20
grep -h 'CudaFp8GemmTest' $R/cuda_engine_r1.log | head -8
# GEMMs alone: our bench (fp8, tp 1), PyTorch's _scaled_mm, every cuBLASLt candidate on two shapes.
source bench/overlapd_util.sh
start_overlapd $R/overlapd.log
timeout 240 overlapctl --addr "$addr" bench --dtype fp8 --json-out $R/bench-fp8.json > $R/bench-fp8.txt 2>$R/bench-fp8.err
echo "bench fp8 rc=$?"; cat $R/bench-fp8.txt | head -60
timeout 200 python3 bench/peers/torch_fp8_gemm.py --tp 1 --json $R/torch-fp8.json > $R/torch-fp8.txt 2>&1
echo "torch rc=$?"; cat $R/torch-fp8.txt | tail -10
for shape in "8192 4096 4096" "4096 8192 8192"; do
  timeout 60 gemm_algos $shape 300 fp8 > "$R/algos-${shape// /x}.txt" 2>&1; tail -4 "$R/algos-${shape// /x}.txt"
done
kill -TERM "$pid"; wait "$pid"
GRAPH_FLAGS="--dtype fp8" timeout 200 bash bench/model_graphs.sh llama3-70b:both > $R/layers-fp8.txt 2>&1
echo "layers rc=$?"; grep -iE 'step|verified|error|succeeded|failed' $R/layers-fp8.txt | head -20
cp $OUT/*.txt $OUT/*.json $R/ 2>/dev/null
tar czf $OUT/results.tar.gz -C $OUT r
