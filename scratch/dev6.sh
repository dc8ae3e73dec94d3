set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
start_overlapd $OUT/overlapd.log
for g in tiny-first gemm-first shape-fp8 tiny-first; do
  echo "== $g"
  timeout 120 overlapctl --addr "$addr" submit scratch/g/$g.yaml --wait 2>&1 | grep -E '^[a-z]+_?[a-z0-9]* +(gemm|ag_gemm|gemm_rs) ' | awk '{print $1, $9, $11}' | tr '\n' ' '; echo
done
kill -TERM "$pid"; wait "$pid"
