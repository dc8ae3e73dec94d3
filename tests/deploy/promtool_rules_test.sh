#!/usr/bin/env bash
# The alert rules parse (promtool check rules) and behave as their unit tests
# say (promtool test rules deploy/prometheus/overlapd-alerts.test.yml: a firing
# and a quiet case for every rule). Without promtool (Debian package
# `prometheus`) it skips with 77, except under CI=true, where it fails:
# scripts/install-deps.sh --test installs it there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
rules_dir=$src/deploy/prometheus

if ! command -v promtool >/dev/null 2>&1; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL: promtool not found (scripts/install-deps.sh --test installs it without starting its server)" >&2
    exit 1
  fi
  echo "SKIP: promtool not found (Debian package prometheus)" >&2
  exit 77
fi

promtool check rules "$rules_dir/overlapd-alerts.yml"

# Every rule in the file has a test case: a rule added without one fails here.
rules=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$rules_dir/overlapd-alerts.yml" | sort -u)
tested=$(sed -n 's/^ *alertname: *\([A-Za-z0-9_]*\).*/\1/p' "$rules_dir/overlapd-alerts.test.yml" | sort -u)
if [ "$rules" != "$tested" ]; then
  echo "FAIL: rules without a test case (<) or tests of no rule (>):" >&2
  diff <(echo "$rules") <(echo "$tested") >&2 || true
  exit 1
fi
[ "$(echo "$rules" | wc -l)" -ge 10 ] || { echo "FAIL: found only: $rules" >&2; exit 1; }

# promtool resolves rule_files relative to the test file.
promtool test rules "$rules_dir/overlapd-alerts.test.yml"
echo "PASS: $(echo "$rules" | wc -l) rules checked and unit-tested"
