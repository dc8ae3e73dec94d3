#!/usr/bin/env bash
# The job store under load, empty and full: one daemon (host backend, 4
# devices, default retention of 10,000 finished jobs), measured by
# build/bench/store_load with submitters and getters at once, first on an
# empty store, then after filling it past keep_finished_jobs so that every
# job's end has pruning to do. Prints both rows and the ratios the daemon is
# held to: submissions/s at 10k stored >= 80% of the empty store's, and GetJob
# p99 <= 30 ms.
#
#   bash bench/store_load.sh                 (SECONDS_PER_RUN=20 FILL=10500)
# Results: $OUT/store-load.json (JSON lines) and the daemon's log.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
FILL=${FILL:-10500}
mkdir -p "$OUT"
cmake --build build -j"$(nproc)" --target overlapd store_load >/dev/null

work=$(mktemp -d /tmp/store-load.XXXXXX)
addr="unix:${work}/s.sock"
build/server/overlapd --backend host --host-devices 4 --listen "$addr" \
  --state-dir "${work}/state" --max-queued-jobs 100000 >"$OUT/store-load-daemon.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  build/client/overlapctl --addr "$addr" node >/dev/null 2>&1 && break
  sleep 0.1
done

json=$OUT/store-load.json
: > "$json"
build/bench/store_load --addr "$addr" --seconds "$SECONDS_PER_RUN" --label empty --json "$json"
echo "store-load: filling the store with ${FILL} jobs..."
build/bench/store_load --addr "$addr" --fill "$FILL" --label fill >/dev/null
build/bench/store_load --addr "$addr" --seconds "$SECONDS_PER_RUN" --label full --json "$json"
python3 - "$json" <<'PY'
import json, sys
rows = {r["label"]: r for r in map(json.loads, open(sys.argv[1]))}
empty, full = rows["empty"], rows["full"]
ratio = full["submits_per_s"] / empty["submits_per_s"]
at = f"after {full['stored_before']} jobs (10,000 finished kept, the rest pruned)"
print(f"submissions/s {at}: {ratio:.0%} of the empty store's "
      f"(target >= 80%): {'met' if ratio >= 0.8 else 'NOT met'}")
print(f"GetJob p99 {at}: {full['get_p99_ms']:.2f} ms "
      f"(target <= 30 ms): {'met' if full['get_p99_ms'] <= 30 else 'NOT met'}")
PY
