"""overlapd.session against a fake daemon on a unix socket: the frames as
common/unix_frames.h lays them out (read here byte by byte, not with the
client's own reader), the fds beside them, the command ring at the offsets of
common/session_ring.h, the doorbells, and each failure the daemon can report."""
import mmap
import os
import socket
import stat
import struct
import tempfile
import threading

import grpc
import pytest

from overlapd import session as ses
from overlapd.errors import SessionError, SessionTimeoutError
from overlapd._gen.overlap.v1 import session_pb2 as spb

NEEDS = [("fc1", spb.SESSION_TENSOR_X, 4, 8), ("fc1", spb.SESSION_TENSOR_W, 8, 4),
         ("fc1", spb.SESSION_TENSOR_Y, 8, 4), ("", spb.SESSION_TENSOR_SIGNALS, 1, 2)]


def read_exactly(conn, size, fds):
    data = b""
    while len(data) < size:
        chunk, ancillary, _, _ = conn.recvmsg(size - len(data), socket.CMSG_SPACE(16))
        for level, kind, payload in ancillary:
            assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
            fds.extend(struct.unpack("%di" % (len(payload) // 4), payload))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(conn):
    """A frame as unix_frames.h defines it; (frame, fds, fds_with_first_byte)."""
    fds = []
    (length,) = struct.unpack("<I", read_exactly(conn, 4, fds))
    with_header = len(fds)
    frame = spb.SessionFrame()
    frame.ParseFromString(read_exactly(conn, length, fds))
    return frame, fds, with_header


def send_frame(conn, frame, fds=()):
    body = frame.SerializeToString()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("%di" % len(fds), *fds))]
    conn.sendmsg([struct.pack("<I", len(body)) + body], anc if fds else [])


class FakeDaemon:
    """One connection: the open handshake, registrations, start, then
    commands: each completed as the lanes would (or failed, per `fail`)."""

    def __init__(self, path, fail=None, refuse_open=None):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.fail = fail  # (after_seq, code, message)
        self.refuse_open = refuse_open
        self.open_request = None
        self.registered = []
        self.commands = []
        self.inputs_ready_seen = []
        self.error = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            self._run()
        except Exception as e:  # reported by the test
            self.error = e

    def _run(self):
        conn, _ = self.listener.accept()
        frame, fds, _ = read_frame(conn)
        self.open_request = frame.open
        if self.refuse_open:
            send_frame(conn, spb.SessionFrame(status=spb.SessionStatus(
                code=self.refuse_open[0], message=self.refuse_open[1])))
            conn.close()
            return
        ring_fd = os.memfd_create("ring")
        os.ftruncate(ring_fd, ses.RING_BYTES)
        ring = mmap.mmap(ring_fd, ses.RING_BYTES)
        struct.pack_into("<II", ring, 0, ses.RING_MAGIC, ses.RING_VERSION)
        posted_bell = os.eventfd(0)
        completed_bell = os.eventfd(0, os.EFD_NONBLOCK)
        reply = spb.OpenSessionReply(session_id="sess-000007", device=frame.open.rank,
                                     backend="host", ops=["fc1"], world=2)
        for op, tensor, rows, cols in NEEDS:
            reply.needs.add(op=op, tensor=tensor, rows=rows, cols=cols, dtype="fp32",
                            bytes=rows * cols * 4)
        send_frame(conn, spb.SessionFrame(opened=reply), [ring_fd, posted_bell, completed_bell])
        signals = None
        while True:
            frame, fds, with_header = read_frame(conn)
            kind = frame.WhichOneof("frame")
            if kind == "register_tensor":
                assert len(fds) == 1 and with_header == 1, "one fd, with the first byte"
                r = frame.register_tensor
                info = os.fstat(fds[0])
                self.registered.append((r.op, r.tensor, r.offset, r.bytes,
                                        stat.S_ISREG(info.st_mode)))
                if r.tensor == spb.SESSION_TENSOR_SIGNALS:
                    signals = mmap.mmap(fds[0], ses.SIGNAL_BYTES)
                else:
                    os.close(fds[0])
                send_frame(conn, spb.SessionFrame(status=spb.SessionStatus()))
            elif kind == "start":
                send_frame(conn, spb.SessionFrame(status=spb.SessionStatus()))
                break
        taken = 0
        while True:
            try:
                os.eventfd_read(posted_bell)
            except OSError:
                return
            (posted,) = struct.unpack_from("<Q", ring, 8)
            while taken < posted:
                taken += 1
                base = 256 + (taken % 64) * 64
                seq, op, _, posted_ns = struct.unpack_from("<QiiQ", ring, base)
                assert seq == taken
                self.commands.append((seq, op, posted_ns))
                self.inputs_ready_seen.append(struct.unpack_from("<Q", signals, 0)[0])
                struct.pack_into("<Q", ring, 16, taken)
                if self.fail and taken > self.fail[0]:
                    message = self.fail[2].encode()
                    struct.pack_into("<i", ring, 40, self.fail[1])
                    ring[48:48 + len(message) + 1] = message + b"\0"
                    os.eventfd_write(completed_bell, 1)
                    continue
                struct.pack_into("<qqi", ring, base + 24, posted_ns + 5000, posted_ns + 9000, 0)
                struct.pack_into("<Q", signals, 8, taken)
                struct.pack_into("<Q", ring, 24, taken)
                struct.pack_into("<Q", ring, 32, taken)
                os.eventfd_write(completed_bell, 1)
            if taken >= 70:
                return


@pytest.fixture
def socket_path():
    work = tempfile.mkdtemp(prefix="overlapd-fake-")
    yield os.path.join(work, "session.sock")


GRAPH = {"name": "fake", "ops": [{"id": "fc1", "type": "ag_gemm", "m": 8, "k": 8, "n": 8}]}


def open_session(path, **kwargs):
    return ses.Session.open(path, "mlp", GRAPH, rank=1, timeout=10, **kwargs)


def test_the_handshake_registers_shared_memory_and_steps_run_through_the_ring(socket_path):
    fake = FakeDaemon(socket_path)
    with open_session(socket_path, priority="deferred", deferred_bound_ms=5) as s:
        assert fake.open_request.name == "mlp" and fake.open_request.rank == 1
        assert fake.open_request.priority == "deferred"
        assert fake.open_request.deferred_bound_ms == 5
        assert '"fc1"' in fake.open_request.graph
        assert (s.session_id, s.backend, s.world, s.ops) == ("sess-000007", "host", 2, ["fc1"])
        assert [(n.op, n.tensor, n.nbytes) for n in s.needs][:2] == [
            ("fc1", ses.TensorKind.X, 128), ("fc1", ses.TensorKind.W, 128)]
        buffers = {}
        for need in s.needs[:3]:  # the signals are made by start()
            buffers[need.key] = ses.SharedBuffer(need.nbytes)
            s.register(need.op, need.tensor.value, buffers[need.key].fd)
        s.start()
        assert [r[:4] for r in fake.registered] == [
            ("fc1", spb.SESSION_TENSOR_X, 0, 128), ("fc1", spb.SESSION_TENSOR_W, 0, 128),
            ("fc1", spb.SESSION_TENSOR_Y, 0, 128), ("", spb.SESSION_TENSOR_SIGNALS, 0, 8)]
        assert all(r[4] for r in fake.registered), "memfds are regular files"
        # 70 steps: the ring wraps past its 64 slots.
        for step in range(1, 71):
            times = s.run("fc1", timeout=10)
            assert times.seq == step
            assert times.enqueued_ns - times.posted_ns == 5000 and times.enqueue_us == 5.0
            assert times.done_ns - times.posted_ns == 9000
        assert s.posted == 70 and s.completed == 70 and s.outputs_ready == 70
        for buffer in buffers.values():
            buffer.close()
    fake.thread.join(10)
    assert fake.error is None, fake.error
    assert [c[:2] for c in fake.commands] == [(i, 0) for i in range(1, 71)]
    assert fake.inputs_ready_seen == list(range(1, 71)), "inputs-ready written before posting"
    assert all(c[2] > 0 for c in fake.commands)


def test_a_session_failed_by_the_daemon_raises_its_code_and_message(socket_path):
    FakeDaemon(socket_path, fail=(2, 14, "rank 0 (pid 4242) closed its connection"))
    with open_session(socket_path) as s:
        buffers = ses.register_host_buffers(s)
        s.start()
        s.wait(s.post("fc1"), timeout=10)
        s.wait(s.post(0), timeout=10)
        seq = s.post("fc1")
        with pytest.raises(SessionError) as failed:
            s.wait(seq, timeout=10)
        assert failed.value.code == grpc.StatusCode.UNAVAILABLE
        assert "rank 0 (pid 4242)" in failed.value.message
        assert failed.value.session_id == "sess-000007" and failed.value.rank == 1
        with pytest.raises(SessionError):
            s.post("fc1")  # a failed session takes no more commands
        for buffer in buffers.values():
            buffer.close()


def test_a_refused_open_raises_the_daemons_code(socket_path):
    FakeDaemon(socket_path, refuse_open=(6, "rank 1 of mlp is taken"))
    with pytest.raises(SessionError) as refused:
        open_session(socket_path)
    assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert refused.value.message == "rank 1 of mlp is taken"


def test_a_wait_that_runs_out_is_a_timeout_and_the_session_goes_on(socket_path):
    fake = FakeDaemon(socket_path, fail=(1, 0, ""))  # takes the 2nd command, never completes it
    with open_session(socket_path) as s:
        buffers = ses.register_host_buffers(s)
        s.start()
        s.run("fc1", timeout=10)
        seq = s.post("fc1")
        with pytest.raises(SessionTimeoutError) as late:
            s.wait(seq, timeout=0.2)
        assert isinstance(late.value, TimeoutError)
        assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "command 2 (fc1)" in late.value.message
        for buffer in buffers.values():
            buffer.close()
    assert fake.error is None


def test_no_socket_is_unavailable_and_says_where(socket_path):
    with pytest.raises(SessionError) as missing:
        open_session(socket_path)
    assert missing.value.code == grpc.StatusCode.UNAVAILABLE
    assert "no socket at %s" % socket_path in missing.value.message


def test_refusals_before_sending(socket_path):
    with pytest.raises(ValueError):
        ses.Session.open(socket_path, "x", GRAPH, priority="urgent")
    with pytest.raises(ValueError):
        ses.TensorKind.parse("z")
    assert ses.TensorKind.parse("SESSION_TENSOR_W") is ses.TensorKind.W
    assert ses.TensorKind.parse(spb.SESSION_TENSOR_Y) is ses.TensorKind.Y


def test_shared_buffer_is_a_memfd_both_mappings_see():
    with ses.SharedBuffer(10) as buffer:
        buffer.write_floats([1.5, -2.0])
        other = mmap.mmap(buffer.fd, mmap.PAGESIZE)
        assert struct.unpack_from("<2f", other, 0) == (1.5, -2.0)
        other.close()
        assert stat.S_ISREG(os.fstat(buffer.fd).st_mode)
        assert buffer.read_floats(2) == (1.5, -2.0)


def test_default_session_socket_sits_beside_the_api_socket(monkeypatch):
    monkeypatch.delenv("OVERLAPD_SESSION_SOCKET", raising=False)
    monkeypatch.setenv("OVERLAPD_ADDR", "unix:/run/x/overlapd.sock")
    assert ses.default_session_socket() == "/run/x/overlapd-session.sock"
    monkeypatch.setenv("OVERLAPD_SESSION_SOCKET", "/tmp/s.sock")
    assert ses.default_session_socket() == "/tmp/s.sock"
