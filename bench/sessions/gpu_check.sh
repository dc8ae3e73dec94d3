#!/usr/bin/env bash
# Sessions on one GPU (issue 56), in one device call:
#  1. the engine's shared memory across processes (shared_memory_gpu_test);
#  2. two rank processes as tp = 2 ranks on the GPU (ranks_per_gpu: 2) run an
#     MLP block through a session; their outputs against PyTorch (reference.py);
#  3. Llama-3-8B's MLP at tp 1 as a daemon job and through a session: the step
#     time of each, and the host time from a rank's call to the daemon's enqueue;
#  4. a critical session's step alone and beside a deferred session's GEMMs (its bound 20 ms, then
#     100 ms); 300 steps alone,
#     posted ahead and paced 6 ms apart, and paced again with the lanes' poll window off.
# Here: build build/ with CUDA, then FUZZ=0 bash bench/pack-checks.sh; there,
# with carry [".devpack"]: tar -xJf .devpack/sessions.tar.xz && bash bench/sessions/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
here=bench/sessions
# STEPS picks the steps to run (default all): STEPS="1 4" runs the shared-memory test and step 4.
want() { [[ " ${STEPS:-1 2 3 4} " == *" $1 "* ]]; }
mkdir -p "$OUT/tp2" "$OUT/l8" "$OUT/crit-alone"

if want 1; then
echo "== 1. shared memory across processes"
timeout 120 .device/bin/shared_memory_gpu_test > "$OUT/shared_memory_gpu_test.txt" 2>&1
echo "shared_memory_gpu_test exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|OK \]|FAILED \]" "$OUT/shared_memory_gpu_test.txt" | head -20
fi

# shellcheck source=bench/sessions/session_util.sh
. bench/sessions/session_util.sh
rank() { session_rank "$@"; }

if want 2; then
echo "== 2. two ranks on the GPU, tp 2 MLP, against PyTorch"
start_overlapd "$OUT/overlapd-2ranks.log" --ranks-per-gpu 2 || exit 1
tp2_against_torch "$OUT/tp2" 3
overlapctl --addr "$addr" sessions -o json > "$OUT/tp2/sessions.json" 2>&1
kill -TERM "$pid"; wait "$pid"

fi

echo "== 3. llama3-8b MLP at tp 1: job against session"
# Debug level: where a session's start waits (registration, hand-off, device idle) is logged.
start_overlapd "$OUT/overlapd-1rank.log" --log-level debug || exit 1
if want 3; then
overlapctl --addr "$addr" submit $here/llama3-8b-mlp-tp1.yaml --wait --json > "$OUT/job.json" 2> "$OUT/job.err"
echo "job exit $?"
python3 - "$OUT/job.json" << 'PY'
import json, sys
job = json.load(open(sys.argv[1]))
r = job.get("result", job)
for op in r.get("ops", []):
    print("job op", op.get("id"), "step_ms", op.get("step", {}).get("median_ms"), op.get("schedule"))
for key, value in r.items():
    if key.startswith("layer") and key != "layer_timeline":
        print("job", key, json.dumps(value)[:400])
PY
rank l8 $here/llama3-8b-mlp-tp1.yaml 0 20 "$OUT/l8" > "$OUT/l8/rank0.json" 2> "$OUT/l8/rank0.err"
echo "session exit $?"; head -c 400 "$OUT/l8/rank0.json"; echo; head -3 "$OUT/l8/rank0.err"

fi

if want 4; then
echo "== 4. critical session alone, then beside a deferred session"
rank crit1 $here/llama3-8b-mlp-tp1.yaml 0 30 "$OUT/crit-alone" > "$OUT/crit-alone.json" 2>&1
echo "alone exit $?"; head -c 400 "$OUT/crit-alone.json"; echo
# 300 steps, so that p50 and p99 of the call to the enqueue mean something (the first step, which
# tunes the GEMMs, is not counted; take_*: the call to the lanes taking the command). Posted ahead
# (up to 32 commands), as a loop that never waits for the GPU; then each step waited for and 6 ms
# apart, as a loop whose host work takes 6 ms: longer than the lanes' old 5 ms poll window,
# shorter than session_poll_ms (100). No --out-dir: Y is not needed here. About 10 s each.
steps300() {  # steps300 NAME OUTFILE [flags]
  local name=$1 file=$2
  shift 2
  timeout 120 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "$name" \
    --graph $here/llama3-8b-mlp-tp1.yaml --rank 0 --steps 300 --json "$@" > "$file" 2>&1
  echo "$name exit $?"; head -c 400 "$file"; echo
}
steps300 crit300 "$OUT/crit-300.json"
steps300 crit300paced "$OUT/crit-300-paced.json" --interval-ms 6
# beside BOUND_MS LABEL: a deferred session of GEMMs streams (its bound BOUND_MS: each command goes
# within that long of heading its session's queue); 4 s later a critical session posts 100 steps
# ahead. The critical step's device time against crit-alone's is the slowdown; the deferred
# session's log line says how many of its chunks went at their bound.
beside() {
  local bound=$1 label=$2
  mkdir -p "$OUT/crit-beside-$label" "$OUT/deferred-$label"
  rank "def-$label" $here/deferred_gemm.yaml 0 4000 "$OUT/deferred-$label" --priority deferred \
    --deferred-bound-ms "$bound" > "$OUT/deferred-$label.json" 2>&1 &
  local d=$!
  sleep 4
  # --log-phases: when the rank filled, copied, registered and started (CLOCK_MONOTONIC, as the
  # daemon's log of the session's start).
  timeout 60 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "crit-$label" \
    --graph $here/llama3-8b-mlp-tp1.yaml --rank 0 --steps 100 --json --log-phases \
    > "$OUT/crit-beside-$label.json" 2> "$OUT/crit-beside-$label.err" &
  local c=$! waited=0
  while kill -0 "$c" 2> /dev/null && [ $waited -lt 120 ]; do sleep 0.1; waited=$((waited + 1)); done
  # Where each daemon thread is 12 s after the critical session opened: its name, its state, the
  # kernel function it sleeps in and its system call (202 = futex on x86-64).
  if kill -0 "$c" 2> /dev/null; then
    echo "critical session still running after 12 s; daemon threads:"
    for t in /proc/"$pid"/task/*; do
      echo "$(cat "$t/comm") $(awk '{print $3}' "$t/stat") $(cat "$t/wchan" 2> /dev/null) $(cut -d' ' -f1 "$t/syscall" 2> /dev/null)"
    done | sort | uniq -c | tee "$OUT/threads-beside-$label.txt"
  fi
  wait $c
  echo "beside ($label, deferred bound $bound ms) exit $?"; head -c 300 "$OUT/crit-beside-$label.json"; echo
  tail -5 "$OUT/crit-beside-$label.err"
  overlapctl --addr "$addr" sessions --lanes -o json > "$OUT/sessions-beside-$label.json" 2>&1
  wait $d; echo "deferred ($label) exit $?"; head -c 300 "$OUT/deferred-$label.json"; echo
}
beside 20 bound20
beside 100 bound100
sleep 1  # the last session's figures are logged once it has ended
echo "every session's figures at its end (call to enqueue; commands taken polling / after a wake-up)"
grep -E "call to the enqueue|no command enqueued|at their bound|\] session sess-[0-9]+ (closed|failed)" \
  "$OUT/overlapd-1rank.log"
if [ "${POLL_OFF:-1}" = 1 ]; then
  echo "== 4b. the paced 300 steps with the lanes' poll window off (session_poll_ms: 0)"
  restart_overlapd "$OUT/overlapd-1rank.log" --log-level debug --session-poll-ms 0 || exit 1
  steps300 crit300paced-nopoll "$OUT/crit-300-paced-nopoll.json" --interval-ms 6
  sleep 1
  grep -E "call to the enqueue" "$OUT/overlapd-1rank.log" | tail -1
fi
fi
kill -TERM "$pid"; wait "$pid"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
