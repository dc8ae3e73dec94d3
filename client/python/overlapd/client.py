"""The overlapd client: the Jobs and Node services of overlap.v1 over gRPC.

Results are typed (overlapd.model: Job, JobResult, OpResult, NodeInfo, ...),
each keeping the JSON form `overlapctl --json` prints (`to_dict()`). Every
failed call raises OverlapdError (overlapd.errors) with the gRPC code and the
reason."""
import errno
import json
import os
import shutil
import subprocess
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from overlapd import _wire
from overlapd._gen.overlap.v1 import overlap_pb2 as pb
from overlapd._gen.overlap.v1 import overlap_pb2_grpc as pb_grpc
from overlapd.errors import (InputFileError, InvalidArgumentError, JobTimeoutError, OverlapdError,
                             unreachable)
from overlapd.model import (Job, JobPage, JobState, NodeInfo, NodeSample, SessionList, Stats,
                            TunedSchedule)

SYSTEM_SOCKET = "/run/overlapd/overlapd.sock"
EXPORT_FORMATS = ("te", "megatron", "torchtitan")

# A graph as submit and validate take it: a mapping (sent as JSON), YAML or
# JSON text, or the path of a file holding it.
Graph = Union[Mapping[str, Any], str, bytes, "os.PathLike[str]"]

# How long submit(wait=True) waits, after cancelling a job that ran past its
# timeout, for the daemon to end it.
_CANCEL_GRACE_S = 60.0

# gRPC's words for a connection that never came up (rather than a daemon that
# answered UNAVAILABLE itself, e.g. while it drains).
_NO_CONNECTION = ("failed to connect", "connect failed", "connection refused",
                  "no such file", "dns resolution failed", "socket closed", "connection reset",
                  "handshake")


def default_address() -> str:
    """Where overlapctl looks: OVERLAPD_ADDR; else, for root, the system socket;
    else the user's own daemon ($XDG_RUNTIME_DIR/overlapd.sock or
    /tmp/overlapd-UID/overlapd.sock) when its socket exists, then the system
    socket when that exists, else the user's own."""
    env = os.environ.get("OVERLAPD_ADDR", "")
    if env:
        return env
    if os.getuid() == 0:
        return "unix:" + SYSTEM_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    own = (runtime + "/overlapd.sock" if runtime.startswith("/")
           else "/tmp/overlapd-%d/overlapd.sock" % os.getuid())
    if os.path.exists(own):
        return "unix:" + own
    if os.path.exists(SYSTEM_SOCKET):
        return "unix:" + SYSTEM_SOCKET
    return "unix:" + own


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputFileError(what, path, e.strerror or str(e), e.errno) from None


def graph_text(graph: Graph) -> Tuple[bytes, str]:
    """A graph as submit takes it, and the name the daemon's messages give it:
    a mapping (sent as JSON), YAML or JSON text (several lines, or one that
    starts with '{'), or the path of a file holding it (a pathlib.Path, or a
    one-line string). A path that cannot be read raises InputFileError
    naming it; it is never sent as text."""
    if isinstance(graph, Mapping):
        return json.dumps(graph).encode(), "<dict>"
    if isinstance(graph, os.PathLike):
        path = os.fspath(graph)
        return _read(path, "graph"), path
    if isinstance(graph, bytes):
        return graph, "<text>"
    if isinstance(graph, str):
        if "\n" in graph.strip() or graph.lstrip().startswith(("{", "[")):
            return graph.encode(), "<text>"
        path = graph.strip()
        if not path:
            raise InvalidArgumentError("graph: empty (a mapping, YAML/JSON text or a file path)")
        return _read(path, "graph"), path
    raise TypeError("graph: a mapping, YAML/JSON text or a path, not %s" % type(graph).__name__)


def _overlapctl_error(rc: int, stderr: str, address: str) -> OverlapdError:
    """overlapctl's exit status and words as an OverlapdError (docs/CLI.md)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    message = lines[0] if lines else "overlapctl exited with status %d" % rc
    message = message[len("overlapctl: "):] if message.startswith("overlapctl: ") else message
    if rc == 2:
        return OverlapdError(grpc.StatusCode.UNAVAILABLE, message, address)
    if rc == 64:
        return InvalidArgumentError(message, address)
    name, _, rest = message.partition(": ")
    code = getattr(grpc.StatusCode, name, None) if rc == 3 else None
    if isinstance(code, grpc.StatusCode):
        return OverlapdError(code, rest, address)
    return OverlapdError(grpc.StatusCode.UNKNOWN, "\n".join(lines) or message, address)



def _peer_list(peers: Optional[Sequence[str]], nodes: Optional[Sequence[str]]) -> List[str]:
    """The peer addresses of submit/validate: `peers`, or `nodes` (its old name)."""
    if nodes is not None:
        if peers is not None:
            raise TypeError("give peers=, not both peers= and nodes=")
        warnings.warn("submit(nodes=...) is now submit(peers=...)", DeprecationWarning,
                      stacklevel=3)
        peers = nodes
    return list(peers or [])

class Client:
    """One connection to one daemon. `addr` as overlapctl's --addr
    (unix:/path, /path or host:port; default: default_address()); the TLS
    files as its --tls-* flags (or OVERLAPD_TLS_CA / _CERT / _KEY), for a
    daemon on host:port only. `timeout_s` bounds each unary call. Use it as
    a context manager, or call close()."""

    def __init__(self, addr: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, timeout_s: float = 60.0):
        self.address = addr or default_address()
        target = "unix:" + self.address if self.address.startswith("/") else self.address
        tls_ca = tls_ca or os.environ.get("OVERLAPD_TLS_CA") or None
        tls_cert = tls_cert or os.environ.get("OVERLAPD_TLS_CERT") or None
        tls_key = tls_key or os.environ.get("OVERLAPD_TLS_KEY") or None
        self._tls = {"--tls-ca": tls_ca, "--tls-cert": tls_cert, "--tls-key": tls_key,
                     "--tls-server-name": tls_server_name}
        options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", -1),
                                          ("grpc.initial_reconnect_backoff_ms", 100),
                                          ("grpc.max_reconnect_backoff_ms", 1000)]
        if tls_ca or tls_cert or tls_key:
            if target.startswith("unix:"):
                raise InvalidArgumentError("TLS is for a daemon on HOST:PORT, not %s"
                                           % self.address)
            if bool(tls_cert) != bool(tls_key):
                raise InvalidArgumentError("tls_cert and tls_key go together")
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca, "tls_ca") if tls_ca else None,
                private_key=_read(tls_key, "tls_key") if tls_key else None,
                certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        # The generated gRPC stubs carry no annotations.
        self._jobs = pb_grpc.JobsStub(self._channel)  # type: ignore[no-untyped-call, unused-ignore]
        self._node = pb_grpc.NodeStub(self._channel)  # type: ignore[no-untyped-call, unused-ignore]
        self._timeout = timeout_s

    def close(self) -> None:
        """Closes the connection; the client is unusable after."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, e: grpc.RpcError) -> OverlapdError:
        code: grpc.StatusCode = e.code()
        details: str = e.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE and any(
                words in details.lower() for words in _NO_CONNECTION):
            return unreachable(self.address, details)
        return OverlapdError(code, details, self.address)

    def _call(self, method: Callable[..., Any], request: Any,
              timeout: Optional[float] = None) -> Any:
        try:
            return method(request, timeout=timeout or self._timeout)
        except grpc.RpcError as e:
            raise self._error(e) from None

    # --- Jobs -------------------------------------------------------------

    def submit(self, graph: Graph, wait: bool = False, peers: Optional[Sequence[str]] = None,
               timeout_s: Optional[float] = None, detach: bool = False,
               nodes: Optional[Sequence[str]] = None) -> Job:
        """Submits a layer graph (a mapping, YAML/JSON text, or a file's path):
        the job as accepted, or with wait=True as it ended. `peers` (the
        daemons' peer addresses) runs it across daemons, as `submit --peers`
        does; `nodes` is its old name, still taken, with a DeprecationWarning.

        With wait=True, as `overlapctl submit --wait`: a job still running
        after `timeout_s` seconds is cancelled and JobTimeoutError raised
        (its `cancelled` true), and so is one whose wait is interrupted
        (KeyboardInterrupt, re-raised); detach=True leaves it running instead."""
        text, source = graph_text(graph)
        request = pb.SubmitJobRequest(spec=text, source_name=source.encode(),
                                      nodes=_peer_list(peers, nodes))
        job = Job.from_dict(_wire.to_dict(self._call(self._jobs.SubmitJob, request).job))
        if not wait:
            return job
        try:
            return self.wait(job.id, timeout_s=timeout_s)
        except JobTimeoutError:
            if detach:
                raise
            ended = self._cancel_and_wait(job.id)
            if ended.state == JobState.SUCCEEDED:
                return ended  # it ended as the wait ran out
            raise JobTimeoutError(
                "job %s did not end within %g s: cancelled it (now %s%s)"
                % (job.id, timeout_s or 0, ended.state.name,
                   "" if ended.final else "; the daemon is still stopping it"),
                self.address, job.id, cancelled=True) from None
        except KeyboardInterrupt:
            if not detach:
                self._cancel_and_wait(job.id, grace_s=5.0)
            raise

    def _cancel_and_wait(self, job_id: str, grace_s: float = _CANCEL_GRACE_S) -> Job:
        try:
            job = self.cancel(job_id)
        except OverlapdError:
            job = self.get(job_id)  # it may have ended meanwhile
        if job.final:
            return job
        try:
            return self.wait(job_id, timeout_s=grace_s)
        except JobTimeoutError:
            return self.get(job_id)

    def validate(self, graph: Graph, peers: Optional[Sequence[str]] = None,
                 nodes: Optional[Sequence[str]] = None) -> Job:
        """Checks a graph as submit would (`overlapctl validate`) and runs
        nothing: the job as it would be queued, without an id, or OverlapdError
        with the code and reason submit would give. `peers` as for submit."""
        text, source = graph_text(graph)
        request = pb.SubmitJobRequest(spec=text, source_name=source.encode(),
                                      nodes=_peer_list(peers, nodes), validate_only=True)
        return Job.from_dict(_wire.to_dict(self._call(self._jobs.SubmitJob, request).job))

    def get(self, job_id: str) -> Job:
        """The job, with its whole result (OverlapdError NOT_FOUND for an unknown id).
        `job_id` is its id on this daemon, or, for a job spanning daemons, its
        `global_id` ("<node>/<job id>"), which names it on every node of it (on
        a part's node, the part)."""
        reply = self._call(self._jobs.GetJob, pb.GetJobRequest(id=job_id))
        return Job.from_dict(_wire.to_dict(reply.job))

    def list(self, state: Union[JobState, str, None] = None, limit: int = 0,
             page_token: str = "") -> JobPage:
        """One page of job summaries, newest first, as the API pages them
        (`page.jobs`, `page.next_page_token`). `state` a JobState or its name
        in any case ("running"); InvalidArgumentError for another word."""
        try:
            name = JobState.parse(state).value if state is not None else None
        except ValueError as e:
            raise InvalidArgumentError(str(e), self.address) from None
        request = pb.ListJobsRequest(state=name, limit=limit, page_token=page_token)
        return JobPage.from_dict(_wire.to_dict(self._call(self._jobs.ListJobs, request)))

    def jobs(self, state: Union[JobState, str, None] = None,
             page_size: int = 0) -> Iterator[Job]:
        """Every job (summaries), newest first, fetching page after page."""
        token = ""
        while True:
            page = self.list(state=state, limit=page_size, page_token=token)
            yield from page.jobs
            token = page.next_page_token
            if not token:
                return

    def cancel(self, job_id: str) -> Job:
        """Asks the daemon to cancel a queued or running job: the job as it
        answered (a running one ends CANCELLED shortly after; wait() for it).
        `job_id` as for get(): an id, or a job's global_id on any node of it."""
        reply = self._call(self._jobs.CancelJob, pb.CancelJobRequest(id=job_id))
        return Job.from_dict(_wire.to_dict(reply.job))

    def watch(self, job_id: str, timeout_s: Optional[float] = None) -> Iterator[Job]:
        """The job at each state change or progress step, until it ends. Past
        `timeout_s` it raises JobTimeoutError and leaves the job running.
        `job_id` as for get(): an id, or a job's global_id."""
        started = time.monotonic()
        try:
            stream = self._jobs.WatchJob(pb.WatchJobRequest(id=job_id), timeout=timeout_s)
            for event in stream:
                yield Job.from_dict(_wire.to_dict(event.job))
        except grpc.RpcError as e:
            error = self._error(e)
            if (error.code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout_s is not None and
                    time.monotonic() - started >= timeout_s * 0.99):
                raise JobTimeoutError(
                    "job %s did not end within %g s; it goes on (cancel('%s') stops it)"
                    % (job_id, timeout_s, job_id), self.address, job_id,
                    cancelled=False) from None
            raise error from None

    def wait(self, job_id: str, timeout_s: Optional[float] = None) -> Job:
        """The job once it has ended, with its result. Past `timeout_s` it
        raises JobTimeoutError and leaves the job running. `job_id` as for
        get(): an id, or a job's global_id."""
        for _ in self.watch(job_id, timeout_s=timeout_s):
            pass
        return self.get(job_id)

    # --- Node -------------------------------------------------------------

    def node(self) -> NodeInfo:
        """The node, as `overlapctl node`: backend, devices, versions, peers."""
        reply = self._call(self._node.GetNodeInfo, pb.GetNodeInfoRequest())
        return NodeInfo.from_dict(_wire.to_dict(reply))

    def watch_node(self, interval_s: float = 1.0) -> Iterator[NodeSample]:
        """The node's live figures, one NodeSample every `interval_s` (the
        daemon raises it to its floor, 0.1 s), from the daemon's one sampler,
        as `overlapctl top` shows them; until the caller stops iterating
        (closing the generator ends the stream). Each stream takes one of the
        daemon's watch slots (RESOURCE_EXHAUSTED when none is left). A reader
        that falls behind skips samples (NodeSample.skipped says how many);
        one that stops reading for long is dropped by the daemon."""
        interval_ms = max(0, min(int(round(interval_s * 1000)), 2**31))
        stream = self._node.WatchNode(pb.WatchNodeRequest(interval_ms=interval_ms))
        try:
            for sample in stream:
                yield NodeSample.from_dict(_wire.to_dict(sample))
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            stream.cancel()

    def stats(self) -> Stats:
        """The daemon's counters, as `overlapctl stats`."""
        return Stats.from_dict(_wire.to_dict(self._call(self._node.GetStats,
                                                        pb.GetStatsRequest())))

    def tuning(self, op_type: str = "", m: int = 0, k: int = 0, n: int = 0,
               stale_only: bool = False) -> List[TunedSchedule]:
        """The schedules autotune chose and kept, as `overlapctl tuning list`;
        each argument left at its default matches anything."""
        request = pb.ListTunedSchedulesRequest(filter=pb.TuningFilter(
            op_type=op_type, m=m, k=k, n=n, stale_only=stale_only))
        reply = _wire.to_dict(self._call(self._node.ListTunedSchedules, request))
        return [TunedSchedule.from_dict(s) for s in reply["schedules"]]

    def calibration(self, tp: int = 0) -> Dict[str, Any]:
        """The planner's calibration kept for `tp` ranks (0: every device), as
        the JSON document `overlapctl calibrate --json` shows; NOT_FOUND when
        none is kept (run `overlapctl calibrate`)."""
        reply = self._call(self._node.GetCalibration, pb.GetCalibrationRequest(tp=tp))
        calibration: Dict[str, Any] = json.loads(reply.calibration_json)
        return calibration

    # --- Sessions ---------------------------------------------------------

    def list_sessions(self, all_users: bool = False, lanes: bool = False) -> SessionList:
        """The caller's sessions (`overlapctl sessions`): `.sessions`, each a
        SessionInfo with its ranks, steps and per-op figures; `all_users`
        (admins) every owner's; `lanes` adds each session's recent lane
        intervals (`.lanes`)."""
        request = pb.ListSessionsRequest(all_users=all_users, lanes=lanes)
        return SessionList.from_dict(_wire.to_dict(self._call(self._node.ListSessions, request)))

    def close_session(self, session_id: str) -> None:
        """Ends a session (`overlapctl sessions close ID`): its ranks' next
        commands fail CANCELLED and its buffers are unmapped. NOT_FOUND for an
        unknown id, PERMISSION_DENIED for another owner's (admins may close any)."""
        self._call(self._node.CloseSession, pb.CloseSessionRequest(session_id=session_id))

    # --- Export -----------------------------------------------------------

    def export(self, format: str, job: Union[Job, str, None] = None,
               graph: Optional[str] = None, tp: int = 0, bench: Optional[str] = None,
               overlapctl: Optional[str] = None) -> str:
        """The schedules auto chose as a training framework's config, the text
        `overlapctl export` writes (docs/EXPORT.md): `format` te (JSON: ub_cfgs
        and what each entry stands on), megatron (--tp-comm-overlap-cfg YAML) or
        torchtitan (TOML); from a job that succeeded (`job`, a Job or its id)
        or from the tuning cache for a graph file's ops (`graph`, `tp`);
        torchtitan also from PyTorch's measured figures (`bench`, a JSON file).

        It runs overlapctl, where the mapping lives, against this daemon:
        `overlapctl` its path, else $OVERLAPCTL, else the one on PATH. Its
        refusals raise OverlapdError with the code overlapctl's exit status
        and words give (INVALID_ARGUMENT for usage, FAILED_PRECONDITION for a
        job that did not succeed, NOT_FOUND, UNAVAILABLE)."""
        if format not in EXPORT_FORMATS:
            raise InvalidArgumentError("export format: %s, not %r"
                                       % (", ".join(EXPORT_FORMATS), format), self.address)
        args = ["export", "--format", format]
        if job is not None:
            args += ["--job", job.id if isinstance(job, Job) else job]
        for what, path in (("graph", graph), ("bench", bench)):
            if path is not None:
                if not os.path.isfile(path):
                    raise InputFileError(what, path, os.strerror(errno.ENOENT))
                args += ["--" + what, path]
        if tp:
            args += ["--tp", str(tp)]
        return self._overlapctl(args, overlapctl)

    def _overlapctl(self, args: List[str], binary: Optional[str]) -> str:
        path = binary or os.environ.get("OVERLAPCTL") or shutil.which("overlapctl")
        if not path:
            raise OverlapdError(grpc.StatusCode.FAILED_PRECONDITION,
                                "overlapctl not found (on PATH): pass overlapctl=PATH or set "
                                "OVERLAPCTL", self.address)
        command = [path, "--addr", self.address]
        for flag, value in self._tls.items():
            if value:
                command += [flag, value]
        try:
            done = subprocess.run(command + args, capture_output=True, text=True,
                                  timeout=self._timeout, check=False)
        except OSError as e:
            raise OverlapdError(grpc.StatusCode.FAILED_PRECONDITION,
                                "cannot run %s: %s" % (path, e.strerror or e), self.address) from None
        except subprocess.TimeoutExpired:
            raise OverlapdError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                "overlapctl %s took over %g s" % (args[0], self._timeout),
                                self.address) from None
        if done.returncode != 0:
            raise _overlapctl_error(done.returncode, done.stderr, self.address)
        return done.stdout
