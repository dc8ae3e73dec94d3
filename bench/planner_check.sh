#!/usr/bin/env bash
# One device call: the planner end to end on the GPU machine. overlapctl
# calibrate measures this node (commbench and a one-repeat bench sweep of the
# calibration shapes) and the daemon keeps it; plan predicts a model layer
# without running it; bench at shapes the calibration never saw prints each
# predicted step beside the measured one (auto timing only the planner's
# third of the candidates); a layer submitted with auto runs pruned and is
# verified against float64.
#
# Two GPUs or more: tp 2, one rank each (the figures mean something). One
# GPU: two ranks on it (ranks_per_gpu: 2; checked, not timed).
# Usage on the GPU machine, from the repo root: bash bench/planner_check.sh
# OVERLAPD_BACKEND=host dry-runs it here (shapes divided by 16).
set -uo pipefail
[ -f .device/env.sh ] && source .device/env.sh
source bench/overlapd_util.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
host=0; [ "${OVERLAPD_BACKEND:-cuda}" = host ] && host=1
gpus=$( (nvidia-smi -L 2> /dev/null || true) | wc -l)
ranks=1; [ "$host" = 0 ] && [ "$gpus" -lt 2 ] && ranks=2
cfg=$(mktemp /tmp/overlapd-cfg.XXXXXX.yaml)
printf 'ranks_per_gpu: %s\n' "$ranks" > "$cfg"
flags=(--config "$cfg")
[ "$host" = 1 ] && flags=(--host-devices 2)
calibration_shapes="ag_gemm:4096x8192x8192,gemm_rs:4096x8192x8192,gemm_ar:4096x8192x8192,ag_gemm:8192x4096x4096,gemm_rs:8192x4096x4096,gemm_ar:8192x4096x4096"
unseen_shapes="ag_gemm:16384x8192x7168,gemm_rs:16384x7168x8192,gemm_ar:16384x7168x8192"
graph_flags=(--model llama3-8b --tp 2 --seq 4096)
if [ "$host" = 1 ]; then
  calibration_shapes="ag_gemm:256x512x512,gemm_rs:256x512x512,gemm_ar:256x512x512"
  unseen_shapes="ag_gemm:512x256x512,gemm_rs:512x512x256"
  graph_flags=(--tp 2 --seq 256 --hidden 256 --ffn 512 --heads 4 --kv-heads 2)
fi
status=0
start_overlapd "$OUT/overlapd.log" "${flags[@]}" || exit 1
echo "== calibrate (ranks_per_gpu $ranks, $gpus GPU(s))" | tee "$OUT/planner-summary.txt"
timeout 270 overlapctl --addr "$addr" calibrate --shapes "$calibration_shapes" \
  --output-file "$OUT/calibration.json" > "$OUT/calibrate.txt" 2> "$OUT/calibrate-progress.txt" || status=1
tee -a "$OUT/planner-summary.txt" < "$OUT/calibrate.txt"
overlapctl --addr "$addr" graph "${graph_flags[@]}" > "$OUT/layer.yaml" || status=1
sed -i 's/^iterations: 20$/iterations: 10/' "$OUT/layer.yaml"
overlapctl --addr "$addr" plan "$OUT/layer.yaml" > "$OUT/plan.txt" || status=1
grep -E "best|^graph|^layer step" "$OUT/plan.txt" | tee -a "$OUT/planner-summary.txt"
echo "== bench at shapes the calibration never saw" | tee -a "$OUT/planner-summary.txt"
timeout 150 overlapctl --addr "$addr" bench --shapes "$unseen_shapes" --repeats 1 \
  --json-out "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench-progress.txt" || status=1
sed -n '/^predicted/,/^prediction:/p' "$OUT/bench.txt" | tee -a "$OUT/planner-summary.txt"
grep -o 'the planner chose [^"]*' "$OUT/bench.json" | sort | uniq -c | tee -a "$OUT/planner-summary.txt"
echo "== the layer, auto pruned by the planner" | tee -a "$OUT/planner-summary.txt"
timeout 150 overlapctl --addr "$addr" --json submit "$OUT/layer.yaml" --wait > "$OUT/job.json" \
  2> "$OUT/job-progress.txt" || status=1
python3 - "$OUT/job.json" <<'PY' | tee -a "$OUT/planner-summary.txt" || status=1
import json, sys
job = json.load(open(sys.argv[1]))
ops = job["result"]["ops"]
bad = [o["id"] for o in ops if not o.get("verified")]
planned = sum("the planner chose" in o.get("auto_reason", "") for o in ops)
print("job %s: %s, %d ops, %d verified, %d timed by the planner's choice" % (
    job["id"], job["state"], len(ops), len(ops) - len(bad), planned))
for o in ops:
    print("  %-8s %-16s step %8.3f ms  %s" % (o["id"], o.get("schedule", ""), o["step"]["median_ms"],
                                          o.get("auto_reason", "")[:150]))
sys.exit(0 if job["state"] == "SUCCEEDED" and not bad else 1)
PY
kill -TERM "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
exit $status
