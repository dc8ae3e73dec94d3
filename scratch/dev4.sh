set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
for ms in 300 1000 2000 4000; do
  echo "== preheat $ms ms"
  start_overlapd $OUT/overlapd.log --preheat-ms $ms
  for dt in fp8 bf16; do
    timeout 120 overlapctl --addr "$addr" submit scratch/g/shape-$dt.yaml --wait 2>&1 | grep -E '^(a_|b_|c_|d_|e_)[a-z]+ ' | awk '{print $1, $9, $11}' | tr '\n' ' '; echo
  done
  kill -TERM "$pid"; wait "$pid"
  sleep 5
done
