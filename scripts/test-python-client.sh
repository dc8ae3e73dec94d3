#!/usr/bin/env bash
# The Python client (client/python): installed with one `pip install` into a
# venv under build/ (Debian's system pip refuses installs), its stubs
# generated from proto/ as it builds, then its pytest suite against the
# overlapd in build/ on the host backend. A run that collects no test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check ./client/python pytest
set +e
OVERLAPD_BIN="$PWD/build/server/overlapd" OVERLAPCTL_BIN="$PWD/build/client/overlapctl" timeout 900 "$venv/bin/python" -m pytest -q \
  -p no:cacheprovider client/python/tests
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "test-python-client: pytest collected no test" >&2
  exit 1
fi
exit $rc
