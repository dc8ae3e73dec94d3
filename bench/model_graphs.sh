#!/usr/bin/env bash
# Runs public models' decoder layers through the daemon: for each "model:pass"
# (pass forward, backward or both; default both), `overlapctl graph` writes the
# layer for every GPU the daemon has, `submit --wait` runs and verifies it, and
# the report lands in $OUT/<model>-<pass>.txt (with its JSON). Exit status 1
# when a job did not succeed.
#   bash bench/model_graphs.sh llama3-8b:both llama3-70b:forward
# OVERLAPD_FLAGS adds daemon flags (e.g. "--ranks-per-gpu 2"), GRAPH_FLAGS
# graph flags (e.g. "--grads" or "--seq 4096"); model "custom" takes its
# dimensions from GRAPH_FLAGS ("--hidden 5120 --ffn 13824 --heads 40"). Run with the device bundle
# unpacked (see pack-device.sh); OVERLAPD_BACKEND=host tries it here.
set -uo pipefail
command -v overlapctl > /dev/null || source .device/env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source bench/overlapd_util.sh
# shellcheck disable=SC2086  # the flags are meant to split
start_overlapd "$OUT/overlapd.log" ${OVERLAPD_FLAGS:-} || exit 1
trap 'kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null' EXIT
status=0
for item in "${@:-llama3-8b:both}"; do
  model=${item%%:*}
  pass=both
  [ "$item" != "$model" ] && pass=${item#*:}
  name="$model-$pass"
  echo "== $name $(date -u +%H:%M:%S)"
  # shellcheck disable=SC2086
  model_flag=(--model "$model")
  [ "$model" = custom ] && model_flag=()  # the dimensions come in GRAPH_FLAGS
  if ! overlapctl --addr "$addr" graph "${model_flag[@]}" --pass "$pass" ${GRAPH_FLAGS:-} \
      --output-file "$OUT/$name.yaml"; then
    status=1
    continue
  fi
  start=$(date +%s)
  overlapctl --addr "$addr" submit "$OUT/$name.yaml" --wait > "$OUT/$name.txt" 2> "$OUT/$name.err"
  rc=$?
  echo "exit $rc in $(( $(date +%s) - start )) s"
  # The table and the layer's lines; the rest (auto's reasons, timelines) is in the file.
  sed -n '1,/^total/p; /^layer/p' "$OUT/$name.txt"
  id=$(awk 'NR == 1 {print $2}' "$OUT/$name.txt")
  [ -n "$id" ] && overlapctl --addr "$addr" --json get "$id" > "$OUT/$name.json"
  [ "$rc" -eq 0 ] || { status=1; tail -5 "$OUT/$name.err"; }
done
exit $status
