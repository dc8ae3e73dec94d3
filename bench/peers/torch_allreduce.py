#!/usr/bin/env python3
"""PyTorch's NCCL all-reduce at gradient sizes, the peer of `overlapctl commbench --peers`.

torch.distributed with the NCCL backend, one process per GPU, all_reduce (sum) of random bf16
tensors from --min-bytes to --max-bytes (each --factor times the last; the size is each rank's
buffer, as commbench's). Timed as overlapd times a collective:

  per iteration  the input copied in afresh (untimed: repeated in-place sums would grow),
                 torch.cuda.synchronize and dist.barrier on the host, then a head start on the
                 GPU (a sleep kernel as long as the host takes to queue the rest, x1.25 + 20 us,
                 measured in the warm-up: overlapd's launch gate, which keeps the host's launch
                 latency out of the time), a one-element all-reduce (overlapd's barrier on the
                 stream, which lines the ranks up), the start event, the all_reduce, the end
                 event;
  per size       the time of an iteration is the max over the ranks of their event pairs; the
                 figure is the median (min and max too) of the timed iterations after warm-up.

Printed per size as nccl-tests prints it: time, algbw = bytes / time, busbw = algbw x 2(N-1)/N
(GB/s, 1e9). One warm-up iteration's result is checked against the sum of every rank's input
(all regenerated from their seeds) on a sample of elements.

Run:  torchrun --standalone --nproc_per_node=2 bench/peers/torch_allreduce.py \
          --min-bytes 1MiB --max-bytes 256MiB --json $OUT/torch_allreduce.json
With NCCL's socket transport, as between nodes without InfiniBand: the same with
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo in the environment.
"""
import argparse
import json
import os
import re
import statistics
import time

import torch
import torch.distributed as dist

# SM cycles per microsecond at the H200's top SM clock: at a lower clock the sleep lasts
# longer, which only gives the host more time.
CYCLES_PER_US = 1980
SAMPLE = 4096  # elements checked against the sum of the inputs


def parse_bytes(text):
    m = re.fullmatch(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1MiB, 64KiB, 1048576)")
    scale = {"B": 1, None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]
    return int(m.group(1)) * scale


def human(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def sizes(lo, hi, factor):
    out, b = [], lo
    while b <= hi:
        out.append(b)
        b *= factor
    return out


def make_input(count, seed, device):
    """Uniform in [-1, 1), drawn in fp32 and rounded to bf16, as overlapd fills its inputs."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.rand(count, device=device, dtype=torch.float32, generator=gen)
    return (x * 2 - 1).to(torch.bfloat16)


def check(out, count, world, device):
    """Max relative error of `out` against the fp32 sum of every rank's input, on a sample."""
    idx = torch.arange(0, count, max(1, count // SAMPLE), device=device)[:SAMPLE]
    want = torch.zeros(idx.numel(), device=device, dtype=torch.float32)
    for r in range(world):
        want += make_input(count, 1234 + r, device)[idx].float()
    got = out[idx].float()
    err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    return err


def time_size(buf, src, ones, warmup, iters, device):
    times, enqueue_s = [], []
    head_us = 0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for i in range(warmup + iters):
        buf.copy_(src)
        torch.cuda.synchronize(device)
        dist.barrier()
        if i == warmup:
            steady = enqueue_s[1:] or enqueue_s  # the first warm-up pays one-time setup
            us = torch.tensor([1.25 * max(steady) * 1e6 + 20 if steady else 0.0], device=device)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)  # the same head start on every rank
            head_us = int(us.item())
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        if i >= warmup and head_us > 0:
            torch.cuda._sleep(head_us * CYCLES_PER_US)
        dist.all_reduce(ones, op=dist.ReduceOp.MAX)  # the barrier on the stream (stays 1)
        start.record()
        dist.all_reduce(buf)
        end.record()
        enqueue_s.append(time.perf_counter() - t0)
        torch.cuda.synchronize(device)
        if i >= warmup:
            t = torch.tensor([start.elapsed_time(end)], device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(t.item())
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "samples": len(times), "head_start_us": head_us}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--min-bytes", type=parse_bytes, default=parse_bytes("1MiB"))
    p.add_argument("--max-bytes", type=parse_bytes, default=parse_bytes("256MiB"))
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-verify", action="store_true")
    p.add_argument("--label", default="", help="recorded in the JSON (e.g. socket, nvlink)")
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.warmup < 1:
        p.error("--warmup must be at least 1 (the head start is measured there)")

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    factor = 2 * (world - 1) / world
    ones = torch.ones(1, device=device, dtype=torch.bfloat16)
    rows = []
    if rank == 0:
        env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                       if k.startswith("NCCL_") and k != "NCCL_NVLS_ENABLE")
        print(f"torch all_reduce: {world} ranks, bf16, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
              f", {args.warmup} warm-up + {args.iters} timed per size; env: {env or '-'}")
        print(f"{'size':>8} {'count':>11} {'time ms':>9} {'min ms':>9} {'max ms':>9}"
              f" {'algbw GB/s':>11} {'busbw GB/s':>11}  check", flush=True)
    for nbytes in sizes(args.min_bytes, args.max_bytes, args.factor):
        count = max(1, nbytes // 2)
        src = make_input(count, 1234 + rank, device)
        buf = torch.empty_like(src)
        err = None
        if not args.no_verify:
            buf.copy_(src)
            dist.all_reduce(buf)
            torch.cuda.synchronize(device)
            e = torch.tensor([check(buf, count, world, device)], device=device)
            dist.all_reduce(e, op=dist.ReduceOp.MAX)
            err = e.item()
        t = time_size(buf, src, ones, args.warmup, args.iters, device)
        algbw = count * 2 / (t["median_ms"] * 1e-3) / 1e9
        row = {"bytes": count * 2, "count": count, "algbw_gbps": algbw,
               "busbw_gbps": algbw * factor, "max_rel_error": err,
               "verified": err is not None and err <= 2 ** -7 * world, **t}
        rows.append(row)
        if rank == 0:
            status = "-" if err is None else f"{'ok' if row['verified'] else 'FAIL'} {err:.1e}"
            print(f"{human(row['bytes']):>8} {count:>11} {t['median_ms']:9.3f} {t['min_ms']:9.3f}"
                  f" {t['max_ms']:9.3f} {algbw:11.2f} {row['busbw_gbps']:11.2f}  {status}",
                  flush=True)
        del src, buf
    if rank == 0 and args.json:
        meta = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpu": torch.cuda.get_device_name(device), "world": world, "dtype": "bf16",
                "label": args.label, "iters": args.iters, "warmup": args.warmup,
                "busbw": "algbw x 2(N-1)/N",
                "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
