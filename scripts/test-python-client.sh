#!/usr/bin/env bash
# The Python client (client/python): installed with one `pip install` into a
# venv under build/ (Debian's system pip refuses installs), its stubs
# generated from proto/ as it builds, then its pytest suite against the
# overlapd in build/ on the host backend, and `mypy --strict` over the
# package. A run that collects no test fails, and so does one that mypy fails.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "./client/python[test,typecheck]"
set +e
OVERLAPD_BIN="$PWD/build/server/overlapd" OVERLAPCTL_BIN="$PWD/build/client/overlapctl" timeout 900 "$venv/bin/python" -m pytest -q \
  -p no:cacheprovider client/python/tests
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "test-python-client: pytest collected no test" >&2
  exit 1
fi
# Checked against the package as installed above (its generated stubs included).
if ! "$venv/bin/python" -m mypy --strict --no-incremental \
    --config-file client/python/pyproject.toml client/python/overlapd; then
  echo "test-python-client: mypy --strict failed" >&2
  [ $rc -ne 0 ] || rc=1
fi
exit $rc
