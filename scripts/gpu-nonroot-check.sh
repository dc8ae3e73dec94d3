#!/usr/bin/env bash
# On a GPU node, as root: runs overlapd's GPU tests and the main job as an
# unprivileged uid (65534, no capabilities, no new privileges, no groups), the
# way deploy/overlapd.service runs the daemon, and checks that /metrics names
# the GPUs as nvidia-smi does (dcgm-exporter's labels). Binaries come from
# PATH (a device bundle's .device/env.sh, or an install). Results go to
# OUT (default ./nonroot-check).
#
#   sudo OUT=/tmp/result bash scripts/gpu-nonroot-check.sh [TEST_BINARY...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/nonroot-check}
mkdir -p "$out"
work=$(mktemp -d /tmp/overlapd-nonroot.XXXXXX)
chown 65534:65534 "$work"
as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs
         --inh-caps=-all --bounding-set=-all)

nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader > "$out/nvidia-smi.csv"
"${as_user[@]}" id > "$out/id.txt"

# The main job: the daemon and the client both unprivileged.
addr="unix:$work/overlapd.sock"
"${as_user[@]}" overlapd --listen "$addr" --state-dir "$work/state" \
  --metrics-listen 127.0.0.1:19464 > "$out/overlapd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 300); do
  "${as_user[@]}" overlapctl --addr "$addr" node > "$out/node.txt" 2>&1 && break
  sleep 0.2
done
"${as_user[@]}" overlapctl --addr "$addr" submit deploy/graphs/llama70b-mlp.yaml --wait \
  > "$out/main-job.txt" 2>&1
echo "main job exit: $?" >> "$out/main-job.txt"
python3 - "$out" <<'PY'
import sys, urllib.request
out = sys.argv[1]
for path in ("/metrics", "/healthz"):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:19464" + path, timeout=10).read().decode()
    except Exception as e:
        body = f"error: {e}\n"
    open(f"{out}/{path.strip('/')}.txt", "w").write(body)
PY
kill -TERM "$daemon"; wait "$daemon"; echo "daemon exit: $?" >> "$out/overlapd.log"

# The GPU tests, each bounded.
for test in "$@"; do
  echo "== $test" >> "$out/gpu-tests.txt"
  (cd "$work" && timeout 240 "${as_user[@]}" "$test") > "$out/$(basename "$test").log" 2>&1
  echo "exit $?" >> "$out/gpu-tests.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]' "$out/$(basename "$test").log" \
    >> "$out/gpu-tests.txt"
done
rm -rf "$work"
