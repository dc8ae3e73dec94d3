#!/usr/bin/env bash
# Sessions of two users on one GPU, the daemon unprivileged as deploy/overlapd.service runs it
# (issue 56). As root on a GPU node:
#   - overlapd runs as uid 65534: no capabilities, no new privileges, no supplementary groups;
#   - alice (uid 23001) runs the tp 2 MLP block as two rank processes sharing the GPU
#     (ranks_per_gpu 2), her tensors exported from her processes (cuMem POSIX fds on CUDA, memfd
#     on the host) and mapped by the daemon's uid; her outputs are checked against PyTorch
#     (reference.py);
#   - bob (uid 23002) streams a deferred session on the same GPU meanwhile;
#   - bob does not see alice's session in `overlapctl sessions`, and `sessions close` of it is
#     PERMISSION_DENIED for him;
#   - both sessions end closed, and the daemon's log names no error.
# The two users reach the sockets (mode 0660, the daemon's group) as members of group 65534.
# Prints one verdict line per check and exits 1 when one fails.
#
# Here: FUZZ=0 bash bench/pack-checks.sh; there, with carry [".devpack"]:
#   tar -xJf .devpack/sessions.tar.xz && bash bench/sessions/cross_user.sh
# DRY_RUN=1 runs it on the host backend from build/ (as root; a smaller graph).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "$(id -u)" != 0 ]; then
  echo "cross_user.sh: run as root (it starts processes as three other uids)" >&2
  exit 2
fi
work=$(mktemp -d /tmp/overlapd-users.XXXXXX)
chmod 0755 "$work"
# What the three uids run, where they can read it.
mkdir -p "$work/bin" "$work/graphs"
if [ "${DRY_RUN:-0}" = 1 ]; then
  cp build/server/overlapd build/client/overlapctl build/client/session/overlapd-session-rank \
    "$work/bin/"
  backend=(--backend host --host-devices 2)
  sed -E 's/m: 2048, k: 2048, n: 8192/m: 64, k: 64, n: 128/; s/m: 2048, k: 4096, n: 2048/m: 64, k: 64, n: 64/' \
    bench/sessions/tp2_mlp.yaml > "$work/graphs/tp2_mlp.yaml"
  sed -E 's/m: [0-9]+, k: [0-9]+, n: [0-9]+/m: 256, k: 512, n: 256/' bench/sessions/deferred_gemm.yaml \
    > "$work/graphs/deferred.yaml"
else
  source .device/env.sh
  cp -r .device "$work/dev"
  for b in overlapd overlapctl overlapd-session-rank; do ln -s "$work/dev/bin/$b" "$work/bin/$b"; done
  backend=(--backend cuda --ranks-per-gpu 2)
  cp bench/sessions/tp2_mlp.yaml "$work/graphs/tp2_mlp.yaml"
  cp bench/sessions/deferred_gemm.yaml "$work/graphs/deferred.yaml"
fi
# Bob's one rank runs on alice's first device (the first rank slot of the GPU).
echo "devices: [0]" >> "$work/graphs/deferred.yaml"
chmod -R a+rX "$work/bin" "$work/graphs" "${work}/dev" 2> /dev/null
mkdir -p "$work/state" "$work/alice" "$work/bob"
chown 65534:65534 "$work/state"
chown 23001:23001 "$work/alice"
chown 23002:23002 "$work/bob"
locked=(--no-new-privs --inh-caps=-all --bounding-set=-all)
daemon=(setpriv --reuid=65534 --regid=65534 --clear-groups "${locked[@]}")
alice=(setpriv --reuid=23001 --regid=23001 --groups=65534 "${locked[@]}")
bob=(setpriv --reuid=23002 --regid=23002 --groups=65534 "${locked[@]}")
addr="unix:$work/run/overlapd.sock"
mkdir -p "$work/run" && chown 65534:65534 "$work/run" && chmod 0755 "$work/run"
session_socket=$work/run/overlapd-session.sock
fails=0
verdict() {  # verdict OK|FAIL WHAT
  echo "$1 $2"
  [ "$1" = OK ] || fails=$((fails + 1))
}

"${daemon[@]}" "$work/bin/overlapd" "${backend[@]}" --listen "$addr" \
  --state-dir "$work/state" > "$OUT/overlapd.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  "${alice[@]}" "$work/bin/overlapctl" --addr "$addr" node > /dev/null 2>&1 && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
"${daemon[@]}" id > "$OUT/daemon-id.txt"
grep -E '^Cap(Eff|Prm)' "/proc/$pid/status" > "$OUT/daemon-caps.txt" 2> /dev/null

rank() {  # rank USER RANK OUTDIR GRAPH STEPS [flags]: one rank process as USER
  local who=$1 r=$2 dir=$3 graph=$4 steps=$5
  shift 5
  local as
  if [ "$who" = alice ]; then as=("${alice[@]}"); else as=("${bob[@]}"); fi
  timeout 300 "${as[@]}" "$work/bin/overlapd-session-rank" --socket "$session_socket" \
    --name "$who" --graph "$graph" --rank "$r" --steps "$steps" --out-dir "$dir" --json "$@"
}

# Bob's deferred stream first, so that alice's ranks open beside it.
rank bob 0 "" "$work/graphs/deferred.yaml" "${BOB_STEPS:-6000}" --priority deferred \
  --deferred-bound-ms 50 > "$OUT/bob.json" 2> "$OUT/bob.err" &
bob_pid=$!
sleep "${BOB_HEAD_S:-2}"
rank alice 0 "$work/alice" "$work/graphs/tp2_mlp.yaml" 3 --dump-inputs --linger-s 3 \
  > "$OUT/alice0.json" 2> "$OUT/alice0.err" &
a0=$!
rank alice 1 "$work/alice" "$work/graphs/tp2_mlp.yaml" 3 --dump-inputs --linger-s 3 \
  > "$OUT/alice1.json" 2> "$OUT/alice1.err" &
a1=$!

# While alice's session lingers open: what bob sees and may do.
alice_id=
for _ in $(seq 1 300); do
  alice_id=$("${alice[@]}" "$work/bin/overlapctl" --addr "$addr" sessions -o name 2> /dev/null | head -1)
  [ -n "$alice_id" ] && break
  sleep 0.1
done
"${alice[@]}" "$work/bin/overlapctl" --addr "$addr" sessions -o json > "$OUT/sessions-alice.json" 2>&1
"${bob[@]}" "$work/bin/overlapctl" --addr "$addr" sessions -o json > "$OUT/sessions-bob.json" 2>&1
if [ -z "$alice_id" ]; then
  verdict FAIL "alice's session is listed for alice"
else
  verdict OK "alice's session $alice_id is listed for alice"
  if grep -q "$alice_id" "$OUT/sessions-bob.json"; then
    verdict FAIL "bob's listing shows alice's session"
  else
    verdict OK "bob's listing does not show alice's session"
  fi
  "${bob[@]}" "$work/bin/overlapctl" --addr "$addr" sessions close "$alice_id" > "$OUT/bob-close.txt" 2>&1
  close_rc=$?
  if [ "$close_rc" != 0 ] && grep -qi "permission" "$OUT/bob-close.txt"; then
    verdict OK "bob's close of alice's session: exit $close_rc, $(head -c 160 "$OUT/bob-close.txt")"
  else
    verdict FAIL "bob's close of alice's session: exit $close_rc, $(head -c 160 "$OUT/bob-close.txt")"
  fi
fi
wait "$a0"; r0=$?
wait "$a1"; r1=$?
bob_alive=0
kill -0 "$bob_pid" 2> /dev/null && bob_alive=1
[ "$r0" = 0 ] && [ "$r1" = 0 ] && verdict OK "alice's two ranks exit 0" ||
  verdict FAIL "alice's ranks exit $r0 / $r1: $(head -c 300 "$OUT/alice0.err" "$OUT/alice1.err")"
python3 bench/sessions/reference.py "$work/alice" > "$OUT/reference.json" 2>&1
ref=$?
[ "$ref" = 0 ] && verdict OK "alice's outputs against the reference: $(head -c 300 "$OUT/reference.json")" ||
  verdict FAIL "alice's outputs against the reference (exit $ref): $(head -c 300 "$OUT/reference.json")"
[ "$bob_alive" = 1 ] && verdict OK "bob's deferred session was still streaming when alice's ended" ||
  verdict FAIL "bob's deferred session ended before alice's (raise BOB_STEPS)"
wait "$bob_pid"; rb=$?
[ "$rb" = 0 ] && verdict OK "bob's deferred session exit 0: $(head -c 200 "$OUT/bob.json")" ||
  verdict FAIL "bob's session exit $rb: $(head -c 300 "$OUT/bob.err")"
"${alice[@]}" "$work/bin/overlapctl" --addr "$addr" sessions --all-users -o json > "$OUT/sessions-end.json" 2>&1
kill -TERM "$pid"
wait "$pid"
grep -E "session sess-.*(closed|failed|ended)" "$OUT/overlapd.log" | sed 's/.*\] //' | head -6
if grep -qE "\[(error|critical)\]" "$OUT/overlapd.log"; then
  verdict FAIL "the daemon logged errors: $(grep -E "\[(error|critical)\]" "$OUT/overlapd.log" | head -2)"
else
  verdict OK "the daemon logged no error"
fi
echo "daemon: $(cat "$OUT/daemon-id.txt"); $(tr '\n' ' ' < "$OUT/daemon-caps.txt")"
rm -rf "$work"
echo "cross_user: $fails failed"
[ "$fails" = 0 ]
