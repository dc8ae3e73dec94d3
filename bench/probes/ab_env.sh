#!/usr/bin/env bash
# A/B of daemon environments in one device call: starts one daemon per variant,
# runs `overlapctl bench` on SHAPES, interleaved over ROUNDS (default 2), and
# collects the op lines per variant in $OUT/ab.txt (daemon logs in logs.tgz).
# A variant is NAME:ITEM[,ITEM...], each ITEM an environment setting VAR=VALUE,
# a daemon flag (--no-launch-gate) or a bench flag (bench:--chunks=3);
# OVERLAPD_FLAGS go to every daemon;
# BENCH_FLAGS go to every `overlapctl bench` (e.g. --transport nccl --no-verify);
# BUDGET_S (default 480) stops starting new runs once spent.
# Usage: VARIANTS="base:X=1 ch8:NCCL_MAX_NCHANNELS=8" SHAPES=gemm_ar:8192x4096x4096 \
#          bash bench/probes/ab_env.sh
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    name=${v%%:*}; vars=(); flags=(); bench_flags=()
    for item in $(echo "${v#*:}" | tr ',' ' '); do
      case $item in
        bench:*) bench_flags+=("${item#bench:}") ;;
        --*) flags+=("$item") ;;
        *) vars+=("$item") ;;
      esac
    done
    if (( $(date +%s) - start > ${BUDGET_S:-480} )); then echo "budget spent before $name round $round"; break 2; fi
    work=$(mktemp -d /tmp/ab.XXXXXX); addr="unix:$work/d.sock"
    env "${vars[@]}" overlapd --backend cuda --listen "$addr" --state-dir "$work/state" \
      ${OVERLAPD_FLAGS:-} "${flags[@]}" \
      > "$OUT/overlapd-$name-$round.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do overlapctl --addr "$addr" node > /dev/null 2>&1 && break; sleep 0.1; done
    t0=$(date +%s)
    timeout 200 overlapctl --addr "$addr" bench --shapes "$SHAPES" --repeats "${REPEATS:-1}" ${BENCH_FLAGS:-} \
      "${bench_flags[@]}" \
      > "$work/bench.txt" 2> "$work/bench.err"
    echo "== $name round $round ($(( $(date +%s) - t0 )) s, exit $?)" | tee -a "$OUT/ab.txt"
    grep -E "^(ag_gemm|gemm_rs|gemm_ar)" "$work/bench.txt" | tee -a "$OUT/ab.txt"
    tail -2 "$work/bench.err" >> "$OUT/ab.txt"
    kill -TERM "$pid"; wait "$pid"
  done
done
(cd "$OUT" && tar -czf logs.tgz --remove-files overlapd-*.log)
