#!/usr/bin/env bash
# One device call for the op benchmark: start overlapd on the GPUs, run the
# Llama-70B MLP graphs (RUN_GRAPH), `overlapctl bench` (default sweep) and
# `overlapctl commbench` (RUN_COMMBENCH), stop the daemon.
# Usage on the GPU machine, from the repo root, after device-bundle:
#   bash bench/run_bench.sh            (results under $OUT)
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ngpu=$(nvidia-smi -L | wc -l)
peers() {  # the PyTorch peers on every GPU, JSON to $OUT/$1 (PEER_FLAGS: torch_tp.py's flags)
  PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc_per_node="$ngpu" bench/peers/torch_tp.py \
    --json "$OUT/$1" ${PEER_FLAGS:-} >> "$OUT/torch_peers.log" 2>&1
  echo "torch peers ($1) exit $?"
}
# The peers run before and after our sweep: GEMM speed drifts with the GPU's power
# state, so each baseline is the best of its two runs (bench/compare.py).
[ "${RUN_PEERS:-1}" = 1 ] && peers torch_peers_before.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$OUT/gpu_before.csv" 2>&1
source bench/overlapd_util.sh
start_overlapd "$OUT/overlapd.log" ${OVERLAPD_FLAGS:-}
overlapctl --addr "$addr" node
if [ "${RUN_GRAPH:-1}" = 1 ]; then
  timeout 200 overlapctl --addr "$addr" submit deploy/graphs/llama70b-mlp.yaml --wait 2>&1 | tee "$OUT/llama70b_mlp.txt"
  # The same block with a gradient all-reduce the layer step defers beside fc2.
  timeout 200 overlapctl --addr "$addr" submit deploy/graphs/llama70b-mlp-grads.yaml --wait 2>/dev/null | tee "$OUT/llama70b_mlp_grads.txt"
  # Its backward pass: X gathered on the side stream beside fc2's weight gradient.
  timeout 200 overlapctl --addr "$addr" submit deploy/graphs/llama70b-mlp-backward.yaml --wait 2>/dev/null | tee "$OUT/llama70b_mlp_backward.txt"
  # A whole layer's TP ops: attention's QKV and output projections, then the MLP.
  timeout 200 overlapctl --addr "$addr" submit deploy/graphs/llama70b-layer.yaml --wait 2>/dev/null | tee "$OUT/llama70b_layer.txt"
fi
start=$(date +%s)
nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.txt" 2>&1 &
dmon=$!
timeout 420 overlapctl --addr "$addr" bench --json-out "$OUT/bench.json" ${BENCH_FLAGS:-} 2>"$OUT/bench.err" | tee "$OUT/bench.txt"
echo "bench exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
kill "$dmon" 2>/dev/null
tail -3 "$OUT/bench.err"
# Where each shape's step went (the traced iterations, charted): into logs.tgz.
bench_job=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['job_id'])" "$OUT/bench.json" 2>/dev/null)
[ -n "$bench_job" ] && overlapctl --addr "$addr" timeline "$bench_job" --width 120 > "$OUT/timelines.txt" 2>&1
if [ "${RUN_COMMBENCH:-1}" = 1 ]; then  # the collectives alone, NCCL beside the copy engines
  timeout 300 overlapctl --addr "$addr" commbench --json-out "$OUT/commbench.json" 2>/dev/null | tee "$OUT/commbench.txt"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$OUT/gpu_after.csv" 2>&1
kill -TERM "$pid"; wait "$pid"; echo "overlapd exit $? (0 = drained cleanly)"
grep -iE "error|warn" "$OUT/overlapd.log" | head -10
# Raw copy-engine bandwidth by issuer, split and graph, when the bundle has the
# probe (EXTRA_TARGETS=peer_copy bash bench/pack-device.sh): what our p2p
# collectives could reach (after the daemon let go of its pools).
if [ "$ngpu" -ge 2 ] && command -v peer_copy > /dev/null; then
  timeout 120 peer_copy 8 32 128 2>&1 | tee "$OUT/peer_copy.txt"
fi
if [ "${RUN_PEERS:-1}" = 1 ]; then
  peers torch_peers.json
  python3 bench/compare.py "$OUT/bench.json" "$OUT/torch_peers_before.json" "$OUT/torch_peers.json" \
    | tee "$OUT/compare.md"
fi
# At most 8 files come back from a device call: pack the logs.
(cd "$OUT" && tar -czf logs.tgz --remove-files overlapd.log bench.err dmon.txt gpu_before.csv \
  gpu_after.csv $( [ -f torch_peers.log ] && echo torch_peers.log ) \
  $( [ -f timelines.txt ] && echo timelines.txt ) \
  $( [ -f peer_copy.txt ] && echo peer_copy.txt ))
