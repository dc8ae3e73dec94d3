#!/bin/sh
# Runs `systemd-analyze verify` on deploy/overlapd.service, then `systemd-analyze
# security`, which must score it 3.0 or below (OK). verify fails when
# ExecStart's binary does not exist, so the unit is checked as a temporary copy
# whose ExecStart points at a built overlapd (default: build/server/overlapd).
#
#   deploy/verify-unit.sh [PATH/TO/overlapd]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$here/../build/server/overlapd}
if [ ! -x "$binary" ]; then
  echo "verify-unit.sh: $binary is not an executable overlapd; build it or pass its path" >&2
  exit 1
fi
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/local/bin/overlapd|$binary|g" "$here/overlapd.service" > "$tmp/overlapd.service"
# verify prints warnings without failing; treat any output as a failure too.
out=$(systemd-analyze verify "$tmp/overlapd.service" 2>&1) || {
  printf '%s\n' "$out" >&2
  exit 1
}
if [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
echo "overlapd.service: systemd-analyze verify passed"

# The exposure score, 0 (locked down) to 10 (root, unconfined); --threshold is
# in tenths.
max_exposure=30
report=$(systemd-analyze security --offline=yes --threshold="$max_exposure" \
  "$tmp/overlapd.service" 2>&1) || {
  printf '%s\n' "$report" | grep -E 'Overall|✗' >&2
  echo "overlapd.service: exposure above 3.0 (systemd-analyze security)" >&2
  exit 1
}
printf '%s\n' "$report" | grep 'Overall exposure' 
