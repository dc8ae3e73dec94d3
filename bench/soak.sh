#!/usr/bin/env bash
# Soak: one daemon runs many small jobs, and what it holds must not grow. Each
# round submits the five mode examples (deploy/graphs/mode-*.yaml) and waits for
# them, has one job refused (too big) and cancels one; every EVERY rounds it
# samples the daemon's resident memory, open files and threads, its pools' use
# and, on a GPU machine, the GPU memory the process holds. A leak shows as a
# column that climbs after the first sample's warm-up (tuning, caches).
#
#   ROUNDS=90 EVERY=15 bash bench/soak.sh       (GPU machine, after device-bundle)
#   OVERLAPD_BACKEND=host bash bench/soak.sh    (here, on the host backend)
#
# SOAK_CONFIG: the daemon's config (default: two ranks per GPU on cuda, so the
# multi-rank schedules run on a one-GPU machine). Results: $OUT/soak.txt.
set -uo pipefail
[ -f .device/env.sh ] && source .device/env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source bench/overlapd_util.sh
config=$(mktemp)
if [ "${OVERLAPD_BACKEND:-cuda}" = cuda ]; then
  printf '%s\n' "${SOAK_CONFIG:-ranks_per_gpu: 2}" > "$config"
else
  printf '%s\n' "${SOAK_CONFIG:-host_device_count: 2}" > "$config"
fi
start_overlapd "$OUT/soak-daemon.log" --config "$config" || exit 1
export OVERLAPD_ADDR=$addr
log=$OUT/soak.txt
: > "$log"

sample() {  # sample LABEL SUBMITTED
  local rss fds threads pool gpu
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  threads=$(awk '/Threads/ {print $2}' "/proc/$pid/status")
  pool=$(overlapctl node --json | python3 -c \
    'import json, sys; print(sum(int(d["memory_used_bytes"]) for d in json.load(sys.stdin)["devices"]))')
  gpu=-
  if command -v nvidia-smi > /dev/null; then
    gpu=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader |
      awk -F', ' -v p="$pid" '$1 == p {print $2}')
  fi
  printf '%-8s submitted %4d  rss %7d KiB  fds %3d  threads %3d  pool used %10d B  gpu %s  t %4d s\n' \
    "$1" "$2" "$rss" "$fds" "$threads" "$pool" "${gpu:--}" "$SECONDS" | tee -a "$log"
}

huge='name: huge
ops:
  - {id: a, type: ag_gemm, m: 1048576, k: 65536, n: 65536}'
sample start 0
submitted=0
failures=0
for round in $(seq 1 "${ROUNDS:-12}"); do
  for graph in deploy/graphs/mode-{serial,bulk,chunked,ring,auto}.yaml; do
    if ! overlapctl submit "$graph" --wait > "$OUT/soak-last.txt" 2>&1; then
      failures=$((failures + 1))
      { echo "FAILED: $graph"; tail -5 "$OUT/soak-last.txt"; } | tee -a "$log"
    fi
  done
  # Refused with RESOURCE_EXHAUSTED; then one cancelled while it runs or waits.
  echo "$huge" | overlapctl submit - > /dev/null 2>&1 && { echo "huge job accepted" | tee -a "$log"; failures=$((failures + 1)); }
  id=$(overlapctl submit deploy/graphs/mode-auto.yaml)
  sleep 0.2
  overlapctl cancel "$id" > /dev/null
  submitted=$((submitted + 7))
  [ $((round % ${EVERY:-3})) = 0 ] && sample "round $round" "$submitted"
done
overlapctl stats | tee -a "$log"
kill -TERM "$pid"
wait "$pid"
echo "overlapd exit $? (0 = drained cleanly); jobs that failed: $failures" | tee -a "$log"
errors=$(grep -E '\[(error|critical)\]' "$OUT/soak-daemon.log" | head -5)
[ -n "$errors" ] && echo "daemon log errors: $errors" | tee -a "$log"
rm -f "$config"
[ "$failures" = 0 ] && [ -z "$errors" ]
