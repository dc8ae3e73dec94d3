#!/usr/bin/env bash
# Fits the planner's calibration of the two H200s from recorded figures only
# (no bench row of the judged sweeps), into $1: shared by planner_replay.sh
# and what_if_sources.sh. The figures:
# - collectives alone on the two H200s (commbench, 2026-12-01);
# - GEMM alone per shape on one H200 (bench at tp 1, 2026-12-02);
# - the GEMM's slowdown beside NCCL (+20%) and beside copy-engine copies
#   (+10.6%), 2x H200 2026-11-30 (../shared/DEVICE.md's ceilings);
# - a piece's fixed cost, 4 us: a GEMM piece boundary 2-4 us on one H200
#   (docs/results/piece-edges-h200-2026-12-01.txt), a cross-device hand-off 4-5 us.
set -euo pipefail
cd "$(dirname "$0")/.."
OVERLAPCTL=${OVERLAPCTL:-build/client/overlapctl}
R=docs/results
"$OVERLAPCTL" calibrate \
  --from "$R/commbench-h200x2-2026-12-01.json" "$R/fp8-bench-bf16-tp1-2026-12-02.json" \
  --gemm-slowdown nccl=1.20,p2p=1.106 --piece-overhead-ms 0.004 --output-file "$1"
