set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
for flags in "" "--no-graph-replay" "--no-programmatic-edges" ""; do
  echo "== daemon flags: '$flags'"
  start_overlapd $OUT/overlapd.log $flags
  for dt in fp8 bf16; do
    timeout 120 overlapctl --addr "$addr" submit scratch/g/shape-$dt.yaml --wait 2>&1 | grep -E '^(a_|b_|c_|d_|e_)[a-z]+ ' | cut -c1-110
  done
  kill -TERM "$pid"; wait "$pid"
done
