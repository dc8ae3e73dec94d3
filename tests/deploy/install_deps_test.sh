#!/usr/bin/env bash
# scripts/install-deps.sh installs the build and run packages alone, adds the
# test-only ones (prometheus for promtool among them) with --test, forbids
# service starts while apt-get runs, then stops, disables and masks the
# Prometheus server it installed; run against stand-ins for dpkg-query, apt-get,
# systemctl and update-rc.d. Then, on this machine: no Prometheus server runs
# or listens on :9090, and where systemd runs prometheus.service is neither
# enabled nor active (set OVERLAP_RUNS_PROMETHEUS=1 on a node that runs one).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

bin=$work/bin
mkdir "$bin"
cat > "$bin/dpkg-query" <<'STUB'
#!/bin/sh
echo "unknown ok not-installed"
STUB
# apt-get install records its packages and what policy-rc.d answers meanwhile.
cat > "$bin/apt-get" <<'STUB'
#!/bin/sh
[ "$1" = update ] && exit 0
shift 3
echo "$*" > "$STUB_LOG/packages"
rc=0; sh "$POLICY_RC_D" prometheus start || rc=$?
echo "$rc" > "$STUB_LOG/policy"
STUB
for tool in systemctl update-rc.d; do
  printf '#!/bin/sh\necho "%s $*" >> "$STUB_LOG/services"\n' "$tool" > "$bin/$tool"
done
printf '#!/bin/sh\nexec "$@"\n' > "$bin/sudo"
chmod +x "$bin"/*

run_stubbed() {  # run_stubbed LOGDIR [--test]
  mkdir -p "$1"
  echo '#!/bin/sh' > "$work/policy-rc.d.before"
  cp "$work/policy-rc.d.before" "$work/policy-rc.d"
  PATH=$bin:$PATH STUB_LOG=$1 POLICY_RC_D=$work/policy-rc.d \
    bash "$src/scripts/install-deps.sh" ${2:-} > "$1/out" 2>&1 || fail "install-deps.sh ${2:-} failed: $(cat "$1/out")"
  cmp -s "$work/policy-rc.d.before" "$work/policy-rc.d" || fail "${2:-build}: policy-rc.d not put back"
}

run_stubbed "$work/build"
packages=" $(cat "$work/build/packages") "
for p in cmake libgrpc++-dev libopenblas-dev help2man; do
  case "$packages" in *" $p "*) ;; *) fail "build packages lack $p" ;; esac
done
for p in prometheus libgtest-dev clang python3-venv; do
  case "$packages" in *" $p "*) fail "build packages include the test-only $p" ;; esac
done
[ ! -e "$work/build/services" ] || fail "build install touched services: $(cat "$work/build/services")"

run_stubbed "$work/test" --test
packages=" $(cat "$work/test/packages") "
for p in cmake prometheus libgtest-dev libgmock-dev; do
  case "$packages" in *" $p "*) ;; *) fail "--test packages lack $p" ;; esac
done
[ "$(cat "$work/test/policy")" = 101 ] || fail "policy-rc.d allowed starts during apt-get: $(cat "$work/test/policy")"
grep -qx "systemctl mask prometheus.service" "$work/test/services" || fail "prometheus.service not masked"
grep -q "^systemctl disable .*prometheus.service" "$work/test/services" || fail "prometheus.service not disabled"
grep -q "stopped, disabled and masked" "$work/test/out" || fail "install-deps did not say what it did to prometheus"

# This machine: no Prometheus server runs or listens (what install-deps must not leave).
if [ "${OVERLAP_RUNS_PROMETHEUS:-}" != 1 ]; then
  for comm in /proc/[0-9]*/comm; do
    [ "$(cat "$comm" 2>/dev/null)" = prometheus ] && fail "a Prometheus server runs: pid $(basename "$(dirname "$comm")")"
  done
  # 9090 = 0x2382; state 0A = LISTEN.
  if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" && $2 ~ /:2382$/' | grep -q .; then
    fail "something listens on :9090"
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 &&
     systemctl cat prometheus.service >/dev/null 2>&1; then
    systemctl is-enabled --quiet prometheus.service 2>/dev/null && fail "prometheus.service is enabled"
    systemctl is-active --quiet prometheus.service 2>/dev/null && fail "prometheus.service is active"
  else
    echo "note: systemd is not running here; the unit's state was not checked" >&2
  fi
fi

[ $fails = 0 ] || exit 1
echo PASS
