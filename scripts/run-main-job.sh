#!/usr/bin/env bash
# The main job, end to end, without root: install the build dependencies, build
# overlapd and overlapctl (Release) into build/, start the daemon with its
# built-in default config on a private unix socket and state dir, submit the
# bundled layer graph (Llama-70B MLP on a CUDA node, the small host graph
# elsewhere), print its report, stop the daemon. Exits with overlapctl's status.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target overlapd overlapctl

overlapd=build/server/overlapd
overlapctl=build/client/overlapctl
work=$(mktemp -d /tmp/overlapd-main.XXXXXX)
addr="unix:${work}/overlapd.sock"
log=build/overlapd-main-job.log
daemon_pid=""

cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "run-main-job: starting overlapd on ${addr} (log: ${log})"
"$overlapd" --listen "$addr" --state-dir "${work}/state" </dev/null >"$log" 2>&1 &
daemon_pid=$!

ready=0
for _ in $(seq 1 300); do
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "run-main-job: overlapd exited during startup; its log:" >&2
    cat "$log" >&2
    daemon_pid=""
    exit 2
  fi
  if "$overlapctl" --addr "$addr" node >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.1
done
if [ "$ready" -ne 1 ]; then
  echo "run-main-job: overlapd did not answer within 30 s; its log:" >&2
  cat "$log" >&2
  exit 2
fi

"$overlapctl" --addr "$addr" node
backend=$("$overlapctl" --addr "$addr" node | awk '$1 == "backend:" {print $2}')
if [ "$backend" = "cuda" ]; then
  graph=deploy/graphs/llama70b-mlp.yaml
else
  graph=deploy/graphs/default-host.yaml
fi
echo
echo "run-main-job: backend ${backend}: submitting ${graph}"
status=0
"$overlapctl" --addr "$addr" submit "$graph" --wait || status=$?

kill -TERM "$daemon_pid"
daemon_status=0
wait "$daemon_pid" || daemon_status=$?
daemon_pid=""
if [ "$daemon_status" -ne 0 ]; then
  echo "run-main-job: overlapd exited with status ${daemon_status}; see ${log}" >&2
fi
exit "$status"
