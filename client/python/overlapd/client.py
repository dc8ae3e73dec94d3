"""The overlapd client: the Jobs and Node services of overlap.v1 over gRPC.

Results are plain dicts with the field names `overlapctl --json` prints
(proto field names, every field present, 64-bit integers as numbers,
unix-millisecond times also in RFC 3339, enums by name). Every failed call raises OverlapdError with the gRPC code and the
daemon's message."""
import datetime
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from overlapd._gen.overlap.v1 import overlap_pb2 as pb
from overlapd._gen.overlap.v1 import overlap_pb2_grpc as pb_grpc

SYSTEM_SOCKET = "/run/overlapd/overlapd.sock"
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "ABORTED")


class OverlapdError(Exception):
    """A call the daemon refused or could not answer: `code` is the
    grpc.StatusCode, `message` the daemon's words."""

    def __init__(self, code: grpc.StatusCode, message: str, address: str = ""):
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message
        self.address = address


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


_WIDE_INTEGERS = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                  FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                  FieldDescriptor.TYPE_SFIXED64}


def _repeated(field) -> bool:
    # protobuf 6 dropped FieldDescriptor.label for is_repeated.
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _time_name(field: str) -> str:
    """submit_time_ms -> submit_time, last_xid_unix_ms -> last_xid_time."""
    if field.endswith("_unix_ms"):
        return field[:-len("_unix_ms")] + "_time"
    if field.endswith("_time_ms"):
        return field[:-len("_ms")]
    return ""


def _rfc3339(unix_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(unix_ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (unix_ms % 1000)


def _numbers(descriptor, value: Dict[str, Any]) -> None:
    """overlapctl --json's form (client/core/proto_json.h): 64-bit integers as
    numbers, unix-millisecond times also in RFC 3339."""
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        map_value = (field.message_type.fields_by_name.get("value")
                     if field.message_type is not None and
                     field.message_type.GetOptions().map_entry else None)
        if map_value is not None:
            for key in item:
                if map_value.message_type is not None:
                    _numbers(map_value.message_type, item[key])
                elif map_value.type in _WIDE_INTEGERS:
                    item[key] = int(item[key])
        elif field.message_type is not None:
            for element in (item if _repeated(field) else [item]):
                _numbers(field.message_type, element)
        elif field.type in _WIDE_INTEGERS:
            if _repeated(field):
                value[field.name] = [int(v) for v in item]
            else:
                value[field.name] = int(item)
                name = _time_name(field.name)
                if name and name not in value:
                    value[name] = _rfc3339(value[field.name]) if value[field.name] else None


def _to_dict(message) -> Dict[str, Any]:
    try:  # protobuf >= 5
        out = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                        always_print_fields_with_no_presence=True)
    except TypeError:  # protobuf < 5
        out = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                        including_default_value_fields=True)
    _numbers(message.DESCRIPTOR, out)
    return out


def _read(path: str, what: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def graph_text(graph: Union[dict, str, os.PathLike]) -> (bytes, str):
    """A graph as submit takes it: a dict (sent as JSON), YAML or JSON text,
    or the path of a file holding it. Returns (text, source name)."""
    if isinstance(graph, dict):
        return json.dumps(graph).encode(), "<dict>"
    if isinstance(graph, os.PathLike):
        return _read(os.fspath(graph), "graph"), os.fspath(graph)
    if isinstance(graph, str):
        # A one-line string naming a file is a path; anything else is the graph.
        if "\n" not in graph and os.path.isfile(graph):
            return _read(graph, "graph"), graph
        return graph.encode(), "<text>"
    raise TypeError("graph: a dict, YAML/JSON text or a path, not %s" % type(graph).__name__)


class Client:
    """One connection to one daemon. `addr` as overlapctl's --addr
    (unix:/path, /path or host:port; default: default_address()); the TLS
    files as its --tls-* flags (or OVERLAPD_TLS_CA / _CERT / _KEY), for a
    daemon on host:port only. `timeout_s` bounds each unary call."""

    def __init__(self, addr: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, timeout_s: float = 60.0):
        self.address = addr or default_address()
        target = "unix:" + self.address if self.address.startswith("/") else self.address
        tls_ca = tls_ca or os.environ.get("OVERLAPD_TLS_CA") or None
        tls_cert = tls_cert or os.environ.get("OVERLAPD_TLS_CERT") or None
        tls_key = tls_key or os.environ.get("OVERLAPD_TLS_KEY") or None
        options = [("grpc.max_receive_message_length", -1),
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if tls_ca or tls_cert or tls_key:
            if target.startswith("unix:"):
                raise ValueError("TLS is for a daemon on HOST:PORT, not %s" % self.address)
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("tls_cert and tls_key go together")
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca, "tls_ca") if tls_ca else None,
                private_key=_read(tls_key, "tls_key") if tls_key else None,
                certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._jobs = pb_grpc.JobsStub(self._channel)
        self._node = pb_grpc.NodeStub(self._channel)
        self._timeout = timeout_s

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout: Optional[float] = None):
        try:
            return method(request, timeout=timeout or self._timeout)
        except grpc.RpcError as e:
            raise OverlapdError(e.code(), e.details() or "", self.address) from None

    # --- Jobs -------------------------------------------------------------

    def submit(self, graph: Union[dict, str, os.PathLike], wait: bool = False,
               nodes: Optional[Sequence[str]] = None,
               timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """Submits a layer graph; the job as accepted, or with wait=True as it
        ended (raises OverlapdError DEADLINE_EXCEEDED past timeout_s). `nodes`
        (peer addresses) runs it across daemons, as `submit --nodes` does."""
        text, source = graph_text(graph)
        request = pb.SubmitJobRequest(spec=text, source_name=source.encode(),
                                      nodes=list(nodes or []))
        job = _to_dict(self._call(self._jobs.SubmitJob, request).job)
        if not wait:
            return job
        for job in self.watch(job["id"], timeout_s=timeout_s):
            pass
        return self.get(job["id"])

    def validate(self, graph: Union[dict, str, os.PathLike],
                 nodes: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Checks a graph as submit would (`overlapctl validate`) and runs
        nothing: the job as it would be queued, without an id, or OverlapdError
        with the code and reason submit would give."""
        text, source = graph_text(graph)
        request = pb.SubmitJobRequest(spec=text, source_name=source.encode(),
                                      nodes=list(nodes or []), validate_only=True)
        return _to_dict(self._call(self._jobs.SubmitJob, request).job)

    def get(self, job_id: str) -> Dict[str, Any]:
        return _to_dict(self._call(self._jobs.GetJob, pb.GetJobRequest(id=job_id)).job)

    def list(self, state: Optional[str] = None, limit: int = 0,
             page_token: str = "") -> Dict[str, Any]:
        """One page of jobs, newest first, as the API pages them:
        {"jobs": [...], "next_page_token": ""}. `state` a JobState name."""
        request = pb.ListJobsRequest(limit=limit, page_token=page_token)
        if state:
            request.state = pb.JobState.Value(state)
        return _to_dict(self._call(self._jobs.ListJobs, request))

    def jobs(self, state: Optional[str] = None, page_size: int = 0) -> Iterator[Dict[str, Any]]:
        """Every job (summaries), newest first, fetching page after page."""
        token = ""
        while True:
            page = self.list(state=state, limit=page_size, page_token=token)
            yield from page["jobs"]
            token = page["next_page_token"]
            if not token:
                return

    def cancel(self, job_id: str) -> Dict[str, Any]:
        return _to_dict(self._call(self._jobs.CancelJob, pb.CancelJobRequest(id=job_id)).job)

    def watch(self, job_id: str, timeout_s: Optional[float] = None) -> Iterator[Dict[str, Any]]:
        """The job at each state change or progress step, until it ends."""
        try:
            stream = self._jobs.WatchJob(pb.WatchJobRequest(id=job_id), timeout=timeout_s)
            for event in stream:
                yield _to_dict(event.job)
        except grpc.RpcError as e:
            raise OverlapdError(e.code(), e.details() or "", self.address) from None

    def wait(self, job_id: str, timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """The job once it has ended."""
        for _ in self.watch(job_id, timeout_s=timeout_s):
            pass
        return self.get(job_id)

    # --- Node -------------------------------------------------------------

    def node(self) -> Dict[str, Any]:
        return _to_dict(self._call(self._node.GetNodeInfo, pb.GetNodeInfoRequest()))

    def stats(self) -> Dict[str, Any]:
        return _to_dict(self._call(self._node.GetStats, pb.GetStatsRequest()))

    def tuning(self, op_type: str = "", m: int = 0, k: int = 0, n: int = 0,
               stale_only: bool = False) -> List[Dict[str, Any]]:
        """The schedules autotune chose and kept, as `overlapctl tuning list`."""
        request = pb.ListTunedSchedulesRequest(filter=pb.TuningFilter(
            op_type=op_type, m=m, k=k, n=n, stale_only=stale_only))
        return _to_dict(self._call(self._node.ListTunedSchedules, request))["schedules"]

    def calibration(self, tp: int = 0) -> Dict[str, Any]:
        """The planner's calibration kept for `tp` ranks (0: every device)."""
        reply = self._call(self._node.GetCalibration, pb.GetCalibrationRequest(tp=tp))
        return json.loads(reply.calibration_json)
