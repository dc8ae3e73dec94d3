"""What the client returns: typed, read-only views of the daemon's messages.

Each class mirrors one message of proto/overlap/v1/overlap.proto field by
field (int64 as int, enums as Enum, unix-millisecond times also as aware UTC
datetimes named without `_ms`, e.g. `submit_time`). The few nested messages
that have no class here (timelines, the layer step's deferrals, lanes, chains
and fusions) stay dicts of the JSON form. Every object keeps the JSON form
`overlapctl --json` prints: `to_dict()` (or `.raw`) returns it, and
`obj["field"]` reads it, as the dicts earlier versions returned did."""
import dataclasses
import datetime
import enum
import typing
from typing import Any, ClassVar, Dict, Iterator, List, Mapping, Optional, Tuple, Type, TypeVar, Union

from overlapd import _wire


class JobState(str, enum.Enum):
    """A job's state. Compares equal to its name (`JobState.RUNNING == "RUNNING"`);
    `JobState.parse` takes a name in any case."""

    UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    ABORTED = "ABORTED"

    def __str__(self) -> str:
        return self.value

    @property
    def final(self) -> bool:
        """Whether the job has ended (SUCCEEDED, FAILED, CANCELLED or ABORTED)."""
        return self in FINAL_STATES

    @classmethod
    def parse(cls, state: Union["JobState", str]) -> "JobState":
        """JobState.RUNNING from JobState.RUNNING, "RUNNING" or "running";
        ValueError naming the states for anything else."""
        if isinstance(state, JobState):
            return state
        if isinstance(state, str):
            name = state.strip().upper()
            for member in cls:
                if name in (member.name, member.value):
                    return member
        raise ValueError("job state: one of %s, not %r" % (
            ", ".join(m.name.lower() for m in cls if m is not cls.UNSPECIFIED), state))


FINAL_STATES: Tuple[JobState, ...] = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED,
                                      JobState.ABORTED)


class PriorityClass(str, enum.Enum):
    """Which of a device's lanes a job's collectives belong on beside sessions
    (graph key priority_class). Compares equal to its name
    (`PriorityClass.DEFERRED == "DEFERRED"`); `PriorityClass.parse` takes a
    name in any case, as the graph key does ("deferred")."""

    CRITICAL = "CRITICAL"
    DEFERRED = "DEFERRED"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Union["PriorityClass", str]) -> "PriorityClass":
        """PriorityClass.DEFERRED from itself, "DEFERRED" or "deferred";
        ValueError naming the classes for anything else."""
        if isinstance(value, PriorityClass):
            return value
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        raise ValueError("priority class: one of %s, not %r" % (
            ", ".join(m.name.lower() for m in cls), value))

M = TypeVar("M", bound="Message")


class Message:
    """The base of every result: its JSON form beside the typed fields."""

    proto: ClassVar[str] = ""  # the overlap.v1 message it mirrors
    _raw: Dict[str, Any]

    @property
    def raw(self) -> Dict[str, Any]:
        """The JSON form, as `overlapctl --json` prints it (proto field names)."""
        raw = getattr(self, "_raw", None)
        if raw is None:
            raw = dataclasses.asdict(self)  # type: ignore[call-overload]
        return typing.cast(Dict[str, Any], raw)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON form, as `overlapctl --json` prints it (proto field names)."""
        return self.raw

    def __getitem__(self, field: str) -> Any:
        """A field of the JSON form: obj["state"] is the state's name."""
        return self.raw[field]

    def __contains__(self, field: object) -> bool:
        return field in self.raw

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def get(self, field: str, default: Any = None) -> Any:
        """A field of the JSON form, or `default`."""
        return self.raw.get(field, default)

    @classmethod
    def from_dict(cls: Type[M], raw: Mapping[str, Any]) -> M:
        """The typed view of a message's JSON form (what to_dict returns)."""
        return _build(cls, raw)


_HINTS: Dict[type, Dict[str, Any]] = {}


def _convert(hint: Any, value: Any, raw: Mapping[str, Any], name: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union:  # Optional[X]
        inner = next(a for a in args if a is not type(None))
        if inner is datetime.datetime:
            return _convert(inner, value, raw, name)
        return None if value is None else _convert(inner, value, raw, name)
    if origin is list:
        return [_convert(args[0], v, {}, name) for v in value or []]
    if origin is dict:
        return {k: _convert(args[1], v, {}, name) for k, v in (value or {}).items()}
    if hint is Any:
        return value
    if hint is datetime.datetime:
        for suffix in ("_ms", "_unix_ms"):
            source = (name + suffix if suffix == "_ms" else name[:-len("_time")] + suffix)
            if source in raw:
                return _wire.moment(int(raw[source] or 0))
        return None
    if isinstance(hint, type) and issubclass(hint, Message):
        return _build(hint, value or {})
    if hint is JobState:
        return JobState.parse(value or JobState.UNSPECIFIED)
    if hint is PriorityClass:  # absent: 0, CRITICAL, as in a job stored before the field
        return PriorityClass.parse(value or PriorityClass.CRITICAL)
    if hint is float:
        return float(value or 0)  # also "NaN", "Infinity" as protobuf's JSON writes them
    if hint is int:
        return int(value or 0)
    if hint is bool:
        return bool(value)
    if hint is str:
        return str(value or "")
    raise TypeError("overlapd: no conversion to %r (field %s)" % (hint, name))


def _build(cls: Type[M], raw: Mapping[str, Any]) -> M:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    values = {f.name: _convert(hints[f.name], raw.get(f.name), raw, f.name)
              for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    obj = cls(**values)
    object.__setattr__(obj, "_raw", dict(raw))
    return obj


def fields_of(cls: Type[Message]) -> List[str]:
    """The typed fields of a result class (for tests and tools)."""
    return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class TimingStats(Message):
    """A set of timed iterations, in milliseconds."""
    proto: ClassVar[str] = "TimingStats"
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int


@dataclasses.dataclass(frozen=True)
class CandidateTiming(Message):
    """What autotune measured of one candidate schedule."""
    proto: ClassVar[str] = "CandidateTiming"
    schedule: str
    best_ms: float
    runoff_ms: float


@dataclasses.dataclass(frozen=True)
class Energy(Message):
    """What the GPUs drew over a timed phase (NVML's energy counter, summed
    over the devices), beside the same work run serially."""
    proto: ClassVar[str] = "Energy"
    step_joules: float  # per step
    step_watts: float  # average power over the window
    serial_valid: bool
    serial_joules: float
    serial_watts: float
    serial_ms: float  # the serial work's time (medians summed)
    joules_per_tflop: float
    note: str  # e.g. overlap saved time but drew more power
    window_s: float  # the windows' wall time, summed (step_watts = step_joules * steps / window_s)
    steps: int  # the timed steps in those windows
    # NVML's counter moves every counter_period_ms, which bounds each figure:
    # step_error and serial_error as fractions of it (0.1 = within 10%).
    step_error: float
    serial_error: float
    counter_period_ms: float


@dataclasses.dataclass(frozen=True)
class OpResult(Message):
    """One op's measurement: step, GEMM and collective alone, what hid, the check."""
    proto: ClassVar[str] = "OpResult"
    id: str
    type: str
    mode: str
    transport: str
    chunks: int
    m: int
    k: int
    n: int
    tp: int
    dtype: str
    step: Optional[TimingStats]
    gemm_alone: Optional[TimingStats]
    comm_alone: Optional[TimingStats]
    exposed_comm_ms: float
    hidden_fraction: float
    tflops: float
    busbw_gbps: float
    algbw_gbps: float
    verified: bool
    max_rel_error: float
    tolerance: float
    requested_mode: str
    auto_reason: str
    ideal_ms: float
    gemm_slowdown: float
    comm_alone_nccl: Optional[TimingStats]
    comm_alone_p2p: Optional[TimingStats]
    gemm_beside_comm: Optional[TimingStats]
    host_enqueue_ms: float
    graph_replay: bool
    schedule: str
    gemm_alone_rank_ms: List[float]
    candidates: List[CandidateTiming]
    timeline: Optional[Dict[str, Any]]
    compute_wait_rank_ms: List[float]
    algorithm: str
    group: str
    group_step_ms: List[float]
    slowest_group: int
    spans_nodes: bool
    energy: Optional[Energy]  # None without an energy counter
    edge: str  # how its input arrived in a layer step: alias | fused <activation> | copy


@dataclasses.dataclass(frozen=True)
class NodeResult(Message):
    """One node's line of a job that spans daemons."""
    proto: ClassVar[str] = "NodeResult"
    node: str
    node_index: int
    part_id: str
    first_rank: int
    ranks: int
    total_step_ms: float
    layer_step_ms: float
    slowest_rank: int
    backend: str
    gpu: str


@dataclasses.dataclass(frozen=True)
class JobResult(Message):
    """A job's report: each op's result and the layer step."""
    proto: ClassVar[str] = "JobResult"
    backend: str
    ops: List[OpResult]
    total_step_ms: float
    total_exposed_comm_ms: float
    launch_gate: bool
    nccl_overlap_ctas: int
    head_start: str
    preheat_ms: float
    ranks_per_gpu: int
    overlapd_version: str
    gpu: str
    cuda_runtime: str
    cuda_driver: str
    nccl: str
    cublas: str
    layer_step: Optional[TimingStats]
    layer_deferred: List[str]
    layer_joined_before: List[str]
    layer_order: List[str]
    layer_note: str
    library_env: Dict[str, str]
    layer_exposed_comm_ms: float
    layer_activation_ms: float
    layer_timeline: Optional[Dict[str, Any]]
    mesh_tp: int
    mesh_dp: int
    layer_deferrals: List[Dict[str, Any]]
    layer_step_without_deferred: Optional[TimingStats]
    layer_deferred_hidden_fraction: float
    node_results: List[NodeResult]
    slowest_rank: int
    slowest_node: str
    inter_node_busbw_gbps: float
    layer_chains: List[Dict[str, Any]]
    fusions: List[Dict[str, Any]]
    layer_scheduler: str
    layer_captured: bool
    lanes: str
    layer_dispatch_iterations: int
    lane_figures: List[Dict[str, Any]]
    scheduler_notes: List[str]
    layer_energy: Optional[Energy]  # the layer step's; None without an energy counter

    def op(self, op_id: str) -> OpResult:
        """The op of this id; KeyError when the job had none."""
        for op in self.ops:
            if op.id == op_id:
                return op
        raise KeyError(op_id)


@dataclasses.dataclass(frozen=True)
class Progress(Message):
    """Where a running job is: which op, which phase, which iteration."""
    proto: ClassVar[str] = "Progress"
    op_index: int
    op_count: int
    op_id: str
    phase: str
    iteration: int
    iterations: int


@dataclasses.dataclass(frozen=True)
class Job(Message):
    """A job: its state, its times, and its result once it has one (None in
    list summaries of jobs without one; summaries carry totals, no ops)."""
    proto: ClassVar[str] = "Job"
    id: str
    name: str
    state: JobState
    priority: int
    devices: List[int]
    spec: str
    error: str
    submit_time_ms: int
    start_time_ms: int
    end_time_ms: int
    submit_time: Optional[datetime.datetime]
    start_time: Optional[datetime.datetime]
    end_time: Optional[datetime.datetime]
    progress: Optional[Progress]
    result: Optional[JobResult]
    sequence: int
    error_code: int
    ops_finished: int
    owner: str
    owner_name: str
    nodes: List[str]
    coordinator: str
    global_job_id: str
    node_index: int
    # A job spanning daemons: "<coordinator's peer address>/<its id there>",
    # the id get, cancel and watch take on any node of it; "" for a job of one node.
    global_id: str
    owner_admin: bool
    counted_as_coordinated: bool
    waiting: str  # a queued job: why it has not started ("" otherwise)
    priority_class: PriorityClass

    @property
    def final(self) -> bool:
        """Whether the job has ended."""
        return self.state.final

@dataclasses.dataclass(frozen=True)
class JobPage(Message):
    """One page of jobs, newest first; pass next_page_token for the next ("": the last)."""
    proto: ClassVar[str] = "ListJobsResponse"
    jobs: List[Job]
    next_page_token: str


@dataclasses.dataclass(frozen=True)
class Device(Message):
    """One device of the node: memory, live readings and health (NVML), Xids."""
    proto: ClassVar[str] = "Device"
    index: int
    name: str
    memory_bytes: int
    memory_used_bytes: int
    total_memory_bytes: int
    pci_bus_id: str
    telemetry_valid: bool
    sm_clock_mhz: int
    mem_clock_mhz: int
    temperature_c: int
    power_w: float
    utilization_pct: int
    max_sm_clock_mhz: int
    clock_limits: List[str]
    clock_limits_valid: bool
    capped_time_valid: bool
    power_capped_s: float
    thermal_capped_s: float
    pcie_valid: bool
    pcie_gen: int
    pcie_max_gen: int
    pcie_width: int
    pcie_max_width: int
    pcie_replays: int
    nvlink_valid: bool
    nvlinks_active: int
    nvlinks_supported: int
    nvlink_crc_errors: int
    nvlink_replay_errors: int
    nvlink_recovery_errors: int
    ecc_valid: bool
    ecc_corrected: int
    ecc_uncorrected: int
    row_remap_valid: bool
    row_remap_pending: bool
    row_remap_failed: bool
    xid_valid: bool
    xid_errors: int
    gpu_xid_errors: int
    last_xid: int
    last_xid_unix_ms: int
    last_xid_time: Optional[datetime.datetime]
    uuid: str
    model_name: str
    nvml_index: int
    nvml_pci_bus_id: str
    energy_valid: bool
    energy_j: float  # drawn since the driver loaded
    nvlink_traffic_valid: bool
    nvlink_tx_bytes: int  # data bytes, summed over the links, since the driver loaded
    nvlink_rx_bytes: int


@dataclasses.dataclass(frozen=True)
class FlightRecorderUsage(Message):
    """The flight recorder's rings and the memory they hold, against its cap."""
    proto: ClassVar[str] = "FlightRecorderUsage"
    rings: int  # one per communicator, lane and rank seen
    entries: int
    bytes: int
    entries_per_ring: int  # config flight_recorder_entries
    cap_bytes: int


@dataclasses.dataclass(frozen=True)
class NodeInfo(Message):
    """The node (`overlapctl node`): backend, devices, versions, peers."""
    proto: ClassVar[str] = "GetNodeInfoResponse"
    backend: str
    devices: List[Device]
    overlapd_version: str
    git_commit: str
    cuda_runtime_version: str
    cuda_driver_version: str
    nccl_version: str
    cublas_version: str
    hostname: str
    state_dir: str
    listen_address: str
    healthy: bool
    library_env: Dict[str, str]
    ranks_per_gpu: int
    node_name: str
    peers: List[str]
    cross_daemon_transport: str
    cross_daemon_note: str
    lanes: str
    flight_recorder: Optional[FlightRecorderUsage]


@dataclasses.dataclass(frozen=True)
class DeviceStats(Message):
    """One device's use since the daemon started."""
    proto: ClassVar[str] = "DeviceStats"
    device: int
    busy_ms: float
    jobs_run: int


@dataclasses.dataclass(frozen=True)
class Stats(Message):
    """The daemon's counters (`overlapctl stats`); jobs_by_state keyed by state name."""
    proto: ClassVar[str] = "GetStatsResponse"
    jobs_by_state: Dict[str, int]
    devices: List[DeviceStats]
    uptime_s: float
    jobs_submitted: int
    jobs_rejected: int
    requests_refused_busy: int
    requests_abandoned: int
    graphs_parsed: int


@dataclasses.dataclass(frozen=True)
class TunedSchedule(Message):
    """One choice autotune kept (`overlapctl tuning list`)."""
    proto: ClassVar[str] = "TunedSchedule"
    key: str
    op_type: str
    m: int
    k: int
    n: int
    dtype: str
    tp: int
    requested: str
    schedule: str
    step_ms: float
    tuned_unix_ms: int
    tuned_time: Optional[datetime.datetime]
    environment: str
    current: bool


@dataclasses.dataclass(frozen=True)
class SessionOpStats(Message):
    """One op of a session as the daemon ran it, every rank's steps together."""
    proto: ClassVar[str] = "SessionOpStats"
    op: str
    steps: int
    median_ms: float  # device time of one step
    hidden_share: float  # of its communication, hidden behind its GEMM (0..1); -1: no GEMM
    lane_wait_ms: float  # total time its steps waited for a lane
    chunks: int  # deferred chunks issued
    chunks_forced: int  # of them, sent beside critical work because the bound was near
    max_delay_ms: float  # deferred: longest from ready to the last chunk issued
    last_ms: float  # device time of its last step (0: none measured yet)
    device_ms_total: float  # device time of every measured step, summed
    timed_steps: int  # the steps in device_ms_total
    over_bound: int  # deferred: steps completed later than the bound after ready


@dataclasses.dataclass(frozen=True)
class LaneInterval(Message):
    """One interval a device's lane was busy with a session's op or chunk
    (ms on the device's clock since the daemon's session origin)."""
    proto: ClassVar[str] = "LaneInterval"
    session_id: str
    op: str
    device: int
    lane: str  # "critical" | "deferred"
    chunk: int
    start_ms: float
    end_ms: float
    forced: bool
    seq: int  # the command (the session's step) it ran for


@dataclasses.dataclass(frozen=True)
class SessionInfo(Message):
    """A session (`overlapctl sessions`): who owns it, its ranks, its steps
    and each op's figures."""
    proto: ClassVar[str] = "SessionInfo"
    session_id: str
    name: str
    owner: str
    state: str  # joining | ready | failed | closed
    priority: str  # critical | deferred
    world: int
    ranks_joined: int
    devices: List[int]  # by rank
    steps: int  # commands completed, every rank's
    mapped_bytes: int
    deferred_bound_ms: float
    ops: List[SessionOpStats]
    error: str
    enqueue_p50_us: float  # host time from a client's call to the daemon's enqueue
    enqueue_p99_us: float
    opened_at: str  # RFC 3339

    def op(self, op_id: str) -> SessionOpStats:
        """The op of this id; KeyError when the session has none."""
        for op in self.ops:
            if op.op == op_id:
                return op
        raise KeyError(op_id)


@dataclasses.dataclass(frozen=True)
class LaneUserFigures(Message):
    """One user's ("session" or "job") share of a device's lanes."""
    proto: ClassVar[str] = "LaneUserFigures"
    user: str
    critical_pending: int
    critical_issued: int
    deferred_sent: int
    deferred_yielded: int
    deferred_over_bound: int
    deferred_yielded_to_other: int


@dataclasses.dataclass(frozen=True)
class DeviceLaneState(Message):
    """A device's lanes, shared by the sessions and jobs on it."""
    proto: ClassVar[str] = "DeviceLaneState"
    device: int
    users: List[LaneUserFigures]


@dataclasses.dataclass(frozen=True)
class SessionList(Message):
    """The sessions the caller may see, and with lanes=True their recent lane intervals."""
    proto: ClassVar[str] = "ListSessionsResponse"
    sessions: List[SessionInfo]
    lanes: List[LaneInterval]
    device_lanes: List[DeviceLaneState]


@dataclasses.dataclass(frozen=True)
class DeviceRates(Message):
    """A device's NVLink rates between two samples; None where not read."""
    proto: ClassVar[str] = "DeviceRates"
    device: int
    nvlink_tx_bytes_per_s: Optional[float]
    nvlink_rx_bytes_per_s: Optional[float]


@dataclasses.dataclass(frozen=True)
class NodeSample(Message):
    """One sample of the node's live figures (Client.watch_node): when it was
    taken, the daemon's sample count, the interval granted, the samples this
    stream skipped before it (the reader was behind), every device as
    NodeInfo.devices, the running jobs (their last finished op only) and the
    open sessions the caller may see."""
    proto: ClassVar[str] = "NodeSample"
    time_ms: int
    sequence: int
    interval_ms: int
    skipped: int
    devices: List[Device]
    running: List[Job]
    sessions: List[SessionInfo]
    device_rates: List[DeviceRates]


RESULT_CLASSES: Tuple[Type[Message], ...] = (
    TimingStats, CandidateTiming, Energy, OpResult, NodeResult, JobResult, Progress, Job, JobPage,
    Device, NodeInfo, DeviceStats, Stats, TunedSchedule, SessionOpStats, LaneInterval,
    SessionInfo, SessionList, NodeSample, FlightRecorderUsage, LaneUserFigures, DeviceLaneState,
    DeviceRates)
