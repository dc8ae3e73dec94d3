"""The typed client against a real daemon on the host backend: result classes
and their fields, job states, the errors a user meets first, submit's timeout,
the exports and the version."""
import dataclasses
import datetime
import enum
import json
import os
import pathlib
import re
import socket
import subprocess
import time

import grpc
import pytest

import overlapd
from overlapd import frameworks, model
from overlapd._gen.overlap.v1 import overlap_pb2 as pb
from overlapd._wire import time_name

from conftest import LONG_YAML, REPO, SMALL_GRAPH

SMALL = dict(SMALL_GRAPH, name="py-typed")


def overlapctl_binary():
    path = os.environ.get("OVERLAPCTL_BIN", str(REPO / "build" / "client" / "overlapctl"))
    if not os.access(path, os.X_OK):
        pytest.fail("no overlapctl at %s: build it first or set OVERLAPCTL_BIN" % path)
    return path


def running(client, job_id, timeout_s=60):
    """Waits until the job runs; the job."""
    for job in client.watch(job_id, timeout_s=timeout_s):
        if job.state == overlapd.JobState.RUNNING:
            return job
    pytest.fail("job %s ended before it was seen running" % job_id)


# --- the result classes --------------------------------------------------


@pytest.mark.parametrize("cls", model.RESULT_CLASSES, ids=lambda c: c.__name__)
def test_every_result_class_mirrors_its_message_field_by_field(cls):
    """A field added to the proto, or a misspelt one here, fails this test."""
    fields = pb.DESCRIPTOR.message_types_by_name[cls.proto].fields
    expected = {f.name for f in fields} | {time_name(f.name) for f in fields if time_name(f.name)}
    assert set(model.fields_of(cls)) == expected


def test_a_finished_job_is_typed_to_the_leaves(daemon):
    client, _ = daemon
    job = client.submit(SMALL, wait=True, timeout_s=120)
    assert isinstance(job, overlapd.Job)
    assert job.state is overlapd.JobState.SUCCEEDED and job.final, job.error
    assert job.name == "py-typed" and job.id.startswith("job-")
    assert job.devices == [0, 1]
    assert isinstance(job.submit_time_ms, int) and isinstance(job.sequence, int)
    assert isinstance(job.submit_time, datetime.datetime)
    assert job.submit_time.tzinfo == datetime.timezone.utc
    assert job.submit_time <= job.start_time <= job.end_time
    assert abs(job.end_time.timestamp() * 1000 - job.end_time_ms) < 1
    result = job.result
    assert isinstance(result, overlapd.JobResult)
    assert result.backend == "host"
    assert [op.id for op in result.ops] == ["fc1", "fc2"]
    fc1 = result.op("fc1")
    assert isinstance(fc1, overlapd.OpResult)
    assert (fc1.type, fc1.m, fc1.k, fc1.n, fc1.tp) == ("ag_gemm", 128, 64, 64, 2)
    assert fc1.schedule.startswith("bulk/") and fc1.mode == "bulk"
    assert isinstance(fc1.step, overlapd.TimingStats)
    assert fc1.step.samples == 2 and 0 < fc1.step.min_ms <= fc1.step.median_ms <= fc1.step.max_ms
    assert isinstance(fc1.hidden_fraction, float) and isinstance(fc1.max_rel_error, float)
    assert fc1.verified is True and fc1.max_rel_error <= fc1.tolerance
    assert all(isinstance(c, overlapd.CandidateTiming) for c in fc1.candidates)
    assert all(isinstance(ms, float) for ms in fc1.gemm_alone_rank_ms)
    assert len(fc1.gemm_alone_rank_ms) == 2
    assert result.total_step_ms == pytest.approx(sum(op.step.median_ms for op in result.ops))
    with pytest.raises(KeyError):
        result.op("nope")


def test_the_json_form_stays_reachable(daemon):
    client, _ = daemon
    job = client.submit(SMALL, wait=True, timeout_s=120)
    raw = job.to_dict()
    assert raw is job.raw and raw["state"] == "SUCCEEDED"
    assert raw["submit_time"].endswith("Z") and raw["submit_time_ms"] == job.submit_time_ms
    assert job["result"]["ops"][0]["m"] == 128  # obj["field"] reads the JSON form
    assert job.result.ops[0].to_dict() == raw["result"]["ops"][0]
    assert "result" in job and job.get("no-such-field", 7) == 7
    assert overlapd.Job.from_dict(raw) == job
    # The same form overlapctl --json prints.
    printed = subprocess.run([overlapctl_binary(), "--addr", client.address, "--json", "get",
                              job.id], check=True, capture_output=True, text=True).stdout
    assert json.loads(printed)["result"]["ops"][0]["m"] == raw["result"]["ops"][0]["m"]


def test_node_stats_tuning_and_pages_are_typed(daemon):
    client, _ = daemon
    node = client.node()
    assert isinstance(node, overlapd.NodeInfo) and node.backend == "host" and node.healthy
    assert [d.index for d in node.devices] == [0, 1]
    assert all(isinstance(d, overlapd.Device) and d.memory_bytes > 0 for d in node.devices)
    assert node.devices[0].last_xid_time is None  # no Xid: no time
    stats = client.stats()
    assert isinstance(stats, overlapd.Stats) and stats.uptime_s > 0
    assert all(isinstance(n, int) for n in stats.jobs_by_state.values())
    assert [d.device for d in stats.devices] == [0, 1]
    auto = dict(SMALL, name="py-typed-auto")
    auto["ops"] = [dict(op, mode="auto") for op in SMALL["ops"]]
    assert client.submit(auto, wait=True, timeout_s=240).state == "SUCCEEDED"
    tuned = client.tuning(op_type="gemm_rs", m=128)
    assert tuned and all(isinstance(t, overlapd.TunedSchedule) for t in tuned)
    assert all(t.op_type == "gemm_rs" and t.m == 128 for t in tuned)
    assert any(t.current and isinstance(t.tuned_time, datetime.datetime) for t in tuned)
    page = client.list(limit=1)
    assert isinstance(page, overlapd.JobPage) and len(page.jobs) == 1 and page.next_page_token
    assert isinstance(page.jobs[0], overlapd.Job) and page.jobs[0].spec == ""  # a summary


# --- job states ------------------------------------------------------------


def test_job_states_are_an_enum_that_takes_any_case():
    S = overlapd.JobState
    assert S.parse("running") is S.RUNNING
    assert S.parse("RUNNING") is S.RUNNING
    assert S.parse(S.RUNNING) is S.RUNNING
    assert S.RUNNING == "RUNNING" and str(S.CANCELLED) == "CANCELLED"
    assert [s.final for s in (S.QUEUED, S.RUNNING)] == [False, False]
    assert all(s.final for s in overlapd.FINAL_STATES)
    assert {s.name for s in S} - {"UNSPECIFIED"} == {
        v.name for v in pb.JobState.DESCRIPTOR.values if v.number != 0}
    with pytest.raises(ValueError, match="one of queued, running"):
        S.parse("runing")


def test_list_takes_a_state_in_any_form(daemon):
    client, _ = daemon
    job = client.submit(LONG_YAML)
    try:
        running(client, job.id)
        for state in ("running", "RUNNING", overlapd.JobState.RUNNING):
            assert [j.id for j in client.list(state=state).jobs] == [job.id], state
        assert job.id not in [j.id for j in client.jobs(state="succeeded")]
        with pytest.raises(overlapd.InvalidArgumentError) as refused:
            client.list(state="runing")
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert isinstance(refused.value, ValueError)
    finally:
        client.cancel(job.id)
        assert client.wait(job.id, timeout_s=60).state == "CANCELLED"


def test_priority_classes_are_an_enum_that_takes_any_case():
    P = overlapd.PriorityClass
    assert P.parse("deferred") is P.DEFERRED and P.parse("CRITICAL") is P.CRITICAL
    assert P.parse(P.DEFERRED) is P.DEFERRED and P.DEFERRED == "DEFERRED"
    assert {p.name for p in P} == {v.name for v in pb.PriorityClass.DESCRIPTOR.values}
    with pytest.raises(ValueError, match="one of critical, deferred"):
        P.parse("urgent")
    # A job stored before the field existed reads as critical, the proto's 0.
    assert overlapd.Job.from_dict({"id": "job-000001"}).priority_class is P.CRITICAL
    assert overlapd.Job.from_dict({"priority_class": "DEFERRED"}).priority_class is P.DEFERRED


def test_a_jobs_priority_class_and_global_id_are_typed(daemon):
    client, _ = daemon
    deferred = client.submit(dict(SMALL, name="py-deferred", priority_class="deferred"),
                             wait=True, timeout_s=120)
    assert deferred.state is overlapd.JobState.SUCCEEDED, deferred.error
    assert deferred.priority_class is overlapd.PriorityClass.DEFERRED
    assert client.get(deferred.id).priority_class is overlapd.PriorityClass.DEFERRED
    assert deferred.global_id == ""  # a job of one node
    assert deferred["priority_class"] == "DEFERRED"
    plain = client.validate(SMALL)
    assert plain.priority_class is overlapd.PriorityClass.CRITICAL


def test_a_global_id_reaches_the_daemon_as_given(daemon):
    """get, cancel and watch pass a global id through: this daemon has no
    peers, so it names the id it was given and says no such job runs here."""
    client, _ = daemon
    global_id = "10.0.0.1:7070/job-000001"
    for call in (client.get, client.cancel, lambda i: list(client.watch(i, timeout_s=30))):
        with pytest.raises(overlapd.OverlapdError) as refused:
            call(global_id)
        assert refused.value.code == grpc.StatusCode.NOT_FOUND
        assert global_id in refused.value.message
        assert "no peers" in refused.value.message


# --- errors a user meets first ----------------------------------------------


def test_no_daemon_on_a_socket_is_unavailable_and_says_so(tmp_path):
    address = "unix:%s/nobody.sock" % tmp_path
    with overlapd.Client(address, timeout_s=5) as client:
        with pytest.raises(overlapd.OverlapdError) as raised:
            client.node()
    error = raised.value
    assert error.code == grpc.StatusCode.UNAVAILABLE
    assert error.address == address
    assert "cannot reach overlapd at %s" % address in str(error)
    assert "is overlapd running?" in str(error)
    assert "failed to connect to all addresses" not in str(error)


def test_no_daemon_on_a_port_is_unavailable_and_says_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with overlapd.Client("127.0.0.1:%d" % port, timeout_s=5) as client:
        with pytest.raises(overlapd.OverlapdError) as raised:
            client.submit(SMALL)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE
    assert "cannot reach overlapd at 127.0.0.1:%d" % port in str(raised.value)
    assert "not running or not reachable" in str(raised.value)


def test_a_missing_graph_file_is_named_and_never_sent_as_text(daemon, tmp_path):
    client, _ = daemon
    before = client.stats().jobs_rejected
    missing = str(tmp_path / "no-such-layer.yaml")
    for graph in (missing, pathlib.Path(missing), "layer.yml"):
        for call in (client.submit, client.validate):
            with pytest.raises(FileNotFoundError) as raised:
                call(graph)
            assert isinstance(raised.value, overlapd.OverlapdError)
            assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert raised.value.filename == str(graph)
            assert str(raised.value) == (
                "INVALID_ARGUMENT: graph: cannot read %s: No such file or directory" % graph)
    assert client.stats().jobs_rejected == before, "a path went to the daemon"
    # One-line text that is a graph (a flow mapping) is still sent as one.
    one_line = json.dumps(SMALL)
    assert client.validate(one_line).name == "py-typed"


# --- submit's timeout ----------------------------------------------------------


def test_submit_wait_past_its_timeout_cancels_the_job(daemon):
    client, _ = daemon
    started = time.monotonic()
    with pytest.raises(overlapd.JobTimeoutError) as raised:
        client.submit(LONG_YAML, wait=True, timeout_s=2)
    error = raised.value
    assert 2 <= time.monotonic() - started < 60
    assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED and isinstance(error, TimeoutError)
    assert error.cancelled is True
    assert re.search(r"job %s did not end within 2 s: cancelled it \(now CANCELLED\)"
                     % error.job_id, str(error)), str(error)
    assert "Stream removed" not in str(error)
    assert client.get(error.job_id).state is overlapd.JobState.CANCELLED


def test_wait_past_its_timeout_leaves_the_job_running(daemon):
    client, _ = daemon
    job = client.submit(LONG_YAML)
    try:
        with pytest.raises(overlapd.JobTimeoutError) as raised:
            client.wait(job.id, timeout_s=1)
        assert raised.value.cancelled is False and "it goes on" in str(raised.value)
        assert client.get(job.id).state in ("QUEUED", "RUNNING")
    finally:
        client.cancel(job.id)
    assert client.wait(job.id, timeout_s=60).state == "CANCELLED"


# --- exports -------------------------------------------------------------------


@pytest.fixture(scope="module")
def layer_job(daemon, tmp_path_factory):
    """A forward and backward layer at tp 2 that auto tuned; (client, job, graph path)."""
    client, _ = daemon
    layer = tmp_path_factory.mktemp("export") / "layer.yaml"
    subprocess.run([overlapctl_binary(), "graph", "--tp", "2", "--seq", "128", "--hidden", "128",
                    "--ffn", "256", "--heads", "2", "--pass", "both", "--output-file", str(layer)],
                   check=True, capture_output=True)
    job = client.submit(layer, wait=True, timeout_s=300)
    assert job.state == "SUCCEEDED", job.error
    return client, job, str(layer)


@pytest.mark.parametrize("fmt", ["te", "megatron", "torchtitan"])
def test_every_export_format_is_overlapctls_own(layer_job, fmt, monkeypatch):
    client, job, _ = layer_job
    ctl = overlapctl_binary()
    expected = subprocess.run([ctl, "--addr", client.address, "export", "--format", fmt, "--job",
                               job.id], check=True, capture_output=True, text=True).stdout
    assert client.export(fmt, job=job, overlapctl=ctl) == expected
    monkeypatch.setenv("OVERLAPCTL", ctl)
    assert client.export(fmt, job=job.id) == expected


def test_the_te_export_matches_the_python_mapping(layer_job):
    client, job, _ = layer_job
    exported = json.loads(client.export("te", job=job, overlapctl=overlapctl_binary()))
    assert exported["ub_cfgs"], "nothing exported"
    assert frameworks.te_ub_cfgs(frameworks.choices_from_job(job)) == exported["ub_cfgs"]
    assert frameworks.choices_from_job(job) == frameworks.choices_from_job(job.to_dict())
    megatron = client.export("megatron", job=job, overlapctl=overlapctl_binary())
    for layer in exported["ub_cfgs"]:
        assert re.search(r"^%s:$" % layer, megatron, flags=re.M), layer


def test_exports_from_a_graph_and_their_refusals(layer_job, tmp_path):
    client, job, layer = layer_job
    ctl = overlapctl_binary()
    # The tuning cache kept what the job chose: the same config, without margins.
    from_graph = json.loads(client.export("te", graph=layer, overlapctl=ctl))
    from_job = json.loads(client.export("te", job=job, overlapctl=ctl))
    assert from_graph["ub_cfgs"] == from_job["ub_cfgs"]
    with pytest.raises(overlapd.OverlapdError) as unknown:
        client.export("te", job="job-999999", overlapctl=ctl)
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND
    assert "job-999999" in unknown.value.message
    with pytest.raises(overlapd.InputFileError) as missing:
        client.export("megatron", graph=str(tmp_path / "nope.yaml"), overlapctl=ctl)
    assert "nope.yaml" in str(missing.value)
    with pytest.raises(overlapd.InvalidArgumentError):
        client.export("deepspeed", job=job, overlapctl=ctl)
    with pytest.raises(overlapd.InvalidArgumentError) as usage:
        client.export("te", overlapctl=ctl)  # neither a job nor a graph: overlapctl's usage
    assert "--job" in usage.value.message
    cancelled = client.submit(LONG_YAML)
    client.cancel(cancelled.id)
    client.wait(cancelled.id, timeout_s=60)
    with pytest.raises(overlapd.OverlapdError) as unfinished:
        client.export("te", job=cancelled, overlapctl=ctl)
    assert unfinished.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(overlapd.OverlapdError) as nowhere:
        overlapd.Client("unix:%s/none.sock" % tmp_path).export("te", job=job, overlapctl=ctl)
    assert nowhere.value.code == grpc.StatusCode.UNAVAILABLE


# --- the version -----------------------------------------------------------------


def test_the_version_is_the_daemons_release(daemon):
    client, _ = daemon
    cmake = (REPO / "CMakeLists.txt").read_text()
    release = re.search(r"project\(overlapd VERSION ([0-9.]+)", cmake).group(1)
    assert overlapd.__version__ == release
    assert client.node().overlapd_version == release


def test_the_package_is_typed_and_documented():
    package = pathlib.Path(overlapd.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_gen" / "overlap" / "v1" / "overlap_pb2.pyi").is_file()
    assert all(dataclasses.is_dataclass(cls) for cls in model.RESULT_CLASSES)
    undocumented = []
    for module in (overlapd.client, overlapd.model, overlapd.errors, frameworks):
        for name, member in vars(module).items():
            if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
                continue
            if not (member.__doc__ or "").strip():
                undocumented.append("%s.%s" % (module.__name__, name))
            if isinstance(member, type) and not issubclass(member, enum.Enum):
                for method, value in vars(member).items():
                    if method.startswith("_") or not (callable(value) or
                                                      isinstance(value, property)):
                        continue
                    if not (getattr(member, method).__doc__ or value.__doc__ or "").strip():
                        undocumented.append("%s.%s.%s" % (module.__name__, name, method))
    assert undocumented == []
