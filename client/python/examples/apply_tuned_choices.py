#!/usr/bin/env python3
"""From a training script: the schedules autotune chose on this node for a
model layer's ops at the job's tp, fetched before training starts and applied
to TransformerEngine's comm+GEMM overlap (its userbuffers config).

The layer graph is what `overlapctl graph --model M --tp N --output-file layer.yaml`
writes; after `overlapctl bench --graph layer.yaml` (or any job running it)
the daemon keeps each op's winner. Run as
    python3 tuned_choices.py layer.yaml --tp 8
It prints each op's choice and the step it measured (an op with none kept
says so: benchmark the layer first), then hands the matching ub_cfgs to
transformer_engine.pytorch.initialize_ub where TransformerEngine is
installed and torch.distributed is up, and prints them otherwise."""
import argparse
import json
import sys

import yaml  # PyYAML: only this example reads YAML

import overlapd
from overlapd import frameworks


def layer_ops(path):
    with open(path) as f:
        graph = yaml.safe_load(f)
    return [op for op in graph["ops"] if op["type"] in ("ag_gemm", "gemm_rs", "gemm_ar")]


def tuned_choices(client, ops, tp, dtype="bf16"):
    """{op id: the kept choice (overlapd.TunedSchedule)} for the ops at `tp`, current ones only."""
    choices = {}
    for op in ops:
        kept = client.tuning(op_type=op["type"], m=op["m"], k=op["k"], n=op["n"])
        usable = [t for t in kept if t.tp == tp and t.dtype == dtype and t.current]
        if usable:
            choices[op["id"]] = usable[0]
    return choices


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph")
    p.add_argument("--tp", type=int, required=True)
    p.add_argument("--addr")
    p.add_argument("--tokens", type=int, default=8192, help="sequence x micro-batch")
    p.add_argument("--hidden", type=int, default=8192)
    args = p.parse_args()
    client = overlapd.Client(args.addr)
    ops = layer_ops(args.graph)
    try:
        choices = tuned_choices(client, ops, args.tp)
    except overlapd.OverlapdError as e:
        sys.exit("overlapd: %s" % e)
    for op in ops:
        c = choices.get(op["id"])
        if c is None:
            print("%-10s no choice kept at tp %d: run overlapctl bench --graph %s" % (
                op["id"], args.tp, args.graph))
        else:
            print("%-10s %-16s %.3f ms when tuned" % (op["id"], c.schedule, c.step_ms))
    picked = [{"op": op["id"], "type": op["type"], "schedule": choices[op["id"]].schedule}
              for op in ops if op["id"] in choices]
    ub_cfgs = frameworks.te_ub_cfgs(picked)
    try:
        import torch
        import transformer_engine.pytorch as te
    except ImportError:
        print("TransformerEngine is not installed here; its ub_cfgs would be:")
        print(json.dumps(ub_cfgs, indent=1))
        return
    if not torch.distributed.is_initialized():
        print("torch.distributed is not initialized (run under torchrun); ub_cfgs:")
        print(json.dumps(ub_cfgs, indent=1))
        return
    tokens, hidden = args.tokens, args.hidden
    te.initialize_ub([tokens, hidden], args.tp, dtype=torch.bfloat16, ub_cfgs=ub_cfgs)
    print("initialize_ub: %d layer(s) configured from overlapd's choices" % len(ub_cfgs))


if __name__ == "__main__":
    main()
