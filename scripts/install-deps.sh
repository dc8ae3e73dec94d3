#!/usr/bin/env bash
# Installs the Debian 12 packages overlapd needs to build and test. Idempotent:
# does nothing when every package is already there. Needs root (or sudo).
set -euo pipefail
packages=(
  build-essential cmake pkg-config git
  libgrpc++-dev libssl-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libopenblas-dev libsqlite3-dev libsystemd-dev prometheus-cpp-dev libcivetweb-dev libgloo-dev
  systemd openssl clang python3 python3-venv
  # The deploy/ tests: promtool (only Debian's prometheus package ships it; it
  # also installs the Prometheus server, which starts on :9090 where systemd
  # runs) and help2man for install.sh's man pages.
  prometheus help2man
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
