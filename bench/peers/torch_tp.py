#!/usr/bin/env python3
"""PyTorch baselines for overlapd's op benchmark, timed the way overlapd times.

Two peers per shape, on the same GPUs, dtype and shapes as `overlapctl bench`:
  serial  NCCL collective + cuBLAS matmul (all_gather_into_tensor then matmul;
          matmul then reduce_scatter_tensor; matmul then all_reduce)
  async   PyTorch async TP over symmetric memory
          (torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter)

Every iteration starts with a barrier across the ranks; each rank times itself
with CUDA events; the iteration's time is the max over ranks; we report the
median (and min/max) of the timed iterations after warm-up. Inputs are random.
Like overlapd's launch gate, a head start before the start event lets the host
queue the whole iteration before the GPU reaches it, so the time is the GPUs'
and not Python's launch latency. Its length is at least the host's enqueue time
(measured in the warm-up, x1.25 + 20 us). By default the head start is the
shape's GEMM, run as many times as cover it (--head-start heat): a sleep kernel
(--head-start sleep) idles the GPU for as long as Python takes to enqueue
(0.4-0.7 ms per async-TP iteration), and an idle GPU runs its next GEMMs cooler
and faster (a 1 ms sleep made PyTorch's 8192x8192x14336 GEMM 7% faster than back
to back), while overlapd's gate idles only for its own, shorter enqueue.

Power state: an H200 runs a large GEMM ~15% faster for the first ~200 ms after
idling than once its power limit bites (docs/PERFORMANCE.md, "GEMM speed").
overlapd's sweep runs without pause, so its phases are timed in the sustained
state a training loop sees; timed in short bursts, PyTorch's were not. So each
phase here first runs the shape's GEMM back to back for --preheat-ms (default
300; 0 = off, the earlier bursts), recorded in the JSON.

Run:  torchrun --nproc_per_node=2 bench/peers/torch_tp.py --json $OUT/torch.json
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.distributed as dist

# Global (m, k, n) per op, as in overlapctl bench's default sweep.
SWEEP = {
    "ag_gemm": [(4096, 8192, 8192), (8192, 8192, 28672), (16384, 8192, 28672),
                (8192, 4096, 4096), (16384, 8192, 7168)],
    "gemm_rs": [(4096, 8192, 8192), (8192, 28672, 8192), (16384, 28672, 8192),
                (8192, 4096, 4096), (16384, 7168, 8192)],
}
SWEEP["gemm_ar"] = SWEEP["gemm_rs"]


def uniform(shape, scale, dtype, device, gen):
    """Uniform in [-scale, scale), drawn in fp32 and rounded to `dtype`, as overlapd fills its
    inputs. (torch.rand straight in bf16 draws multiples of 2^-8: low-entropy mantissas that
    toggle fewer bits, draw less power and let the GEMM run measurably faster.)"""
    x = torch.rand(*shape, device=device, dtype=torch.float32, generator=gen)
    return ((x * 2 - 1) * scale).to(dtype)


# SM cycles per microsecond at the H200's top SM clock: at a lower clock the
# head start lasts longer, which only gives the host more time.
CYCLES_PER_US = 1980
HEAD_START_US = -1  # -1: the measured enqueue time; 0: none; else fixed
PREHEAT_MS = 300
HEAD_START = "heat"  # heat: the shape's GEMM; sleep: torch.cuda._sleep


def head_start_us(enqueue_s, device):
    """The head start for the timed iterations, the same on every rank."""
    if HEAD_START_US >= 0:
        return HEAD_START_US
    steady = enqueue_s[1:] or enqueue_s  # the first warm-up pays one-time setup
    if not steady:
        return 0
    us = torch.tensor([1.25 * max(steady) * 1e6 + 20], device=device)
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    return int(us.item())


def preheat(gemm, device):
    """The shape's GEMM back to back for PREHEAT_MS, to the power state of a busy GPU."""
    if PREHEAT_MS <= 0:
        return
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < PREHEAT_MS / 1000:
        for _ in range(4):
            gemm()
        torch.cuda.synchronize(device)


def gemm_ms(gemm, device):
    """One run of the shape's GEMM, in ms (after one untimed run)."""
    gemm()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        gemm()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / 3


def timed(fn, warmup, iters, device, heat):
    preheat(heat, device)
    heat_ms = gemm_ms(heat, device) if HEAD_START == "heat" else 0
    times, enqueue_s = [], []
    head_us, heat_runs = 0, 0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for i in range(warmup + iters):
        torch.cuda.synchronize(device)
        dist.barrier()
        if i == warmup:
            head_us = head_start_us(enqueue_s, device)
            if HEAD_START == "heat" and head_us > 0:
                # The same count on every rank, so that they reach their start events together.
                runs = torch.tensor([max(1, math.ceil(head_us / 1000 / heat_ms))], device=device)
                dist.all_reduce(runs, op=dist.ReduceOp.MAX)
                heat_runs = int(runs.item())
        if i >= warmup and head_us > 0:
            if HEAD_START == "heat":
                for _ in range(heat_runs):
                    heat()
            else:
                torch.cuda._sleep(head_us * CYCLES_PER_US)
        start.record()
        t0 = time.perf_counter()
        fn()
        enqueue_s.append(time.perf_counter() - t0)
        end.record()
        torch.cuda.synchronize(device)
        if i >= warmup:
            t = torch.tensor([start.elapsed_time(end)], device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(t.item())
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "samples": len(times), "head_start_us": head_us, "head_start": HEAD_START,
            "head_start_gemms": heat_runs, "preheat_ms": PREHEAT_MS}


def main():
    global HEAD_START_US, PREHEAT_MS, HEAD_START
    p = argparse.ArgumentParser()
    p.add_argument("--json", default="")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--head-start-us", type=int, default=HEAD_START_US,
                   help="head start before each timed iteration's start event: -1 (default) "
                        "the host's measured enqueue time, 0 none, else this many microseconds")
    p.add_argument("--head-start", default=HEAD_START, choices=["heat", "sleep"],
                   help="what the GPU runs during the head start: the shape's GEMM (default) "
                        "or a sleep kernel")
    p.add_argument("--preheat-ms", type=int, default=PREHEAT_MS,
                   help="run the shape's GEMM back to back this long before each phase "
                        "(the sustained power state overlapd's sweep runs in); 0 = off")
    p.add_argument("--shapes", default="",
                   help="op:MxKxN,... instead of the default sweep (as overlapctl bench --shapes)")
    args = p.parse_args()
    HEAD_START_US = args.head_start_us
    PREHEAT_MS = args.preheat_ms
    HEAD_START = args.head_start
    sweep = SWEEP
    if args.shapes:
        sweep = {}
        for item in args.shapes.split(","):
            op, dims = item.split(":")
            sweep.setdefault(op, []).append(tuple(int(x) for x in dims.split("x")))

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    dist.init_process_group("nccl")
    rank, tp = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    group = dist.group.WORLD
    group_name = group.group_name

    symm_ok = True
    try:
        import torch.distributed._symmetric_memory as symm_mem
        symm_mem.enable_symm_mem_for_group(group_name)
    except Exception as e:  # noqa: BLE001 - report and carry on with the serial peer
        symm_ok = False
        if rank == 0:
            print(f"async TP unavailable: {e}")

    rows = []
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    for op, shapes in sweep.items():
        for (m, k, n) in shapes:
            row = {"op": op, "m": m, "k": k, "n": n, "tp": tp, "dtype": args.dtype}
            if op == "ag_gemm":
                a = uniform((m // tp, k), 1.0, dtype, device, gen)
                w = uniform((k, n // tp), k ** -0.5, dtype, device, gen)
                # The gathered A holds what the all-gather would bring (random rows) from
                # the start: the GEMM-alone phase and the preheat run before any gather,
                # and a GEMM over uninitialised (mostly zero) memory draws less power and
                # runs faster than over the random data the steps multiply.
                full = uniform((m, k), 1.0, dtype, device, gen)

                def serial():
                    dist.all_gather_into_tensor(full, a)
                    torch.matmul(full, w)

                def fused():
                    torch.ops.symm_mem.fused_all_gather_matmul(a, [w], gather_dim=0,
                                                               group_name=group_name)
                gemm = lambda: torch.matmul(full, w)  # noqa: E731
                comm = lambda: dist.all_gather_into_tensor(full, a)  # noqa: E731
            else:
                a = uniform((m, k // tp), 1.0, dtype, device, gen)
                w = uniform((k // tp, n), k ** -0.5, dtype, device, gen)
                part = torch.empty(m, n, device=device, dtype=dtype)
                out = torch.empty(m // tp, n, device=device, dtype=dtype)
                if op == "gemm_rs":
                    def serial():
                        torch.matmul(a, w, out=part)
                        dist.reduce_scatter_tensor(out, part)

                    def fused():
                        torch.ops.symm_mem.fused_matmul_reduce_scatter(
                            a, w, "sum", scatter_dim=0, group_name=group_name)
                    comm = lambda: dist.reduce_scatter_tensor(out, part)  # noqa: E731
                else:
                    def serial():
                        torch.matmul(a, w, out=part)
                        dist.all_reduce(part)
                    fused = None
                    comm = lambda: dist.all_reduce(part)  # noqa: E731
                gemm = lambda: torch.matmul(a, w, out=part)  # noqa: E731
            row["gemm_alone"] = timed(gemm, args.warmup, args.iters, device, gemm)
            row["comm_alone"] = timed(comm, args.warmup, args.iters, device, gemm)
            row["serial"] = timed(serial, args.warmup, args.iters, device, gemm)
            if fused is not None and symm_ok:
                try:
                    row["async_tp"] = timed(fused, args.warmup, args.iters, device, gemm)
                except Exception as e:  # noqa: BLE001
                    row["async_tp_error"] = str(e)[:200]
            rows.append(row)
            if rank == 0:
                best = row["serial"]["median_ms"]
                if "async_tp" in row:
                    best = min(best, row["async_tp"]["median_ms"])
                print(f"{op:8s} {m:6d}x{k:6d}x{n:6d}  gemm {row['gemm_alone']['median_ms']:7.3f}"
                      f"  comm {row['comm_alone']['median_ms']:7.3f}"
                      f"  serial {row['serial']['median_ms']:7.3f}"
                      f"  async {row.get('async_tp', {}).get('median_ms', float('nan')):7.3f}"
                      f"  best {best:7.3f} ms", flush=True)
    if rank == 0 and args.json:
        meta = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpu": torch.cuda.get_device_name(device), "tp": tp,
                "head_start_us": HEAD_START_US, "head_start": HEAD_START,
                "preheat_ms": PREHEAT_MS}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
