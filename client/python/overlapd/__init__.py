"""overlapd's Python client (client/python/README.md)."""
from importlib import metadata as _metadata

from overlapd.client import EXPORT_FORMATS, Client, default_address, graph_text
from overlapd.errors import (InputFileError, InvalidArgumentError, JobTimeoutError,
                             OverlapdError, SessionError, SessionTimeoutError)
from overlapd.model import (FINAL_STATES, CandidateTiming, Device, DeviceStats, Energy, Job,
                            JobPage, JobResult, JobState, LaneInterval, NodeInfo, NodeResult,
                            NodeSample, OpResult, PriorityClass, Progress, SessionInfo,
                            SessionList, SessionOpStats, Stats, TimingStats, TunedSchedule)
from overlapd.session import (RUN_LAYER, CommandTimes, Session, SharedBuffer, TensorKind,
                              TensorNeed, default_session_socket)

try:
    # The daemon's release: setup.py takes it from the repository's
    # CMakeLists.txt project(VERSION) when the package is built.
    __version__: str = _metadata.version("overlapd")
except _metadata.PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "__version__", "Client", "default_address", "graph_text", "EXPORT_FORMATS",
    "OverlapdError", "InvalidArgumentError", "InputFileError", "JobTimeoutError",
    "JobState", "FINAL_STATES", "PriorityClass", "Job", "JobPage", "JobResult", "OpResult",
    "TimingStats", "CandidateTiming", "Energy", "NodeResult", "Progress", "NodeInfo",
    "NodeSample", "Device", "Stats", "DeviceStats",
    "TunedSchedule", "SessionInfo", "SessionOpStats", "SessionList", "LaneInterval",
    "SessionError", "SessionTimeoutError", "Session", "SharedBuffer", "TensorKind", "TensorNeed",
    "CommandTimes", "RUN_LAYER", "default_session_socket",
]
