set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
start_overlapd $OUT/overlapd.log
overlapctl --addr "$addr" top --interval 0.1 > $OUT/top.txt 2>&1 &
top_pid=$!
timeout 120 overlapctl --addr "$addr" submit scratch/g/shape-fp8.yaml --wait 2>&1 | grep -E '^(a_|b_|c_|d_|e_)[a-z]+ ' | awk '{print $1, $9, $11}' | tr '\n' ' '; echo
kill $top_pid
kill -TERM "$pid"; wait "$pid"
# phases with SM clock and power: print one line per change of (op, phase)
python3 - $OUT/top.txt <<'PY'
import sys
lines=open(sys.argv[1]).read().splitlines()
print(lines[0])
prev=None; buf=[]
for l in lines[1:]:
    f=l.split()
    if len(f)<12: continue
    key=" ".join(f[9:11])
    if key!=prev:
        if buf: print(prev, "| sm", min(buf), "-", max(buf), "n", len(buf))
        prev=key; buf=[]
    try: buf.append(int(f[2]))
    except: pass
if buf: print(prev, "| sm", min(buf), "-", max(buf), "n", len(buf))
PY
head -3 $OUT/top.txt; sed -n '40,45p' $OUT/top.txt
