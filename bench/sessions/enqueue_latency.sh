#!/usr/bin/env bash
# A session command's host time beside a gRPC round trip (issue 56): starts a
# daemon (host backend unless OVERLAPD_BACKEND says otherwise) and runs
# session_enqueue_latency against its session and gRPC sockets.
#   bash bench/sessions/enqueue_latency.sh [OUT_DIR] [session_enqueue_latency flags...]
# Writes OUT_DIR/enqueue_latency.json and the daemon's log; prints the table.
# Binaries: overlapd, overlapctl and session_enqueue_latency from $PATH or build/.
# On CUDA the session is tp 1: give the daemon one GPU (CUDA_VISIBLE_DEVICES=0).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${1:-/tmp/enqueue-latency}
shift || true
mkdir -p "$out"
export PATH="$PATH:$PWD/build/server:$PWD/build/client:$PWD/build/bench"
export OVERLAPD_BACKEND=${OVERLAPD_BACKEND:-host}
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
flags=()
# A tp 1 session uses one device: the host backend simulates just that one.
[ "$OVERLAPD_BACKEND" = host ] && flags=(--host-devices 1)
start_overlapd "$out/overlapd.log" "${flags[@]}" || exit 1
trap 'kill -TERM "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; rm -rf "$work"' EXIT
timeout 600 session_enqueue_latency --socket "$work/overlapd-session.sock" --addr "$addr" \
  --json "$out/enqueue_latency.json" "$@"
status=$?
overlapctl --addr "$addr" sessions -o json > "$out/sessions.json" 2>&1
exit $status
