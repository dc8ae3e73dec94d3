"""Sessions against a real daemon on the host backend (docs/SESSIONS.md): two
client processes as the tp = 2 ranks of an MLP block (fc1 ag_gemm, SwiGLU,
fc2 gemm_rs) on their own memfd tensors, checked against float64; a rank
killed mid-steps; `overlapctl sessions` and the Python client's
list_sessions / close_session.

The daemon's session socket is skipped over where the built overlapd has
none (an overlapd without sessions)."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest

import overlapd
from overlapd import session as ses

from conftest import REPO, start_daemon, stop_daemon

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import tp2_mlp_session as mlp  # noqa: E402

M, HIDDEN, FFN = 16, 32, 64
GRAPH = mlp.mlp_graph(M, HIDDEN, FFN)
TOLERANCE = 1e-4  # fp32 (docs/GRAPHS.md)


def built(path_env, default):
    path = os.environ.get(path_env, str(REPO / "build" / default))
    return path if os.access(path, os.X_OK) else None


def session_rank_binary():
    """The C++ client library's example rank (client/session/examples/)."""
    return built("OVERLAPD_SESSION_RANK_BIN", "client/session/overlapd-session-rank")


@pytest.fixture(scope="module")
def session_daemon():
    """A daemon on the host backend with 2 devices and its session socket;
    skips when this overlapd has no session socket."""
    work = tempfile.mkdtemp(prefix="overlapd-py-sessions-")
    process, client, log = start_daemon(work)
    socket_path = os.path.join(work, "overlapd-session.sock")
    deadline = time.time() + 5
    while not os.path.exists(socket_path) and time.time() < deadline:
        time.sleep(0.05)
    if not os.path.exists(socket_path):
        stop_daemon(process, client, log)
        pytest.skip("this overlapd listens on no session socket (no %s): a daemon without "
                    "sessions" % socket_path)
    yield client, work, socket_path
    stop_daemon(process, client, log)


def graph_file(work, graph=GRAPH):
    path = os.path.join(work, "mlp-%d.json" % time.monotonic_ns())
    with open(path, "w") as f:
        json.dump(graph, f)
    return path


def start_rank(socket_path, name, graph_path, rank, steps, seed=7):
    return subprocess.Popen(
        [sys.executable, str(HERE / "session_rank.py"), socket_path, name, graph_path,
         str(rank), str(steps), str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def finish(process, timeout=120):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail("a rank did not finish within %d s: %s %s" % (timeout, out[-1000:], err))
    return process.returncode, out, err


def saved_tensors(out):
    return json.loads(out.strip().splitlines()[-1])


def as_matrix(saved, name):
    t = saved[name]
    return mlp.matrix(t["values"], t["rows"], t["cols"])


def check_against_float64(ranks):
    """Every rank's fc1 and fc2 outputs against the block in float64."""
    y1s, y2s = mlp.reference([as_matrix(r, "fc1.x") for r in ranks],
                             [as_matrix(r, "fc1.w") for r in ranks],
                             [as_matrix(r, "fc2.w") for r in ranks])
    for r, saved in enumerate(ranks):
        assert mlp.max_rel_error(as_matrix(saved, "fc1.y"), y1s[r]) <= TOLERANCE, "rank %d fc1" % r
        assert mlp.max_rel_error(as_matrix(saved, "fc2.y"), y2s[r]) <= TOLERANCE, "rank %d fc2" % r
    # Not a reference that cannot fail: the outputs are O(1) and differ by rank.
    assert max(abs(v) for row in y2s[0] for v in row) > 0.01
    assert y2s[0] != y2s[1]


def test_two_python_ranks_run_the_tp2_mlp_block_against_float64(session_daemon):
    _, work, socket_path = session_daemon
    path = graph_file(work)
    ranks = [start_rank(socket_path, "py-mlp", path, r, 3) for r in range(2)]
    results = [finish(p) for p in ranks]
    for rc, out, err in results:
        assert rc == 0, out[-2000:] + err[-2000:]
    saved = [saved_tensors(out) for _, out, _ in results]
    assert saved[0]["session_id"] == saved[1]["session_id"]
    assert saved[0]["session_id"].startswith("sess-")
    check_against_float64(saved)


def test_the_example_runs_and_checks_itself(session_daemon):
    _, _, socket_path = session_daemon
    done = subprocess.run([sys.executable, str(EXAMPLES / "tp2_mlp_session.py"), "--socket",
                           socket_path, "--name", "example", "--steps", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("max relative error") == 4


@pytest.mark.skipif(session_rank_binary() is None,
                    reason="the C++ example rank overlapd-session-rank is not built")
def test_a_cpp_rank_and_a_python_rank_run_one_session(session_daemon):
    _, work, socket_path = session_daemon
    path = graph_file(work)
    out_dir = tempfile.mkdtemp(prefix="cpp-rank-", dir=work)
    cpp = subprocess.Popen([session_rank_binary(), "--socket", socket_path, "--name", "mixed",
                            "--graph", path, "--rank", "0", "--steps", "3", "--seed", "1234",
                            "--out-dir", out_dir, "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    python = start_rank(socket_path, "mixed", path, 1, 3)
    rc, out, err = finish(python)
    cpp_rc, cpp_out, cpp_err = finish(cpp)
    assert cpp_rc == 0, cpp_out[-2000:] + cpp_err[-2000:]
    assert rc == 0, out[-2000:] + err[-2000:]
    rank1 = saved_tensors(out)
    summary = json.loads(cpp_out.strip().splitlines()[-1])
    assert summary["session_id"] == rank1["session_id"] and summary["world"] == 2
    assert len(summary["commands"]) == 6  # fc1 and fc2, 3 steps
    assert all(c["enqueued_ns"] >= c["posted_ns"] > 0 for c in summary["commands"])
    rank0 = cpp_rank_tensors(out_dir, 0, 1234, rank1)
    check_against_float64([rank0, rank1])


_M64 = (1 << 64) - 1


def splitmix64(x):
    """common/seeded_random.h's SplitMix64."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def seeded_value(seed, index):
    """SeededUniform: 24 bits in [-1, 1), exact in float32 and so here."""
    return (splitmix64(splitmix64(seed) ^ index) >> 40) * (1.0 / 8388608.0) - 1.0


def tensor_seed(base, op, tensor, rank):
    """client/session/overlapd_session.h's TensorSeed (X 1, W 2)."""
    h = 1469598103934665603
    for c in op.encode():
        h = ((h ^ c) * 1099511628211) & _M64
    return splitmix64(base ^ splitmix64(h ^ ((tensor << 56) & _M64) ^ rank))


def cpp_rank_tensors(out_dir, rank, seed, python_rank_saved):
    """What the C++ rank filled (recomputed from its seeds, shapes from the
    Python rank's, which are the same) and the Y it wrote
    (OUT_DIR/<op>.rank<R>.npy)."""
    saved = {}
    for name, op, tensor in (("fc1.x", "fc1", 1), ("fc1.w", "fc1", 2), ("fc2.w", "fc2", 2)):
        rows, cols = python_rank_saved[name]["rows"], python_rank_saved[name]["cols"]
        key = tensor_seed(seed, op, tensor, rank)
        saved[name] = {"rows": rows, "cols": cols,
                       "values": [seeded_value(key, i) for i in range(rows * cols)]}
    for op in ("fc1", "fc2"):
        path = os.path.join(out_dir, "%s.rank%d.npy" % (op, rank))
        assert os.path.exists(path), "the C++ rank wrote no %s (%s)" % (path, os.listdir(out_dir))
        saved[op + ".y"] = read_npy(path)
    return saved


def read_npy(path):
    """A 2-D float32 (or float64) .npy file, without numpy."""
    import ast
    import struct

    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack(
        "<I", data[8:12])[0]
    start = (10 if data[6] == 1 else 12)
    header = ast.literal_eval(data[start:start + header_len].decode("latin1"))
    rows, cols = header["shape"]
    fmt = {"<f4": "f", "<f8": "d"}[header["descr"]]
    values = struct.unpack_from("<%d%s" % (rows * cols, fmt), data, start + header_len)
    return {"rows": rows, "cols": cols, "values": list(values)}


def wait_for_steps(process, steps, timeout=120):
    """Reads the rank's "step N" lines until step `steps`."""
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line.strip())
        if line.strip() == "step %d" % steps:
            return
    pytest.fail("the rank did not reach step %d: %s; stderr %s"
                % (steps, seen[-5:], process.stderr.read()[-2000:] if process.poll() is not None
                   else "(running)"))


def test_a_rank_killed_mid_steps_fails_the_other_naming_it(session_daemon):
    _, work, socket_path = session_daemon
    path = graph_file(work)
    victim = start_rank(socket_path, "killed", path, 1, 1000000)
    if session_rank_binary() is not None:
        other = subprocess.Popen([session_rank_binary(), "--socket", socket_path, "--name",
                                  "killed", "--graph", path, "--rank", "0", "--steps",
                                  "1000000", "--out-dir", tempfile.mkdtemp(dir=work)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        other = start_rank(socket_path, "killed", path, 0, 1000000)
    wait_for_steps(victim, 3)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    rc, out, err = finish(other, timeout=120)
    assert rc != 0
    said = out + err
    assert "UNAVAILABLE" in said, said[-2000:]
    assert "rank 1" in said, said[-2000:]


def open_ranks(socket_path, name, steps=2):
    """Both ranks in this process (threads for the joins); the sessions, started."""
    sessions = [ses.Session.open(socket_path, name, GRAPH, rank=r, timeout=30) for r in range(2)]
    buffers = []
    for s in sessions:
        fill = {n.key: mlp.inputs_for(s.rank, 7, n) for n in s.needs if n.key in mlp.FILLED}
        buffers.append(ses.register_host_buffers(s, fill))
    starters = [threading.Thread(target=s.start) for s in sessions]
    for t in starters:
        t.start()
    for t in starters:
        t.join(60)
    for _ in range(steps):
        seqs = [s.post("fc1") for s in sessions]
        for s, seq in zip(sessions, seqs):
            s.wait(seq, timeout=60)
    return sessions, buffers


def close_all(sessions, buffers):
    for s in sessions:
        s.close()
    for group in buffers:
        for buffer in group.values():
            buffer.close()


def test_the_python_client_lists_and_closes_a_session(session_daemon):
    client, _, socket_path = session_daemon
    sessions, buffers = open_ranks(socket_path, "listed")
    try:
        listed = client.list_sessions()
        assert isinstance(listed, overlapd.SessionList)
        mine = [s for s in listed.sessions if s.session_id == sessions[0].session_id]
        assert len(mine) == 1, [s.session_id for s in listed.sessions]
        info = mine[0]
        assert isinstance(info, overlapd.SessionInfo)
        assert (info.name, info.world, info.ranks_joined, info.priority) == (
            "listed", 2, 2, "critical")
        assert info.state == "ready"
        assert "uid:%d" % os.getuid() in info.owner
        assert info.steps >= 2  # fc1 twice (each rank's commands, or each step)
        assert info.op("fc1").steps >= 2 and info.op("fc1").median_ms > 0
        assert info.mapped_bytes > 0
        client.close_session(info.session_id)
        with pytest.raises(overlapd.SessionError) as closed:
            sessions[0].wait(sessions[0].post("fc1"), timeout=30)
        assert closed.value.code == grpc.StatusCode.CANCELLED
        with pytest.raises(overlapd.OverlapdError) as missing:
            client.close_session("sess-999999")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
    finally:
        close_all(sessions, buffers)


def overlapctl(work, *args):
    binary = built("OVERLAPCTL_BIN", "client/overlapctl")
    if binary is None:
        pytest.fail("no overlapctl built")
    return subprocess.run([binary, "--addr", "unix:%s/overlapd.sock" % work, *args],
                          capture_output=True, text=True, timeout=60)


def test_overlapctl_sessions_shows_the_steps_and_closes_by_id(session_daemon):
    _, work, socket_path = session_daemon
    sessions, buffers = open_ranks(socket_path, "ctl", steps=3)
    try:
        shown = overlapctl(work, "sessions", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        doc = json.loads(shown.stdout)
        mine = [s for s in doc["sessions"] if s["session_id"] == sessions[0].session_id]
        assert len(mine) == 1
        assert mine[0]["name"] == "ctl" and mine[0]["steps"] >= 3
        assert isinstance(mine[0]["steps"], int)
        assert [op["op"] for op in mine[0]["ops"]][:1] == ["fc1"]
        table = overlapctl(work, "sessions")
        assert table.returncode == 0, table.stderr
        header = table.stdout.splitlines()[0].split()
        assert header[:7] == ["SESSION", "NAME", "OWNER", "STATE", "PRIORITY", "RANKS", "STEPS"]
        row = next(line.split() for line in table.stdout.splitlines()
                   if line.startswith(sessions[0].session_id))
        assert row[1] == "ctl" and row[5] == "2/2"
        names = overlapctl(work, "sessions", "-o", "name")
        assert sessions[0].session_id in names.stdout.split()
        closed = overlapctl(work, "sessions", "close", sessions[0].session_id)
        assert closed.returncode == 0, closed.stderr
        with pytest.raises(overlapd.SessionError) as ended:
            sessions[1].wait(sessions[1].post("fc1"), timeout=30)
        assert ended.value.code == grpc.StatusCode.CANCELLED
        again = overlapctl(work, "sessions", "close", "sess-999999")
        assert again.returncode == 3 and "NOT_FOUND" in again.stderr
    finally:
        close_all(sessions, buffers)
