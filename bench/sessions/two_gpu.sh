#!/usr/bin/env bash
# A tp 2 session over two GPUs (issue 56): one overlapd-session-rank process
# per GPU (ranks_per_gpu 1) runs the MLP block of tp2_mlp.yaml through one
# session, its all-gather and reduce-scatter over the daemon's NCCL lanes;
# their outputs against reference.py (PyTorch, float64 compare), and the time
# of a step as each rank sees it (device time and call-to-enqueue on CUDA,
# post-to-done on the host backend).
#
# On a machine of two GPUs: build build/ with CUDA, then FUZZ=0 bash
# bench/pack-checks.sh; there, with carry [".devpack"]:
#   tar -xJf .devpack/sessions.tar.xz && bash bench/sessions/two_gpu.sh
# DRY_RUN=1 (or OVERLAPD_BACKEND=host) runs the same flow here on the host
# backend, two simulated devices, with the binaries of build/ and a smaller
# graph (the plain-Python reference is slow). STEPS (default 20) steps a rank.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-20}
here=bench/sessions
mkdir -p "$OUT/two_gpu"
dir=$OUT/two_gpu

if [[ "${DRY_RUN:-0}" == 1 || "${OVERLAPD_BACKEND:-cuda}" == host ]]; then
  export OVERLAPD_BACKEND=host
  PATH=$PWD/build/server:$PWD/build/client:$PWD/build/client/session:$PATH
  daemon_flags=(--host-devices 2)
  # tp2_mlp.yaml's shape over 32: the same ops, a reference of seconds.
  graph=$dir/tp2_mlp_small.yaml
  sed -e 's/m: 2048/m: 64/g' -e 's/k: 2048/k: 64/' -e 's/n: 8192/n: 256/' \
    -e 's/k: 4096/k: 128/' -e 's/n: 2048/n: 64/' $here/tp2_mlp.yaml > "$graph"
  echo "== dry run: host backend, 2 simulated devices, $(grep -c '{id:' "$graph") ops"
else
  source .device/env.sh
  gpus=$(nvidia-smi -L | wc -l)
  if ((gpus < 2)); then
    echo "two_gpu.sh needs 2 GPUs; this machine has $gpus (DRY_RUN=1 tries the flow on the host backend)" >&2
    exit 77
  fi
  daemon_flags=(--ranks-per-gpu 1)
  graph=$here/tp2_mlp.yaml
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
fi
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh

start_overlapd "$dir/overlapd.log" "${daemon_flags[@]}" || exit 1
for r in 0 1; do
  timeout 300 overlapd-session-rank --socket "$work/overlapd-session.sock" --name tp2 \
    --graph "$graph" --rank "$r" --steps "$STEPS" --out-dir "$dir" --dump-inputs --json \
    > "$dir/rank$r.json" 2> "$dir/rank$r.err" &
  rank_pid[r]=$!
done
status=0
for r in 0 1; do
  wait "${rank_pid[r]}"
  rc=$?
  echo "rank $r exit $rc"
  ((rc == 0)) || { status=1; head -3 "$dir/rank$r.err"; }
done
overlapctl --addr "$addr" sessions -o json > "$dir/sessions.json" 2>&1
kill -TERM "$pid"
wait "$pid"
((status == 0)) || exit 1

echo "== outputs against the reference"
python3 $here/reference.py "$dir" | tee "$dir/reference.json"
verified=${PIPESTATUS[0]}

echo "== step times"
python3 - "$dir" << 'PY'
import json, statistics, sys
out = sys.argv[1]
for r in (0, 1):
    rank = json.load(open(f"{out}/rank{r}.json"))
    line = f"rank {r}: device {rank['device']} of {rank['world']} ranks, backend {rank['backend']}, {rank['steps']} steps"
    if "device_ms_per_step" in rank:
        line += (f", device {rank['device_ms_per_step']:.3f} ms/step, call->enqueue p50 "
                 f"{rank['enqueue_p50_us']:.1f} us p99 {rank['enqueue_p99_us']:.1f} us")
    print(line)
    by_op = {}
    for c in rank.get("commands", []):
        by_op.setdefault(c["op"], []).append((c["done_ns"] - c["posted_ns"]) / 1e6)
        by_op.setdefault(c["op"] + " enqueue", []).append((c["enqueued_ns"] - c["posted_ns"]) / 1e3)
    for op, values in by_op.items():
        unit = "us" if op.endswith("enqueue") else "ms"
        what = "post->enqueue" if unit == "us" else "post->done"
        print(f"  {op.split()[0]:>6} {what:>13} p50 {statistics.median(values):9.3f} {unit}"
              f"  max {max(values):9.3f} {unit}  (n={len(values)})")
PY
exit "$verified"
