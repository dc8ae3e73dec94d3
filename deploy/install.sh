#!/bin/sh
# Installs overlapd: binaries to PREFIX/bin (default /usr/local/bin), the config
# to /etc/overlapd/overlapd.yaml (an existing one is kept; the new default goes
# next to it as overlapd.yaml.new), the unit to /etc/systemd/system, then runs
# `systemctl daemon-reload`.
#
#   deploy/install.sh [--build-dir DIR] [--prefix PREFIX] [--destdir DIR] [--no-reload]
#
# DESTDIR (the option or the environment variable) stages everything under a
# directory without root and skips daemon-reload, e.g. for packaging or tests:
#   DESTDIR=/tmp/stage deploy/install.sh --build-dir build
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build_dir="$here/../build"
prefix=/usr/local
destdir=${DESTDIR:-}
reload=1

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --no-reload) reload=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

case "$prefix" in
  /*) ;;
  *) echo "install.sh: --prefix must be absolute (got $prefix)" >&2; exit 2 ;;
esac

overlapd_bin="$build_dir/server/overlapd"
overlapctl_bin="$build_dir/client/overlapctl"
if [ ! -x "$overlapd_bin" ]; then
  echo "install.sh: $overlapd_bin not found; build first:" >&2
  echo "  cmake -S . -B build && cmake --build build --target overlapd overlapctl" >&2
  exit 1
fi

bindir="$destdir$prefix/bin"
confdir="$destdir/etc/overlapd"
unitdir="$destdir/etc/systemd/system"
install -d -m 0755 "$bindir" "$confdir" "$unitdir"

install -m 0755 "$overlapd_bin" "$bindir/overlapd"
if [ -x "$overlapctl_bin" ]; then
  install -m 0755 "$overlapctl_bin" "$bindir/overlapctl"
else
  echo "install.sh: warning: $overlapctl_bin not built; installing overlapd only" >&2
fi

if [ -e "$confdir/overlapd.yaml" ]; then
  install -m 0644 "$here/overlapd.yaml" "$confdir/overlapd.yaml.new"
  echo "kept $confdir/overlapd.yaml; the default config is in overlapd.yaml.new"
else
  install -m 0644 "$here/overlapd.yaml" "$confdir/overlapd.yaml"
fi

# The unit names /usr/local/bin/overlapd; follow another prefix.
sed "s|/usr/local/bin/overlapd|$prefix/bin/overlapd|g" "$here/overlapd.service" \
  > "$unitdir/overlapd.service.tmp"
chmod 0644 "$unitdir/overlapd.service.tmp"
mv "$unitdir/overlapd.service.tmp" "$unitdir/overlapd.service"

echo "installed overlapd to $bindir, config to $confdir, unit to $unitdir"
if [ -z "$destdir" ] && [ "$reload" = 1 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "run: systemctl enable --now overlapd"
fi
