#!/usr/bin/env bash
# A critical session's step beside a deferred session that streams GEMMs, against the same
# critical session alone right after the same deferred load (issue 56: at most 3% slower).
#
# The deferred session (bench/sessions/deferred_gemm.yaml, Llama-3-8B's fc2 shape, about 1.5 ms a
# GEMM on an H100) runs its GEMMs for WARM_S seconds first in every round, so that the critical
# session always starts on a GPU that has been at its power cap, as it does beside the stream.
# Rounds, one daemon: alone, beside (bound 20 ms), alone, beside (bound 100 ms), alone. Each
# critical run posts STEPS (300, about 1.3 s on an H100: the chunks already queued when it opens
# weigh three times as much over 100) steps of Llama-3-8B's MLP at tp 1 ahead and reports its device
# time per step; the slowdown of each beside run is against the mean of the alone runs either
# side. The deferred session's log line says how many of its chunks went at their bound.
#
# Here: FUZZ=0 bash bench/pack-checks.sh; there, with carry [".devpack"]:
#   tar -xJf .devpack/sessions.tar.xz && bash bench/sessions/deferred_beside.sh
# DRY_RUN=1 runs it on the host backend from build/ (the figures mean nothing there).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "${DRY_RUN:-0}" = 1 ]; then
  export PATH="$PWD/build/server:$PWD/build/client:$PWD/build/client/session:$PATH"
  export OVERLAPD_BACKEND=host
  flags=(--host-devices 1)
else
  source .device/env.sh
  flags=()
fi
# shellcheck source=bench/overlapd_util.sh
. bench/overlapd_util.sh
deferred_graph=bench/sessions/deferred_gemm.yaml
critical_graph=bench/sessions/llama3-8b-mlp-tp1.yaml
if [ "${DRY_RUN:-0}" = 1 ]; then  # the same ops, small enough for a few host cores
  sed -E 's/m: [0-9]+, k: [0-9]+, n: [0-9]+/m: 64, k: 128, n: 64/' "$deferred_graph" > "$OUT/deferred.yaml"
  sed -E -e 's/k: 4096, n: 28672/k: 128, n: 256/' -e 's/k: 14336, n: 4096/k: 128, n: 128/' \
    -e 's/m: 8192/m: 64/' "$critical_graph" > "$OUT/critical.yaml"
  deferred_graph=$OUT/deferred.yaml
  critical_graph=$OUT/critical.yaml
fi
steps=${STEPS:-300}
warm_s=${WARM_S:-3}

session() {  # session NAME GRAPH STEPS [flags]: one rank's JSON summary on stdout
  local name=$1 graph=$2 n=$3
  shift 3
  timeout 120 overlapd-session-rank --socket "$work/overlapd-session.sock" --name "$name" \
    --graph "$graph" --rank 0 --steps "$n" --json "$@"
}

# The run's device time per step (0 where the backend has no device clock: the host's).
device_ms() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("device_ms_per_step", 0))' \
    "$1" 2> /dev/null || echo 0
}

# round LABEL [BOUND_MS]: the deferred stream for WARM_S seconds, then the critical run, beside it
# when BOUND_MS is given, else after it ended.
round() {
  local label=$1 bound=${2:-}
  local warm_steps
  warm_steps=$(python3 -c "print(int($warm_s * 1000 / 1.5))")
  if [ -z "$bound" ]; then
    session "warm-$label" "$deferred_graph" "$warm_steps" --priority deferred \
      > "$OUT/warm-$label.json" 2>&1
    session "crit-$label" "$critical_graph" "$steps" > "$OUT/crit-$label.json" 2>&1
  else
    session "def-$label" "$deferred_graph" $((warm_steps * 3)) --priority deferred \
      --deferred-bound-ms "$bound" > "$OUT/def-$label.json" 2>&1 &
    local d=$!
    sleep "$warm_s"
    session "crit-$label" "$critical_graph" "$steps" > "$OUT/crit-$label.json" 2>&1
    kill -0 "$d" 2> /dev/null || echo "$label: the deferred session ended before the critical one" >&2
    wait "$d"
  fi
  echo "$label $(device_ms "$OUT/crit-$label.json")" | tee -a "$OUT/rounds.txt"
}

: > "$OUT/rounds.txt"
start_overlapd "$OUT/overlapd.log" "${flags[@]}" || exit 1
round alone1
round beside20 20
round alone2
round beside100 100
round alone3
kill -TERM "$pid"
wait "$pid"
grep -E "op grad: .* at their bound" "$OUT/overlapd.log" | sed 's/.*\] //'
python3 - "$OUT/rounds.txt" << 'PY' | tee "$OUT/deferred_beside.json"
import json, sys
ms = dict(line.split() for line in open(sys.argv[1]) if line.strip())
ms = {k: float(v) for k, v in ms.items()}
out = {"device_ms_per_step": ms}
for beside, before, after in (("beside20", "alone1", "alone2"), ("beside100", "alone2", "alone3")):
    base = (ms[before] + ms[after]) / 2
    out[beside + "_slowdown_pct"] = round(100 * (ms[beside] / base - 1), 2) if base else None
print(json.dumps(out))
PY
