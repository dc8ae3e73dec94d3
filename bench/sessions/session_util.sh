# Sourced by the sessions' GPU scripts (gpu_check.sh, graphs_check.sh), after
# bench/overlapd_util.sh started a daemon ($work, $addr, $pid set).

# session_rank NAME GRAPH RANK STEPS OUTDIR [flags]: one overlapd-session-rank
# process, its outputs under OUTDIR, --json on stdout.
session_rank() {
  local name=$1 graph=$2 r=$3 steps=$4 dir=$5
  shift 5
  mkdir -p "$dir"
  timeout 300 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "$name" \
    --graph "$graph" --rank "$r" --steps "$steps" --out-dir "$dir" --json "$@"
}

# tp2_against_torch DIR STEPS: the tp 2 MLP of bench/sessions/tp2_mlp.yaml as two rank
# processes on the daemon's GPU (started with --ranks-per-gpu 2), each posting STEPS steps, their
# outputs checked against PyTorch (reference.py) into DIR/reference.json.
tp2_against_torch() {
  local dir=$1 steps=$2 r0
  session_rank mlp bench/sessions/tp2_mlp.yaml 0 "$steps" "$dir" --dump-inputs \
    > "$dir/rank0.json" 2> "$dir/rank0.err" &
  r0=$!
  session_rank mlp bench/sessions/tp2_mlp.yaml 1 "$steps" "$dir" --dump-inputs \
    > "$dir/rank1.json" 2> "$dir/rank1.err"
  echo "rank 1 exit $?"; wait $r0; echo "rank 0 exit $?"
  cat "$dir/rank0.err" "$dir/rank1.err" | head -5
  python3 bench/sessions/reference.py "$dir" | tee "$dir/reference.json"
}
