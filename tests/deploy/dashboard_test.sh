#!/usr/bin/env bash
# deploy/grafana/overlapd-dashboard.json is an importable dashboard: it parses,
# has the datasource/instance/Hostname/gpu variables, and every overlapd_*
# metric it names (and every one the alert rules and their tests name) is one
# the daemon exports, as listed in server/rpc/metrics.cc and session_metrics.cc.
# With promtool on PATH its queries also parse as PromQL, and the DCGM joins
# are evaluated on made-up series: they keep overlapd's GPUs (by UUID) and
# drop the others.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${OVERLAP_SOURCE_DIR:-$here/../..}
dashboard=$src/deploy/grafana/overlapd-dashboard.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What the daemon exports: each family's name is a string literal there.
grep -oh '"overlapd_[a-z_]*"' "$src/server/rpc/metrics.cc" "$src/server/rpc/session_metrics.cc" |
  tr -d '"' | sort -u > "$work/exported"
[ "$(wc -l < "$work/exported")" -ge 20 ] || { echo "FAIL: too few names in metrics.cc" >&2; exit 1; }

python3 - "$dashboard" "$work" "$src/deploy/prometheus/overlapd-alerts.yml" \
  "$src/deploy/prometheus/overlapd-alerts.test.yml" <<'PY'
import json, re, sys
dashboard_path, work, *rule_files = sys.argv[1:]
errors = []
text = open(dashboard_path).read()
d = json.loads(text)

if not 36 <= d.get("schemaVersion", 0) <= 41:
    errors.append(f"schemaVersion {d.get('schemaVersion')}: expected ~39")
if not d.get("uid") or not d.get("title"):
    errors.append("no uid or title")
variables = {v["name"]: v for v in d["templating"]["list"]}
ds = variables.get("datasource", {})
if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    errors.append("no datasource variable of type prometheus")
for name in ("instance", "Hostname", "gpu"):
    if name not in variables:
        errors.append(f"no {name} variable")
    elif variables[name].get("datasource", {}).get("uid") != "${datasource}":
        errors.append(f"variable {name} does not query ${{datasource}}")

ids, exprs = set(), []
for p in d["panels"]:
    if p["id"] in ids:
        errors.append(f"panel id {p['id']} used twice")
    ids.add(p["id"])
    g = p["gridPos"]
    if g["x"] < 0 or g["x"] + g["w"] > 24:
        errors.append(f"panel {p['title']!r} lies outside the 24 columns")
    if p["type"] == "row":
        continue
    if not p.get("targets"):
        errors.append(f"panel {p['title']!r} has no query")
    for t in p.get("targets", []):
        if t.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel {p['title']!r} does not use ${{datasource}}")
        exprs.append(t["expr"])
for want in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"):
    if not any(want in e and "on (UUID)" in e for e in exprs):
        errors.append(f"no query joins {want} to overlapd's series by UUID")

exported = set(open(f"{work}/exported").read().split())
for path, body in [(dashboard_path, text)] + [(f, open(f).read()) for f in rule_files]:
    named = set(re.findall(r"\boverlapd_[a-z_]+", body))
    if len(named) < 5:
        errors.append(f"{path}: names only {sorted(named)}")
    for name in sorted(named - exported):
        errors.append(f"{path}: {name} is not exported by server/rpc/metrics.cc")

# The queries as recording rules, for promtool to parse (JSON is YAML).
def concrete(e):
    for var, value in (("$__rate_interval", "5m"), ("$instance", ".*"),
                       ("$Hostname", ".*"), ("$gpu", ".*")):
        e = e.replace(var, value)
    if "$" in e:
        errors.append(f"unknown variable in {e}")
    return e
rules = [{"record": f"dashboard:query_{i}", "expr": concrete(e)} for i, e in enumerate(exprs)]
json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(f"{work}/queries.yml", "w"))
json.dump([concrete(e) for e in exprs if "DCGM_" in e], open(f"{work}/dcgm.json", "w"))

if errors:
    print("FAIL:\n  " + "\n  ".join(errors), file=sys.stderr)
    sys.exit(1)
print(f"dashboard: {len(d['panels'])} panels, {len(exprs)} queries, "
      f"{len(set(re.findall(r'overlapd_[a-z_]+', text)))} overlapd metrics, all exported")
PY

if ! command -v promtool >/dev/null 2>&1; then
  echo "PASS (promtool not found: the queries' PromQL and the DCGM joins were not checked)"
  exit 0
fi
promtool check rules "$work/queries.yml"

# The DCGM joins on two of overlapd's GPUs (UUIDs A, B) and a GPU it does not
# serve (C): each keeps A and B with DCGM's figure and drops C.
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
exprs = json.load(open(f"{work}/dcgm.json"))
gpu = lambda i, u: {"gpu": str(i), "UUID": u, "modelName": "NVIDIA H100 80GB HBM3",
                    "Hostname": "gpu-node-1", "pci_bus_id": f"00000000:{19 + i}:00.0"}
def series(name, labels):
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
def fmt(labels):
    return series("", labels)
ovl = lambda i, u: dict(gpu(i, u), cuda_device=str(i), instance="gpu-node-1:9464", job="overlapd")
dcgm = lambda i, u, host="gpu-node-1": dict(gpu(i, u), Hostname=host, device=f"nvidia{i}",
                                            instance=f"{host}:9400", job="dcgm")
inputs = [
    (series("overlapd_device_memory_bytes", ovl(0, "GPU-A")), "1e10"),
    (series("overlapd_device_memory_bytes", ovl(1, "GPU-B")), "1e10"),
    (series("overlapd_device_running_job", dict(ovl(0, "GPU-A"), job_id="job-000007")), "1"),
    (series("DCGM_FI_DEV_GPU_UTIL", dcgm(0, "GPU-A")), "80"),
    (series("DCGM_FI_DEV_GPU_UTIL", dcgm(1, "GPU-B")), "40"),
    (series("DCGM_FI_DEV_GPU_UTIL", dcgm(0, "GPU-C", "gpu-node-9")), "99"),
    (series("DCGM_FI_DEV_POWER_USAGE", dcgm(0, "GPU-A")), "650"),
    (series("DCGM_FI_DEV_POWER_USAGE", dcgm(1, "GPU-B")), "300"),
    (series("DCGM_FI_DEV_POWER_USAGE", dcgm(0, "GPU-C", "gpu-node-9")), "700"),
]
tests, kinds = [], set()
for e in exprs:
    if e.startswith("DCGM_FI_DEV_GPU_UTIL"):
        kinds.add("util")
        want = [(dcgm(0, "GPU-A"), 0.8), (dcgm(1, "GPU-B"), 0.4)]
    elif e.startswith("DCGM_FI_DEV_POWER_USAGE"):
        kinds.add("power")
        want = [(dcgm(0, "GPU-A"), 650), (dcgm(1, "GPU-B"), 300)]
    elif e.startswith("overlapd_device_running_job"):
        kinds.add("job")
        want = [(dict(ovl(0, "GPU-A"), job_id="job-000007"), 0.8)]
    else:
        print(f"FAIL: a DCGM query of unknown shape: {e}", file=sys.stderr); sys.exit(1)
    tests.append({"expr": e, "eval_time": "1m",
                  "exp_samples": [{"labels": fmt(l), "value": v} for l, v in want]})
if kinds != {"util", "power", "job"}:
    print(f"FAIL: DCGM joins found: {sorted(kinds)}", file=sys.stderr); sys.exit(1)
json.dump({"rule_files": [], "evaluation_interval": "1m",
           "tests": [{"interval": "1m",
                      "input_series": [{"series": s, "values": f"{v}x5"} for s, v in inputs],
                      "promql_expr_test": tests}]},
          open(f"{work}/dcgm.test.yml", "w"), indent=1)
PY
promtool test rules "$work/dcgm.test.yml"
echo "PASS"
