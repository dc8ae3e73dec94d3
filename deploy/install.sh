#!/bin/sh
# Installs overlapd: binaries to PREFIX/bin (default /usr/local/bin), the config
# to /etc/overlapd/overlapd.yaml (every key commented out at its default; an
# existing one is the operator's and is kept), the shipped default beside it as
# overlapd.yaml.default (an upgrade prints how the defaults changed), the unit
# to /etc/systemd/system, overlapctl's bash completion to
# PREFIX/share/bash-completion/completions, man pages made by help2man to
# PREFIX/share/man/man1, the system user and group `overlapd` the unit runs as,
# then runs `systemctl daemon-reload`. It starts and enables nothing.
#
#   deploy/install.sh [--build-dir DIR] [--prefix PREFIX] [--destdir DIR] [--no-reload]
#   deploy/install.sh --uninstall [--purge] [--prefix PREFIX] [--destdir DIR]
#
# --uninstall stops and disables the unit and removes what an install put
# there, keeping /etc/overlapd and /var/lib/overlapd (jobs, keys) and the user;
# --purge removes those two directories too.
#
# DESTDIR (the option or the environment variable) stages everything under a
# directory without root, creates no user and skips systemctl, e.g. for
# packaging or tests:
#   DESTDIR=/tmp/stage deploy/install.sh --build-dir build
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build_dir="$here/../build"
prefix=/usr/local
destdir=${DESTDIR:-}
reload=1
uninstall=0
purge=0

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --no-reload) reload=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    --purge) purge=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

case "$prefix" in
  /*) ;;
  *) echo "install.sh: --prefix must be absolute (got $prefix)" >&2; exit 2 ;;
esac
if [ "$purge" = 1 ] && [ "$uninstall" = 0 ]; then
  echo "install.sh: --purge goes with --uninstall" >&2; exit 2
fi

bindir="$destdir$prefix/bin"
confdir="$destdir/etc/overlapd"
statedir="$destdir/var/lib/overlapd"
unitdir="$destdir/etc/systemd/system"
mandir="$destdir$prefix/share/man/man1"
completiondir="$destdir$prefix/share/bash-completion/completions"
systemd_here() { [ -z "$destdir" ] && [ -d /run/systemd/system ]; }

# Removes what an install put under PREFIX and the unit; the config, the state
# and the user stay unless --purge (the user always: files elsewhere may be its).
uninstall_overlapd() {
  if systemd_here && [ -e "$unitdir/overlapd.service" ]; then
    systemctl disable --now overlapd.service || true
  fi
  for f in "$bindir/overlapd" "$bindir/overlapctl" "$unitdir/overlapd.service" \
           "$completiondir/overlapctl" "$mandir/overlapd.1.gz" "$mandir/overlapctl.1.gz"; do
    if [ -e "$f" ]; then rm -f "$f" && echo "removed $f"; fi
  done
  if systemd_here && [ "$reload" = 1 ]; then systemctl daemon-reload; fi
  if [ "$purge" = 1 ]; then
    rm -rf "$confdir" "$statedir"
    echo "purged $confdir and $statedir"
  else
    echo "kept $confdir and $statedir (--purge removes them)"
  fi
  echo "kept the user overlapd: userdel overlapd removes it"
}
if [ "$uninstall" = 1 ]; then
  uninstall_overlapd
  exit 0
fi

overlapd_bin="$build_dir/server/overlapd"
overlapctl_bin="$build_dir/client/overlapctl"
if [ ! -x "$overlapd_bin" ]; then
  echo "install.sh: $overlapd_bin not found; build first:" >&2
  echo "  cmake -S . -B build && cmake --build build --target overlapd overlapctl" >&2
  exit 1
fi

install -d -m 0755 "$bindir" "$confdir" "$unitdir"

install -m 0755 "$overlapd_bin" "$bindir/overlapd"
if [ -x "$overlapctl_bin" ]; then
  install -m 0755 "$overlapctl_bin" "$bindir/overlapctl"
else
  overlapctl_bin=""
  echo "install.sh: warning: $build_dir/client/overlapctl not built; installing overlapd only" >&2
fi

# The operator's file is theirs. Its keys are commented out at the defaults, so
# a changed default reaches the node unless they set that key; what changed is
# the difference between the last install's overlapd.yaml.default and this one.
install_config() {
  shipped="$here/overlapd.yaml"
  default_copy="$confdir/overlapd.yaml.default"
  if [ ! -e "$confdir/overlapd.yaml" ]; then
    install -m 0644 "$shipped" "$confdir/overlapd.yaml"
  else
    echo "kept $confdir/overlapd.yaml; the shipped default is in overlapd.yaml.default"
    if [ ! -e "$default_copy" ]; then
      # An install older than overlapd.yaml.default: its config set every key.
      echo "to see where yours differs: diff -u $confdir/overlapd.yaml $default_copy"
    elif ! cmp -s "$default_copy" "$shipped"; then
      echo "the defaults changed since the last install:"
      diff -u --label "overlapd.yaml.default (before)" --label "overlapd.yaml.default (now)" \
        "$default_copy" "$shipped" | sed -n '3,$p' | grep '^[-+]' || true
    fi
    set_keys=$(sed -n 's/^\([a-z_][a-z0-9_]*\):.*/\1/p' "$confdir/overlapd.yaml" | paste -sd' ' -)
    if [ -n "$set_keys" ]; then
      echo "keys your file sets (they override the defaults): $set_keys"
    fi
  fi
  install -m 0644 "$shipped" "$default_copy"
}
install_config

# The unit names /usr/local/bin/overlapd; follow another prefix.
sed "s|/usr/local/bin/overlapd|$prefix/bin/overlapd|g" "$here/overlapd.service" \
  > "$unitdir/overlapd.service.tmp"
chmod 0644 "$unitdir/overlapd.service.tmp"
mv "$unitdir/overlapd.service.tmp" "$unitdir/overlapd.service"

# The completion reads overlapctl's --help when used, so it needs no build step.
if [ -n "$overlapctl_bin" ]; then
  install -d -m 0755 "$completiondir"
  install -m 0644 "$here/completion/overlapctl.bash" "$completiondir/overlapctl"
fi

# Man pages from the binaries' --help. overlapctl's gets a section per
# subcommand (its --help lists only their names). The version comes from
# overlapd --version: overlapctl --version would ask a daemon for its own.
# Escapes a --help text for a no-fill roff block.
roff_text() { sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/"; }
make_man() {  # make_man BINARY NAME DESCRIPTION [INCLUDE]
  help2man --no-info --section 1 --name "$3" --version-string "$2 $version" \
    ${4:+--include "$4"} --output "$tmp/$2.1" "$1"
  gzip -9n < "$tmp/$2.1" > "$mandir/$2.1.gz"
  chmod 0644 "$mandir/$2.1.gz"
}
if command -v help2man >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  install -d -m 0755 "$mandir"
  version=$("$overlapd_bin" --version | sed -n '1s/^overlapd //p')
  [ -n "$version" ] || version=unknown
  {
    cat "$here/man/overlapd.h2m"
    echo "[SEE ALSO]"
    echo "overlapctl(1); docs/CONFIGURATION.md and docs/OPERATIONS.md in overlapd's source."
  } > "$tmp/overlapd.h2m"
  make_man "$overlapd_bin" overlapd \
    "per-node daemon that runs tensor-parallel layer ops with overlapped communication" \
    "$tmp/overlapd.h2m"
  if [ -n "$overlapctl_bin" ]; then
    {
      echo "[COMMANDS]"
      for cmd in $("$overlapctl_bin" --help | sed -n '/^Subcommands:/,$s/^  \([a-z][a-z0-9-]*\) .*/\1/p'); do
        for sub in "" $("$overlapctl_bin" "$cmd" --help |
                        sed -n '/^Subcommands:/,$s/^  \([a-z][a-z0-9-]*\) .*/\1/p'); do
          echo ".SS \"$cmd${sub:+ $sub}\""
          echo ".nf"
          # shellcheck disable=SC2086  # $sub is one word or none
          "$overlapctl_bin" "$cmd" $sub --help | sed '/^Usage: /s|^Usage: [^ ]*overlapctl|Usage: overlapctl|' |
            roff_text
          echo ".fi"
        done
      done
      cat "$here/man/overlapctl.h2m"
      echo "[SEE ALSO]"
      echo "overlapd(1); docs/CLI.md and docs/OPERATIONS.md in overlapd's source."
    } > "$tmp/overlapctl.h2m"
    make_man "$overlapctl_bin" overlapctl \
      "submit layer-graph jobs to overlapd and read their reports" "$tmp/overlapctl.h2m"
  fi
  echo "installed man pages to $mandir"
else
  echo "install.sh: warning: help2man not found; no man pages (apt-get install help2man)" >&2
fi

# The unit runs as User=overlapd Group=overlapd: a system user with no login,
# whose home is the state directory (systemd makes it: StateDirectory=).
if [ -n "$destdir" ]; then
  echo "not creating the overlapd user under DESTDIR; a package's postinst, or:" \
       "useradd --system --user-group --home-dir /var/lib/overlapd --no-create-home --shell /usr/sbin/nologin overlapd"
elif id -u overlapd >/dev/null 2>&1; then
  echo "user overlapd exists"
else
  if getent group overlapd >/dev/null 2>&1; then group_opt="--gid overlapd"; else group_opt="--user-group"; fi
  # shellcheck disable=SC2086  # one option and maybe its value
  useradd --system $group_opt --home-dir /var/lib/overlapd --no-create-home \
    --shell /usr/sbin/nologin --comment "overlapd GPU overlap daemon" overlapd
  echo "created system user overlapd (group overlapd)"
fi

echo "installed overlapd to $bindir, config to $confdir, unit to $unitdir"
echo "users who submit jobs (ML engineers, Slurm jobs' users) must be in the socket's group:" \
     "socket_group in /etc/overlapd/overlapd.yaml (\"\" = overlapd's own group), e.g." \
     "usermod -aG overlapd alice"
if systemd_here && [ "$reload" = 1 ]; then
  systemctl daemon-reload
  echo "run: systemctl enable --now overlapd"
fi
