#!/usr/bin/env bash
# Session ops replayed as CUDA graphs (session_graphs), on one GPU, in one device call:
#  1. the engine's capture: cuda_engine_gpu_test (CaptureNamesTheStreamsItJoined and the rest);
#  2. outputs against PyTorch with graphs on: a tp 1 MLP (one rank, 4 steps: direct, captured,
#     replayed twice) and the tp 2 MLP as two rank processes on the GPU (ranks_per_gpu 2);
#  3. Llama-3-8B's MLP at tp 1, 300 steps posted ahead and 300 paced 6 ms apart, the call to the
#     enqueue with session_graphs on, then off (the same daemon binary, restarted), then on again;
#     30 steps alone against the same ops as a daemon job (device time per step).
# Here: build build/ with CUDA, then FUZZ=0 bash bench/pack-checks.sh; there, with carry
# [".devpack"]: tar -xJf .devpack/sessions.tar.xz && bash bench/sessions/graphs_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
here=bench/sessions
# The ranks' tensors (.npy, hundreds of MB) stay out of $OUT; their JSON is copied there.
scratch=$(mktemp -d /tmp/graphs-check.XXXXXX)
want() { [[ " ${STEPS:-1 2 3} " == *" $1 "* ]]; }

if want 1; then
  echo "== 1. cuda_engine_gpu_test"
  timeout 300 .device/bin/cuda_engine_gpu_test > "$OUT/cuda_engine_gpu_test.txt" 2>&1
  echo "cuda_engine_gpu_test exit $?"
  grep -E "CaptureNamesTheStreamsItJoined|^\[  (PASSED|FAILED|SKIPPED)|FAILED \]" \
    "$OUT/cuda_engine_gpu_test.txt" | head -20
fi

# shellcheck source=bench/sessions/session_util.sh
. bench/sessions/session_util.sh

if want 2; then
  echo "== 2a. tp 1 MLP, graphs on, against PyTorch"
  start_overlapd "$OUT/overlapd-tp1.log" --log-level debug || exit 1
  mkdir -p "$scratch/tp1" "$OUT/tp1" "$OUT/tp2"
  session_rank tp1 $here/tp1_mlp.yaml 0 4 "$scratch/tp1" --dump-inputs > "$scratch/tp1/rank0.json" 2> "$scratch/tp1/rank0.err"
  echo "rank exit $?"; head -3 "$scratch/tp1/rank0.err"
  python3 $here/reference.py "$scratch/tp1" | tee "$scratch/tp1/reference.json"
  cp "$scratch"/tp1/*.json "$OUT/tp1/"
  kill -TERM "$pid"; wait "$pid"
  grep -E "replayed as graphs|not replayed" "$OUT/overlapd-tp1.log"

  echo "== 2b. tp 2 MLP, two rank processes on the GPU, graphs on, against PyTorch"
  start_overlapd "$OUT/overlapd-tp2.log" --ranks-per-gpu 2 || exit 1
  mkdir -p "$scratch/tp2"
  tp2_against_torch "$scratch/tp2" 4
  cp "$scratch"/tp2/*.json "$OUT/tp2/"
  kill -TERM "$pid"; wait "$pid"
  grep -E "replayed as graphs|not replayed" "$OUT/overlapd-tp2.log"
fi

if want 3; then
  echo "== 3. llama3-8b MLP at tp 1: call to the enqueue, graphs on / off / on"
  steps300() {  # steps300 NAME OUTFILE [flags]
    local name=$1 file=$2
    shift 2
    timeout 120 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "$name" \
      --graph $here/llama3-8b-mlp-tp1.yaml --rank 0 --steps 300 --json "$@" > "$file" 2>&1
    echo "$name exit $?"; head -c 600 "$file"; echo
  }
  round() {  # round LABEL
    steps300 "ahead-$1" "$OUT/ahead-$1.json"
    steps300 "paced-$1" "$OUT/paced-$1.json" --interval-ms 6
    timeout 120 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "alone-$1" \
      --graph $here/llama3-8b-mlp-tp1.yaml --rank 0 --steps 30 --json > "$OUT/alone-$1.json" 2>&1
    echo "alone-$1 exit $?"; head -c 300 "$OUT/alone-$1.json"; echo
  }
  start_overlapd "$OUT/overlapd-l8.log" || exit 1
  overlapctl --addr "$addr" submit $here/llama3-8b-mlp-tp1.yaml --wait --json > "$OUT/job.json" 2> "$OUT/job.err"
  echo "job exit $?"
  round on1
  restart_overlapd "$OUT/overlapd-l8.log" --no-session-graphs || exit 1
  round off
  restart_overlapd "$OUT/overlapd-l8.log" || exit 1
  round on2
  sleep 1
  kill -TERM "$pid"; wait "$pid"
  echo "every session's figures at its end"
  grep -E "call to the enqueue|not replayed|\] session sess-[0-9]+ (closed|failed)" "$OUT/overlapd-l8.log"
  python3 - "$OUT" << 'PY'
import json, sys
out = sys.argv[1]
try:
    job = json.load(open(f"{out}/job.json"))
    r = job.get("result", job)
    for key, value in r.items():
        if key.startswith("layer") and key != "layer_timeline":
            print("job", key, json.dumps(value)[:300])
except Exception as e:  # noqa: BLE001
    print("job.json unreadable:", e)
print(f"{'run':10} {'enqueue p50':>12} {'p99':>9} {'by op (p50)':>22} {'take p50':>9} {'device ms/step':>15}")
for label in ("on1", "off", "on2"):
    for kind in ("ahead", "paced", "alone"):
        try:
            j = json.load(open(f"{out}/{kind}-{label}.json"))
        except Exception as e:  # noqa: BLE001
            print(kind, label, "unreadable:", e)
            continue
        by_op = " / ".join(f"{v['p50']:.1f}" for v in j.get("enqueue_us_by_op", {}).values())
        print(f"{kind + '-' + label:10} {j['enqueue_p50_us']:12.1f} {j['enqueue_p99_us']:9.1f} "
              f"{by_op:>22} {j['take_p50_us']:9.2f} {j['device_ms_per_step']:15.4f}")
PY
fi
rm -rf "$scratch"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
