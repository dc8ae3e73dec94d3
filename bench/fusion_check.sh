#!/usr/bin/env bash
# One device call: a model's layer written unfused (plain all_gather / gemm /
# reduce_scatter / all_reduce, row-parallel GEMMs among them) runs fused and
# unfused (submit --compare-fusion), every output verified against float64; at
# tp = 1 on each GPU, and, on a one-GPU machine, at tp = 2 with two ranks on the
# GPU (copies stand in for NCCL there: checked, not timed).
# Usage on the GPU machine, from the repo root: bash bench/fusion_check.sh [MODEL]
# OVERLAPD_BACKEND=host runs it here on the host backend (a small model).
set -uo pipefail
[ -f .device/env.sh ] && source .device/env.sh
source bench/overlapd_util.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
model=${1:-llama3-8b}
gpus=$( (nvidia-smi -L 2> /dev/null || true) | wc -l)
passes=("1:$((gpus > 0 ? gpus : 1))")
[ "$gpus" = 1 ] && passes+=("2:2")
[ "${OVERLAPD_BACKEND:-cuda}" = host ] && passes=("1:2")
status=0
for pass in "${passes[@]}"; do
  ranks=${pass%%:*} tp=${pass##*:}
  cfg=$(mktemp /tmp/overlapd-cfg.XXXXXX.yaml)
  echo "ranks_per_gpu: $ranks" > "$cfg"
  extra=()
  [ "${OVERLAPD_BACKEND:-cuda}" = host ] && extra=(--host-devices "$tp")
  [ "${OVERLAPD_BACKEND:-cuda}" = host ] || extra=(--config "$cfg")
  start_overlapd "$OUT/overlapd-ranks$ranks.log" "${extra[@]}" || { status=1; continue; }
  graph="$OUT/$model-tp$tp-unfused.yaml"
  graph_flags=(--model "$model" --tp "$tp" --unfused)
  [ "${OVERLAPD_BACKEND:-cuda}" = host ] && graph_flags+=(--seq 256 --hidden 256 --ffn 512 --heads 4 --kv-heads 2)
  overlapctl --addr "$addr" graph "${graph_flags[@]}" > "$graph" || status=1
  timeout 500 overlapctl --addr "$addr" submit "$graph" --compare-fusion \
    > "$OUT/compare-fusion-tp$tp-ranks$ranks.txt" 2>&1
  rc=$?
  echo "tp $tp, $ranks rank(s) a GPU: compare-fusion exit $rc"
  [ $rc = 0 ] || status=1
  cat "$OUT/compare-fusion-tp$tp-ranks$ranks.txt" | tail -30
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
done
exit $status
