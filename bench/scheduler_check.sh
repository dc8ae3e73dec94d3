#!/usr/bin/env bash
# One device call: a model's layer backward with its gradient all-reduces,
# run under scheduler static and then dynamic (submit --compare-scheduler),
# every output verified against float64.
#
# With two or more GPUs (one rank each): tp 1 x dp 2 and tp 2 x dp 1, each with
# the deferred lane's NCCL communicators capped (deferred_lane_ctas 4) and not
# (0). Targets: the backward with its deferred all-reduces at most 1.03x the
# backward alone (layer step / step without deferred), every bound met, and
# dynamic no slower than static.
# On one GPU: the same layers at two ranks on the GPU, and tp 2 x dp 2 at four
# (ranks_per_gpu: copies stand in for NCCL; checked, not timed).
#
# Usage on the GPU machine, from the repo root: bash bench/scheduler_check.sh [MODEL]
# OVERLAPD_BACKEND=host dry-runs it here on the host backend (a small model).
set -uo pipefail
[ -f .device/env.sh ] && source .device/env.sh
source bench/overlapd_util.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
model=${1:-llama3-8b}
host=0; [ "${OVERLAPD_BACKEND:-cuda}" = host ] && host=1
gpus=$( (nvidia-smi -L 2> /dev/null || true) | wc -l)
# Passes: "ranks_per_gpu:tp:dp:deferred_lane_ctas".
if [ "$host" = 1 ]; then
  passes=("1:1:2:4" "1:2:1:4" "1:2:2:4")
elif [ "$gpus" -ge 2 ]; then
  passes=("1:1:2:4" "1:1:2:0" "1:2:1:4" "1:2:1:0")
else
  passes=("2:1:2:4" "2:2:1:4" "4:2:2:4")
fi
status=0
summary="$OUT/scheduler-summary.txt"
: > "$summary"
for pass in "${passes[@]}"; do
  IFS=: read -r ranks tp dp ctas <<< "$pass"
  name="tp${tp}-dp${dp}-ranks${ranks}-ctas${ctas}"
  cfg=$(mktemp /tmp/overlapd-cfg.XXXXXX.yaml)
  printf 'ranks_per_gpu: %s\ndeferred_lane_ctas: %s\n' "$ranks" "$ctas" > "$cfg"
  flags=(--config "$cfg")
  [ "$host" = 1 ] && flags=(--host-devices $((tp * dp)))
  start_overlapd "$OUT/overlapd-$name.log" "${flags[@]}" || { status=1; continue; }
  graph="$OUT/$model-$name.yaml"
  graph_flags=(--model "$model" --tp "$tp" --dp "$dp" --pass backward --grads --seq 4096)
  [ "$host" = 1 ] && graph_flags=(--model "$model" --tp "$tp" --dp "$dp" --pass backward --grads
                                  --seq 256 --hidden 256 --ffn 512 --heads 4 --kv-heads 2)
  overlapctl --addr "$addr" graph "${graph_flags[@]}" > "$graph" || status=1
  sed -i 's/^iterations: 20$/iterations: 10/' "$graph"
  timeout 400 overlapctl --addr "$addr" submit "$graph" --compare-scheduler \
    > "$OUT/compare-$name.txt" 2> "$OUT/progress-$name.txt"
  rc=$?
  [ $rc = 0 ] || status=1
  overlapctl --addr "$addr" --json list > "$OUT/jobs-$name.json" 2>&1
  for id in $(overlapctl --addr "$addr" list -o name); do
    overlapctl --addr "$addr" --json get "$id" > "$OUT/$name-$id.json" 2>&1
  done
  {
    echo "== $name (ranks_per_gpu $ranks, tp $tp x dp $dp, deferred_lane_ctas $ctas): exit $rc"
    grep -E "^(static|dynamic) |^dynamic:|bound|inversion|^lanes" "$OUT/compare-$name.txt"
    grep -E "SUCCEEDED|FAILED|error" "$OUT/progress-$name.txt" | tail -4
  } | tee -a "$summary"
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
done
exit $status
