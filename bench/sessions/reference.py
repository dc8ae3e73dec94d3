"""Checks a tp 2 MLP session's outputs against PyTorch (bench/sessions/gpu_check.sh).

    python3 reference.py OUT_DIR

OUT_DIR holds what two `overlapd-session-rank --dump-inputs --out-dir OUT_DIR`
ranks wrote: fc1.X.rank{0,1}.npy, fc1.W.rank{r}.npy, fc2.W.rank{r}.npy and the
outputs fc1.rank{r}.npy, fc2.rank{r}.npy (float32 of the graph's bf16). The
reference is PyTorch's, in one process on the GPU: torch.cat over the ranks'
X is the all-gather, then matmul, SiLU(gate) x up, matmul, and the sum of
the ranks' partials split by rows is the reduce-scatter (NCCL cannot put two
ranks on one GPU). Values are rounded to bf16 where the daemon stores them.
Prints one JSON line; exits 1 when an output is off by more than bf16 allows."""
import json
import sys

import numpy as np
import torch


def load(out, name):
    return torch.from_numpy(np.load(f"{out}/{name}.npy")).cuda()


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def main(out):
    tp = 2
    x = torch.cat([load(out, f"fc1.X.rank{r}") for r in range(tp)], dim=0)
    report = {"ops": {}}
    partials = []
    ok = True
    for r in range(tp):
        y1 = bf16(x @ load(out, f"fc1.W.rank{r}"))
        half = y1.shape[1] // 2
        h = bf16(torch.nn.functional.silu(y1[:, :half]) * y1[:, half:])
        partials.append(h @ load(out, f"fc2.W.rank{r}"))
        report["ops"][f"fc1.rank{r}"] = compare(load(out, f"fc1.rank{r}"), y1)
    y2 = bf16(sum(partials))
    rows = y2.shape[0] // tp
    for r in range(tp):
        report["ops"][f"fc2.rank{r}"] = compare(load(out, f"fc2.rank{r}"), y2[r * rows:(r + 1) * rows])
    ok = all(v["ok"] for v in report["ops"].values())
    report["verified"] = ok
    print(json.dumps(report))
    return 0 if ok else 1


def compare(got, want):
    got64, want64 = got.double(), want.double()
    scale = want64.abs().max().item() or 1.0
    err = (got64 - want64).abs().max().item()
    return {"max_abs_err": err, "max_abs_ref": scale, "rel": err / scale,
            "ok": bool(err / scale < 2e-2)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
