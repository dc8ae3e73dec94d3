#!/usr/bin/env bash
# Installs the Debian 12 packages overlapd needs. Idempotent: does nothing when
# every package is already there. Needs root (or sudo) only when one is missing.
#
#   scripts/install-deps.sh          build and run: compilers, CMake, the libraries
#                                    overlapd and overlapctl link, help2man (man pages)
#   scripts/install-deps.sh --test   also what only the tests use: GoogleTest, clang
#                                    (thread-safety check, fuzzers), Python (the client's
#                                    tests), openssl (test certificates), systemd
#                                    (systemd-analyze), promtool (the alert rules),
#                                    chromium (the --html charts, loaded headless)
#
# Nothing it installs starts or enables a service. promtool comes only in Debian's
# `prometheus` package, which also ships the Prometheus server and would start it
# on :9090 and enable it at boot: when this script installs that package, starts
# are forbidden during the install (policy-rc.d) and prometheus.service is then
# stopped, disabled and masked (`systemctl unmask prometheus` undoes the mask). A
# prometheus package that was already installed is left as it was.
set -euo pipefail

build_packages=(
  build-essential cmake pkg-config git
  libgrpc++-dev libssl-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libopenblas-dev libsqlite3-dev libsystemd-dev prometheus-cpp-dev libcivetweb-dev libgloo-dev
  help2man
)
test_packages=(
  libgtest-dev libgmock-dev clang python3 python3-venv openssl systemd
  chromium  # tests/charts loads the --html pages headless
  prometheus  # for promtool only: see above
)

with_tests=0
case "${1:-}" in
  --test) with_tests=1 ;;
  "") ;;
  -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown argument: $1 (--test adds the test-only packages)" >&2; exit 2 ;;
esac
packages=("${build_packages[@]}")
[ "$with_tests" = 1 ] && packages+=("${test_packages[@]}")

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
# A Prometheus server an earlier install-deps.sh left enabled (it did, before
# 0.2): said, not changed, since this one cannot tell who wanted it.
warn_running_prometheus() {
  [ -d /run/systemd/system ] && installed prometheus || return 0
  if systemctl is-enabled --quiet prometheus.service 2>/dev/null ||
     systemctl is-active --quiet prometheus.service 2>/dev/null; then
    echo "install-deps: note: prometheus.service is enabled or running (the tests need only" \
         "promtool); if this node does not run Prometheus: sudo systemctl disable --now prometheus" >&2
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  warn_running_prometheus
  exit 0
fi

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive

# policy-rc.d exit 101 = "action forbidden": invoke-rc.d and deb-systemd-invoke
# then start nothing during the install. An existing policy is put back after.
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}  # another path only for tests/deploy/
policy_saved=""
forbid_service_starts() {
  if [ -e "$policy" ]; then
    policy_saved=$(mktemp /tmp/policy-rc.d.XXXXXX)
    $sudo_cmd cp -p "$policy" "$policy_saved"
  fi
  printf '#!/bin/sh\n# install-deps.sh: no service starts while it installs\nexit 101\n' |
    $sudo_cmd tee "$policy" >/dev/null
  $sudo_cmd chmod 0755 "$policy"
}
restore_policy() {
  if [ -n "$policy_saved" ]; then
    $sudo_cmd cp -p "$policy_saved" "$policy" && rm -f "$policy_saved"
  else
    $sudo_cmd rm -f "$policy"
  fi
}

# The Prometheus server of the prometheus package: stopped, never started at boot.
silence_prometheus_server() {
  if [ -d /run/systemd/system ]; then
    $sudo_cmd systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  else
    # No systemd running (a container): drop the boot links offline.
    $sudo_cmd systemctl disable prometheus.service >/dev/null 2>&1 || true
  fi
  $sudo_cmd systemctl mask prometheus.service >/dev/null 2>&1 || true
  $sudo_cmd update-rc.d prometheus disable >/dev/null 2>&1 || true
  echo "install-deps: prometheus.service (installed for promtool) is stopped, disabled and masked"
}

installs_prometheus=0
for p in "${missing[@]}"; do [ "$p" = prometheus ] && installs_prometheus=1; done

echo "install-deps: installing ${missing[*]}"
forbid_service_starts
trap restore_policy EXIT
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [ "$installs_prometheus" = 1 ]; then silence_prometheus_server; else warn_running_prometheus; fi
