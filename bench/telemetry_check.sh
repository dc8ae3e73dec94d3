#!/usr/bin/env bash
# A short device check of the daemon's NVML telemetry: `overlapctl node` before
# and after a two-shape bench, and the bench JSON's telemetry fields.
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source bench/overlapd_util.sh
start_overlapd "$OUT/overlapd.log"
overlapctl --addr "$addr" node
timeout 200 overlapctl --addr "$addr" bench --shapes ag_gemm:8192x8192x28672,gemm_ar:4096x8192x8192 \
  --repeats 1 --json-out "$OUT/bench.json" 2> "$OUT/bench.err"
python3 -c "import json; j=json.load(open('$OUT/bench.json')); print('before', j['telemetry_before']); print('after', j['telemetry_after']); print('commit', j['git_commit'])"
overlapctl --addr "$addr" node | tail -3
kill -TERM "$pid"; wait "$pid"; echo "overlapd exit $?"
grep -i nvml "$OUT/overlapd.log"
