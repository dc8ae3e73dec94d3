#!/usr/bin/env bash
# Issue 34: NCCL between daemons on two GPUs, in one device call. Two overlapd on one 2-GPU
# machine, each as its own node (CUDA_VISIBLE_DEVICES=0 and =1, own unix socket, state
# directory and loopback peer port, the other in peers:), then:
#   A  NCCL's socket transport, as between nodes without InfiniBand (the daemons started with
#      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo): a tp 1 x dp 2
#      layer with gradients over both (every op verified), commbench --peers and bench --peers
#      (the dp gradient all-reduce whole, bucketed and in 256 KiB pieces) at 1 MiB .. 256 MiB;
#   T  the PyTorch peer (bench/peers/torch_allreduce.py, torchrun, 2 ranks) at the same sizes,
#      once with the socket env and once without (no daemon runs meanwhile);
#   B  the daemons restarted without those variables (NVLink): commbench and bench again, and
#      the layer when more than 200 s of the budget are left (LAYER_B=0: never);
#   K  kill -9 of the peer mid-job: the coordinator's job must end FAILED or ABORTED naming it
#      within the collective timeout, and the survivor run a local job next;
# and a summary table (sizes, our busbw vs PyTorch's, ratio) from the JSON files.
# Everything lands in $OUT (logs, JSON, summary.txt); a step that fails is logged and the next
# one runs. Each step has a time cap and none starts once BUDGET_S (default 540 s) is spent, so
# the whole stays within one device call (10 minutes).
#
# Usage on a 2-GPU machine, from the repo root (it sources .device/env.sh when there):
#   bash bench/probes/two_daemons.sh
# A dry run of the daemon parts on a CPU machine (host backend, one simulated device each;
# PyTorch and the NCCL transports left out, the figures mean nothing):
#   PATH=$PWD/build/server:$PWD/build/client:$PATH BACKEND=host OUT=/tmp/td bash bench/probes/two_daemons.sh
# Knobs (environment): BACKEND (cuda | host), BUDGET_S, ITERS/WARMUP (commbench, bench and the
# PyTorch peer), MIN_BYTES/MAX_BYTES/FACTOR (commbench and PyTorch sizes), GRAD_SIZES (bench),
# GRAPH_FLAGS (overlapctl graph's model flags), GRAPH_ITERS, TIMEOUT_MS (the collective
# timeouts), NCCL_VIA (env | config | both: how pass A's NCCL settings reach the daemons: the
# process environment, nccl_env in the config, or both), NCCL_DEBUG_DAEMONS (NCCL_DEBUG for
# the daemons and PyTorch, default INFO with NCCL_DEBUG_SUBSYS=INIT,NET: the logs say which
# transport each connection took), KILL_PASS (A | B, default B), LAYER_B, PORT_BASE (default 17100:
# pass A peers on +1/+2, pass B on +11/+12).
set -uo pipefail
BACKEND=${BACKEND:-cuda}
# shellcheck disable=SC1091  # written by ../shared/tools/device-bundle
if [ "$BACKEND" = cuda ] && [ -f .device/env.sh ]; then source .device/env.sh; fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/two_daemons.log") 2>&1
SECONDS=0
BUDGET_S=${BUDGET_S:-540}
RESERVE_S=${RESERVE_S:-25}  # kept for the summary and stopping the daemons
TIMEOUT_MS=${TIMEOUT_MS:-30000}
TIMEOUT_S=$(( (TIMEOUT_MS + 999) / 1000 ))
NCCL_VIA=${NCCL_VIA:-env}
KILL_PASS=${KILL_PASS:-B}
PORT_BASE=${PORT_BASE:-17100}
SOCKET_ENV=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)
UNSET_SOCKET_ENV=(-u NCCL_P2P_DISABLE -u NCCL_SHM_DISABLE -u NCCL_IB_DISABLE -u NCCL_SOCKET_IFNAME)
DEBUG_ENV=()
if [ "${NCCL_DEBUG_DAEMONS-INFO}" != "" ]; then
  DEBUG_ENV=(NCCL_DEBUG="${NCCL_DEBUG_DAEMONS:-INFO}" "NCCL_DEBUG_SUBSYS=INIT,NET")
fi
if [ "$BACKEND" = host ]; then
  # Threads for GPUs and Gloo on loopback: only the orchestration and the checks mean anything.
  BACKEND_FLAGS=(--backend host --host-devices 1)
  ITERS=${ITERS:-5}; WARMUP=${WARMUP:-1}
  MIN_BYTES=${MIN_BYTES:-64KiB}; MAX_BYTES=${MAX_BYTES:-1MiB}; FACTOR=${FACTOR:-4}
  GRAD_SIZES=${GRAD_SIZES:-256KiB,1MiB}
  GRAPH_FLAGS=${GRAPH_FLAGS:---name tiny --hidden 256 --ffn 512 --heads 4 --kv-heads 2 --seq 256}
  GRAPH_ITERS=${GRAPH_ITERS:-3}
  LONG_MN=(256 256); LOCAL_MKN=512
else
  BACKEND_FLAGS=(--backend cuda)
  ITERS=${ITERS:-20}; WARMUP=${WARMUP:-5}
  MIN_BYTES=${MIN_BYTES:-1MiB}; MAX_BYTES=${MAX_BYTES:-256MiB}; FACTOR=${FACTOR:-4}
  GRAD_SIZES=${GRAD_SIZES:-1MiB,4MiB,16MiB,64MiB,256MiB}
  GRAPH_FLAGS=${GRAPH_FLAGS:---model llama3-8b}
  GRAPH_ITERS=${GRAPH_ITERS:-10}
  LONG_MN=(8192 16384); LOCAL_MKN=4096  # the long job: 256 MiB bf16 per rank
fi
work=$(mktemp -d /tmp/two_daemons.XXXXXX)
verdicts=$OUT/verdicts.txt; : > "$verdicts"
pids=(); addrs=(); peers=(); pass=""

log() { printf '[%3ds] %s\n' "$SECONDS" "$*"; }
verdict() { log "$*"; echo "$*" >> "$verdicts"; }

# cap N: the seconds a step may take, N at most, within what is left of the budget.
cap() {
  local left=$(( BUDGET_S - RESERVE_S - SECONDS ))
  if (( left < $1 )); then echo "$left"; else echo "$1"; fi
}

# step NAME CAP CMD...: runs CMD under a time cap, stdout to $OUT/NAME.out and stderr to
# $OUT/NAME.err; logs its exit and time, returns its exit (125: skipped, no budget left).
step() {
  local name=$1 limit rc t0=$SECONDS
  limit=$(cap "$2"); shift 2
  if (( limit < 5 )); then
    verdict "$name: SKIPPED (budget: ${SECONDS} s of ${BUDGET_S} s spent)"
    return 125
  fi
  timeout -k 5 "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  rc=$?
  log "$name: exit $rc in $(( SECONDS - t0 )) s$( ((rc == 124 || rc == 137)) && echo " (cut at its cap of $limit s)")"
  if (( rc != 0 )); then tail -5 "$OUT/$name.err" | sed 's/^/    /'; fi
  # A client cut short leaves its job running on the daemons: cancel it, or it holds the GPUs.
  if (( rc == 124 || rc == 137 )) && (( ${#pids[@]} )); then cancel_jobs; fi
  return "$rc"
}

show() { [ -f "$1" ] && sed 's/^/    /' "$1"; }
ctl() { overlapctl --addr "${addrs[0]}" "$@"; }  # to the first daemon, the coordinator
# The same as an array, for step (timeout runs programs, not functions): "${CTL[@]}" ...
CTL=()
nodes_csv() { echo "${peers[0]},${peers[1]}"; }

# start_daemons PASS PORT0 PORT1 [VAR=VALUE...]: both daemons of a pass, each with one GPU, the
# other as its peer; the variables go to their environment (and/or nccl_env: NCCL_VIA).
start_daemons() {
  pass=$1; local ports=("$2" "$3"); shift 3
  local vars=("$@") env_vars=() i ok limit
  [ "$NCCL_VIA" = config ] || env_vars=("${vars[@]}")
  pids=(); addrs=(); peers=()
  # Peers prove themselves with one cluster key that both daemons hold, and
  # each with a node key of its own, which the other lists in known_nodes.
  [ -f "$work/cluster.key" ] || overlapd --make-cluster-key "$work/cluster.key" > /dev/null
  rm -f "$work/$pass"node*.key
  for i in 0 1; do
    echo "127.0.0.1:${ports[i]} $(overlapd --make-node-key "$work/${pass}node$i.key" 2>/dev/null)"
  done > "$work/known_nodes.$pass"
  chmod 644 "$work/known_nodes.$pass"
  for i in 0 1; do
    local dir=$work/$pass$i me=127.0.0.1:${ports[i]} other=127.0.0.1:${ports[1 - i]}
    mkdir -p "$dir"
    {
      echo "peer_listen: \"$me\""
      echo "peers: [\"$other\"]"
      echo "peer_key_file: \"$work/cluster.key\""
      echo "peer_node_key_file: \"$work/${pass}node$i.key\""
      echo "peer_known_nodes_file: \"$work/known_nodes.$pass\""
      echo "cluster_collective_timeout_ms: $TIMEOUT_MS"
      echo "collective_timeout_s: $TIMEOUT_S"
      if [ "$NCCL_VIA" != env ] && (( ${#vars[@]} )); then
        printf 'nccl_env: ['; printf '"%s", ' "${vars[@]}" | sed 's/, $//'; echo ']'
      fi
    } > "$dir/overlapd.yaml"
    cp "$dir/overlapd.yaml" "$OUT/overlapd-$pass$i.yaml"
    env "${UNSET_SOCKET_ENV[@]}" "${env_vars[@]}" "${DEBUG_ENV[@]}" CUDA_VISIBLE_DEVICES=$i \
      overlapd --config "$dir/overlapd.yaml" "${BACKEND_FLAGS[@]}" --listen "unix:$dir/s.sock" \
      --state-dir "$dir/state" > "$OUT/overlapd-$pass$i.log" 2>&1 &
    pids[i]=$!; addrs[i]=unix:$dir/s.sock; peers[i]=$me
  done
  CTL=(overlapctl --addr "${addrs[0]}")
  limit=$(cap 90); ok=0
  for _ in $(seq 1 $(( limit * 5 ))); do
    ok=1
    for i in 0 1; do
      if ! kill -0 "${pids[i]}" 2> /dev/null; then
        verdict "pass $pass: daemon $i exited at start: $(tail -2 "$OUT/overlapd-$pass$i.log" | tr '\n' ' ')"
        return 1
      fi
      overlapctl --addr "${addrs[i]}" node > /dev/null 2>&1 || ok=0
    done
    (( ok )) && break
    sleep 0.2
  done
  if (( !ok )); then verdict "pass $pass: the daemons did not both answer within $limit s"; return 1; fi
  log "pass $pass: both daemons answer (pids ${pids[*]}; peers ${peers[*]}; env: ${vars[*]:-none}, via $NCCL_VIA)"
  overlapctl node --nodes "${addrs[0]},${addrs[1]}" > "$OUT/node-$pass.txt" 2>&1
  log "overlapctl node --nodes (exit $?):"; sed 's/^/    /' "$OUT/node-$pass.txt"
  return 0
}

# stop_daemons: SIGTERM (it drains), SIGKILL after 15 s.
stop_daemons() {
  local i
  for i in 0 1; do [ -n "${pids[i]:-}" ] && kill -TERM "${pids[i]}" 2> /dev/null; done
  for i in 0 1; do
    [ -n "${pids[i]:-}" ] || continue
    for _ in $(seq 1 75); do kill -0 "${pids[i]}" 2> /dev/null || break; sleep 0.2; done
    kill -0 "${pids[i]}" 2> /dev/null && { log "daemon $i still up after 15 s: SIGKILL"; kill -KILL "${pids[i]}"; }
    wait "${pids[i]}" 2> /dev/null
  done
  pids=()
  # Which transport NCCL took between the daemons (NCCL_DEBUG=INFO), for the record.
  transports "$OUT"/overlapd-"$pass"?.log > "$OUT/transport-$pass.txt"
  if [ -s "$OUT/transport-$pass.txt" ]; then
    verdict "pass $pass transport (daemons' NCCL logs): $(tr '\n' ';' < "$OUT/transport-$pass.txt")"
  fi
}

# transports FILE...: NCCL's connections (channel lines "via P2P/...", "via NET/Socket/0"), counted
# by kind, and the network it chose, from NCCL_DEBUG=INFO output.
transports() {
  grep -ohE "via (NET|P2P|SHM|COLLNET)/[A-Za-z0-9_/]+" "$@" 2> /dev/null | sort | uniq -c | sort -rn \
    | awk '{print $2, $3, "x" $1}'
  grep -ohE "NET/(Socket|IB) : Using .*" "$@" 2> /dev/null | sort -u | head -2
}

# The tp 1 x dp 2 layer with gradients over both daemons; every op must be verified.
layer_job() {
  local g=$work/layer.yaml
  # shellcheck disable=SC2086  # GRAPH_FLAGS is a list of flags
  if ! ctl graph $GRAPH_FLAGS --tp 1 --dp 2 --pass both --grads --layers 1 --output-file "$g" > "$OUT/graph.err" 2>&1; then
    verdict "pass $pass layer: overlapctl graph failed: $(tail -2 "$OUT/graph.err" | tr '\n' ' ')"
    return 1
  fi
  sed -i -e "s/^iterations: .*/iterations: $GRAPH_ITERS/" -e "s/^warmup: .*/warmup: 2/" "$g"
  cp "$g" "$OUT/layer-$pass.yaml"
  step "layer-$pass" 150 "${CTL[@]}" --json submit "$g" --peers "$(nodes_csv)" --wait
  python3 - "$OUT/layer-$pass.out" "$pass" > "$OUT/layer-$pass.check" <<'PY'
import json, sys
path, p = sys.argv[1], sys.argv[2]
try:
    job = json.load(open(path))
except Exception as e:  # noqa: BLE001
    print(f"pass {p} layer: FAIL: no job JSON ({e})"); sys.exit()
ops = job.get("result", {}).get("ops", [])
bad = [o["id"] for o in ops if not o.get("verified")]
across = [o["id"] for o in ops if o.get("spans_nodes")]
ok = job.get("state") == "SUCCEEDED" and ops and not bad
print(f"pass {p} layer: {'PASS' if ok else 'FAIL'}: {job.get('state')}, {len(ops)} ops,"
      f" {len(ops) - len(bad)} verified{', not: ' + ','.join(bad) if bad else ''};"
      f" {len(across)} across nodes ({','.join(across)});"
      f" total step {job.get('result', {}).get('total_step_ms', 0):.3f} ms;"
      f" layer exposed {job.get('result', {}).get('layer_exposed_comm_ms', 0):.3f} ms"
      + (f"; error: {job.get('error', '')[:300]}" if job.get("error") else ""))
for o in ops:
    print(f"    {o['id']:14s} {o.get('type', ''):10s} {o.get('schedule', ''):14s}"
          f" step {o.get('step', {}).get('median_ms', 0):8.3f} ms busbw {o.get('busbw_gbps', 0):7.2f}"
          f" {'across' if o.get('spans_nodes') else '      '} verified={o.get('verified', False)}")
PY
  head -1 "$OUT/layer-$pass.check" >> "$verdicts"
  cat "$OUT/layer-$pass.check"
}

benches() {
  step "commbench-$pass" 90 "${CTL[@]}" commbench --peers "$(nodes_csv)" --min-bytes "$MIN_BYTES" \
    --max-bytes "$MAX_BYTES" --factor "$FACTOR" --iterations "$ITERS" --warmup "$WARMUP" \
    --json-out "$OUT/commbench-$pass.json"
  (( $? == 125 )) || { show "$OUT/commbench-$pass.out"; check_json "commbench" "$OUT/commbench-$pass.json"; }
  step "bench-$pass" 180 "${CTL[@]}" bench --peers "$(nodes_csv)" --grad-sizes "$GRAD_SIZES" \
    --bucket-mib 25 --chunk-kib 256 --iterations "$ITERS" --warmup "$WARMUP" \
    --json-out "$OUT/bench-$pass.json"
  (( $? == 125 )) || { show "$OUT/bench-$pass.out"; check_json "bench" "$OUT/bench-$pass.json"; }
}

# check_json KIND FILE: a verdict on a commbench or bench --peers JSON record.
check_json() {
  python3 - "$1" "$2" "$pass" >> "$verdicts" <<'PY'
import json, sys
kind, path, p = sys.argv[1:4]
try:
    j = json.load(open(path))
except Exception as e:  # noqa: BLE001
    print(f"pass {p} {kind}: FAIL: no JSON ({e.__class__.__name__})"); sys.exit()
if kind == "commbench":
    cells = [(r["bytes"], v, c) for r in j.get("rows", []) for v, c in r.get("variants", {}).items()]
    bad = [f"{v}@{b}" for b, v, c in cells if not c.get("verified")]
    best = max((c.get("busbw_gbps", 0), b) for b, v, c in cells if v == "dp") if cells else (0, 0)
    what = f"{len(cells)} size x variant cells, best dp busbw {best[0]:.2f} GB/s at {best[1] / 2**20:g} MiB"
else:
    forms = j.get("forms", [])
    bad = [f["form"] for f in forms if not f.get("verified")]
    what = ", ".join(f"{f['form']} hidden {100 * f.get('hidden', 0):.0f}% busbw {f.get('busbw_gbps', 0):.2f}"
                     for f in forms)
ok = not bad and (cells if kind == "commbench" else forms)
print(f"pass {p} {kind}: {'PASS' if ok else 'FAIL'}: {what}"
      f"{'; not verified: ' + ', '.join(bad) if bad else ''}; nccl {j.get('nccl', '?')}")
PY
  tail -1 "$verdicts" | sed "s/^/[$(printf '%3d' "$SECONDS")s] /"
}

# jobs_json ADDR: that daemon's jobs, as JSON on stdout.
jobs_json() { overlapctl --addr "$1" --json list --limit 20 2> /dev/null; }
# cancel_jobs: cancels every queued or running job, the coordinator's first (which ends the
# parts), then whatever is left on the peer.
cancel_jobs() {
  local i id
  for i in 0 1; do
    [ -n "${pids[i]:-}" ] || continue
    for id in $(jobs_json "${addrs[i]}" | python3 -c "
import json, sys
try:
    jobs = json.load(sys.stdin)['jobs']
except Exception:  # noqa: BLE001
    jobs = []
print(' '.join(j['id'] for j in jobs if j.get('state') in ('QUEUED', 'RUNNING') and not j.get('coordinator')))
print(' '.join(j['id'] for j in jobs if j.get('state') in ('QUEUED', 'RUNNING') and j.get('coordinator')))"); do
      log "    cancel $id on daemon $i: $(overlapctl --addr "${addrs[i]}" cancel "$id" 2>&1 | tail -1)"
    done
  done
}

# running KEY ID: whether the jobs on stdin have one RUNNING whose KEY is ID.
running() {
  python3 -c "
import json, sys
try:
    jobs = json.load(sys.stdin)['jobs']
except Exception:  # noqa: BLE001 - no answer yet
    sys.exit(1)
sys.exit(0 if any(j.get('$1') == '$2' and j.get('state') == 'RUNNING' for j in jobs) else 1)"
}

kill_test() {
  local long=$work/long.yaml id limit t_kill kill_s state err elapsed
  local -i running=0
  printf 'name: long\nmesh: {tp: 1, dp: 2}\niterations: 10000\nwarmup: 1\nverify: false\nlayer_step: false\nops:\n  - {id: grads, type: all_reduce, m: %d, n: %d, group: dp}\n' \
    "${LONG_MN[0]}" "${LONG_MN[1]}" > "$long"
  # At most 30 s to see it run, 2 s, TIMEOUT_S + 20 s for it and the survivor's part to end, and
  # the local job: start only with that much budget left.
  limit=$(cap $(( TIMEOUT_S + 90 )))
  if (( limit < TIMEOUT_S + 60 )); then verdict "pass $pass kill: SKIPPED (budget)"; return 125; fi
  if ! id=$(ctl submit "$long" --peers "$(nodes_csv)" 2> "$OUT/kill-submit.err"); then
    verdict "pass $pass kill: FAIL: submit: $(tail -2 "$OUT/kill-submit.err" | tr '\n' ' ')"; return 1
  fi
  log "kill test: long job $id submitted to ${peers[0]}; waiting until it runs on both"
  for _ in $(seq 1 150); do  # 30 s
    if jobs_json "${addrs[0]}" | running "id" "$id" && jobs_json "${addrs[1]}" | running "global_job_id" "$id"; then
      running=1; break
    fi
    sleep 0.2
  done
  jobs_json "${addrs[1]}" > "$OUT/kill-peer-jobs-before.json"
  if (( !running )); then
    verdict "pass $pass kill: FAIL: job $id not RUNNING on both within 30 s"
    ctl cancel "$id" > /dev/null 2>&1; return 1
  fi
  sleep "${KILL_AFTER_S:-2}"  # well into its timed iterations
  ctl --json get "$id" > "$OUT/kill-job-before.json" 2>&1
  kill -KILL "${pids[1]}"; t_kill=$(date +%s.%N); kill_s=$SECONDS
  wait "${pids[1]}" 2> /dev/null; pids[1]=""
  log "kill test: kill -9 of ${peers[1]}; its part was at $(python3 -c "
import json
for j in json.load(open('$OUT/kill-peer-jobs-before.json'))['jobs']:
    if j.get('global_job_id') == '$id':
        print(j.get('progress')); break" 2> /dev/null)"
  state=""
  while (( SECONDS - kill_s < TIMEOUT_S + 20 )); do
    ctl --json get "$id" > "$OUT/kill-job.json" 2> /dev/null
    state=$(python3 -c "import json;print(json.load(open('$OUT/kill-job.json'))['state'])" 2> /dev/null)
    case $state in SUCCEEDED|FAILED|CANCELLED|ABORTED) break ;; esac
    sleep 0.2
  done
  elapsed=$(python3 -c "import time;print(f'{time.time() - $t_kill:.1f}')")
  err=$(python3 -c "import json;print(json.load(open('$OUT/kill-job.json'))['error'])" 2> /dev/null)
  if [[ $state =~ ^(FAILED|ABORTED)$ ]] && [[ $err == *"${peers[1]}"* ]] &&
     python3 -c "import sys; sys.exit(0 if $elapsed <= $TIMEOUT_S + 15 else 1)"; then
    verdict "pass $pass kill: PASS: job $id $state ${elapsed} s after kill -9 of ${peers[1]} (collective timeout ${TIMEOUT_S} s), naming it"
  else
    verdict "pass $pass kill: FAIL: job $id ${state:-still running} ${elapsed} s after kill -9 of ${peers[1]} (collective timeout ${TIMEOUT_S} s; the error should name ${peers[1]})"
  fi
  log "    error: ${err:0:600}"
  # Every job of the survivor ends (its own part may outlive the coordinator's job: an NCCL
  # kernel waiting on a dead peer over NVLink ends only when the watchdog aborts it), then it
  # runs a local job on its GPU.
  local ended=""
  while (( SECONDS - kill_s < TIMEOUT_S + 20 )); do
    jobs_json "${addrs[0]}" > "$OUT/kill-survivor-jobs.json"
    if python3 -c "
import json, sys
jobs = json.load(open('$OUT/kill-survivor-jobs.json'))['jobs']
sys.exit(0 if all(j['state'] not in ('QUEUED', 'RUNNING') for j in jobs) else 1)" 2> /dev/null; then
      ended=$(python3 -c "import time;print(f'{time.time() - $t_kill:.1f}')"); break
    fi
    sleep 0.2
  done
  verdict "pass $pass kill, survivor: its jobs $([ -n "$ended" ] && echo "all ended ${ended} s after the kill" || echo "NOT all ended $(( TIMEOUT_S + 20 )) s after the kill")"
  python3 -c "
import json
for j in json.load(open('$OUT/kill-survivor-jobs.json'))['jobs'][:3]:
    print('    survivor:', j['id'], j['state'], j['name'], '|', j.get('error', '')[:200])"
  printf 'name: local-after-kill\niterations: 5\nwarmup: 1\nops:\n  - {id: fc1, type: ag_gemm, m: %d, k: %d, n: %d}\n  - {id: ar, type: all_reduce, m: 1024, n: %d, after: [fc1]}\n' \
    "$LOCAL_MKN" "$LOCAL_MKN" "$LOCAL_MKN" "$LOCAL_MKN" > "$work/local.yaml"
  if step "local-after-kill" 60 "${CTL[@]}" --json submit "$work/local.yaml" --wait; then
    verdict "pass $pass survivor: PASS: a local job SUCCEEDED after the kill ($(python3 -c "
import json
j = json.load(open('$OUT/local-after-kill.out'))
print(', '.join(f\"{o['id']} {o['step']['median_ms']:.3f} ms verified={o.get('verified')}\" for o in j['result']['ops']))" 2> /dev/null))"
  else
    verdict "pass $pass survivor: FAIL: the local job after the kill: $(tail -2 "$OUT/local-after-kill.err" | tr '\n' ' ')"
  fi
}

torch_peer() {  # LABEL [VAR=VALUE...]
  local label=$1; shift
  if [ "$BACKEND" = host ]; then log "torch-$label: skipped on the host backend"; return 0; fi
  step "torch-$label" 100 env "${UNSET_SOCKET_ENV[@]}" "$@" "${DEBUG_ENV[@]}" PYTHONUNBUFFERED=1 \
    torchrun --standalone --nproc_per_node=2 bench/peers/torch_allreduce.py --min-bytes "$MIN_BYTES" \
    --max-bytes "$MAX_BYTES" --factor "$FACTOR" --iters "$ITERS" --warmup "$WARMUP" \
    --label "$label" --json "$OUT/torch-$label.json"
  [ -f "$OUT/torch-$label.out" ] && grep -v "NCCL INFO" "$OUT/torch-$label.out" | sed 's/^/    /'
  transports "$OUT/torch-$label.out" "$OUT/torch-$label.err" > "$OUT/transport-torch-$label.txt"
  if [ -s "$OUT/transport-torch-$label.txt" ]; then
    verdict "torch $label transport (NCCL logs): $(tr '\n' ';' < "$OUT/transport-torch-$label.txt")"
  fi
}

log "two_daemons: backend $BACKEND, budget $BUDGET_S s, sizes $MIN_BYTES..$MAX_BYTES x$FACTOR, grads $GRAD_SIZES, $WARMUP+$ITERS iterations, collective timeout $TIMEOUT_S s; work $work"
if ! command -v overlapd > /dev/null || ! command -v overlapctl > /dev/null; then
  log "overlapd/overlapctl not on PATH (source .device/env.sh, or build/server and build/client)"; exit 2
fi
if [ "$BACKEND" = cuda ]; then
  nvidia-smi -L > "$OUT/gpus.txt" 2>&1; nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
  log "GPUs: $(nvidia-smi -L 2> /dev/null | wc -l)"; head -2 "$OUT/gpus.txt" | sed 's/^/    /'
fi

# Pass A: NCCL's socket transport between the daemons.
if start_daemons A $(( PORT_BASE + 1 )) $(( PORT_BASE + 2 )) "${SOCKET_ENV[@]}"; then
  layer_job
  benches
  [ "$KILL_PASS" = A ] && kill_test
fi
stop_daemons

# PyTorch, the same sizes, both ways (no daemon holds the GPUs meanwhile).
torch_peer socket "${SOCKET_ENV[@]}"
torch_peer nvlink

# Pass B: the same without the socket settings (NVLink, P2P between the processes).
if start_daemons B $(( PORT_BASE + 11 )) $(( PORT_BASE + 12 )); then
  benches
  # The layer again over P2P (another transport's code path), when the kill test still fits.
  if [ "${LAYER_B:-1}" = 1 ] && (( $(cap 1000) > 200 )); then layer_job; fi
  [ "$KILL_PASS" = B ] && kill_test
fi
stop_daemons

# The summary: our busbw against PyTorch's per size, and bench's forms.
python3 - "$OUT" "$BACKEND" > "$OUT/summary.txt" <<'PY'
import json, os, sys
out, backend = sys.argv[1], sys.argv[2]

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:  # noqa: BLE001 - a step that failed left no file
        return None

def human(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"

def fmt(x, w=8, p=2):
    return f"{x:{w}.{p}f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"

def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

passes = [("A", "socket"), ("B", "nvlink")]
ours, torch, sent = {}, {}, {}
for p, label in passes:
    cb = load(f"commbench-{p}.json")
    if cb:
        for r in cb.get("rows", []):
            v = r.get("variants", {}).get("dp", {})
            ours[(p, r["bytes"])] = (v.get("busbw_gbps"), v.get("verified"))
    tj = load(f"torch-{label}.json")
    if tj:
        for r in tj.get("rows", []):
            torch[(p, r["bytes"])] = r.get("busbw_gbps")
    bj = load(f"bench-{p}.json")
    if bj:
        n = bj.get("mesh", {}).get("dp", 2) * bj.get("mesh", {}).get("tp", 1)
        for form in bj.get("forms", []):
            if form.get("form") != "whole":
                continue
            for m in form.get("messages", []):
                if m.get("alone_ms"):
                    sent[(p, m["bytes"])] = m["bytes"] / (m["alone_ms"] * 1e-3) / 1e9 * 2 * (n - 1) / n

sizes = sorted({b for (_, b) in list(ours) + list(torch) + list(sent)})
print(f"two_daemons summary ({backend} backend){': the figures mean nothing here' if backend == 'host' else ''}")
print("all_reduce busbw GB/s over 2 GPUs, bf16, per rank's size: ours = commbench --peers (dp),"
      " gradient = bench --peers' whole gradient timed alone, torch = bench/peers/torch_allreduce.py;"
      " ratio = ours / torch")
print(f"{'':8s} | {'A: socket (NCCL_P2P/SHM/IB off, lo)':^43s} | {'B: NVLink':^43s} | B/A")
print(f"{'size':>8s} | {'ours':>8s} {'gradient':>8s} {'torch':>8s} {'ratio':>6s} {'verify':>8s} |"
      f" {'ours':>8s} {'gradient':>8s} {'torch':>8s} {'ratio':>6s} {'verify':>8s} | {'ours':>6s}")
for b in sizes:
    cells = []
    for p, _ in passes:
        o, ok = ours.get((p, b), (None, None))
        t = torch.get((p, b))
        r = ratio(o, t)
        cells.append(f"{fmt(o)} {fmt(sent.get((p, b)))} {fmt(t)} {fmt(r, 6)}"
                     f" {('ok' if ok else 'FAIL') if ok is not None else '-':>8s}")
    ba = ratio(ours.get(("B", b), (None,))[0], ours.get(("A", b), (None,))[0])
    print(f"{human(b):>8s} | {cells[0]} | {cells[1]} | {fmt(ba, 6, 1)}")
print()
print("bench --peers: the layer step's gradient all-reduces beside GEMMs, per form")
print(f"{'pass':4s} {'form':9s} {'sent':>5s} {'step ms':>9s} {'no ARs ms':>9s} {'exposed':>9s}"
      f" {'alone ms':>9s} {'hidden %':>8s} {'busbw':>8s} {'verify':>6s}")
for p, _ in passes:
    bj = load(f"bench-{p}.json")
    if not bj:
        print(f"{p:4s} (no bench-{p}.json)")
        continue
    for f in bj.get("forms", []):
        pieces = sum(m.get("pieces", 1) for m in f.get("messages", []))
        print(f"{p:4s} {f.get('form', ''):9s} {pieces:5d} {fmt(f.get('layer_step_ms'), 9, 3)}"
              f" {fmt(f.get('without_all_reduces_ms'), 9, 3)} {fmt(f.get('exposed_ms'), 9, 3)}"
              f" {fmt(f.get('sent_alone_ms'), 9, 3)} {fmt(100 * f.get('hidden', 0), 8, 1)}"
              f" {fmt(f.get('busbw_gbps'))} {'ok' if f.get('verified') else 'FAIL':>6s}")
print()
print("checks:")
try:
    with open(os.path.join(out, "verdicts.txt")) as f:
        for line in f:
            if not line.startswith("    "):
                print("  " + line.rstrip())
except OSError:
    pass
PY
log "summary ($OUT/summary.txt):"
cat "$OUT/summary.txt"
(cd "$OUT" && tar -czf daemon-logs.tgz overlapd-*.log 2> /dev/null && rm -f overlapd-*.log)
rm -rf "$work"
log "done in $SECONDS s"
