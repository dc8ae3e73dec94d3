set -uo pipefail
tar -xJf .devpack/device.tar.xz
source .device/env.sh
R=$OUT/r; mkdir -p $R
source bench/overlapd_util.sh
start_overlapd $R/overlapd.log
timeout 240 overlapctl --addr "$addr" bench --dtype fp8 --json-out $R/bench-fp8.json > $R/bench-fp8.txt 2>$R/bench-fp8.err
echo "bench fp8 rc=$?"
timeout 200 python3 bench/peers/torch_fp8_gemm.py --tp 1 --json $R/torch-fp8.json > $R/torch-fp8.txt 2>&1
echo "torch rc=$?"
kill -TERM "$pid"; wait "$pid"
GRAPH_FLAGS="--dtype fp8" timeout 200 bash bench/model_graphs.sh llama3-70b:both > $R/layers-fp8.txt 2>&1
echo "layers rc=$?"; grep -E '^layer:' $OUT/llama3-70b-both.txt; cp $OUT/llama3-70b-both.txt $R/
tar czf $OUT/results.tar.gz -C $OUT r
