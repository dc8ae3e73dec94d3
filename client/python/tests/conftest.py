"""A real overlapd on the host backend for each test module: its own unix
socket and state directory, stopped (SIGTERM) after."""
import os
import pathlib
import subprocess
import tempfile
import time

import pytest

import overlapd

REPO = pathlib.Path(__file__).resolve().parents[3]


def overlapd_binary() -> str:
    path = os.environ.get("OVERLAPD_BIN", str(REPO / "build" / "server" / "overlapd"))
    if not os.access(path, os.X_OK):
        pytest.fail("no overlapd at %s: build it first or set OVERLAPD_BIN" % path)
    return path


@pytest.fixture(scope="module")
def daemon():
    work = tempfile.mkdtemp(prefix="overlapd-py-")
    address = "unix:%s/overlapd.sock" % work
    log = open(os.path.join(work, "overlapd.log"), "wb")
    process = subprocess.Popen(
        [overlapd_binary(), "--backend", "host", "--host-devices", "2", "--listen", address,
         "--state-dir", os.path.join(work, "state")], stdout=log, stderr=subprocess.STDOUT)
    client = overlapd.Client(address, timeout_s=10)
    deadline = time.time() + 60
    while True:
        try:
            client.node()
            break
        except overlapd.OverlapdError:
            if process.poll() is not None or time.time() > deadline:
                process.kill()
                pytest.fail("overlapd did not start; its log: %s" %
                            open(os.path.join(work, "overlapd.log")).read()[-2000:])
            time.sleep(0.1)
    yield client, work
    client.close()
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("overlapd did not stop within 30 s of SIGTERM")
    log.close()
