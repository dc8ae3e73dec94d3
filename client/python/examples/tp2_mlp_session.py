"""Two processes as the tp = 2 ranks of an MLP block, run through overlapd's
session socket on their own tensors (docs/SESSIONS.md), checked against float64.

    python tp2_mlp_session.py --socket /run/overlapd/overlapd-session.sock
    python tp2_mlp_session.py --socket ... --torch      # torch tensors (CPU or CUDA)

The block is Llama's MLP at toy size: fc1 an ag_gemm (all-gather the
sequence rows, then the gate-and-up GEMM, each rank its columns), SwiGLU (the
daemon applies it between the ops: fc2 reads `input: fc1, activation:
swiglu`), fc2 a gemm_rs (the down GEMM, then reduce-scatter the sequence
rows). This script starts itself twice (--rank 0 and 1); each rank draws its
inputs from its own seed, runs the block --steps times, and writes what it
read and wrote to --out-dir. The parent then checks every rank's fc1 and fc2
outputs against the same block computed in float64 in one process from both
ranks' inputs: the reference that PyTorch's all_gather_into_tensor +
matmul + reduce_scatter_tensor would give, computed without a process group
(two ranks on one GPU cannot share NCCL; the host backend has no GPU).

Without --torch it needs only this package (memfd buffers; the daemon's
host backend, fp32). With --torch it uses overlapd.torch: on a CUDA daemon
each rank's tensors are exportable cuMem allocations on the GPU the daemon
names, and `run` orders the step on the rank's CUDA stream.
Exit status 0 when every output is within tolerance, 1 otherwise."""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence, Tuple

import overlapd
from overlapd import session as ses

Matrix = List[List[float]]


def mlp_graph(m: int, hidden: int, ffn: int, dtype: str = "fp32") -> Dict[str, object]:
    """fc1 [m, hidden] x [hidden, 2 ffn] (gate and up), SwiGLU, fc2 [m, ffn] x [ffn, hidden]."""
    return {"name": "tp2-mlp-session", "dtype": dtype, "devices": [0, 1], "ops": [
        {"id": "fc1", "type": "ag_gemm", "m": m, "k": hidden, "n": 2 * ffn},
        {"id": "fc2", "type": "gemm_rs", "m": m, "k": ffn, "n": hidden,
         "input": "fc1", "activation": "swiglu"}]}


def seeded(rows: int, cols: int, seed: int, scale: float) -> List[float]:
    """rows x cols values uniform in [-scale, scale), exact in fp32."""
    draw = random.Random(seed)
    return [struct.unpack("<f", struct.pack("<f", (draw.random() * 2 - 1) * scale))[0]
            for _ in range(rows * cols)]


def matrix(flat: Sequence[float], rows: int, cols: int) -> Matrix:
    return [list(flat[r * cols:(r + 1) * cols]) for r in range(rows)]


def matmul(a: Matrix, b: Matrix) -> Matrix:
    columns = list(zip(*b))
    return [[math.fsum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def silu(x: float) -> float:
    return x / (1.0 + math.exp(-x))


def reference(xs: List[Matrix], w1s: List[Matrix], w2s: List[Matrix]) -> Tuple[List[Matrix],
                                                                                List[Matrix]]:
    """Every rank's fc1 and fc2 outputs in float64 from every rank's inputs:
    all_gather_into_tensor of X, X @ W1 (a rank's columns), SwiGLU on the
    rank's gate and up halves, @ W2 (its rows), summed over the ranks and
    reduce-scattered by rows."""
    gathered = [row for x in xs for row in x]
    y1s = [matmul(gathered, w1) for w1 in w1s]
    partial_sum: Matrix = []
    for y1, w2 in zip(y1s, w2s):
        half = len(y1[0]) // 2
        activated = [[silu(row[j]) * row[j + half] for j in range(half)] for row in y1]
        partial = matmul(activated, w2)
        partial_sum = partial if not partial_sum else [
            [a + b for a, b in zip(p, q)] for p, q in zip(partial_sum, partial)]
    block = len(partial_sum) // len(xs)
    y2s = [partial_sum[r * block:(r + 1) * block] for r in range(len(xs))]
    return y1s, y2s


def max_rel_error(got: Matrix, want: Matrix) -> float:
    scale = max(abs(v) for row in want for v in row) or 1.0
    return max(abs(g - w) for gr, wr in zip(got, want) for g, w in zip(gr, wr)) / scale


def inputs_for(rank: int, seed: int, need: ses.TensorNeed) -> List[float]:
    """A rank's X of fc1 and W of both ops, from its own seed; W scaled by
    1/sqrt(k) so that the outputs stay O(1)."""
    salt = {("fc1", ses.TensorKind.X): 1, ("fc1", ses.TensorKind.W): 2,
            ("fc2", ses.TensorKind.W): 3}[need.key]
    scale = 1.0 if need.tensor is ses.TensorKind.X else 1.0 / math.sqrt(need.rows)
    return seeded(need.rows, need.cols, seed * 1000 + rank * 10 + salt, scale)


FILLED = [("fc1", ses.TensorKind.X), ("fc1", ses.TensorKind.W), ("fc2", ses.TensorKind.W)]
SAVED = FILLED + [("fc1", ses.TensorKind.Y), ("fc2", ses.TensorKind.Y)]


def run_rank(args: argparse.Namespace) -> None:
    """One rank: open, register, fill, start, run the block, save the tensors."""
    graph = mlp_graph(args.m, args.hidden, args.ffn)
    if args.torch:
        run_rank_torch(args, graph)
        return
    with ses.Session.open(args.socket, args.name, graph, rank=args.rank, timeout=60) as s:
        fill = {need.key: inputs_for(args.rank, args.seed, need) for need in s.needs
                if need.key in FILLED}
        buffers = ses.register_host_buffers(s, fill)
        s.start()
        for _ in range(args.steps):
            s.wait(s.post("fc1"), timeout=60)
            times = s.wait(s.post("fc2"), timeout=60)
        print("rank %d: %s, %d steps, last fc2 enqueued %.1f us after the call"
              % (args.rank, s.session_id, args.steps, times.enqueue_us), file=sys.stderr)
        saved = {}
        for need in s.needs:
            if need.key in SAVED:
                saved["%s.%s" % need.key] = {
                    "rows": need.rows, "cols": need.cols,
                    "values": list(buffers[need.key].read_floats(need.rows * need.cols))}
        for buffer in buffers.values():
            buffer.close()
    with open(os.path.join(args.out_dir, "rank%d.json" % args.rank), "w") as f:
        json.dump(saved, f)


def run_rank_torch(args: argparse.Namespace, graph: Dict[str, object]) -> None:
    import torch
    import overlapd.torch as otorch

    with otorch.open_session(graph, args.name, args.rank, socket=args.socket) as s:
        for key in FILLED:
            need = next(n for n in s.session.needs if n.key == key)
            values = torch.tensor(inputs_for(args.rank, args.seed, need), dtype=torch.float64)
            s.tensor(*key).copy_(values.view(need.rows, need.cols))
        s.start()
        stream = torch.cuda.current_stream() if s.on_cuda else None
        for _ in range(args.steps):
            s.run("fc1", stream=stream)
            s.run("fc2", stream=stream)
        s.synchronize(timeout=60)
        if s.on_cuda:
            torch.cuda.synchronize()
        saved = {}
        for key in SAVED:
            t = s.tensor(*key).to("cpu", torch.float64)
            saved["%s.%s" % key] = {"rows": t.shape[0], "cols": t.shape[1],
                                    "values": t.flatten().tolist()}
    with open(os.path.join(args.out_dir, "rank%d.json" % args.rank), "w") as f:
        json.dump(saved, f)


def check(out_dir: str, tolerance: float) -> bool:
    ranks = []
    for r in range(2):
        with open(os.path.join(out_dir, "rank%d.json" % r)) as f:
            ranks.append(json.load(f))

    def get(rank: Dict[str, Dict[str, object]], name: str) -> Matrix:
        t = rank[name]
        return matrix(t["values"], int(t["rows"]), int(t["cols"]))  # type: ignore[arg-type]

    y1s, y2s = reference([get(r, "fc1.x") for r in ranks], [get(r, "fc1.w") for r in ranks],
                         [get(r, "fc2.w") for r in ranks])
    ok = True
    for r, rank in enumerate(ranks):
        for name, want in (("fc1.y", y1s[r]), ("fc2.y", y2s[r])):
            error = max_rel_error(get(rank, name), want)
            print("rank %d %s: max relative error %.2e (tolerance %.0e)"
                  % (r, name, error, tolerance))
            ok = ok and error <= tolerance
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", default=None,
                        help="the daemon's session socket (default: beside its API socket)")
    parser.add_argument("--name", default="tp2-mlp")
    parser.add_argument("--m", type=int, default=16, help="tokens (rows)")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--ffn", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--torch", action="store_true", help="use overlapd.torch (PyTorch)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="fp32: 1e-4")
    parser.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.socket = args.socket or overlapd.default_session_socket()
    if args.rank >= 0:
        run_rank(args)
        return 0
    out_dir = tempfile.mkdtemp(prefix="tp2-mlp-")
    ranks = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r),
                               "--out-dir", out_dir]) for r in range(2)]
    codes = [p.wait(timeout=600) for p in ranks]
    if any(codes):
        print("a rank failed: exit statuses %s" % codes, file=sys.stderr)
        return 1
    return 0 if check(out_dir, args.tolerance) else 1


if __name__ == "__main__":
    sys.exit(main())
