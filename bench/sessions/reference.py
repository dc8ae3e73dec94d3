"""Checks an MLP session's outputs (tp 1 or 2) against PyTorch (bench/sessions/gpu_check.sh,
two_gpu.sh, graphs_check.sh).

    python3 reference.py OUT_DIR

OUT_DIR holds what two `overlapd-session-rank --dump-inputs --out-dir OUT_DIR`
ranks (or one, for tp 1) wrote: fc1.X.rank{0,1}.npy, fc1.W.rank{r}.npy, fc2.W.rank{r}.npy and the
outputs fc1.rank{r}.npy, fc2.rank{r}.npy (float32 of the graph's bf16). The
reference is PyTorch's, in one process on the GPU: torch.cat over the ranks'
X is the all-gather, then matmul, SiLU(gate) x up, matmul, and the sum of
the ranks' partials split by rows is the reduce-scatter (NCCL cannot put two
ranks on one GPU). Values are rounded to bf16 where the daemon stores them.
Prints one JSON line; exits 1 when an output is off by more than bf16 allows.

Without PyTorch (bench/sessions/two_gpu.sh's dry run on the host backend) the
same reference runs in plain Python in float64 from the .npy files; it is
meant for the dry run's small graph."""
import array
import ast
import glob
import json
import math
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    torch = None


def ranks(out):
    """The tp of the session whose ranks wrote OUT_DIR: one fc1.X file per rank."""
    return len(glob.glob(f"{out}/fc1.X.rank*.npy"))


def load(out, name):
    return torch.from_numpy(np.load(f"{out}/{name}.npy")).cuda()


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def main(out):
    if torch is None:
        return main_plain(out)
    tp = ranks(out)
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
    return verdict(err, scale)


def verdict(err, scale):
    return {"max_abs_err": err, "max_abs_ref": scale, "rel": err / scale,
            "ok": bool(err / scale < 2e-2)}


# The plain-Python reference: matrices are lists of rows of floats.

def load_plain(out, name):
    """A float32 2-D .npy file as written by overlapd-session-rank."""
    with open(f"{out}/{name}.npy", "rb") as f:
        data = f.read()
    header_len = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + header_len].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError(f"{name}.npy: expected little-endian float32 in C order")
    rows, cols = header["shape"]
    values = array.array("f")
    values.frombytes(data[10 + header_len:])
    if sys.byteorder != "little":
        values.byteswap()
    return [list(values[r * cols:(r + 1) * cols]) for r in range(rows)]


def round_bf16(v):
    """v rounded to the nearest bf16 (ties to even), as a float."""
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def matmul(a, b):
    columns = list(zip(*b))
    return [[math.fsum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def silu(v):
    return v / (1.0 + math.exp(-v))


def compare_plain(got, want):
    scale = max(abs(v) for row in want for v in row) or 1.0
    err = max(abs(g - w) for got_row, want_row in zip(got, want)
              for g, w in zip(got_row, want_row))
    return verdict(err, scale)


def main_plain(out):
    tp = ranks(out)
    x = [row for r in range(tp) for row in load_plain(out, f"fc1.X.rank{r}")]
    report = {"ops": {}, "reference": "python-float64"}
    partial_sum = None
    for r in range(tp):
        y1 = [[round_bf16(v) for v in row] for row in matmul(x, load_plain(out, f"fc1.W.rank{r}"))]
        half = len(y1[0]) // 2
        h = [[round_bf16(silu(row[c]) * row[half + c]) for c in range(half)] for row in y1]
        partial = matmul(h, load_plain(out, f"fc2.W.rank{r}"))
        partial_sum = partial if partial_sum is None else [
            [a + b for a, b in zip(ra, rb)] for ra, rb in zip(partial_sum, partial)]
        report["ops"][f"fc1.rank{r}"] = compare_plain(load_plain(out, f"fc1.rank{r}"), y1)
    y2 = [[round_bf16(v) for v in row] for row in partial_sum]
    rows = len(y2) // tp
    for r in range(tp):
        report["ops"][f"fc2.rank{r}"] = compare_plain(load_plain(out, f"fc2.rank{r}"),
                                                      y2[r * rows:(r + 1) * rows])
    ok = all(v["ok"] for v in report["ops"].values())
    report["verified"] = ok
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
