set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
start_overlapd $OUT/overlapd.log
for dt in fp8 bf16; do
  timeout 120 overlapctl --addr "$addr" submit scratch/g/shape-$dt.yaml --wait 2>&1 | grep -E '^(a_|b_|c_|d_|e_)|layer' | cut -c1-150
done
kill -TERM "$pid"; wait "$pid"
for shape in "8192 10240 8192"; do timeout 60 gemm_algos $shape 300 fp8 2>&1 | tail -12; done
