#!/usr/bin/env python3
"""A seeded random walk through a real overlapd's lifecycle, on any backend.

Submits small random graphs (one at a time, and in bursts from several clients,
some killed mid-burst), bad graphs, cancels, SIGKILLs and SIGTERM drains, each
followed by a restart on the same state directory. Then it waits for every job
to end and checks what tests/integration/random_lifecycle_test.cc checks on the
host backend in CI:
  - no job a client got an id for is lost (nor one the daemon took but was
    killed before it could answer);
  - a finished job never changes (state, error, result) across restarts;
  - a job fails only for a restart, is cancelled only when asked or drained,
    and when it succeeds every op is verified;
  - bad graphs get INVALID_ARGUMENT; unknown ids NOT_FOUND; SIGTERM exits 0;
  - jobs that share a device start in priority-then-submission order.

On a GPU node (docs/DEVELOPMENT.md):
  python3 bench/probes/lifecycle_walk.py --devices 2 \
      --backend-flags "--backend cuda --ranks-per-gpu 2 --preheat-ms 20 --pool-bytes-per-device 4GiB"
Exit status 0 when nothing was wrong, 1 otherwise (each problem is printed).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "ABORTED"}
TYPES = ["ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "gemm"]


class Walk:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = os.path.join(args.work, f"lifecycle-walk-{args.seed}")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.address = f"unix:{self.work}/s.sock"
        self.daemon = None
        self.jobs = {}  # id -> what the walk knows of it
        self.problems = []
        self.last_id = 0

    def problem(self, message):
        print("PROBLEM:", message, flush=True)
        self.problems.append(message)

    def ctl(self, *args, stdin=None, timeout=60):
        p = subprocess.run([self.args.overlapctl, "--addr", self.address, "--json", *args],
                           input=stdin, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def start(self):
        log = open(os.path.join(self.work, "daemon.log"), "a")
        drain = self.rng.choice(["0", "0.2", "2"])
        self.daemon = subprocess.Popen(
            [self.args.overlapd, *self.args.backend_flags.split(), "--listen", self.address,
             "--state-dir", os.path.join(self.work, "state"), "--log-level", "warn",
             "--drain-timeout", drain], stdout=log, stderr=log)
        deadline = time.time() + 90
        while time.time() < deadline and self.daemon.poll() is None:
            if self.ctl("node")[0] == 0:
                return
            time.sleep(0.05)
        raise SystemExit(f"overlapd did not come up; see {self.work}/daemon.log")

    def unfinished(self):
        return [rec for rec in self.jobs.values() if rec["final"] is None]

    def kill(self):
        for rec in self.unfinished():
            rec["restarted"] = True
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()

    def drain(self):
        for rec in self.unfinished():
            rec["drained"] = True
        self.daemon.send_signal(signal.SIGTERM)
        try:
            if self.daemon.wait(timeout=30) != 0:
                self.problem(f"SIGTERM: exit {self.daemon.returncode}")
        except subprocess.TimeoutExpired:
            self.problem("SIGTERM did not stop overlapd within 30 s")
            self.daemon.kill()
            self.daemon.wait()

    def graph(self, valid=True):
        rng, ndev = self.rng, self.args.devices
        tp = rng.choice([t for t in (1, 2, 4) if t <= ndev])
        ops = []
        for i in range(rng.randint(1, 3)):
            kind = rng.choice(TYPES)
            op = {"id": f"o{i}", "type": kind, "m": 64 * tp * rng.randint(1, 3),
                  "n": 64 * tp * rng.randint(1, 3)}
            if "gemm" in kind:
                op["k"] = 64 * tp * rng.randint(1, 3)
            if kind in ("ag_gemm", "gemm_rs", "gemm_ar"):
                op["mode"] = rng.choice(["serial", "bulk", "chunked", "ring", "auto"])
                if op["mode"] == "chunked":
                    op["chunks"] = rng.choice([2, 4])
            if kind == "all_reduce" and rng.random() < 0.5:  # a copy-engine layout: any backend
                op.update(algorithm=rng.choice(["ring", "tree", "ps"]), transport="p2p")
            if i and rng.random() < 0.5:
                op["after"] = [f"o{i - 1}"]
            ops.append(op)
        graph = {"name": "walk", "devices": sorted(rng.sample(range(ndev), tp)),
                 "dtype": rng.choice(["fp32", "bf16", "fp16"]), "iterations": rng.randint(1, 30),
                 "warmup": 1, "priority": rng.randint(-2, 2), "ops": ops}
        if not valid:
            broken = rng.choice(["chunks", "type", "devices", "duplicate id"])
            if broken == "chunks":
                ops[0].update(mode="chunked", chunks=100000)
            elif broken == "type":
                ops[0]["type"] = "conv"
            elif broken == "devices":
                graph["devices"] = [0, ndev + 3]
            else:
                ops.append(dict(ops[0]))
        return graph

    def track(self, job, restarted=False):
        jid = job["id"]
        if jid in self.jobs:
            self.problem(f"id {jid} given out twice")
        spec = json.loads(job["spec"])
        self.jobs[jid] = {"ops": len(spec["ops"]), "final": None, "cancelled": False,
                          "restarted": restarted, "drained": False}

    def observe(self):
        rc, out, err = self.ctl("list", "--limit", "1000000")
        if rc != 0:
            self.problem(f"list: exit {rc}: {err.strip()}")
            return
        listed = set()
        for job in json.loads(out).get("jobs", []):
            jid = job["id"]
            listed.add(jid)
            if jid not in self.jobs:  # taken, but the daemon was killed before it answered
                self.track(job, restarted=True)
            rec = self.jobs[jid]
            final = rec["final"]
            if final is not None:
                for key in ("state", "error", "result"):
                    if job.get(key) != final.get(key):
                        self.problem(f"{jid}: {key} changed after it ended ({final['state']})")
            elif job["state"] in TERMINAL:
                rec["final"] = job
        for jid in self.jobs.keys() - listed:
            self.problem(f"{jid} was lost")

    def submit_one(self):
        valid = self.rng.random() > 0.1
        rc, out, err = self.ctl("submit", "-", stdin=json.dumps(self.graph(valid)))
        if not valid:
            if rc != 3 or "INVALID_ARGUMENT" not in err:
                self.problem(f"a bad graph got exit {rc}: {err.strip()}")
        elif rc == 0:
            job = json.loads(out)
            if int(job["id"].split("-")[1]) <= self.last_id:
                self.problem(f"id {job['id']} is not above the last one given")
            self.last_id = int(job["id"].split("-")[1])
            self.track(job)
        elif not (rc == 3 and "RESOURCE_EXHAUSTED" in err):
            self.problem(f"submit: exit {rc}: {err.strip()}")

    def submit_burst(self):
        graphs = [self.graph() for _ in range(self.rng.randint(2, 8))]
        kill = self.rng.random() < 0.5
        results = [None] * len(graphs)

        def submit(i):
            try:
                results[i] = self.ctl("submit", "-", stdin=json.dumps(graphs[i]), timeout=30)
            except subprocess.TimeoutExpired:
                results[i] = (-1, "", "timed out")

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(graphs))]
        for thread in threads:
            thread.start()
        if kill:
            time.sleep(self.rng.random() * 0.05)
            self.kill()
        for thread in threads:
            thread.join()
        for rc, out, err in results:
            if rc == 0:
                self.track(json.loads(out), restarted=kill)
            elif not kill and not (rc == 3 and "RESOURCE_EXHAUSTED" in err):
                self.problem(f"burst submit: exit {rc}: {err.strip()}")
        if kill:
            self.start()

    def cancel_one(self):
        jid = self.rng.choice(sorted(self.jobs))
        rc, out, err = self.ctl("cancel", jid)
        if rc == 0:
            self.jobs[jid]["cancelled"] = True
            if self.jobs[jid]["final"] is not None:
                self.problem(f"a cancel of finished {jid} was taken")
        elif not (rc == 3 and "FAILED_PRECONDITION" in err):
            self.problem(f"cancel {jid}: exit {rc}: {err.strip()}")

    def step(self):
        r = self.rng.random()
        if r < 0.45:
            self.submit_one()
        elif r < 0.6 and self.jobs:
            self.cancel_one()
        elif r < 0.62:
            rc, _, err = self.ctl("cancel", "job-999999")
            if rc != 3 or "NOT_FOUND" not in err:
                self.problem(f"cancel of an unknown id: exit {rc}: {err.strip()}")
        elif r < 0.75:
            time.sleep(self.rng.random() * 0.3)
        elif r < 0.8:
            self.observe()
            self.kill()
            self.start()
        elif r < 0.85:
            self.observe()
            self.drain()
            self.start()
        elif r < 0.9:
            self.submit_burst()
        else:
            self.observe()
        if self.daemon.poll() is not None:
            self.problem(f"overlapd exited on its own: {self.daemon.returncode}")
            self.start()

    def check_ends(self):
        for jid, rec in sorted(self.jobs.items()):
            final = rec["final"]
            if final is None:
                self.problem(f"{jid} never ended")
                continue
            state, error = final["state"], final.get("error", "")
            if state == "SUCCEEDED":
                ops = final["result"]["ops"]
                if len(ops) != rec["ops"]:
                    self.problem(f"{jid} succeeded with {len(ops)} of {rec['ops']} ops")
                for op in ops:
                    if not op.get("verified", False):
                        self.problem(f"{jid}: op {op['id']} not verified")
            elif state == "FAILED":
                if not (rec["restarted"] and "daemon restarted" in error):
                    self.problem(f"{jid} failed: {error}")
            elif state == "CANCELLED":
                if not (rec["cancelled"] or rec["drained"]):
                    self.problem(f"{jid} cancelled unasked: {error}")
            else:
                self.problem(f"{jid} ended {state}: {error}")

    def check_start_order(self):
        started = [rec["final"] for rec in self.jobs.values()
                   if rec["final"] is not None and int(rec["final"]["start_time_ms"]) > 0]
        contended = 0
        for a in started:
            for b in started:
                if a is b or not set(a["devices"]) & set(b["devices"]):
                    continue
                # a waited (millisecond clock: strictly) while b started.
                if not (int(a["submit_time_ms"]) < int(b["start_time_ms"]) <
                        int(a["start_time_ms"])):
                    continue
                contended += 1
                if (-a["priority"], int(a["sequence"])) < (-b["priority"], int(b["sequence"])):
                    self.problem(f"{b['id']} (priority {b['priority']}) started while "
                                 f"{a['id']} (priority {a['priority']}) waited")
        return contended

    def run(self):
        self.start()
        for _ in range(self.args.steps):
            self.step()
        deadline = time.time() + self.args.final_wait_s
        while time.time() < deadline:
            self.observe()
            if not self.unfinished():
                break
            time.sleep(0.5)
        self.check_ends()
        contended = self.check_start_order()
        self.drain()
        ends = {}
        for rec in self.jobs.values():
            state = rec["final"]["state"] if rec["final"] else "unfinished"
            ends[state] = ends.get(state, 0) + 1
        print(f"seed {self.args.seed}: {len(self.jobs)} jobs "
              + ", ".join(f"{n} {s}" for s, n in sorted(ends.items()))
              + f"; {contended} pairs sharing a device where one waited as the other started;"
              f" {len(self.problems)} problems", flush=True)
        return 1 if self.problems else 0


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200, help="random actions before the wait")
    parser.add_argument("--devices", type=int, default=4, help="devices (ranks) the daemon has")
    parser.add_argument("--backend-flags", default=None,
                        help="overlapd flags choosing the backend (default: the host backend)")
    parser.add_argument("--overlapd", default=os.path.join(here, "build/server/overlapd"))
    parser.add_argument("--overlapctl", default=os.path.join(here, "build/client/overlapctl"))
    parser.add_argument("--work", default="/tmp", help="where the state and log go")
    parser.add_argument("--final-wait-s", type=float, default=300,
                        help="how long every job gets to end after the walk")
    args = parser.parse_args()
    if args.backend_flags is None:
        args.backend_flags = f"--backend host --host-devices {args.devices}"
    raise SystemExit(Walk(args).run())


if __name__ == "__main__":
    main()
