#!/usr/bin/env bash
# deploy/install.sh with DESTDIR stages the binaries, the config, the unit
# (following --prefix), overlapctl's bash completion and, where help2man is
# installed, gzipped man pages for both programs (overlapctl's with a section
# per subcommand); without help2man it warns and installs the rest. Under
# DESTDIR it creates no user and says so.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
build=${OVERLAP_BUILD_DIR:-$src/build}
if [ ! -x "$build/server/overlapd" ] || [ ! -x "$build/client/overlapctl" ]; then
  echo "SKIP: overlapd and overlapctl not built in $build (set OVERLAP_BUILD_DIR)" >&2
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks '$2'"; }

stage=$work/stage
DESTDIR=$stage sh "$src/deploy/install.sh" --build-dir "$build" --prefix /opt/overlap > "$work/log" 2>&1 ||
  { cat "$work/log" >&2; fail "install.sh failed"; exit 1; }
for built in server/overlapd client/overlapctl; do
  bin=$stage/opt/overlap/bin/${built#*/}
  if [ ! -x "$bin" ] || ! cmp -s "$build/$built" "$bin"; then fail "$bin missing or not the build's"; fi
done
cmp -s "$src/deploy/overlapd.yaml" "$stage/etc/overlapd/overlapd.yaml" || fail "config differs"
cmp -s "$src/deploy/overlapd.yaml" "$stage/etc/overlapd/overlapd.yaml.default" || fail "no overlapd.yaml.default"
has "$stage/etc/systemd/system/overlapd.service" "ExecStart=/opt/overlap/bin/overlapd "
grep -q /usr/local/bin "$stage/etc/systemd/system/overlapd.service" && fail "unit still names /usr/local/bin"
completion=$stage/opt/overlap/share/bash-completion/completions/overlapctl
cmp -s "$src/deploy/completion/overlapctl.bash" "$completion" || fail "completion missing or differs"
has "$work/log" "not creating the overlapd user under DESTDIR"
has "$work/log" "socket_group"
[ -z "$(find "$stage" -type f -perm -o+w)" ] || fail "a world-writable file was installed"

# The staged completion completes with the staged binary.
got=$(bash -c 'source "$1"; COMP_WORDS=("$2" tun); COMP_CWORD=1; _overlapctl; echo "${COMPREPLY[*]}"' \
        _ "$completion" "$stage/opt/overlap/bin/overlapctl")
[ "$got" = tuning ] || fail "staged completion: 'overlapctl tun' gave '$got'"

man=$stage/opt/overlap/share/man/man1
if command -v help2man >/dev/null 2>&1; then
  for page in overlapd overlapctl; do
    [ -f "$man/$page.1.gz" ] || { fail "no $man/$page.1.gz"; continue; }
    gzip -dc "$man/$page.1.gz" > "$work/$page.1" || fail "$page.1.gz is not gzip"
    upper=$(echo "$page" | tr '[:lower:]' '[:upper:]')
    grep -q "^\.TH $upper \"1\" .* \"$page [0-9]" "$work/$page.1" || fail "$page.1: $(grep '^\.TH' "$work/$page.1")"
    grep -A1 '^\.SH NAME' "$work/$page.1" | grep -q "^$page \\\\- " || fail "$page.1: NAME does not name $page"
  done
  has "$work/overlapd.1" '\-\-config'
  has "$work/overlapctl.1" '.SS "submit"'
  has "$work/overlapctl.1" '.SS "tuning forget"'
  has "$work/overlapctl.1" 'Usage: overlapctl tuning forget [OPTIONS]'
  has "$work/overlapctl.1" '.SH "SEE ALSO"'
  for page in overlapd overlapctl; do
    has "$work/$page.1" '.SH "EXIT STATUS"'
    has "$work/$page.1" '.SH ENVIRONMENT'
    has "$work/$page.1" '.SH EXAMPLES'
  done
  # The exit statuses docs/CLI.md gives, and the variables each program reads.
  for code in 0 1 2 3 64; do has "$work/overlapctl.1" ".B $code"; done
  for var in OVERLAPD_ADDR OVERLAPD_TLS_CA OVERLAP_TORCH_PEERS COLUMNS; do has "$work/overlapctl.1" "$var"; done
  for var in SPDLOG_LEVEL XDG_RUNTIME_DIR NOTIFY_SOCKET; do has "$work/overlapd.1" "$var"; done
  if command -v man >/dev/null 2>&1; then
    MANWIDTH=100 man -l "$man/overlapctl.1.gz" 2>"$work/man.err" > "$work/man.txt" || fail "man -l failed"
    [ ! -s "$work/man.err" ] || fail "man warned: $(cat "$work/man.err")"
    has "$work/man.txt" "--compare-scheduler"
  fi
else
  echo "note: help2man not installed; the man pages were not checked" >&2
fi

# Without help2man: a warning, no man pages, everything else.
mkdir "$work/path"
IFS=: read -r -a dirs <<< "$PATH"
for dir in "${dirs[@]}"; do
  for f in "$dir"/*; do
    name=${f##*/}
    [ "$name" != help2man ] && [ -x "$f" ] && [ ! -e "$work/path/$name" ] && ln -s "$f" "$work/path/$name"
  done
done
stage2=$work/stage2
PATH=$work/path DESTDIR=$stage2 sh "$src/deploy/install.sh" --build-dir "$build" > "$work/log2" 2>&1 ||
  fail "install.sh without help2man failed: $(cat "$work/log2")"
has "$work/log2" "help2man not found"
[ ! -e "$stage2/usr/local/share/man" ] || fail "man pages without help2man"
[ -x "$stage2/usr/local/bin/overlapctl" ] || fail "no overlapctl without help2man"
[ -f "$stage2/usr/local/share/bash-completion/completions/overlapctl" ] || fail "no completion without help2man"

# Without overlapctl built: overlapd alone, no completion.
mkdir -p "$work/build/server"
ln -s "$build/server/overlapd" "$work/build/server/overlapd"
DESTDIR=$work/stage3 sh "$src/deploy/install.sh" --build-dir "$work/build" > "$work/log3" 2>&1 ||
  fail "install.sh without overlapctl failed: $(cat "$work/log3")"
has "$work/log3" "installing overlapd only"
[ ! -e "$work/stage3/usr/local/share/bash-completion" ] || fail "completion installed without overlapctl"

# An upgrade: the operator's file stays; the defaults' change since the last
# install (an older overlapd.yaml.default) is printed, with the keys they set.
conf=$stage/etc/overlapd
printf 'max_queued_jobs: 64\n' > "$conf/overlapd.yaml"
sed 's/^#drain_timeout_s: [^ ]*/#drain_timeout_s: 12345/' "$src/deploy/overlapd.yaml" > "$conf/overlapd.yaml.default"
DESTDIR=$stage sh "$src/deploy/install.sh" --build-dir "$build" --prefix /opt/overlap > "$work/log5" 2>&1 ||
  fail "upgrade failed: $(cat "$work/log5")"
[ "$(cat "$conf/overlapd.yaml")" = "max_queued_jobs: 64" ] || fail "upgrade replaced the operator's config"
cmp -s "$src/deploy/overlapd.yaml" "$conf/overlapd.yaml.default" || fail "upgrade left the old default"
has "$work/log5" "the defaults changed since the last install"
has "$work/log5" "-#drain_timeout_s: 12345"
has "$work/log5" "+$(grep '^#drain_timeout_s:' "$src/deploy/overlapd.yaml" | cut -c1-30)"
has "$work/log5" "keys your file sets (they override the defaults): max_queued_jobs"
DESTDIR=$stage sh "$src/deploy/install.sh" --build-dir "$build" --prefix /opt/overlap > "$work/log6" 2>&1 ||
  fail "second upgrade failed"
grep -q "defaults changed" "$work/log6" && fail "unchanged defaults reported as changed"

# --uninstall removes the install and keeps the config and the state; --purge
# removes those too.
mkdir -p "$stage/var/lib/overlapd" && echo jobs > "$stage/var/lib/overlapd/jobs.db"
DESTDIR=$stage sh "$src/deploy/install.sh" --uninstall --prefix /opt/overlap > "$work/log7" 2>&1 ||
  fail "--uninstall failed: $(cat "$work/log7")"
for gone in opt/overlap/bin/overlapd opt/overlap/bin/overlapctl etc/systemd/system/overlapd.service \
            opt/overlap/share/bash-completion/completions/overlapctl \
            opt/overlap/share/man/man1/overlapd.1.gz opt/overlap/share/man/man1/overlapctl.1.gz; do
  [ ! -e "$stage/$gone" ] || fail "--uninstall left $gone"
done
[ "$(cat "$conf/overlapd.yaml")" = "max_queued_jobs: 64" ] || fail "--uninstall removed the config"
[ -f "$stage/var/lib/overlapd/jobs.db" ] || fail "--uninstall removed the state"
has "$work/log7" "--purge removes them"
rc=0
sh "$src/deploy/install.sh" --purge --destdir "$stage" > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "--purge without --uninstall: exit $rc"
DESTDIR=$stage sh "$src/deploy/install.sh" --uninstall --purge --prefix /opt/overlap > "$work/log8" 2>&1 ||
  fail "--uninstall --purge failed: $(cat "$work/log8")"
[ ! -e "$conf" ] && [ ! -e "$stage/var/lib/overlapd" ] || fail "--purge left the config or the state"

rc=0
sh "$src/deploy/install.sh" --prefix relative --destdir "$work/stage4" > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "relative prefix: exit $rc"

[ $fails = 0 ] || exit 1
echo PASS
