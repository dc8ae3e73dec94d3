#!/usr/bin/env bash
# Everything issues 57 and 58 measure on one GPU, in one device call of about 8 minutes:
#  1. every GPU test (.device/bin/*_gpu_test, a timeout each), pass or fail;
#  2. the activation pass against memory bandwidth (activation_bandwidth --json, then --check);
#  3. overlapd's GEMM alone beside torch.matmul and torch._scaled_mm, timed the same way
#     (bench/gemm_vs_torch/gemm_vs_torch.py over liboverlapd_gemm_shim.so);
#  4. the llama3-8b and llama3-70b layers at tp 1, forward and backward, as daemon jobs: the
#     layer step, the op-by-op sum, the limit (GEMMs alone + the activations' bytes at the
#     measured bandwidth; each GEMM alone also timed back to back for SUSTAIN_MS, default 1000,
#     0 = not) and joules per step from the report;
#  5. `overlapctl calibrate --devices 0`, then bench's and plan's predictions at tp 1;
#  6. the flight recorder's cost: the llama3-8b layer step with flight_recorder_entries 0 and
#     2000, daemons alternating (FLIGHT_PAIRS pairs), the medians' difference in %, at tp 1
#     and at tp 2 with two ranks on the GPU (FLIGHT_TP="1 2": at tp 1 nothing is recorded).
# Logs and JSON land under $OUT; the table of figures and targets (met or missed) is printed
# at the end and written to $OUT/results/one-gpu-check.md (for docs/results/) with
# $OUT/one_gpu_check.json beside it.
#
# Here: build build/ with CUDA (sm_90, targets overlapd overlapctl overlapd-session-rank, the
# GPU tests, activation_bandwidth, overlapd_gemm_shim), then `FUZZ=0 bash bench/pack-checks.sh`;
# there, with carry [".devpack"]:
#   tar -xJf .devpack/sessions.tar.xz && bash bench/one_gpu_check.sh
# DRY_RUN=1 runs the same steps here on the host backend (binaries from build/, small shapes,
# the GEMM comparison's self-test when torch is missing): the logic is checked, the timings
# mean nothing. SKIP="tests,activation,gemm,layers,flight,planner" leaves steps out;
# GPU_TEST_RANKS="1 2" also runs the GPU tests with two ranks on the GPU; GPU_TESTS="elementwise
# layer_step" runs only those (names without _gpu_test).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/tests" "$OUT/layers" "$OUT/flight" "$OUT/planner" "$OUT/results"
dry=${DRY_RUN:-0}
skip=",${SKIP:-},"
t_start=$(date +%s)
if [ "$dry" = 1 ]; then
  export PATH="$PWD/build/server:$PWD/build/client:$PATH" OVERLAPD_BACKEND=host
  tests_dir=build/tests
  activation_bin=build/bench/activation_bandwidth
  shim=build/bench/gemm_vs_torch/liboverlapd_gemm_shim.so
  daemon_flags=(--host-simulated-power-w 300)
  one_device_flags=(--host-devices 1)
  two_rank_flags=(--host-devices 2)
  # Layers small enough for a few host cores; --model keeps each preset's name and shape.
  graph_8b=(--model llama3-8b --hidden 256 --ffn 512 --heads 4 --kv-heads 2 --seq 128)
  graph_70b=(--model llama3-70b --hidden 512 --ffn 1024 --heads 8 --kv-heads 2 --seq 128)
  iterations=3
  sustain_ms=20
  calibrate_shapes=(--shapes "ag_gemm:256x256x256,gemm_rs:256x256x256")
  bench_shapes="ag_gemm:256x512x512,gemm_rs:512x256x256"
  gemm_args=(--sets llama --dtypes bf16 --shapes 512x512x512 --rounds 3 --warm-ms 10)
else
  source .device/env.sh
  tests_dir=.device/bin
  activation_bin=.device/bin/activation_bandwidth
  shim=.device/lib/liboverlapd_gemm_shim.so
  daemon_flags=()
  one_device_flags=()
  two_rank_flags=()
  [ "$(nvidia-smi -L 2> /dev/null | wc -l)" -lt 2 ] && two_rank_flags=(--ranks-per-gpu 2)
  graph_8b=(--model llama3-8b)
  graph_70b=(--model llama3-70b)
  iterations=20
  sustain_ms=1000
  calibrate_shapes=()
  bench_shapes="ag_gemm:8192x4096x14336,gemm_rs:8192x14336x4096"
  gemm_args=(--budget-s "${GEMM_BUDGET_S:-150}")
fi
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
: > "$OUT/summary.tsv"

elapsed() { echo $(($(date +%s) - t_start)); }
step() { echo "== $* (at $(elapsed) s)"; }
# budget SECONDS: that, or less where the call's end (HARD_LIMIT_S, default 570 s after the
# start) comes sooner, keeping 15 s for the table.
budget() {
  local left=$((${HARD_LIMIT_S:-570} - $(elapsed) - 15))
  [ "$left" -lt 10 ] && left=10
  echo $(($1 < left ? $1 : left))
}
# skipped STEP: true when SKIP names it, or when DEADLINE_S (default 480) have passed, so
# that the table is still written inside the device call's limit; $why says which.
skipped() {
  why=SKIP
  [[ "$skip" == *",$1,"* ]] && return 0
  why="not started: $(elapsed) s spent, DEADLINE_S=${DEADLINE_S:-480}"
  [ "$(elapsed)" -gt "${DEADLINE_S:-480}" ]
}
# summary CHECK FIGURE TARGET VERDICT: one row of the final table.
summary() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/summary.tsv"; }
stop_daemon() {
  [ -n "${pid:-}" ] || return 0
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  pid=
}
trap 'stop_daemon' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
  --format=csv > "$OUT/gpu_before.csv" 2>&1

# ---------------------------------------------------------------- 1. GPU tests
if skipped tests; then
  summary "GPU tests" "skipped ($why)" "all pass" "-"
else
  step "1. GPU tests"
  passed=0 failed=0 failed_names=""
  for ranks in ${GPU_TEST_RANKS:-1}; do
    for t in "$tests_dir"/*_gpu_test; do
      [ -x "$t" ] || continue
      name=$(basename "$t")
      [ -z "${GPU_TESTS:-}" ] || [[ " $GPU_TESTS " == *" ${name%_gpu_test} "* ]] || continue
      [ "$ranks" = 1 ] || name="$name-ranks$ranks"
      if [ "$(elapsed)" -gt "${TESTS_BUDGET_S:-200}" ]; then
        echo "$name: not run (the tests' budget of ${TESTS_BUDGET_S:-200} s is spent)"
        failed=$((failed + 1)) failed_names="$failed_names $name(not-run)"
        continue
      fi
      OVERLAP_TEST_RANKS_PER_GPU=$ranks timeout "$(budget "${TEST_TIMEOUT_S:-120}")" "$t" --gtest_brief=1 \
        > "$OUT/tests/$name.log" 2>&1
      rc=$?
      ok=$(grep -oE '^\[  PASSED  \] [0-9]+' "$OUT/tests/$name.log" | grep -oE '[0-9]+$')
      skips=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$OUT/tests/$name.log" | tail -1 | grep -oE '[0-9]+$')
      if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        echo "PASS $name (${ok:-0} passed, ${skips:-0} skipped)"
      else
        failed=$((failed + 1)) failed_names="$failed_names $name"
        echo "FAIL $name (exit $rc$([ "$rc" = 124 ] && echo ": timed out"))"
        grep -E 'Failure|FAILED' "$OUT/tests/$name.log" | head -8
      fi
    done
  done
  summary "GPU tests" "$passed passed, $failed failed${failed_names:+:$failed_names}" "all pass" \
    "$([ "$failed" = 0 ] && [ "$passed" -gt 0 ] && echo met || echo MISSED)"
fi

# ---------------------------------------------------------------- 2. activation bandwidth
if skipped activation; then
  summary "activation pass" "skipped ($why)" ">= 80% of peak" "-"
elif [ ! -x "$activation_bin" ]; then
  step "2. activation bandwidth"
  echo "activation_bandwidth missing ($activation_bin): not measured"
  summary "activation pass" "not measured: $activation_bin missing" ">= 80% of peak" "-"
else
  step "2. activation bandwidth"
  timeout "$(budget 120)" "$activation_bin" --json "$OUT/activation.json" > "$OUT/activation.txt" 2>&1
  echo "activation_bandwidth exit $?"
  tail -20 "$OUT/activation.txt"
  timeout "$(budget 120)" "$activation_bin" --check > "$OUT/activation-check.txt" 2>&1
  check_rc=$?
  echo "activation_bandwidth --check exit $check_rc"
  grep -E "identical|DIFFERENT" "$OUT/activation-check.txt" | head -12
  verdict=$([ "$check_rc" = 0 ] && echo met || echo MISSED)
  [ "$dry" = 1 ] && verdict="- (no GPU here)"
  summary "activation --check" "exit $check_rc" "new kernel = old, bit for bit" "$verdict"
  python3 - "$OUT/activation.json" >> "$OUT/summary.tsv" << 'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception as e:  # no GPU, or the binary failed before writing
    print("activation pass\tno JSON (%s)\t>= 80%% of peak\t-" % str(e)[:60])
    sys.exit(0)
kernels = []
for r in rows:
    if r["kernel"] not in kernels:
        kernels.append(r["kernel"])
for r in rows:
    if r["op"] in ("swiglu", "gelu") and r["kernel"] == kernels[-1]:
        pct = r["pct_peak"]
        print("activation %s %s (%s)\t%.0f GB/s, %.1f%% of peak (%.3f ms)\t>= 80%% of peak\t%s" % (
            r["op"], r["shape"], r["kernel"], r["gbps"], pct, r["ms_median"],
            "met" if pct >= 80 else "MISSED"))
PY
fi

# ---------------------------------------------------------------- 3. GEMM against PyTorch
if skipped gemm; then
  summary "GEMM vs PyTorch" "skipped ($why)" "geomean <= 1.00, max <= 1.03" "-"
else
  step "3. overlapd's GEMM alone against PyTorch's"
  if python3 -c "import torch" 2> /dev/null && [ -f "$shim" ]; then
    PYTHONUNBUFFERED=1 timeout "$(budget "${GEMM_TIMEOUT_S:-240}")" python3 bench/gemm_vs_torch/gemm_vs_torch.py \
      --lib "$shim" --json "$OUT/gemm_vs_torch.json" "${gemm_args[@]}" 2>&1 |
      tee "$OUT/gemm_vs_torch.txt" | tail -6
    echo "gemm_vs_torch exit ${PIPESTATUS[0]}"
    python3 - "$OUT/gemm_vs_torch.json" >> "$OUT/summary.tsv" << 'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print("GEMM vs PyTorch\tno JSON (%s)\tgeomean <= 1.00, max <= 1.03\tMISSED" % str(e)[:60])
    sys.exit(0)
v = j["verdict"]
for dtype in ("bf16", "fp8"):
    rows = [r for r in j["rows"] if r["dtype"] == dtype]
    if rows:
        ratios = [r["ratio"] for r in rows]
        import math
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print("GEMM vs PyTorch %s (%d shapes)\tgeomean %.3f, %.3f-%.3f\t-\t-" % (
            dtype, len(rows), g, min(ratios), max(ratios)))
print("GEMM vs PyTorch (ours/torch)\tgeomean %.3f, max %.3f (%s)\tgeomean <= 1.00, max <= 1.03\t%s" % (
    v["geomean"], v["max"], v["max_shape"], "met" if v["pass"] else "MISSED"))
PY
  elif [ "$dry" = 1 ]; then
    python3 bench/gemm_vs_torch/gemm_vs_torch.py --self-test
    rc=$?
    summary "GEMM vs PyTorch" "no torch here: self-test exit $rc" "geomean <= 1.00, max <= 1.03" "-"
  else
    echo "torch not importable or $shim missing: not measured"
    summary "GEMM vs PyTorch" "not measured (torch or $shim missing)" \
      "geomean <= 1.00, max <= 1.03" "MISSED"
  fi
fi

# ---------------------------------------------------------------- 4. layers as daemon jobs
# layer_job NAME GRAPH_YAML: submits it, waits, leaves $OUT/layers/NAME.json; prints its id.
layer_job() {
  local name=$1 graph=$2
  timeout "$(budget "${LAYER_TIMEOUT_S:-240}")" overlapctl --addr "$addr" submit "$graph" --wait --json \
    > "$OUT/layers/$name.json" 2> "$OUT/layers/$name.err"
  local rc=$?
  [ "$rc" = 0 ] || { echo "$name: submit exit $rc" >&2; tail -3 "$OUT/layers/$name.err" >&2; }
  return $rc
}

# make_graph FILE PASS TP [graph flags]: a layer with $iterations timed iterations.
make_graph() {
  local file=$1 pass=$2 tp=$3
  shift 3
  overlapctl graph "$@" --tp "$tp" --pass "$pass" > "$file" || return 1
  sed -i "s/^iterations: .*/iterations: $iterations/" "$file"
  [ "$dry" = 1 ] && sed -i 's/^warmup: .*/warmup: 1/' "$file"
  return 0
}

# The figures of one layer job: step, op by op, limit and energy, as summary rows.
layer_figures() {
  python3 - "$@" << 'PY'
import json, re, sys
path, label = sys.argv[1], sys.argv[2]
act_path = sys.argv[3] if len(sys.argv) > 3 else ""
try:
    job = json.load(open(path))
except Exception as e:
    print("%s\tno report (%s)\t-\tMISSED" % (label, str(e)[:60]))
    sys.exit(0)
r = job.get("result") or {}
state = job.get("state", "?")
step = (r.get("layer_step") or {}).get("median_ms", 0)
serial = r.get("total_step_ms", 0)
print("%s: state\t%s, every op verified: %s\tSUCCEEDED\t%s" % (
    label, state, all(o.get("verified") for o in r.get("ops", [])),
    "met" if state == "SUCCEEDED" else "MISSED"))
if not step:
    sys.exit(0)
print("%s: layer step\t%.3f ms as one step, %.3f ms op by op (%+.1f%%)\t-\t-" % (
    label, step, serial, 100 * (step / serial - 1) if serial else 0))
# The limit: every GEMM alone plus each activation pass's bytes at the measured memory
# bandwidth (activation_bandwidth's best GB/s), else at the pass's own time in the step.
gemm_ms = sum(o["gemm_alone"]["median_ms"] for o in r.get("ops", [])
              if (o.get("gemm_alone") or {}).get("samples"))
best_gbps = 0
try:
    best_gbps = max(x["gbps"] for x in json.load(open(act_path))["rows"]) if act_path else 0
except Exception:
    pass
act_bytes = 0
for s in (r.get("layer_timeline") or {}).get("spans", []):
    m = re.match(r"(swiglu|gelu|copy)\s+(\d+)x(\d+)", s.get("name", "")) if s.get(
        "kind") == "elementwise" else None
    if m:
        rows, cols = int(m.group(2)), int(m.group(3))
        out_cols = cols // 2 if m.group(1) == "swiglu" else cols
        act_bytes += 2 * rows * (cols + out_cols)  # bf16 in and out
if best_gbps > 0:
    act_ms, how = act_bytes / (best_gbps * 1e9) * 1e3, "at %.0f GB/s" % best_gbps
else:
    act_ms, how = r.get("layer_activation_ms", 0), "as timed in the step"
limit = gemm_ms + act_ms
over = 100 * (step / limit - 1) if limit else 0
print("%s: step vs limit\t%.3f ms against %.3f ms (GEMMs alone %.3f + activations %.3f %s): %+.1f%%"
      "\t<= +3%%\t%s" % (label, step, limit, gemm_ms, act_ms, how, over,
                          "met" if over <= 3 else "MISSED"))
e = r.get("layer_energy") or {}
if e.get("steps"):
    line = "%.1f J per step at %.0f W" % (e.get("step_joules", 0), e.get("step_watts", 0))
    if e.get("serial_valid"):
        line += "; op by op %.1f J at %.0f W" % (e.get("serial_joules", 0), e.get("serial_watts", 0))
    if e.get("joules_per_tflop"):
        line += "; %.2f J/TFLOP" % e["joules_per_tflop"]
    print("%s: energy\t%s\treported\tmet" % (label, line))
else:
    print("%s: energy\tnone in the report (%s)\treported\tMISSED" % (label, e.get("note", "")))
PY
}

if skipped layers; then
  summary "layers" "skipped ($why)" "-" "-"
else
  step "4. llama3-8b and llama3-70b layers at tp 1, forward and backward"
  models="8b 70b"
  start_overlapd "$OUT/layers/overlapd.log" "${daemon_flags[@]}" "${one_device_flags[@]}" || {
    summary "layers" "the daemon did not start ($OUT/layers/overlapd.log)" "-" "MISSED"
    models=""
  }
  for model in $models; do
    name=llama3-$model-both
    flags=("${graph_8b[@]}")
    [ "$model" = 70b ] && flags=("${graph_70b[@]}")
    make_graph "$OUT/layers/$name.yaml" both 1 "${flags[@]}" || {
      summary "$name" "overlapctl graph failed" "-" "MISSED"
      continue
    }
    # Each GEMM alone also timed back to back (gemm_alone_sustain_ms): the limit at the clocks a
    # step that runs for seconds is held to.
    sustain=${SUSTAIN_MS:-$sustain_ms}
    [ "$sustain" != 0 ] && echo "gemm_alone_sustain_ms: $sustain" >> "$OUT/layers/$name.yaml"
    t0=$(date +%s)
    layer_job "$name" "$OUT/layers/$name.yaml"
    echo "$name: exit $? in $(($(date +%s) - t0)) s"
    layer_figures "$OUT/layers/$name.json" "$name" "$OUT/activation.json" |
      tee -a "$OUT/summary.tsv" | cut -f1,2
  done
  stop_daemon
fi

# ---------------------------------------------------------------- 5. planner on one GPU
if skipped planner; then
  summary "planner" "skipped ($why)" "-" "-"
else
  step "5. calibrate --devices 0, then bench and plan at tp 1"
  if ! start_overlapd "$OUT/planner/overlapd.log" "${daemon_flags[@]}" "${one_device_flags[@]}"; then
    summary "planner" "the daemon did not start ($OUT/planner/overlapd.log)" "-" "MISSED"
  else
    timeout "$(budget "${CALIBRATE_TIMEOUT_S:-200}")" overlapctl --addr "$addr" calibrate --devices 0 \
      "${calibrate_shapes[@]}" --output-file "$OUT/planner/calibration.json" \
      > "$OUT/planner/calibrate.txt" 2> "$OUT/planner/calibrate.err"
    rc=$?
    echo "calibrate exit $rc"
    tail -8 "$OUT/planner/calibrate.txt"
    tail -3 "$OUT/planner/calibrate.err"
    summary "calibrate --devices 0" "exit $rc: $(grep -v '^\s*$' "$OUT/planner/calibrate.txt" |
      tail -1 | cut -c1-100)" "succeeds on one GPU" "$([ "$rc" = 0 ] && echo met || echo MISSED)"
    make_graph "$OUT/planner/layer.yaml" forward 1 "${graph_8b[@]}"
    overlapctl --addr "$addr" plan "$OUT/planner/layer.yaml" > "$OUT/planner/plan.txt" 2>&1
    rc=$?
    echo "plan exit $rc"
    grep -iE "best|^graph|^layer|predict|why|one rank|tp 1" "$OUT/planner/plan.txt" | head -12
    summary "plan llama3-8b tp 1" "exit $rc: $(grep -iE 'layer step|predict' "$OUT/planner/plan.txt" |
      head -1 | cut -c1-100)" "predicts tp 1" "$([ "$rc" = 0 ] && echo met || echo MISSED)"
    timeout "$(budget 200)" overlapctl --addr "$addr" bench --devices 0 --shapes "$bench_shapes" --repeats 1 \
      --json-out "$OUT/planner/bench.json" > "$OUT/planner/bench.txt" 2> "$OUT/planner/bench.err"
    rc=$?
    echo "bench exit $rc"
    sed -n '/^predict/,/^prediction/p' "$OUT/planner/bench.txt" | head -20
    pred=$(grep -iE "^predictions?:" "$OUT/planner/bench.txt" | head -1 | cut -c1-110)
    summary "bench predictions at tp 1" "exit $rc: ${pred:-no prediction line}" \
      "a prediction beside each step" \
      "$([ "$rc" = 0 ] && [ -n "$pred" ] && ! grep -q 'predictions: none' <<< "$pred" && echo met || echo MISSED)"
    stop_daemon
  fi
fi

# ---------------------------------------------------------------- 6. flight recorder cost
if skipped flight; then
  summary "flight recorder" "skipped ($why)" "< 1% of the step" "-"
else
  # At tp 1 a layer issues no collective, so the recorder has nothing to record; tp 2 runs
  # two ranks on the one GPU (ranks_per_gpu 2: copies stand in for NCCL), whose collectives
  # the recorder does see. Daemons alternate off, on, off, on, ... per FLIGHT_PAIRS.
  step "6. the flight recorder's cost on the llama3-8b layer step"
  for tp in ${FLIGHT_TP:-1 2}; do
    ranks_flags=("${one_device_flags[@]}")
    [ "$tp" = 2 ] && ranks_flags=("${two_rank_flags[@]}")
    graph="$OUT/flight/layer-tp$tp.yaml"
    make_graph "$graph" both "$tp" "${graph_8b[@]}" || continue
    sed -i "s/^iterations: .*/iterations: ${FLIGHT_ITERATIONS:-40}/" "$graph"
    sed -i 's/^verify: .*//; s/^warmup: \(.*\)/warmup: \1\nverify: false/' "$graph"
    for pair in $(seq 1 "${FLIGHT_PAIRS:-1}"); do
      for entries in 0 2000; do
        name=flight-tp$tp-$entries-$pair
        start_overlapd "$OUT/flight/overlapd-$name.log" "${daemon_flags[@]}" "${ranks_flags[@]}" \
          --flight-recorder-entries "$entries" || continue
        layer_job "$name" "$graph"
        id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('id',''))" \
          "$OUT/layers/$name.json" 2> /dev/null)
        [ -n "$id" ] && overlapctl --addr "$addr" flight "$id" --json > "$OUT/flight/$name-rings.json" 2>&1
        stop_daemon
      done
    done
    python3 - "$OUT/layers" "$OUT/flight" "$tp" "${FLIGHT_PAIRS:-1}" >> "$OUT/summary.tsv" << 'PY'
import json, statistics, sys
layers, flight, tp, pairs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
label = "flight recorder cost (llama3-8b layer, tp %s%s)" % (tp, ", 2 ranks on 1 GPU" if tp == "2" else "")
steps = {0: [], 2000: []}
recorded = 0
for pair in range(1, pairs + 1):
    for entries in (0, 2000):
        name = "flight-tp%s-%d-%d" % (tp, entries, pair)
        try:
            r = json.load(open("%s/%s.json" % (layers, name)))["result"]
            steps[entries].append(r["layer_step"]["median_ms"])
        except Exception:
            pass
        if entries:
            try:
                rings = json.load(open("%s/%s-rings.json" % (flight, name)))
                recorded = max(recorded, sum(len(x.get("entries", [])) for x in rings.get("rings", [])))
            except Exception:
                pass
if not steps[0] or not steps[2000]:
    print("%s\tnot measured (%d off, %d on)\t< 1%% of the step\tMISSED" % (
        label, len(steps[0]), len(steps[2000])))
    sys.exit(0)
off, on = statistics.median(steps[0]), statistics.median(steps[2000])
diff = 100 * (on / off - 1)
print("%s\toff %.3f ms, on %.3f ms: %+.2f%% (runs off %s, on %s); %d entries in the rings"
      "\t< 1%% of the step\t%s" % (
          label, off, on, diff, ",".join("%.3f" % x for x in steps[0]),
          ",".join("%.3f" % x for x in steps[2000]), recorded, "met" if diff < 1 else "MISSED"))
PY
    tail -1 "$OUT/summary.tsv" | cut -f1,2
  done
fi

# ---------------------------------------------------------------- the table
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$OUT/gpu_after.csv" 2>&1
step "summary"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -1)
[ "$dry" = 1 ] && gpu="host backend (DRY_RUN: timings mean nothing)"
commit=$(overlapd --version 2> /dev/null | head -1)
python3 - "$OUT/summary.tsv" "$OUT/one_gpu_check.json" "$OUT/results/one-gpu-check.md" \
  "${gpu:-unknown GPU}" "${commit:-unknown}" "$(elapsed)" << 'PY'
import json, sys, time
tsv, json_out, md_out, gpu, commit, seconds = sys.argv[1:7]
rows = [line.rstrip("\n").split("\t") for line in open(tsv) if line.strip()]
rows = [r + ["-"] * (4 - len(r)) for r in rows]
heads = ["CHECK", "FIGURE", "TARGET", "VERDICT"]
width = [min(max(len(r[i]) for r in rows + [heads]), 110) for i in range(4)]
def line(r):
    return "  ".join(r[i][:width[i]].ljust(width[i]) for i in range(4)).rstrip()
print(line(heads))
print(line(["-" * w for w in width]))
for r in rows:
    print(line(r))
missed = [r[0] for r in rows if r[3] == "MISSED"]
print("\n%d checks, %d met, %d missed%s; %s, %s, %s s" % (
    len(rows), sum(r[3] == "met" for r in rows), len(missed),
    (": " + ", ".join(missed)) if missed else "", gpu, commit, seconds))
date = time.strftime("%Y-%m-%d", time.gmtime())
with open(md_out, "w") as f:
    f.write("# One-GPU check, %s\n\n`bash bench/one_gpu_check.sh` on %s, overlapd %s, %s s.\n\n" % (
        date, gpu, commit, seconds))
    f.write("| check | figure | target | verdict |\n| --- | --- | --- | --- |\n")
    for r in rows:
        f.write("| %s |\n" % " | ".join(x.replace("|", "/") for x in r))
json.dump({"date": date, "gpu": gpu, "overlapd": commit, "seconds": int(seconds),
           "checks": [dict(zip(["check", "figure", "target", "verdict"], r)) for r in rows]},
          open(json_out, "w"), indent=1)
PY
