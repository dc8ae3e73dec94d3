#!/usr/bin/env bash
# deploy/completion/overlapctl.bash completes what the built overlapctl's
# --help lists: every subcommand, nested ones (tuning list), every subcommand's
# flags with the top level's, the values of flags that name them, and files for
# a graph. The expected lists are taken from `overlapctl [CMD] --help` here
# with a plainer parse than the completion's, so a help layout it misreads fails.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
ctl=${OVERLAPCTL_BIN:-$src/build/client/overlapctl}
if [ ! -x "$ctl" ]; then
  echo "SKIP: $ctl not built (set OVERLAPCTL_BIN)" >&2
  exit 77
fi
source "$src/deploy/completion/overlapctl.bash"
[ "$(complete -p overlapctl)" = "complete -F _overlapctl overlapctl" ] || { echo "FAIL: not registered" >&2; exit 1; }

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# complete WORD...: COMPREPLY for the cursor on the last word, sorted, one line.
complete_words() {
  COMP_WORDS=("$ctl" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _overlapctl
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() {  # expect "WANT" WORD...
  local want=$1; shift
  local got; got=$(complete_words "$@")
  [ "$got" = "$want" ] || fail "overlapctl $* <TAB>: got '$got', want '$want'"
}
subcommands() { "$ctl" "$@" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p' | sort; }
long_flags() {
  "$ctl" "$@" --help | sed -n '/^Options:/,/^[^ ]/p' | grep -oE '^  (-[a-zA-Z],)?--[a-z0-9-]+(,--[a-z0-9-]+)*' |
    tr ',' '\n' | sed 's/^ *//' | grep -- '^--'
}
join() { sort -u | tr '\n' ' ' | sed 's/ $//'; }

top=$(subcommands | join)
[ "$(echo "$top" | wc -w)" -ge 15 ] || fail "overlapctl --help lists only: $top"
expect "$top" ""
expect "submit" su
global=$(long_flags)

# Every subcommand, and every subcommand of those: its flags and the top level's.
n=0
for cmd in $(subcommands); do
  for sub in "" $(subcommands "$cmd"); do
    read -r -a path <<< "$cmd $sub"
    want=$( { long_flags "${path[@]}"; echo "$global"; } | join)
    expect "$want" "${path[@]}" --
    n=$((n + 1))
    if [ -n "$sub" ]; then continue; fi
    nested=$(subcommands "$cmd" | join)
    [ -z "$nested" ] || expect "$nested" "$cmd" ""
  done
done
[ "$n" -ge 20 ] || fail "only $n subcommands walked"

expect "--scheduler" submit --sch
expect "dynamic static" submit --scheduler ""
expect "dynamic" submit --scheduler = d          # --scheduler=d
expect "auto direct nccl p2p" bench --transport ""
expect "bf16 fp16 fp32 fp8" bench --dtype ""
expect "megatron te torchtitan" export --format ""
expect "" top --interval ""                      # a number
expect "tuning" --addr unix:/tmp/x.sock tu       # --addr's value is not a subcommand
expect "forget list" tuning ""
expect "forget list" --json tuning ""            # a flag without a value
expect "--wait" submit --no-fuse --wa            # "--no-fuse Excludes: ..." takes none either
expect "--nodes" --json node --no
expect "--peers" submit --pe                      # peer addresses: --peers, user addresses: --nodes
# A graph file for submit, and for a text flag's value.
expect "$src/deploy/graphs" submit "$src/deploy/grap"
expect "$src/deploy/graphs/mesh-host.yaml" bench --graph "$src/deploy/graphs/mesh-"

# No overlapctl at that path: nothing, and no error.
COMP_WORDS=(/nonexistent/overlapctl su) COMP_CWORD=1 COMPREPLY=()
_overlapctl || fail "failed without the binary"
[ ${#COMPREPLY[@]} = 0 ] || fail "completed without the binary: ${COMPREPLY[*]}"

[ $fails = 0 ] || exit 1
echo "PASS: $n commands' flags"
