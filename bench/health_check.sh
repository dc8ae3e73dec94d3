#!/usr/bin/env bash
# A short device check of the daemon's NVML health readings against
# nvidia-smi's: PCIe link, NVLink states and error counters, ECC, row remaps;
# an Xid made on purpose (xid_probe), counted again after a restart, then
# forgotten (health --forget-xids) for good; then `overlapctl check` for its health
# findings. Pack with EXTRA_TARGETS=xid_probe. Run with the device bundle
# unpacked (see pack-device.sh).
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source bench/overlapd_util.sh
start_overlapd "$OUT/overlapd.log"
overlapctl --addr "$addr" node | tee "$OUT/node.txt"
overlapctl --addr "$addr" --json node > "$OUT/node.json"
echo "== nvidia-smi"
for f in pcie.link.gen.current pcie.link.gen.max pcie.link.width.current pcie.link.width.max \
         ecc.errors.corrected.volatile.total ecc.errors.uncorrected.volatile.total \
         remapped_rows.pending remapped_rows.failure; do
  echo "$f: $(nvidia-smi --query-gpu="$f" --format=csv,noheader 2>&1 | tr '\n' ' ')"
done
nvidia-smi -q -d PCIE | grep -iE 'replay' | head -4
echo "links active: $(nvidia-smi nvlink -s 2>&1 | grep -c 'GB/s')"
echo "links inactive: $(nvidia-smi nvlink -s 2>&1 | grep -ci 'inactive')"
nvidia-smi nvlink -s 2>&1 | head -4
nvidia-smi nvlink -e 2>&1 > "$OUT/nvlink-errors.txt"
python3 - "$OUT/nvlink-errors.txt" <<'PY'
import re, sys
sums = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*(.+?)\s*:\s*(\d+)\s*$", line)
    if m:
        sums[m.group(1)] = sums.get(m.group(1), 0) + int(m.group(2))
print("nvlink -e sums:", sums)
PY
python3 - "$OUT/node.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
print("ours:", {k: v for k, v in d.items() if k.startswith(("pcie", "nvlink", "ecc", "row"))})
PY
echo "== Xid: a process faults on purpose (bench/probes/xid_probe.cu, Xid 31, an application's)"
xid_probe 0; echo "xid_probe exit $?"
sleep 2
overlapctl --addr "$addr" health; echo "health exit $?"
overlapctl --addr "$addr" --json health
dmesg 2>/dev/null | grep -i xid | tail -3
echo "== the Xid count after a restart on the same state directory (kept in xids.db)"
restart_overlapd "$OUT/overlapd.log"
xids() { overlapctl --addr "$addr" --json health | python3 -c "import json,sys; print('$1:', json.load(sys.stdin)['devices'][0]['health'].get('xid'))"; }
xids "after restart"
overlapctl --addr "$addr" health --forget-xids 0; echo "forget exit $?"
xids "after forget"
restart_overlapd "$OUT/overlapd.log"
xids "after forget and restart"
echo "== check"
overlapctl --addr "$addr" check --iterations 20; echo "check exit $?"
overlapctl --addr "$addr" check --iterations 5 --json | python3 -c "import json,sys; j=json.load(sys.stdin); print(j['unhealthy_gpus'], j['gpus'][0].get('health'), j['gpus'][0].get('health_problems'))"
kill -TERM "$pid"; wait "$pid"; echo "overlapd exit $?"
grep -iE 'nvml|xid|error' "$OUT/overlapd.log" | head -8
