#!/usr/bin/env bash
# The mesh through the real daemon on one GPU: deploy/graphs/mesh-host.yaml
# with four ranks on the GPU (ranks_per_gpu 4: copies stand in for NCCL, so
# the timings mean nothing, the float64 checks do), then a 1 x 1 mesh beside
# the same graph without one at one rank: the same schedules and checks.
# Usage on the GPU machine, from the repo root: bash bench/probes/mesh_check.sh
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
dir=$(mktemp -d)
run_daemon() {  # ranks_per_gpu, name
  overlapd --backend cuda --ranks-per-gpu "$1" --listen "unix:$dir/$2.sock" --state-dir "$dir/$2" \
    > "$OUT/overlapd-$2.log" 2>&1 &
  for _ in $(seq 100); do overlapctl --addr "unix:$dir/$2.sock" node > /dev/null 2>&1 && return; sleep 0.2; done
}
run_daemon 4 mesh
overlapctl --addr "unix:$dir/mesh.sock" submit deploy/graphs/mesh-host.yaml --wait > "$OUT/mesh-report.txt" 2>&1
echo "mesh tp2 x dp2 on 4 ranks of one GPU: exit $?"
grep -E "^(mesh|layer|deferred)|verify|FAIL" "$OUT/mesh-report.txt" | head -8
overlapctl --addr "unix:$dir/mesh.sock" list --json > /dev/null
kill %1; wait
ops='ops:
  - {id: fc1, type: ag_gemm, m: 4096, k: 4096, n: 4096}
  - {id: ar, type: all_reduce, m: 1024, n: 4096, after: [fc1]}'
printf 'name: plain\ndtype: bf16\n%s\n' "$ops" > "$dir/plain.yaml"
printf 'name: one-by-one\ndtype: bf16\nmesh: {tp: 1, dp: 1}\n%s\n' "$ops" > "$dir/mesh11.yaml"
run_daemon 1 one
for g in plain mesh11; do
  overlapctl --addr "unix:$dir/one.sock" submit "$dir/$g.yaml" --wait --json > "$OUT/$g.json" 2> "$OUT/$g.progress.log"
  echo "$g exit $?: $(python3 -c "import json,sys; r=json.load(open('$OUT/$g.json'))['result']; print([(o['id'], o['schedule'], o.get('verified'), round(o['step']['median_ms'],3)) for o in r['ops']])")"
done
kill %1; wait
