#!/usr/bin/env bash
# One device call for the input and report checks: the GPU tests (as
# bench/gpu_check.sh, without the PyTorch peers), the main job and the
# llama3-8b layer at tp 1 (a layer step's exposed communication must be 0 there
# and its activation passes named apart), the refusals of hostile graphs on a
# CUDA daemon, and, on the host's spare cores meanwhile, the parsing fuzz
# targets (scripts/fuzz-on-cores.sh, ASan + UBSan, 1 MiB inputs).
#
# Here: build build/ (sm_90) and build-fuzz/ (scripts/run-sanitizers.sh fuzz 0
# builds it), then `bash bench/pack-checks.sh`; there, with carry
# [".devpack"]: tar -xJf .devpack/sessions.tar.xz && bash bench/input_and_report_check.sh
# FUZZ_SECONDS (default 420) and FUZZ_WORKERS (default 2 a target) and FUZZ_TARGETS size the fuzzing.
set -uo pipefail
cd "$(dirname "$0")/.."
source .device/env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh

read -r -a fuzz_targets <<< "${FUZZ_TARGETS:-job_spec graph_sizes peer_message pinned_graph job_row daemon_config hf_config}"
FUZZ_BIN=.device/fuzz FUZZ_OUT=$OUT/fuzz \
  bash scripts/fuzz-on-cores.sh "${FUZZ_SECONDS:-420}" "${FUZZ_WORKERS:-2}" "${fuzz_targets[@]}" \
  > "$OUT/fuzz.txt" 2>&1 &
fuzz_pid=$!

RUN_PEERS=0 bash bench/gpu_check.sh > "$OUT/gpu_tests.txt" 2>&1
echo "== GPU tests"; grep -E "exit" "$OUT/gpu_tests.txt"

echo "== main job and llama3-8b layer at tp 1"
start_overlapd "$OUT/overlapd.log" || exit 1
overlapctl --addr "$addr" submit deploy/graphs/llama70b-mlp.yaml --wait > "$OUT/main_job.txt" 2>&1
echo "main job exit $?"; grep -E "layer|fc1|fc2|verified" "$OUT/main_job.txt" | head -12
overlapctl graph --model llama3-8b --tp 1 --pass both > "$OUT/llama3-8b-tp1.yaml"
overlapctl --addr "$addr" submit "$OUT/llama3-8b-tp1.yaml" --wait --json > "$OUT/llama3-8b-tp1.json" 2> "$OUT/llama3-8b-tp1.err"
echo "llama3-8b tp1 exit $?"
python3 - "$OUT/llama3-8b-tp1.json" << 'EOF'
import json, sys
try:
    job = json.load(open(sys.argv[1]))
except Exception as e:
    print("no JSON:", e); sys.exit(0)
r = job.get("result", job)
for key, value in r.items():
    if key.startswith("layer") and key not in ("layer_timeline",):
        print(key, json.dumps(value)[:300])
EOF

echo "== hostile graphs on the CUDA daemon (code, seconds, daemon RSS after)"
printf 'name: wrap\nmesh: {tp: 6, dp: 715827883}\nops:\n- {id: a, type: all_reduce, m: 64, k: 64, n: 64}\n' > "$OUT/wrap.yaml"
head -c 1048000 /dev/zero | tr '\0' '[' > "$OUT/brackets.yaml"
for f in wrap brackets; do
  for cmd in validate submit; do
    t0=$(date +%s.%N)
    overlapctl --addr "$addr" "$cmd" "$OUT/$f.yaml" > "$OUT/$f-$cmd.txt" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo "$f $cmd exit $rc $(python3 -c "print(round($t1-$t0,3))") s rss $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status) : $(head -c 160 "$OUT/$f-$cmd.txt" | tr '\n' ' ')"
  done
done
kill -TERM "$pid"; wait "$pid"

wait "$fuzz_pid"
echo "== fuzzing (fuzz-on-cores exit $?)"; cat "$OUT/fuzz.txt"
nvidia-smi --query-gpu=name,driver_version,power.draw --format=csv > "$OUT/gpu_after.csv" 2>&1
