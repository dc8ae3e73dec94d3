set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
source bench/overlapd_util.sh
start_overlapd $OUT/overlapd.log --log-level debug
for i in 1 2; do
  timeout 120 overlapctl --addr "$addr" --json submit scratch/g/shape-fp8.yaml --wait > $OUT/job$i.json 2>/dev/null
done
kill -TERM "$pid"; wait "$pid"
python3 - $OUT/job1.json $OUT/job2.json <<'PY'
import json,sys
for f in sys.argv[1:]:
    j=json.load(open(f))
    res=j.get('result') or j.get('job',{}).get('result')
    for op in res['ops'][:3]:
        keys=[k for k in op.keys()]
        print(f, op.get('id') or op.get('opId'), {k: (op[k] if not isinstance(op[k],(dict,list)) else '...') for k in keys if 'ms' in k.lower() or 'reason' in k.lower()})
        for k in ('step','gemmAlone'):
            if k in op: print('   ', k, op[k])
PY
grep -iE 'GEMM .*candidates|tun' $OUT/overlapd.log | head -12
