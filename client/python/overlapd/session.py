"""Sessions: one rank of a training process hands overlapd its own tensors
and asks for the graph's ops on them without a gRPC call per step
(docs/SESSIONS.md; the C++ twin is client/session/overlapd_session.h).

A rank connects to the daemon's session socket, sends the layer graph and its
rank (proto/overlap/v1/session.proto: frames of a 4-byte little-endian length
and the serialized SessionFrame, file descriptors beside them as SCM_RIGHTS),
learns which tensors it must register (`needs`), registers each as shared
memory (a memfd on the host backend: SharedBuffer; a cuMem POSIX fd on CUDA:
overlapd.torch), and starts. From then on a step is `post(op)` -> seq, which
fills a slot of the command ring the daemon shares with this rank
(common/session_ring.h: fixed offsets, read here with struct and ctypes),
and `wait(seq)`, which sleeps on the daemon's doorbell (an eventfd) until the
command completed or the session failed.

    with Session.open(socket_path, "mlp", graph, rank=0) as s:
        buffers = {}
        for need in s.needs:
            buffers[need.key] = SharedBuffer(need.nbytes)
            s.register(need.op, need.tensor, buffers[need.key].fd)
        s.start()
        s.wait(s.post("fc1"))

Memory order: the client writes a slot, then `posted`; the daemon reads
`posted`, then the slot (acquire). Python has no fences: each counter is one
aligned 8-byte store or load through ctypes, and x86-64 keeps stores in
program order, which is what this relies on. On another architecture the
daemon still sees every command, but a slot may be read before its fields.

Thread safety: one thread per Session (as one rank posts its steps in order).
"""
import ctypes
import dataclasses
import enum
import mmap
import os
import select
import socket
import struct
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from overlapd.client import Graph, default_address, graph_text
from overlapd.errors import (InvalidArgumentError, SessionError, SessionTimeoutError,
                             session_error)
from overlapd._gen.overlap.v1 import session_pb2 as spb

# common/session_ring.h, byte for byte.
RING_MAGIC = 0x5253564F  # "OVSR"
RING_VERSION = 1
RING_SLOTS = 64
RING_BYTES = 8192
RUN_LAYER = -1  # a command's op: every op of the graph in order
_POSTED, _TAKEN, _ENQUEUED, _COMPLETED = 8, 16, 24, 32
_FAILED_CODE, _FAILED_MESSAGE, _FAILED_MESSAGE_BYTES = 40, 48, 208
_SLOTS, _SLOT_BYTES = 256, 64
# SessionCommand: seq u64, op i32, reserved i32, posted_ns i64 (the client's);
# enqueued_ns i64, done_ns i64, status i32 (the daemon's).
_CLIENT_FIELDS = struct.Struct("<QiiQ")
_DAEMON_FIELDS = struct.Struct("<qqi")
_DAEMON_FIELDS_OFFSET = 24
SIGNAL_INPUTS_READY = 0
SIGNAL_OUTPUTS_READY = 8
SIGNAL_BYTES = 16

# common/unix_frames.h
MAX_FRAME_FDS = 4
_LENGTH = struct.Struct("<I")
# The largest frame the daemon sends (an open reply): far below this.
_MAX_REPLY_BYTES = 16 << 20

# How long start() waits beyond the join timeout for the daemon's answer.
_START_SLACK_S = 10.0
DEFAULT_JOIN_TIMEOUT_S = 60.0


class TensorKind(str, enum.Enum):
    """Which tensor of an op a registration is (proto SessionTensor)."""

    X = "x"  # the op's input A (X of a collective alone)
    W = "w"  # its weights
    Y = "y"  # its output
    SIGNALS = "signals"  # the rank's two 64-bit signal words (op "")

    def __str__(self) -> str:
        return self.value

    @property
    def proto(self) -> int:
        return int(_TENSOR_PROTO[self])

    @classmethod
    def parse(cls, value: Union["TensorKind", str, int]) -> "TensorKind":
        """TensorKind.X from TensorKind.X, "x", "X", or SESSION_TENSOR_X's number."""
        if isinstance(value, TensorKind):
            return value
        if isinstance(value, int):
            for kind, number in _TENSOR_PROTO.items():
                if number == value:
                    return kind
        if isinstance(value, str):
            for kind in cls:
                if value.strip().lower() in (kind.value, "session_tensor_" + kind.value):
                    return kind
        raise InvalidArgumentError("tensor: x, w, y or signals, not %r" % (value,))


_TENSOR_PROTO: Dict[TensorKind, int] = {
    TensorKind.X: spb.SESSION_TENSOR_X,
    TensorKind.W: spb.SESSION_TENSOR_W,
    TensorKind.Y: spb.SESSION_TENSOR_Y,
    TensorKind.SIGNALS: spb.SESSION_TENSOR_SIGNALS,
}


@dataclasses.dataclass(frozen=True)
class TensorNeed:
    """A tensor this rank must register, as the daemon computed it from the
    graph: rows x cols elements of dtype, row-major, at least nbytes."""

    op: str  # "" for the signals
    tensor: TensorKind
    rows: int
    cols: int
    dtype: str
    nbytes: int

    @property
    def key(self) -> Tuple[str, TensorKind]:
        """(op, tensor): a dict key for the buffer registered for it."""
        return (self.op, self.tensor)


@dataclasses.dataclass(frozen=True)
class CommandTimes:
    """One command's clock readings (CLOCK_MONOTONIC, ns): when this rank
    posted it, when the daemon enqueued it on the device, when it saw its
    outputs ready (0: not yet)."""

    seq: int
    posted_ns: int
    enqueued_ns: int
    done_ns: int

    @property
    def enqueue_us(self) -> float:
        """Host time from the call to the daemon's enqueue, in microseconds."""
        return (self.enqueued_ns - self.posted_ns) / 1e3 if self.enqueued_ns else 0.0


class SharedBuffer:
    """Shared memory for the host backend: an anonymous memfd of `nbytes`
    (rounded up to a page), mapped here. `fd` is what register() sends; the
    daemon maps the same pages. `view` is a writable memoryview of the first
    nbytes; `floats()` reads it as float32 (the host backend's fp32
    tensors). close() unmaps and closes the fd (views taken from `view` must
    be released first)."""

    def __init__(self, nbytes: int, name: str = "overlapd-tensor"):
        if nbytes <= 0:
            raise InvalidArgumentError("SharedBuffer: nbytes must be positive, not %d" % nbytes)
        self.nbytes = nbytes
        size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self._map: Optional[mmap.mmap] = mmap.mmap(self.fd, size, mmap.MAP_SHARED,
                                                       mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(self.fd)
            raise
        self.view = memoryview(self._map)[:nbytes]

    def floats(self) -> "memoryview[float]":
        """The buffer as float32 elements (a writable memoryview, format 'f')."""
        return self.view[: self.nbytes - self.nbytes % 4].cast("f")

    def write_floats(self, values: Sequence[float], offset: int = 0) -> None:
        """Stores `values` as float32 from element `offset` on."""
        struct.pack_into("<%df" % len(values), self.view, offset * 4, *values)

    def read_floats(self, count: int, offset: int = 0) -> Tuple[float, ...]:
        """`count` float32 elements from element `offset`, as Python floats."""
        return struct.unpack_from("<%df" % count, self.view, offset * 4)

    def close(self) -> None:
        if self._map is None:
            return
        self.view.release()
        self._map.close()
        self._map = None
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> "SharedBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_session_socket() -> str:
    """The daemon's session socket when the caller names none:
    OVERLAPD_SESSION_SOCKET, else `overlapd-session.sock` beside the API
    socket default_address() finds (the daemon's default session_socket)."""
    env = os.environ.get("OVERLAPD_SESSION_SOCKET", "")
    if env:
        return env
    address = default_address()
    path = address[len("unix:"):] if address.startswith("unix:") else address
    return os.path.join(os.path.dirname(path), "overlapd-session.sock")


def _send_frame(sock: socket.socket, frame: Any, fds: Sequence[int] = ()) -> None:
    """One frame: its length, its bytes, and `fds` on the sendmsg of its first byte."""
    if len(fds) > MAX_FRAME_FDS:
        raise InvalidArgumentError("a frame carries at most %d fds" % MAX_FRAME_FDS)
    body = frame.SerializeToString()
    wire = _LENGTH.pack(len(body)) + body
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("%di" % len(fds), *fds))]
    sent = sock.sendmsg([wire], ancillary if fds else [])
    if sent < len(wire):
        sock.sendall(wire[sent:])


def _receive_exactly(sock: socket.socket, size: int, deadline: float, fds: List[int]) -> bytes:
    data = b""
    space = socket.CMSG_SPACE(MAX_FRAME_FDS * 4)
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError()
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            continue
        chunk, ancillary, flags, _ = sock.recvmsg(size - len(data), space,
                                                  getattr(socket, "MSG_CMSG_CLOEXEC", 0))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(payload) // 4
                fds.extend(struct.unpack("%di" % count, payload[: count * 4]))
        if flags & socket.MSG_CTRUNC:
            _close_all(fds)
            raise ConnectionError("the daemon sent more fds than a frame carries")
        if not chunk:
            raise ConnectionError("closed" if not data else "closed in the middle of a frame")
        data += chunk
    return data


def _receive_frame(sock: socket.socket, timeout: float) -> Tuple[Any, List[int]]:
    """The next frame and the fds that came with it. TimeoutError when none
    came in `timeout` s, ConnectionError when the daemon closed."""
    deadline = time.monotonic() + timeout
    fds: List[int] = []
    try:
        (length,) = _LENGTH.unpack(_receive_exactly(sock, _LENGTH.size, deadline, fds))
        if length > _MAX_REPLY_BYTES:
            raise ConnectionError("a frame of %d bytes from the daemon" % length)
        frame = spb.SessionFrame()
        frame.ParseFromString(_receive_exactly(sock, length, deadline, fds))
    except BaseException:
        _close_all(fds)
        raise
    return frame, fds


def _close_all(fds: List[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class _Ring:
    """The command ring: the daemon's memfd mapped here, its counters as
    ctypes views (one aligned 8-byte load or store each)."""

    def __init__(self, fd: int):
        self._map: Optional[mmap.mmap] = mmap.mmap(fd, RING_BYTES, mmap.MAP_SHARED,
                                                   mmap.PROT_READ | mmap.PROT_WRITE)
        magic, version = struct.unpack_from("<II", self._map, 0)
        if (magic, version) != (RING_MAGIC, RING_VERSION):
            self._map.close()
            raise ConnectionError("the command ring is not one this client reads (magic %#x, "
                                  "version %d; want %#x, %d)"
                                  % (magic, version, RING_MAGIC, RING_VERSION))
        self._posted = ctypes.c_uint64.from_buffer(self._map, _POSTED)
        self._completed = ctypes.c_uint64.from_buffer(self._map, _COMPLETED)
        self._enqueued = ctypes.c_uint64.from_buffer(self._map, _ENQUEUED)
        self._failed_code = ctypes.c_int32.from_buffer(self._map, _FAILED_CODE)

    @property
    def posted(self) -> int:
        return int(self._posted.value)

    @property
    def completed(self) -> int:
        return int(self._completed.value)

    @property
    def enqueued(self) -> int:
        return int(self._enqueued.value)

    def failure(self) -> Tuple[int, str]:
        """The session's failure: (gRPC code, message), code 0 while it runs."""
        code = int(self._failed_code.value)
        if code == 0:
            return 0, ""
        assert self._map is not None
        raw = self._map[_FAILED_MESSAGE:_FAILED_MESSAGE + _FAILED_MESSAGE_BYTES]
        return code, raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def post(self, seq: int, op: int, posted_ns: int) -> None:
        """Fills seq's slot, then publishes it."""
        assert self._map is not None
        offset = _SLOTS + (seq % RING_SLOTS) * _SLOT_BYTES
        _CLIENT_FIELDS.pack_into(self._map, offset, seq, op, 0, posted_ns)
        self._posted.value = seq

    def slot(self, seq: int) -> Tuple[int, int, int, int, int, int]:
        """seq's slot as it is now: (seq, op, posted_ns, enqueued_ns, done_ns, status)."""
        assert self._map is not None
        offset = _SLOTS + (seq % RING_SLOTS) * _SLOT_BYTES
        slot_seq, op, _, posted_ns = _CLIENT_FIELDS.unpack_from(self._map, offset)
        enqueued_ns, done_ns, status = _DAEMON_FIELDS.unpack_from(
            self._map, offset + _DAEMON_FIELDS_OFFSET)
        return slot_seq, op, posted_ns, enqueued_ns, done_ns, status

    def close(self) -> None:
        if self._map is None:
            return
        # The ctypes views hold the mapping's buffer: drop them before closing it.
        del self._posted, self._completed, self._enqueued, self._failed_code
        self._map.close()
        self._map = None


class _Signals:
    """The rank's signal words mapped here (host backend): the client writes
    inputs_ready before it posts."""

    def __init__(self, fd: int, offset: int):
        page = offset - offset % mmap.PAGESIZE
        self._map: Optional[mmap.mmap] = mmap.mmap(
            fd, offset - page + SIGNAL_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
            offset=page)
        self._inputs_ready = ctypes.c_uint64.from_buffer(self._map,
                                                         offset - page + SIGNAL_INPUTS_READY)
        self._outputs_ready = ctypes.c_uint64.from_buffer(self._map,
                                                          offset - page + SIGNAL_OUTPUTS_READY)

    def inputs_ready(self, seq: int) -> None:
        self._inputs_ready.value = seq

    @property
    def outputs_ready(self) -> int:
        return int(self._outputs_ready.value)

    def close(self) -> None:
        if self._map is None:
            return
        del self._inputs_ready, self._outputs_ready
        self._map.close()
        self._map = None


class Session:
    """One rank of a session: made by Session.open, then register(), start(),
    post()/wait() per step, close() (or use it as a context manager).
    Closing this rank's connection ends the session for every rank: the
    others' next steps fail UNAVAILABLE naming this rank."""

    def __init__(self, sock: socket.socket, reply: Any, fds: List[int], socket_path: str,
                 rank: int, join_timeout_s: float, frame_timeout_s: float):
        self._sock: Optional[socket.socket] = sock
        self._socket_path = socket_path
        self.rank = rank
        self.session_id: str = reply.session_id
        self.device: int = reply.device
        self.device_pci_bus_id: str = reply.device_pci_bus_id
        self.backend: str = reply.backend
        self.world: int = reply.world
        self.ops: List[str] = list(reply.ops)
        self.needs: List[TensorNeed] = [
            TensorNeed(op=n.op, tensor=TensorKind.parse(int(n.tensor)), rows=int(n.rows),
                       cols=int(n.cols), dtype=n.dtype, nbytes=int(n.bytes)) for n in reply.needs]
        self._ring_fd, self._posted_doorbell, self._completed_doorbell = fds
        self._ring: Optional[_Ring] = _Ring(self._ring_fd)
        self._signals: Optional[_Signals] = None
        self._own_signals: Optional[SharedBuffer] = None
        self._registered: Dict[Tuple[str, TensorKind], int] = {}
        self._join_timeout_s = join_timeout_s
        self._frame_timeout_s = frame_timeout_s
        self._started = False
        self._next_seq = 1

    # --- the handshake -------------------------------------------------------

    @classmethod
    def open(cls, socket: Optional[str] = None, name: str = "", graph: Graph = "",
             rank: int = 0, priority: str = "critical", timeout: float = 30.0,
             deferred_bound_ms: float = 0.0, join_timeout_s: float = 0.0,
             step_timeout_s: float = 0.0, chunk_kib: int = 0) -> "Session":
        """Joins session `name` (of this process's uid) as `rank`, the first
        rank creating it from `graph` (a mapping, YAML/JSON text or a file,
        as Client.submit takes it; the others send the same). `socket` is the
        daemon's session socket (default: default_session_socket()).
        `priority` "critical" or "deferred" (whose collectives yield to
        critical ones within `deferred_bound_ms`); the timeouts 0 take the
        daemon's; `timeout` bounds each frame of the handshake here.
        SessionError with the daemon's code when it refuses;
        SessionTimeoutError when it does not answer."""
        if priority not in ("critical", "deferred"):
            raise InvalidArgumentError("priority: critical or deferred, not %r" % priority)
        path = socket or default_session_socket()
        text, _ = graph_text(graph)
        request = spb.SessionFrame(open=spb.OpenSessionRequest(
            name=name, graph=text.decode(), rank=rank, priority=priority,
            deferred_bound_ms=deferred_bound_ms, join_timeout_s=join_timeout_s,
            step_timeout_s=step_timeout_s, chunk_kib=chunk_kib))
        sock = _connect(path, timeout, rank)
        try:
            _send_frame(sock, request)
            frame, fds = _exchange_reply(sock, timeout, path, "", rank, "open")
            if frame.WhichOneof("frame") != "opened" or len(fds) != 3:
                _close_all(fds)
                raise SessionError(_unavailable(), "the daemon answered the open with %s and "
                                   "%d fds, not a reply and 3" % (frame.WhichOneof("frame"),
                                                                len(fds)), path, "", rank)
            try:
                return cls(sock, frame.opened, fds, path, rank,
                           join_timeout_s or DEFAULT_JOIN_TIMEOUT_S, timeout)
            except ConnectionError as e:
                _close_all(fds)
                raise SessionError(_unavailable(), str(e), path, frame.opened.session_id,
                                   rank) from None
        except BaseException:
            sock.close()
            raise

    def register(self, op: str, tensor: Union[TensorKind, str], fd: int, offset: int = 0,
                 nbytes: Optional[int] = None) -> None:
        """Registers shared memory `fd` (`offset` bytes in, `nbytes` long;
        default the need's size) as `op`'s `tensor` ("x", "w", "y"; op "" and
        "signals" for the signal words). The daemon maps it once and holds it
        for the session's life; the fd stays the caller's. SessionError
        INVALID_ARGUMENT for memory that is not shared or too small."""
        kind = TensorKind.parse(tensor)
        need = self._need(op, kind)
        size = need.nbytes if nbytes is None else nbytes
        frame = spb.SessionFrame(register_tensor=spb.RegisterTensorRequest(
            op=op, tensor=kind.proto,  # type: ignore[arg-type]
            offset=offset, bytes=size))
        self._status_call(frame, [fd], self._frame_timeout_s, "register %s %s" % (op, kind.value))
        self._registered[need.key] = fd
        if kind is TensorKind.SIGNALS and self.backend == "host":
            self._signals = _Signals(fd, offset)

    def start(self, timeout: Optional[float] = None) -> None:
        """Tells the daemon every need is registered and waits until every
        rank has (SessionError DEADLINE_EXCEEDED naming the ranks that did
        not come, FAILED_PRECONDITION naming what is not registered). On the
        host backend, signal words this rank did not register are made here
        (a SharedBuffer)."""
        if self.backend == "host" and (("", TensorKind.SIGNALS) not in self._registered):
            self._own_signals = SharedBuffer(SIGNAL_BYTES, "overlapd-signals")
            self.register("", TensorKind.SIGNALS, self._own_signals.fd)
        wait = timeout if timeout is not None else self._join_timeout_s + _START_SLACK_S
        self._status_call(spb.SessionFrame(start=spb.StartSessionRequest()), [], wait, "start")
        self._started = True

    def _need(self, op: str, kind: TensorKind) -> TensorNeed:
        for need in self.needs:
            if need.op == op and need.tensor is kind:
                return need
        raise InvalidArgumentError("%s has no tensor %s %r to register (the needs: %s)" % (
            self.session_id, kind.value, op,
            ", ".join("%s %s" % (n.op or "-", n.tensor.value) for n in self.needs)))

    def _status_call(self, frame: Any, fds: List[int], timeout: float, what: str) -> None:
        sock = self._socket()
        try:
            _send_frame(sock, frame, fds)
        except OSError as e:
            raise self._gone("%s: %s" % (what, e)) from None
        reply, got = _exchange_reply(sock, timeout, self._socket_path, self.session_id,
                                     self.rank, what)
        _close_all(got)
        if reply.WhichOneof("frame") != "status":
            raise self._gone("%s: the daemon answered with %s, not a status"
                             % (what, reply.WhichOneof("frame")))

    # --- steps -------------------------------------------------------------

    def op_index(self, op: Union[str, int]) -> int:
        """The command number of op `op` (its name, an index, or RUN_LAYER)."""
        if isinstance(op, int):
            if op == RUN_LAYER or 0 <= op < len(self.ops):
                return op
            raise InvalidArgumentError("op index %d: the session has %d ops" % (op, len(self.ops)))
        if op in self.ops:
            return self.ops.index(op)
        raise InvalidArgumentError("no op %r in %s (its ops: %s)"
                                   % (op, self.session_id, ", ".join(self.ops)))

    def post(self, op: Union[str, int], signal_inputs: bool = True) -> int:
        """Asks for `op` (a name, an index, or RUN_LAYER for every op in
        order) on this rank: its sequence number, once the command is on the
        ring and the doorbell rung. On the host backend it first writes the
        inputs-ready word (the inputs are in memory already);
        `signal_inputs=False` leaves that to the caller (a CUDA stream that
        writes it: overlapd.torch). Every rank must post the same ops in the
        same order. When the ring is full it first waits for the oldest."""
        if not self._started:
            raise InvalidArgumentError("post before start(): register every need, then start")
        ring = self._ring_or_raise()
        index = self.op_index(op)
        self._raise_failure(ring)
        seq = self._next_seq
        if seq > RING_SLOTS:
            oldest = seq - RING_SLOTS
            if ring.completed < oldest:
                self.wait(oldest, timeout=self._join_timeout_s + _START_SLACK_S)
        if signal_inputs and self._signals is not None:
            self._signals.inputs_ready(seq)
        ring.post(seq, index, time.monotonic_ns())
        self._next_seq = seq + 1
        os.write(self._posted_doorbell, struct.pack("<Q", 1))
        return seq

    def wait(self, seq: int, timeout: Optional[float] = None) -> CommandTimes:
        """Blocks until command `seq` completed (its outputs are ready): its
        times. SessionError with the daemon's code when the session failed
        (UNAVAILABLE naming a rank that has gone, DEADLINE_EXCEEDED for
        inputs that never became ready, CANCELLED once closed) or the
        command did; SessionTimeoutError after `timeout` s (None: forever)
        with the session still going."""
        ring = self._ring_or_raise()
        if seq <= 0 or seq >= self._next_seq:
            raise InvalidArgumentError("command %d was not posted (posted: 1 to %d)"
                                       % (seq, self._next_seq - 1))
        deadline = None if timeout is None else time.monotonic() + timeout
        sock = self._socket()
        # The socket becomes readable when the daemon closes it (it sends no
        # frame after start); anything else is left unread and unwatched.
        watched = [self._completed_doorbell, sock.fileno()]
        while True:
            if ring.completed >= seq:
                slot = ring.slot(seq)
                if slot[0] == seq and slot[5] != 0:
                    code, message = ring.failure()
                    raise session_error(slot[5], message or "command %d failed" % seq,
                                        self._socket_path, self.session_id, self.rank)
                return self.times(seq)
            self._raise_failure(ring)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise SessionTimeoutError(
                    "%s rank %d: command %d (%s) not complete within %g s (the session goes on)"
                    % (self.session_id, self.rank, seq, self._op_name(ring.slot(seq)[1]),
                       timeout or 0), self._socket_path, self.session_id, self.rank)
            ready, _, _ = select.select(watched, [], [], left)
            if self._completed_doorbell in ready:
                try:
                    os.read(self._completed_doorbell, 8)
                except BlockingIOError:
                    pass
            if sock.fileno() in ready and ring.completed < seq and ring.failure()[0] == 0:
                try:
                    gone = sock.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    raise self._gone("the daemon closed %s's connection" % self.session_id)
                watched = [self._completed_doorbell]

    def run(self, op: Union[str, int], timeout: Optional[float] = None) -> CommandTimes:
        """post(op), then wait() for it."""
        return self.wait(self.post(op), timeout=timeout)

    def times(self, seq: int) -> CommandTimes:
        """Command seq's times as the ring holds them (until its slot is reused,
        RING_SLOTS commands later)."""
        ring = self._ring_or_raise()
        slot_seq, _, posted_ns, enqueued_ns, done_ns, _ = ring.slot(seq)
        if slot_seq != seq:
            raise InvalidArgumentError("command %d's slot holds command %d now" % (seq, slot_seq))
        return CommandTimes(seq, posted_ns, enqueued_ns, done_ns)

    @property
    def outputs_ready(self) -> int:
        """The last command whose outputs the daemon signalled (host backend: the
        signal word; 0 without a mapping)."""
        return self._signals.outputs_ready if self._signals is not None else 0

    @property
    def next_seq(self) -> int:
        """The sequence number the next post() gets."""
        return self._next_seq

    @property
    def posted(self) -> int:
        return self._ring_or_raise().posted

    @property
    def completed(self) -> int:
        return self._ring_or_raise().completed

    # --- the end -------------------------------------------------------------

    def close(self) -> None:
        """Ends this rank's part: closes the connection (the daemon ends the
        session and unmaps everything it mapped), unmaps the ring and closes
        the doorbells. Buffers the caller registered stay the caller's.
        A started rank first says it leaves on purpose, so that the daemon
        ends the session "closed" when every command it posted completed
        (a killed process sends nothing, and its session fails)."""
        if self._sock is not None:
            if self._started:
                try:
                    _send_frame(self._sock, spb.SessionFrame(leave=spb.LeaveSessionRequest()))
                except OSError:
                    pass  # the daemon is gone: nothing to tell it
            self._started = False
            self._sock.close()
            self._sock = None
        if self._signals is not None:
            self._signals.close()
            self._signals = None
        if self._own_signals is not None:
            self._own_signals.close()
            self._own_signals = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None
            _close_all([self._ring_fd, self._posted_doorbell, self._completed_doorbell])

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    # --- helpers -------------------------------------------------------------

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise InvalidArgumentError("%s rank %d is closed" % (self.session_id, self.rank))
        return self._sock

    def _ring_or_raise(self) -> _Ring:
        if self._ring is None:
            raise InvalidArgumentError("%s rank %d is closed" % (self.session_id, self.rank))
        return self._ring

    def _raise_failure(self, ring: _Ring) -> None:
        code, message = ring.failure()
        if code != 0:
            raise session_error(code, message, self._socket_path, self.session_id, self.rank)

    def _gone(self, message: str) -> SessionError:
        return SessionError(_unavailable(), message, self._socket_path, self.session_id,
                            self.rank)

    def _op_name(self, index: int) -> str:
        if index == RUN_LAYER:
            return "the layer"
        return self.ops[index] if 0 <= index < len(self.ops) else "op %d" % index


def _unavailable() -> grpc.StatusCode:
    return grpc.StatusCode.UNAVAILABLE


def _connect(path: str, timeout: float, rank: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        why = ("no socket at %s: is overlapd running with sessions on (session_socket)?" % path
               if not os.path.exists(path) else "%s: %s" % (path, e.strerror or e))
        raise SessionError(_unavailable(), "cannot reach overlapd's session socket: " + why,
                           path, "", rank) from None
    sock.settimeout(None)  # frames wait with select, under their own deadlines
    return sock


def _exchange_reply(sock: socket.socket, timeout: float, path: str, session_id: str, rank: int,
                    what: str) -> Tuple[Any, List[int]]:
    """The daemon's answer to `what`; a SessionStatus with a code raises it."""
    try:
        frame, fds = _receive_frame(sock, timeout)
    except TimeoutError:
        raise SessionTimeoutError("%s: no answer from the daemon within %g s" % (what, timeout),
                                  path, session_id, rank) from None
    except (ConnectionError, OSError) as e:
        raise SessionError(_unavailable(), "%s: the daemon closed the connection (%s)"
                           % (what, e), path, session_id, rank) from None
    if frame.WhichOneof("frame") == "status" and frame.status.code != 0:
        _close_all(fds)
        raise session_error(frame.status.code, frame.status.message, path, session_id, rank)
    return frame, fds


def session_needs_text(needs: Sequence[TensorNeed]) -> str:
    """The needs as lines, for messages and examples."""
    return "\n".join("%-6s %-8s %d x %d %s (%d bytes)" % (n.op or "-", n.tensor.value, n.rows,
                                                          n.cols, n.dtype, n.nbytes)
                     for n in needs)


def register_host_buffers(session: Session,
                          fill: Optional[Mapping[Tuple[str, TensorKind], Sequence[float]]] = None
                          ) -> Dict[Tuple[str, TensorKind], SharedBuffer]:
    """Host backend: a SharedBuffer per need of `session` (the signals
    included), registered; `fill` gives float32 values for some of them
    (keyed (op, tensor)). The buffers, keyed the same way; the caller closes
    them after the session."""
    buffers: Dict[Tuple[str, TensorKind], SharedBuffer] = {}
    try:
        for need in session.needs:
            buffer = SharedBuffer(need.nbytes, "overlapd-%s-%s" % (need.op or "signals",
                                                                    need.tensor.value))
            buffers[need.key] = buffer
            if fill is not None and need.key in fill:
                if need.dtype != "fp32":
                    raise InvalidArgumentError(
                        "register_host_buffers fills fp32 tensors; %s %s is %s (write its "
                        "bytes into buffer.view instead)" % (need.op, need.tensor.value,
                                                             need.dtype))
                buffer.write_floats(fill[need.key])
            session.register(need.op, need.tensor, buffer.fd)
    except BaseException:
        for buffer in buffers.values():
            buffer.close()
        raise
    return buffers
