#!/usr/bin/env bash
# Judges the planner offline on the recorded two-GPU sweeps (issue 41): fits a
# calibration from the recorded commbench and GEMM figures only (the bench
# rows are held out), has `overlapctl plan --replay` predict every candidate
# each recorded run measured, and checks with bench/planner_replay.py that
# the candidates `auto` would measure hold one within 2% of the run's best on
# >= 90% of shapes while measuring <= a third of them, and that the predicted
# step errs by <= 10% in median. Needs no daemon and no GPU.
#
#   bash bench/planner_replay.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OVERLAPCTL=${OVERLAPCTL:-build/client/overlapctl}
OUT=${1:-${OUT:-/tmp/planner-replay}}
mkdir -p "$OUT"
R=docs/results
bash bench/recorded_calibration.sh "$OUT/calibration.json"
replays=()
for run in ${PLANNER_RUNS:-27 28 29}; do
  "$OVERLAPCTL" plan --calibration "$OUT/calibration.json" \
    --replay "$R/bench-h200x2-2026-12-01-run$run-heat.json" > "$OUT/replay-run$run.json"
  replays+=("$OUT/replay-run$run.json")
done
python3 bench/planner_replay.py "${replays[@]}" --json "$OUT/verdict.json"
