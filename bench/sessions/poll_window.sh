#!/usr/bin/env bash
# The session lanes' poll window (session_poll_ms) against a training loop's
# pace (issue 56): one tp 1 rank (overlapd-session-rank) steps a small GEMM
# STEPS times, pausing INTERVAL_MS between steps, against a daemon started
# once per window in WINDOWS. Prints, per window, the rank's call to the
# enqueue and, of it, to the lanes taking the command (p50, p99 over the steps
# after the first, from the ring's stamps), and the daemon's count of
# commands taken while polling against after a wake-up.
#   [OVERLAPD_BACKEND=host] [WINDOWS="0 5 100"] [STEPS=300] [INTERVAL_MS=6] \
#     bash bench/sessions/poll_window.sh [OUT_DIR]
# Binaries: overlapd, overlapctl, overlapd-session-rank from $PATH or build/.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${1:-/tmp/poll-window}
mkdir -p "$out"
export PATH="$PATH:$PWD/build/server:$PWD/build/client:$PWD/build/client/session"
export OVERLAPD_BACKEND=${OVERLAPD_BACKEND:-host}
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
steps=${STEPS:-300}
interval=${INTERVAL_MS:-6}
graph="$out/graph.yaml"
printf 'name: poll-window\ndtype: fp32\nmesh: {tp: 1, dp: 1}\nops:\n  - {id: g, type: gemm, m: 64, k: 64, n: 64}\n' > "$graph"
flags=()
[ "$OVERLAPD_BACKEND" = host ] && flags=(--host-devices 1)
printf '%-10s %8s %14s %14s %12s %12s %9s %9s\n' POLL_MS STEPS ENQUEUE_P50_US ENQUEUE_P99_US \
  TAKE_P50_US TAKE_P99_US POLLED WOKEN
for window in ${WINDOWS:-0 5 100}; do
  log="$out/overlapd-$window.log"
  : > "$log"
  start_overlapd "$log" --session-poll-ms "$window" "${flags[@]}" || exit 1
  timeout 300 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "poll$window" \
    --graph "$graph" --rank 0 --steps "$steps" --interval-ms "$interval" --json \
    > "$out/rank-$window.json" 2> "$out/rank-$window.err"
  status=$?
  sleep 0.5  # the daemon logs the session's figures once it has ended
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  rm -rf "$work"
  if [ "$status" -ne 0 ]; then
    echo "window $window: the rank exited $status: $(head -c 300 "$out/rank-$window.err")" >&2
    continue
  fi
  python3 - "$out/rank-$window.json" "$log" "$window" "$steps" << 'PY'
import json, re, sys
rank = json.load(open(sys.argv[1]))
counts = re.findall(r"commands taken polling (\d+), after a wake-up (\d+)", open(sys.argv[2]).read())
polled, woken = counts[-1] if counts else ("-", "-")
print("%-10s %8s %14.1f %14.1f %12.1f %12.1f %9s %9s" % (
    sys.argv[3], sys.argv[4], rank["enqueue_p50_us"], rank["enqueue_p99_us"],
    rank["take_p50_us"], rank["take_p99_us"], polled, woken))
PY
done
