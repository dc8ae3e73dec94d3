#!/usr/bin/env python3
"""PyTorch's GEMMs at the op sweep's per-rank shapes, bf16 (torch.matmul) and fp8
(torch._scaled_mm, E4M3 inputs, bf16 out, per-tensor scales), timed as
overlapd times its GEMM alone: after --preheat-ms of the same GEMM back to back
(the sustained power state of a training loop), one CUDA-event pair per GEMM,
back to back, median (min and max too) of --iterations.

The fp8 weights are stored [n, k] and passed transposed, the layout Hopper's
fp8 tensor cores take, as overlapd stores them (engine.h). Inputs are uniform
in [-1, 1) drawn in fp32 and rounded; fp8 ones span E4M3's range (+-448) and
carry the rest in their scales, as overlapd fills its own (reference.h).

Run:  python3 bench/peers/torch_fp8_gemm.py --tp 1 --json $OUT/torch_fp8.json
"""
import argparse
import json
import statistics
import time

import torch

SWEEP = {
    "ag_gemm": [(4096, 8192, 8192), (8192, 8192, 28672), (16384, 8192, 28672),
                (8192, 4096, 4096), (16384, 8192, 7168)],
    "gemm_rs": [(4096, 8192, 8192), (8192, 28672, 8192), (16384, 28672, 8192),
                (8192, 4096, 4096), (16384, 7168, 8192)],
}


def local_shape(op, m, k, n, tp):
    """The GEMM one rank runs (all rows: the gathered A, or the whole partial)."""
    return (m, k, n // tp) if op == "ag_gemm" else (m, k // tp, n)


def uniform(shape, dtype, scale=1.0):
    return ((torch.rand(*shape, device="cuda") * 2 - 1) * scale).to(dtype)


def time_gemm(run, iterations, preheat_ms, sync_each=False):
    run()
    torch.cuda.synchronize()
    t0 = time.time()
    while (time.time() - t0) * 1e3 < preheat_ms:
        for _ in range(4):
            run()
        torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(iterations)]
    for start, end in pairs:
        start.record()
        run()
        end.record()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in pairs]
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--preheat-ms", type=float, default=300)
    parser.add_argument("--sync-each", action="store_true",
                        help="wait for each GEMM before queueing the next (as gemm_algos times)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    shapes = sorted({local_shape(op, *s, args.tp) for op, ss in SWEEP.items() for s in ss})
    scale_a = torch.full((), 1 / 448, device="cuda", dtype=torch.float32)
    rows = []
    for m, k, n in shapes:
        a16, w16 = uniform((m, k), torch.bfloat16), uniform((k, n), torch.bfloat16) * 0.01
        out16 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        bf16 = time_gemm(lambda: torch.matmul(a16, w16, out=out16), args.iterations,
                         args.preheat_ms, args.sync_each)
        del a16, w16, out16
        a8 = uniform((m, k), torch.float8_e4m3fn, 448)
        w8 = uniform((n, k), torch.float8_e4m3fn, 448)  # [n, k]: passed transposed
        scale_w = torch.full((), k ** -0.5 / 448, device="cuda", dtype=torch.float32)
        fp8 = time_gemm(lambda: torch._scaled_mm(a8, w8.t(), scale_a=scale_a, scale_b=scale_w,
                                                 out_dtype=torch.bfloat16),
                        args.iterations, args.preheat_ms, args.sync_each)
        del a8, w8
        flop = 2.0 * m * k * n
        rows.append({"m": m, "k": k, "n": n, "bf16": bf16, "fp8": fp8,
                     "bf16_tflops": flop / bf16["median_ms"] / 1e9,
                     "fp8_tflops": flop / fp8["median_ms"] / 1e9})
        torch.cuda.empty_cache()
    print(f"{'m x k x n':>22} | {'bf16 ms':>8} | {'TFLOP/s':>7} | {'fp8 ms':>7} | {'TFLOP/s':>7} | speedup")
    for r in rows:
        print(f"{r['m']:>6} x {r['k']:>5} x {r['n']:>5} | {r['bf16']['median_ms']:8.3f} | "
              f"{r['bf16_tflops']:7.0f} | {r['fp8']['median_ms']:7.3f} | {r['fp8_tflops']:7.0f} | "
              f"{r['bf16']['median_ms'] / r['fp8']['median_ms']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                       "tp": args.tp, "iterations": args.iterations,
                       "preheat_ms": args.preheat_ms, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
