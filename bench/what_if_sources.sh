#!/usr/bin/env bash
# The planner's answers to the sources' what-if figures (a dense 70B model at
# SP = TP = 8 on 8x H800; TP scaling on 8x H100), from the calibration fitted
# to the recorded two-H200 figures, assumptions beside each figure.
#   bash bench/what_if_sources.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp/what-if-sources}}
mkdir -p "$OUT"
bash bench/recorded_calibration.sh "$OUT/calibration.json" > /dev/null
python3 bench/what_if_sources.py --calibration "$OUT/calibration.json" \
  --overlapctl "${OVERLAPCTL:-build/client/overlapctl}" --json "$OUT/what-if.json"
