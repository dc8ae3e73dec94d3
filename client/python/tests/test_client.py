"""The client against a real daemon on the host backend, read through the
JSON form (obj["field"]) that earlier versions returned as dicts."""
import contextlib
import json
import os
import subprocess
import time

import grpc
import pytest

import overlapd

from conftest import LONG_YAML, REPO, SMALL_GRAPH

SMALL = SMALL_GRAPH


def test_node_and_stats_answer_with_overlapctls_field_names(daemon):
    client, _ = daemon
    node = client.node()
    assert node["backend"] == "host"
    assert len(node["devices"]) == 2
    assert "memory_bytes" in node["devices"][0]  # proto field names, as --json
    stats = client.stats()
    assert "jobs_by_state" in stats and "uptime_s" in stats


def test_watch_node_streams_samples_at_the_floor(daemon):
    client, _ = daemon
    samples = []
    stream = client.watch_node(interval_s=0.01)  # below the floor: 100 ms
    for sample in stream:
        samples.append(sample)
        if len(samples) == 3:
            break
    stream.close()
    assert [s["interval_ms"] for s in samples] == [100, 100, 100]
    assert samples[0]["sequence"] < samples[1]["sequence"] < samples[2]["sequence"]
    assert samples[0]["time_ms"] < samples[1]["time_ms"] < samples[2]["time_ms"]
    assert [len(s["devices"]) for s in samples] == [2, 2, 2]
    assert samples[0]["devices"][1]["index"] == 1


def test_submit_a_dict_and_wait_for_a_verified_report(daemon):
    client, _ = daemon
    job = client.submit(SMALL, wait=True, timeout_s=120)
    assert job["state"] == "SUCCEEDED", job.get("error")
    assert job["name"] == "py-small"
    ops = job["result"]["ops"]
    assert [op["id"] for op in ops] == ["fc1", "fc2"]
    for op in ops:
        assert op["verified"] is True
        assert op["max_rel_error"] <= op["tolerance"]
        assert op["m"] == 128  # int64 as a number, as overlapctl --json
        assert isinstance(job["submit_time_ms"], int)
        assert job["submit_time"].endswith("Z")  # RFC 3339, as overlapctl --json
    assert ops[0]["schedule"] == "bulk/p2p" or ops[0]["schedule"].startswith("bulk/")
    # The same job by id, and in the list.
    assert client.get(job["id"])["state"] == "SUCCEEDED"
    assert job["id"] in [j["id"] for j in client.jobs()]


def test_yaml_text_and_a_path_are_graphs_too(daemon, tmp_path):
    client, _ = daemon
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    from_path = client.submit(str(path), wait=True, timeout_s=120)
    assert from_path["state"] == "SUCCEEDED"
    yaml_text = "name: py-yaml\niterations: 2\nwarmup: 1\nops:\n" \
                "  - {id: g, type: gemm, m: 64, k: 64, n: 64}\n"
    assert client.submit(yaml_text, wait=True, timeout_s=120)["state"] == "SUCCEEDED"


def test_watch_yields_progress_until_the_job_ends(daemon):
    client, _ = daemon
    job = client.submit(SMALL)
    events = list(client.watch(job["id"], timeout_s=120))
    assert events, "no event"
    assert events[-1]["state"] in overlapd.FINAL_STATES
    assert any(e["state"] == "RUNNING" for e in events)


def test_cancel_ends_a_running_job_cancelled(daemon):
    client, _ = daemon
    job = client.submit(LONG_YAML)
    for event in client.watch(job["id"], timeout_s=60):
        if event["state"] == "RUNNING":
            break
    client.cancel(job["id"])
    ended = client.wait(job["id"], timeout_s=60)
    assert ended["state"] == "CANCELLED"


def test_a_bad_graph_raises_invalid_argument_with_the_daemons_message(daemon):
    client, _ = daemon
    with pytest.raises(overlapd.OverlapdError) as raised:
        client.submit({"ops": [{"id": "x", "type": "ag_gemm", "m": 0, "k": 64, "n": 64}]})
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "m" in raised.value.message
    with pytest.raises(overlapd.OverlapdError) as unknown:
        client.get("job-999999")
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND


def test_pages_follow_the_api(daemon):
    client, _ = daemon
    for _ in range(3):
        client.submit(SMALL, wait=True, timeout_s=120)
    first = client.list(limit=2)
    assert len(first["jobs"]) == 2
    assert first["next_page_token"]
    second = client.list(limit=2, page_token=first["next_page_token"])
    assert {j["id"] for j in first["jobs"]}.isdisjoint({j["id"] for j in second["jobs"]})
    assert len(list(client.jobs(page_size=2))) == len(list(client.jobs()))


def test_tuning_and_a_missing_calibration(daemon):
    client, _ = daemon
    auto = dict(SMALL, name="py-auto")
    auto["ops"] = [dict(op, mode="auto") for op in SMALL["ops"]]
    assert client.submit(auto, wait=True, timeout_s=240)["state"] == "SUCCEEDED"
    tuned = client.tuning(op_type="ag_gemm")
    assert any(t["m"] == 128 and t["current"] for t in tuned)
    with pytest.raises(overlapd.OverlapdError) as none:
        client.calibration()
    assert none.value.code == grpc.StatusCode.NOT_FOUND


def test_nothing_listens_is_unavailable(tmp_path):
    client = overlapd.Client("unix:%s/nobody.sock" % tmp_path, timeout_s=2)
    with pytest.raises(overlapd.OverlapdError) as raised:
        client.node()
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE


def test_te_ub_cfgs_match_overlapctl_export(daemon, tmp_path):
    """The Python mapping and `overlapctl export --format te` agree on a job."""
    import os
    import subprocess
    from overlapd import frameworks

    client, work = daemon
    ctl = os.environ.get("OVERLAPCTL_BIN",
                         os.path.join(os.path.dirname(os.environ.get("OVERLAPD_BIN", "")),
                                      "..", "client", "overlapctl"))
    layer = tmp_path / "layer.yaml"
    subprocess.run([ctl, "graph", "--tp", "2", "--seq", "128", "--hidden", "128", "--ffn", "256",
                    "--heads", "2", "--pass", "both", "--output-file", str(layer)], check=True,
                   capture_output=True)
    job = client.submit(str(layer), wait=True, timeout_s=300)
    assert job["state"] == "SUCCEEDED", job.get("error")
    exported = subprocess.run([ctl, "--addr", client.address, "export", "--format", "te",
                               "--job", job["id"]], check=True, capture_output=True, text=True)
    expected = json.loads(exported.stdout)["ub_cfgs"]
    assert frameworks.te_ub_cfgs(frameworks.choices_from_job(job)) == expected


def test_a_job_across_two_daemons(two_daemons):
    """submit(peers=...) runs the job over both daemons, as submit --peers does."""
    (first, _), peers = two_daemons
    mesh = {"name": "py-mesh", "mesh": {"tp": 2, "dp": 2}, "iterations": 2, "warmup": 1,
            "ops": [{"id": "fc1", "type": "ag_gemm", "m": 128, "k": 64, "n": 64},
                    {"id": "grads", "type": "all_reduce", "m": 64, "n": 64, "group": "dp",
                     "after": ["fc1"]}]}
    job = first.submit(mesh, peers=peers, wait=True, timeout_s=180)
    assert job["state"] == "SUCCEEDED", job.get("error")
    assert [n["node"] for n in job["result"]["node_results"]] == peers
    assert all(op["verified"] for op in job["result"]["ops"])


def overlapctl_binary():
    path = os.environ.get("OVERLAPCTL_BIN", str(REPO / "build" / "client" / "overlapctl"))
    if not os.access(path, os.X_OK):
        pytest.fail("no overlapctl at %s: build it first or set OVERLAPCTL_BIN" % path)
    return path


def part_of(client, global_id, timeout_s=60):
    """The part of the job `global_id` on the client's daemon, once it has one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return client.get(global_id)
        except overlapd.OverlapdError as e:
            if e.code != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def test_a_global_id_names_a_job_across_daemons_on_every_node(two_daemons):
    """get, watch, wait and cancel take a job's global id as they take an id."""
    (first, second), peers = two_daemons
    long_mesh = {"name": "py-mesh-long", "mesh": {"tp": 2, "dp": 2}, "iterations": 10000,
                 "warmup": 1, "verify": False, "layer_step": False,
                 "ops": [{"id": "grads", "type": "all_reduce", "m": 512, "n": 512,
                          "group": "dp"}]}
    job = first.submit(long_mesh, peers=peers)
    try:
        assert job.global_id == "%s/%s" % (peers[0], job.id)
        assert first.get(job.global_id).id == job.id
        running = None
        for event in first.watch(job.global_id, timeout_s=120):
            assert event.id == job.id
            if event.state == overlapd.JobState.RUNNING:
                running = event
                break
        assert running is not None, "the job ended before it was seen running"
        # The other node's part, which the same id names there, is admitted
        # as the coordinator starts: moments after it runs.
        part = part_of(second, job.global_id)
        assert part.coordinator == peers[0] and part.global_job_id == job.id
        assert part.global_id == job.global_id and part.node_index == 1
        assert part.id.startswith("job-")
        # `overlapctl list -o name` names it by its global id on both nodes.
        for client in (first, second):
            names = subprocess.run([overlapctl_binary(), "--addr", client.address, "list", "-o",
                                    "name"], check=True, capture_output=True, text=True,
                                   timeout=60).stdout.split()
            assert names.count(job.global_id) == 1 and part.id not in names, names
        assert first.cancel(job.global_id).id == job.id
    except BaseException:
        with contextlib.suppress(overlapd.OverlapdError):
            first.cancel(job.id)  # nothing left running for the tests after
        raise
    assert first.wait(job.global_id, timeout_s=120).state == overlapd.JobState.CANCELLED
    assert second.wait(job.global_id, timeout_s=120).final


def test_validate_runs_nothing_and_refuses_as_submit_would(daemon):
    client, _ = daemon
    before = len(list(client.jobs()))
    job = client.validate(SMALL)
    assert job["id"] == "" and job["name"] == "py-small"
    assert len(list(client.jobs())) == before, "validate queued a job"
    with pytest.raises(overlapd.OverlapdError) as refused:
        client.validate({"version": 2, "ops": [{"id": "a", "type": "gemm", "m": 8, "k": 8, "n": 8}]})
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "graph version 1" in str(refused.value)
