#!/usr/bin/env bash
# deploy/slurm/overlap-job.sbatch builds --peers from the allocation and
# submits to the first node's daemon. scontrol, srun, hostname and overlapctl
# are stand-ins on PATH that record how they were called: srun runs its
# command once per node (in reverse order, with that node's SLURMD_NODENAME),
# `hostname -f` answers NODE.dc1.example, and `overlapctl --json node` answers
# the node_name each node's daemon would (NODE.dc1.example:7070).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
script=$src/deploy/slurm/overlap-job.sbatch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stubs=$work/stubs
mkdir -p "$stubs" "$work/nosrun"
calls=$work/calls

cat > "$stubs/scontrol" <<'SH'
#!/bin/sh
echo "scontrol $*" >> "$CALLS"
[ "$1 $2" = "show hostnames" ] || exit 9
printf '%s\n' $FAKE_HOSTS
SH
cat > "$stubs/srun" <<'SH'
#!/bin/bash
echo "srun $*" >> "$CALLS"
while [ "${1#--}" != "$1" ]; do shift; done
hosts=($FAKE_HOSTS)
for ((i = ${#hosts[@]} - 1; i >= 0; i--)); do SLURMD_NODENAME=${hosts[i]} "$@"; done
SH
cat > "$stubs/hostname" <<'SH'
#!/bin/sh
[ "$1" = -f ] && echo "$SLURMD_NODENAME.dc1.example"
SH
cat > "$stubs/overlapctl" <<'SH'
#!/bin/sh
echo "overlapctl $*" >> "$CALLS"
case " $* " in
  *" --json node "*)
    name="$SLURMD_NODENAME.dc1.example:7070"
    case " ${NO_PEER_NODES:-} " in *" $SLURMD_NODENAME "*) name="" ;; esac
    printf '{\n "backend": "cuda",\n "node_name": "%s",\n "peers": [\n  "x:7070"\n ]\n}\n' "$name" ;;
  *) echo "overlapctl $*" ;;
esac
SH
chmod +x "$stubs"/*
# The same stand-ins without srun, as on a machine without Slurm's client.
for f in scontrol hostname overlapctl; do ln -s "$stubs/$f" "$work/nosrun/$f"; done

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# run STUB_DIR HOSTS [VAR=VALUE...] -- ARGS...: the script's exit status in $rc,
# its output in $out, the stand-ins' calls in $calls.
run() {
  local dir=$1 hosts=$2; shift 2
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  : > "$calls"
  rc=0
  out=$(env -u OVERLAPD_NODE_NAMES -u OVERLAPD_DOMAIN -u PEER_PORT -u OVERLAPD_ADDR \
          -u SLURM_GPUS_PER_NODE -u SLURM_GPUS_ON_NODE -u SLURM_JOB_GPUS -u OVERLAPD_NODE_ADDRS \
          PATH="$dir:$PATH" CALLS="$calls" FAKE_HOSTS="$hosts" SLURM_JOB_NODELIST=x \
          "${env[@]}" bash "$script" "$@" 2>&1) || rc=$?
}
expect_submit() {  # the overlapctl submit line expected among the calls
  grep -qxF "overlapctl $1" "$calls" || fail "$2: expected 'overlapctl $1'; calls: $(cat "$calls"); output: $out"
}
sock=unix:/run/overlapd/overlapd.sock

# Without srun: Slurm's short names, PEER_PORT, flags passed on.
run "$work/nosrun" "gpu-a gpu-b gpu-c" PEER_PORT=7100 -- layer.yaml --json
[ $rc = 0 ] || fail "short names: exit $rc: $out"
expect_submit "--addr $sock submit layer.yaml --peers gpu-a:7100,gpu-b:7100,gpu-c:7100 --wait --json" "short names"
grep -q '^scontrol show hostnames x$' "$calls" || fail "scontrol not asked for SLURM_JOB_NODELIST"
case $out in *"holds no GPUs"*) ;; *) fail "no warning without --gpus-per-node: $out" ;; esac

# OVERLAPD_DOMAIN completes short names; a name that is already an FQDN is kept.
run "$work/nosrun" "gpu-a gpu-b.dc2.example" OVERLAPD_DOMAIN=dc1.example SLURM_GPUS_PER_NODE=8 -- g.yaml
[ $rc = 0 ] || fail "domain: exit $rc: $out"
expect_submit "--addr $sock submit g.yaml --peers gpu-a.dc1.example:7000,gpu-b.dc2.example:7000 --wait" "domain"
case $out in *"holds no GPUs"*) fail "warned although the job holds GPUs: $out" ;; esac

# With srun, by default: each daemon's own node_name, matched by node although
# srun answers in reverse order; once on every node, one task each.
run "$stubs" "gpu-a gpu-b" OVERLAPD_ADDR=unix:/tmp/o.sock -- g.yaml --detach
[ $rc = 0 ] || fail "daemon names: exit $rc: $out"
expect_submit "--addr unix:/tmp/o.sock submit g.yaml --peers gpu-a.dc1.example:7070,gpu-b.dc1.example:7070 --wait --detach" "daemon names"
grep -q '^srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ' "$calls" || fail "srun: $(grep srun "$calls")"
[ "$(grep -c -- "--addr $sock --json node" "$calls")" = 2 ] || fail "not every node's daemon asked: $(cat "$calls")"

# A daemon without a peer listener (no node_name) stops the job, naming the node.
run "$stubs" "gpu-a gpu-b" NO_PEER_NODES=gpu-b -- g.yaml
[ $rc = 1 ] || fail "no node_name: exit $rc"
case $out in *"daemon on gpu-b named no node_name"*) ;; *) fail "no node_name: $out" ;; esac
grep -q 'submit' "$calls" && fail "submitted although gpu-b has no node_name"

# fqdn: each node's hostname -f, with PEER_PORT.
run "$stubs" "gpu-a gpu-b" OVERLAPD_NODE_NAMES=fqdn -- g.yaml
[ $rc = 0 ] || fail "fqdn: exit $rc: $out"
expect_submit "--addr $sock submit g.yaml --peers gpu-a.dc1.example:7000,gpu-b.dc1.example:7000 --wait" "fqdn"

# slurm naming on request even with srun; then OVERLAPD_NODE_ADDRS shows the
# daemons side by side before the submission.
run "$stubs" "gpu-a gpu-b" OVERLAPD_NODE_NAMES=slurm OVERLAPD_NODE_ADDRS=gpu-a:7443,gpu-b:7443 -- g.yaml
[ $rc = 0 ] || fail "slurm naming: exit $rc: $out"
expect_submit "--addr $sock submit g.yaml --peers gpu-a:7000,gpu-b:7000 --wait" "slurm naming"
grep -q srun "$calls" && fail "slurm naming ran srun"
[ "$(sed -n 2p "$calls")" = "overlapctl node --nodes gpu-a:7443,gpu-b:7443" ] ||
  fail "node --nodes not shown first: $(cat "$calls")"

# Refusals: an unknown naming, and no graph.
run "$stubs" "gpu-a" OVERLAPD_NODE_NAMES=dns -- g.yaml
[ $rc = 2 ] || fail "unknown naming: exit $rc: $out"
run "$stubs" "gpu-a" --
[ $rc != 0 ] || fail "no graph: exit 0"
case $out in *usage*) ;; *) fail "no graph: $out" ;; esac

# The submission replaces the shell (exec), so scancel's SIGTERM reaches overlapctl.
grep -q '^exec overlapctl ' "$script" || fail "overlapctl submit is not exec'd"

[ $fails = 0 ] || exit 1
echo PASS
