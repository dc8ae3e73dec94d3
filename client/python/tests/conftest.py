"""A real overlapd on the host backend for each test module: its own unix
socket and state directory, stopped (SIGTERM) after."""
import os
import pathlib
import socket
import subprocess
import tempfile
import time

import pytest

import overlapd

REPO = pathlib.Path(__file__).resolve().parents[3]

# Two ops, a bulk ag_gemm then a serial gemm_rs: a job that ends in seconds.
SMALL_GRAPH = {
    "name": "py-small",
    "iterations": 2,
    "warmup": 1,
    "ops": [
        {"id": "fc1", "type": "ag_gemm", "m": 128, "k": 64, "n": 64, "mode": "bulk"},
        {"id": "fc2", "type": "gemm_rs", "m": 128, "k": 64, "n": 64, "mode": "serial",
         "after": ["fc1"]},
    ],
}

# One op for 10,000 iterations: a job that runs long enough to be cancelled.
LONG_YAML = """name: py-long
iterations: 10000
warmup: 1
verify: false
layer_step: false
ops:
  - {id: big, type: ag_gemm, m: 512, k: 512, n: 512, mode: serial}
"""


def overlapd_binary() -> str:
    path = os.environ.get("OVERLAPD_BIN", str(REPO / "build" / "server" / "overlapd"))
    if not os.access(path, os.X_OK):
        pytest.fail("no overlapd at %s: build it first or set OVERLAPD_BIN" % path)
    return path


def start_daemon(work, extra=()):
    """overlapd on the host backend with 2 devices in `work`; (process, client, log)."""
    address = "unix:%s/overlapd.sock" % work
    log = open(os.path.join(work, "overlapd.log"), "wb")
    process = subprocess.Popen(
        [overlapd_binary(), "--backend", "host", "--host-devices", "2", "--listen", address,
         "--state-dir", os.path.join(work, "state"), *extra], stdout=log, stderr=subprocess.STDOUT)
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
    return process, client, log


def stop_daemon(process, client, log):
    client.close()
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("overlapd did not stop within 30 s of SIGTERM")
    log.close()


@pytest.fixture(scope="module")
def daemon():
    work = tempfile.mkdtemp(prefix="overlapd-py-")
    process, client, log = start_daemon(work)
    yield client, work
    stop_daemon(process, client, log)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_daemons():
    """Two daemons that know each other as peers (a shared cluster key, node keys, loopback)."""
    base = tempfile.mkdtemp(prefix="overlapd-py-cluster-")
    key = os.path.join(base, "cluster.key")
    with open(key, "w") as f:
        f.write("0123456789abcdef0123456789abcdef-python-test-key\n")
    os.chmod(key, 0o600)
    peers = ["127.0.0.1:%d" % free_port() for _ in range(2)]
    # Each node's own key, and the file that lists both (peer_known_nodes_file).
    node_keys = [os.path.join(base, "node%d.key" % i) for i in range(2)]
    known_nodes = os.path.join(base, "known_nodes")
    with open(known_nodes, "w") as f:
        for node, path in zip(peers, node_keys):
            public = subprocess.run([overlapd_binary(), "--make-node-key", path], check=True,
                                    capture_output=True, text=True).stdout.strip()
            f.write("%s %s\n" % (node, public))
    os.chmod(known_nodes, 0o644)
    started = []
    for i in range(2):
        work = os.path.join(base, "node%d" % i)
        os.makedirs(work)
        config = os.path.join(work, "overlapd.yaml")
        with open(config, "w") as f:
            f.write('peer_listen: "%s"\npeer_key_file: "%s"\npeers: ["%s"]\n'
                    'peer_node_key_file: "%s"\npeer_known_nodes_file: "%s"\n'
                    "cluster_collective_timeout_ms: 20000\n"
                    % (peers[i], key, peers[1 - i], node_keys[i], known_nodes))
        started.append(start_daemon(work, ["--config", config]))
    yield [s[1] for s in started], peers
    for s in started:
        stop_daemon(*s)
