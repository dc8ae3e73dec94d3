set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
sleep 10  # an idle GPU, as a new daemon meets it
start_overlapd $OUT/overlapd.log --log-level debug
for i in 1 2; do
  timeout 120 overlapctl --addr "$addr" submit scratch/g/shape-fp8.yaml --wait 2>&1 | grep -E '^[a-z]+_?[a-z0-9]* +(gemm|ag_gemm|gemm_rs) ' | awk '{print $1, $9, $11}' | tr '\n' ' '; echo
done
kill -TERM "$pid"; wait "$pid"
grep -E 'candidates|job-0000[12].*(start|running|succeeded)|phase' $OUT/overlapd.log | cut -c1-200 | head -20
