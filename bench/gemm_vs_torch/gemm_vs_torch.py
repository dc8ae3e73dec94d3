#!/usr/bin/env python3
"""overlapd's GEMM alone beside PyTorch's, timed the same way in one process.

overlapd's side is the daemon's own cuBLASLt path (server/cuda/gemm_lt.h: GemmLt with its
per-shape algorithm tuning and the daemon's default workspace) through the C ABI of
liboverlapd_gemm_shim.so (ovd_gemm.h); PyTorch's is torch.matmul (bf16) and
torch._scaled_mm with per-tensor scales (fp8 e4m3 in, bf16 out, as overlapd's fp8 GEMM
writes). Both run on one torch stream over the same input tensors (uniform random, never
zeros), and their outputs are compared before anything is timed.

Timing: per shape, a warm-up of both, then R rounds; each round times a block of N
back-to-back calls of each side between two CUDA events, the sides interleaved and their
order alternating per round (A B, B A, ...), so that clock and power drift hit both alike.
Per side: the median and p10..p90 of the rounds' per-call times, and what NVML read while
its blocks ran (SM and memory clocks, power, temperature, the share of samples throttled
for power) beside each figure; ratio = ours / torch (median over median, and the rounds'
paired ratios' p10..p90).

  python3 bench/gemm_vs_torch/gemm_vs_torch.py --json OUT.json [--lib PATH] [--graph G.yaml]
  python3 bench/gemm_vs_torch/gemm_vs_torch.py --self-test   # no GPU: the statistics code

Pass: geomean ratio <= 1.00 and no shape above 1.03 (issue 57).
"""
import argparse
import ctypes
import json
import math
import os
import re
import sys
import time

GEOMEAN_MAX = 1.00
SHAPE_MAX = 1.03

# The 15 shapes of overlapctl bench's default sweep (client/measure/bench.cc
# DefaultBenchShapes), op:MxKxN; at tp 1 each is one GEMM of that size.
SWEEP_SHAPES = [
    ("ag_gemm", 4096, 8192, 8192), ("ag_gemm", 8192, 8192, 28672),
    ("ag_gemm", 16384, 8192, 28672), ("ag_gemm", 8192, 4096, 4096),
    ("ag_gemm", 16384, 8192, 7168),
] + [(op, m, k, n) for op in ("gemm_rs", "gemm_ar") for (m, k, n) in (
    (4096, 8192, 8192), (8192, 28672, 8192), (16384, 28672, 8192), (8192, 4096, 4096),
    (16384, 7168, 8192))]

# The forward GEMMs of one decoder layer at tp 1, seq 8192, as
# `overlapctl graph --model llama3-8b|llama3-70b --tp 1 --pass forward` writes them (MxKxN).
LLAMA_SHAPES = [
    ("llama3-8b.qkv", 8192, 4096, 6144), ("llama3-8b.proj", 8192, 4096, 4096),
    ("llama3-8b.fc1", 8192, 4096, 28672), ("llama3-8b.fc2", 8192, 14336, 4096),
    ("llama3-70b.qkv", 8192, 8192, 10240), ("llama3-70b.proj", 8192, 8192, 8192),
    ("llama3-70b.fc1", 8192, 8192, 57344), ("llama3-70b.fc2", 8192, 28672, 8192),
]

GEMM_OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "gemm")

# ---------------------------------------------------------------- statistics (host only)


def percentile(values, q):
    """The q-th percentile (0..100) of values, linear between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values):
    return {"median": percentile(values, 50), "p10": percentile(values, 10),
            "p90": percentile(values, 90), "min": min(values), "max": max(values),
            "n": len(values)}


def geomean(values):
    if not values or any(v <= 0 for v in values):
        raise ValueError("geomean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def verdict(ratios, geomean_max=GEOMEAN_MAX, shape_max=SHAPE_MAX):
    """ratios: {label: ours/torch}. The pass criteria and what missed them."""
    g = geomean(list(ratios.values()))
    worst = max(ratios, key=ratios.get)
    over = sorted(k for k, v in ratios.items() if v > shape_max)
    return {"geomean": g, "max": ratios[worst], "max_shape": worst, "over": over,
            "geomean_ok": g <= geomean_max, "max_ok": not over,
            "pass": g <= geomean_max and not over}


def merge_shapes(named):
    """[(label, m, k, n)] -> [(labels, m, k, n)], each GEMM once, in first-seen order."""
    out, index = [], {}
    for label, m, k, n in named:
        key = (m, k, n)
        if key in index:
            labels = out[index[key]][0]
            if label not in labels:
                labels.append(label)
        else:
            index[key] = len(out)
            out.append(([label], m, k, n))
    return [(compact_labels(labels), m, k, n) for labels, m, k, n in out]


def compact_labels(labels):
    """Labels joined, one head word each:
    ["sweep ag_gemm", "sweep gemm_rs", "llama3-8b.proj"] -> "sweep ag_gemm,gemm_rs llama3-8b.proj"."""
    groups = {}
    for label in labels:
        head, _, tail = label.partition(" ")
        groups.setdefault(head, []).append(tail)
    return " ".join(head + (" " + ",".join(t for t in tails if t) if any(tails) else "")
                    for head, tails in groups.items())


def sweep_named():
    return [("sweep %s" % op, m, k, n) for op, m, k, n in SWEEP_SHAPES]


_OP_LINE = re.compile(r"\{\s*id:\s*([\w.-]+),\s*type:\s*(\w+),\s*m:\s*(\d+),\s*k:\s*(\d+),"
                      r"\s*n:\s*(\d+)")


def graph_shapes(text, prefix):
    """The GEMM ops of an `overlapctl graph` YAML (its flow-style op lines)."""
    out = []
    for match in _OP_LINE.finditer(text):
        op_id, op_type, m, k, n = match.groups()
        if op_type in GEMM_OPS:
            out.append(("%s.%s" % (prefix, op_id), int(m), int(k), int(n)))
    return out


def interleaved(sides, rounds, time_block):
    """Times each side once per round, the order alternating: round r runs sides in
    order when r is even, reversed when odd. time_block(side) -> a dict with "ms"
    (per call) and whatever else it read. Returns {side: [dict per round]}."""
    out = {side: [] for side in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            out[side].append(time_block(side))
    return out


def side_figures(blocks):
    """Per-call time statistics and the NVML readings taken while the blocks ran."""
    fig = summarize([b["ms"] for b in blocks])
    for key in ("sm_mhz", "mem_mhz", "power_w", "temp_c"):
        vals = [b[key] for b in blocks if b.get(key) is not None]
        fig[key] = percentile(vals, 50) if vals else None
    capped = [b["power_capped"] for b in blocks if b.get("power_capped") is not None]
    fig["power_capped_share"] = sum(capped) / len(capped) if capped else None
    joules = [b["joules"] for b in blocks if b.get("joules") is not None]
    if joules and len(joules) == len(blocks):
        calls = sum(b["calls"] for b in blocks)
        wall = sum(b["wall_s"] for b in blocks)
        fig["joules_per_call"] = sum(joules) / calls
        fig["energy_watts"] = sum(joules) / wall if wall > 0 else None
    else:
        fig["joules_per_call"] = fig["energy_watts"] = None
    return fig


def row_figures(label, dtype, m, k, n, blocks, check):
    ours, torch_ = side_figures(blocks["ours"]), side_figures(blocks["torch"])
    paired = [o["ms"] / t["ms"] for o, t in zip(blocks["ours"], blocks["torch"])]
    flop = 2.0 * m * n * k
    return {"shape": label, "dtype": dtype, "m": m, "k": k, "n": n, "ours": ours,
            "torch": torch_, "ratio": ours["median"] / torch_["median"],
            "paired_ratio": summarize(paired),
            "ours_tflops": flop / ours["median"] / 1e9,
            "torch_tflops": flop / torch_["median"] / 1e9, "check": check}


def _num(v, fmt):
    return "-" if v is None else fmt % v


def format_table(rows):
    head = ("%-34s %-4s %8s %17s %8s %17s %6s %13s %7s %11s %11s %9s %7s" % (
        "SHAPE(MxKxN)", "DT", "OURS_MS", "OURS_P10..P90", "TORCH_MS", "TORCH_P10..P90",
        "RATIO", "PAIRED_P10-90", "TFLOPS", "SM_MHZ_O/T", "MEM_MHZ_O/T", "W_O/T", "C_O/T"))
    lines = [head, "-" * len(head)]
    for r in rows:
        o, t = r["ours"], r["torch"]
        name = "%dx%dx%d %s" % (r["m"], r["k"], r["n"], r["shape"])
        lines.append("%-34s %-4s %8.4f %17s %8.4f %17s %6.3f %13s %7.0f %11s %11s %9s %7s" % (
            name[:34], r["dtype"], o["median"], "%.4f..%.4f" % (o["p10"], o["p90"]),
            t["median"], "%.4f..%.4f" % (t["p10"], t["p90"]), r["ratio"],
            "%.3f-%.3f" % (r["paired_ratio"]["p10"], r["paired_ratio"]["p90"]),
            r["ours_tflops"],
            "%s/%s" % (_num(o["sm_mhz"], "%.0f"), _num(t["sm_mhz"], "%.0f")),
            "%s/%s" % (_num(o["mem_mhz"], "%.0f"), _num(t["mem_mhz"], "%.0f")),
            "%s/%s" % (_num(o["power_w"], "%.0f"), _num(t["power_w"], "%.0f")),
            "%s/%s" % (_num(o["temp_c"], "%.0f"), _num(t["temp_c"], "%.0f"))))
    return "\n".join(lines)


def format_summary(rows):
    lines = []
    groups = [("all", rows)] + [(d, [r for r in rows if r["dtype"] == d])
                                for d in ("bf16", "fp8")]
    result = None
    for name, group in groups:
        if not group:
            continue
        v = verdict({"%s %s" % (r["dtype"], r["shape"]): r["ratio"] for r in group})
        if name == "all":
            result = v
        lines.append("%-4s %2d shapes: geomean ours/torch %.3f (target <= %.2f: %s), max %.3f "
                     "at %s (target <= %.2f: %s)" % (
                         name, len(group), v["geomean"], GEOMEAN_MAX,
                         "met" if v["geomean_ok"] else "MISSED", v["max"], v["max_shape"],
                         SHAPE_MAX, "met" if v["max_ok"] else "MISSED"))
    if result is not None:
        lines.append("PASS" if result["pass"] else
                     "FAIL: %s" % ", ".join(result["over"] or ["geomean above target"]))
    return "\n".join(lines), result


# ---------------------------------------------------------------- self-test (host only)


def self_test():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert abs(percentile(list(range(1, 11)), 10) - 1.9) < 1e-12
    assert abs(percentile(list(range(1, 11)), 90) - 9.1) < 1e-12
    assert percentile([7.0], 90) == 7.0
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.5, 1.0, 4.0, 4)
    assert abs(geomean([0.5, 2.0]) - 1.0) < 1e-12
    assert abs(geomean([1.0, 1.0, 8.0]) - 2.0) < 1e-12
    for bad in ([], [1.0, 0.0], [-1.0]):
        try:
            geomean(bad)
            raise AssertionError("geomean(%r) did not raise" % bad)
        except ValueError:
            pass
    v = verdict({"a": 0.95, "b": 0.99, "c": 1.02})
    assert v["pass"] and v["max_shape"] == "c" and v["over"] == []
    v = verdict({"a": 0.90, "b": 1.05})
    assert v["geomean_ok"] and not v["max_ok"] and not v["pass"] and v["over"] == ["b"]
    v = verdict({"a": 1.02, "b": 1.01})
    assert not v["geomean_ok"] and v["max_ok"] and not v["pass"]

    merged = merge_shapes(sweep_named() + LLAMA_SHAPES)
    assert len(SWEEP_SHAPES) == 15
    dims = [(m, k, n) for _, m, k, n in merged]
    assert len(dims) == len(set(dims)) == 14, dims  # 8 sweep GEMMs, 6 llama GEMMs not in it
    assert merged[0] == ("sweep ag_gemm,gemm_rs,gemm_ar", 4096, 8192, 8192), merged[0]
    assert ("sweep ag_gemm,gemm_rs,gemm_ar llama3-8b.proj", 8192, 4096, 4096) in merged, merged
    assert ("llama3-70b.fc1", 8192, 8192, 57344) in merged, merged

    yaml = ("ops:\n  - {id: qkv, type: ag_gemm, m: 8192, k: 4096, n: 6144}\n"
            "  - {id: fc1_x_gather, type: all_gather, m: 8192, n: 4096, after: [x]}\n"
            "  - {id: fc2_wgrad, type: gemm, m: 4096, k: 8192, n: 14336, after: [y]}\n")
    assert graph_shapes(yaml, "l8") == [("l8.qkv", 8192, 4096, 6144),
                                        ("l8.fc2_wgrad", 4096, 8192, 14336)]

    # The interleaving: A B, then B A, and a made-up clock whose drift (each block
    # 1% slower than the last) hits both sides alike.
    calls = []
    clock = {"t": 1.0}

    def fake_block(side):
        calls.append(side)
        clock["t"] *= 1.01
        base = 0.9 if side == "ours" else 1.0
        return {"ms": base * clock["t"], "sm_mhz": 1980, "mem_mhz": 3201,
                "power_w": 690.0, "temp_c": 60, "power_capped": side == "ours",
                "joules": 0.7 * 10 * base, "calls": 10, "wall_s": 0.01 * base}

    blocks = interleaved(["ours", "torch"], 4, fake_block)
    assert calls == ["ours", "torch", "torch", "ours"] * 2, calls
    row = row_figures("made-up", "bf16", 1024, 2048, 4096, blocks, {"ok": True})
    assert abs(row["ratio"] - 0.9) < 0.02, row["ratio"]
    assert row["ours"]["power_capped_share"] == 1.0 and row["torch"]["power_capped_share"] == 0
    assert abs(row["ours"]["joules_per_call"] - 0.7 * 0.9) < 1e-9
    assert abs(row["torch"]["energy_watts"] - 700.0) < 1e-6
    assert abs(row["ours_tflops"] - 2.0 * 1024 * 2048 * 4096 / row["ours"]["median"] / 1e9) < 1e-9
    rows = [row, dict(row, dtype="fp8", ratio=1.04, shape="slow")]
    table = format_table(rows)
    assert table.splitlines()[0].startswith("SHAPE(MxKxN)") and len(table.splitlines()) == 4
    assert "1024x2048x4096 made-up" in table and "1980/1980" in table, table
    summary, result = format_summary(rows)
    assert not result["pass"] and result["over"] == ["fp8 slow"], result
    assert "MISSED" in summary and summary.splitlines()[-1] == "FAIL: fp8 slow", summary
    assert format_summary([row])[1]["pass"]
    print("gemm_vs_torch self-test: ok")
    return 0


# ---------------------------------------------------------------- NVML (ctypes)


class Nvml:
    """Clocks, power, temperature and energy of one GPU through libnvidia-ml.so.1."""
    SW_POWER_CAP = 0x4
    HW_POWER_BRAKE = 0x80

    def __init__(self, pci_bus_id):
        self.lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            if pci_bus_id is None or lib.nvmlDeviceGetHandleByPciBusId_v2(
                    pci_bus_id.encode(), ctypes.byref(handle)) != 0:
                if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                    return
            self.lib, self.handle = lib, handle
            self.reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        except OSError:
            self.lib = None

    def _uint(self, fn, *args):
        v = ctypes.c_uint()
        return v.value if fn(self.handle, *args, ctypes.byref(v)) == 0 else None

    def energy_j(self):
        if self.lib is None:
            return None
        v = ctypes.c_ulonglong()
        ok = self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(v)) == 0
        return v.value / 1e3 if ok else None

    def sample(self):
        if self.lib is None:
            return {}
        out = {"sm_mhz": self._uint(self.lib.nvmlDeviceGetClockInfo, 1),
               "mem_mhz": self._uint(self.lib.nvmlDeviceGetClockInfo, 2),
               "temp_c": self._uint(self.lib.nvmlDeviceGetTemperature, 0)}
        mw = self._uint(self.lib.nvmlDeviceGetPowerUsage)
        out["power_w"] = None if mw is None else mw / 1e3
        if self.reasons is not None:
            r = ctypes.c_ulonglong()
            if self.reasons(self.handle, ctypes.byref(r)) == 0:
                out["power_capped"] = bool(r.value & (self.SW_POWER_CAP | self.HW_POWER_BRAKE))
        return out

    def power_limit_w(self):
        if self.lib is None:
            return None
        mw = self._uint(self.lib.nvmlDeviceGetEnforcedPowerLimit)
        return None if mw is None else mw / 1e3


# ---------------------------------------------------------------- the GPU run


def find_shim(explicit):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for path in ([explicit] if explicit else []) + [
            os.path.join(root, ".device/lib/liboverlapd_gemm_shim.so"),
            os.path.join(root, ".device/bin/liboverlapd_gemm_shim.so"),
            os.path.join(root, "build/bench/gemm_vs_torch/liboverlapd_gemm_shim.so")]:
        if path and os.path.exists(path):
            return path
    raise SystemExit("gemm_vs_torch: liboverlapd_gemm_shim.so not found (build target "
                     "overlapd_gemm_shim, or pass --lib)")


class Shim:
    def __init__(self, path, device, challenger_margin=None):
        lib = ctypes.CDLL(path)
        lib.ovd_gemm_create.restype = ctypes.c_void_p
        lib.ovd_gemm_create.argtypes = [ctypes.c_int, ctypes.c_int64]
        lib.ovd_gemm_create_with_margin.restype = ctypes.c_void_p
        lib.ovd_gemm_create_with_margin.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_double]
        lib.ovd_gemm_run.restype = ctypes.c_int
        lib.ovd_gemm_run.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 3 + [ctypes.c_int] + \
            [ctypes.c_void_p] * 6
        lib.ovd_gemm_destroy.argtypes = [ctypes.c_void_p]
        lib.ovd_gemm_last_error.restype = ctypes.c_char_p
        for name in ("ovd_gemm_workspace_bytes", "ovd_gemm_cached_shapes"):
            getattr(lib, name).restype = ctypes.c_int64
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        lib.ovd_gemm_cublaslt_version.restype = ctypes.c_int64
        self.lib, self.path = lib, path
        if challenger_margin is None:  # the daemon's rule
            self.handle = lib.ovd_gemm_create(device, -1)
        else:
            self.handle = lib.ovd_gemm_create_with_margin(device, -1, challenger_margin)
        if not self.handle:
            raise SystemExit("ovd_gemm_create: %s" % lib.ovd_gemm_last_error().decode())
        self._run = lib.ovd_gemm_run

    def run(self, m, n, k, dtype, a, b, c, a_scale, b_scale, stream):
        rc = self._run(self.handle, m, n, k, dtype, a, b, c, a_scale, b_scale, stream)
        if rc != 0:
            raise RuntimeError("ovd_gemm_run: %s" % self.lib.ovd_gemm_last_error().decode())


def mapped_libraries(pattern):
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if pattern in line})
    except OSError:
        return []


def run_gpu(args):
    import torch

    device = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(device)
    bus = None
    if hasattr(props, "pci_bus_id"):
        bus = "%08x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    nvml = Nvml(bus)
    torch.cuda.init()
    shim = Shim(find_shim(args.lib), 0, args.challenger_margin)
    stream = torch.cuda.Stream(device)
    stream_ptr = ctypes.c_void_p(stream.cuda_stream)

    named = []
    if "sweep" in args.sets:
        named += sweep_named()
    if "llama" in args.sets:
        if args.graph:
            for path in args.graph:
                prefix = os.path.basename(path).split(".")[0]
                with open(path) as f:
                    named += graph_shapes(f.read(), prefix)
        else:
            named += LLAMA_SHAPES
    if args.shapes:
        for item in args.shapes.split(","):
            m, k, n = (int(x) for x in item.split("x"))
            named.append(("given", m, k, n))
    shapes = merge_shapes(named)
    dtypes = args.dtypes.split(",")

    meta = {"gpu": props.name, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "ours_cublaslt_version": shim.lib.ovd_gemm_cublaslt_version(),
            "ours_workspace_bytes": shim.lib.ovd_gemm_workspace_bytes(shim.handle),
            "libcublasLt_mapped": mapped_libraries("libcublasLt"),
            "torch_preferred_blas": str(getattr(torch.backends.cuda, "preferred_blas_library",
                                                lambda: "?")()),
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
            "power_limit_w": nvml.power_limit_w(), "rounds": args.rounds,
            "block_ms": args.block_ms, "shim": shim.path,
            "ours_challenger_margin": ("daemon default" if args.challenger_margin is None
                                       else args.challenger_margin),
            "method": "per shape: warm-up, then rounds of one timed block of N back-to-back "
                      "calls per side between CUDA events, sides interleaved, order alternating; "
                      "NVML sampled while each block runs"}
    print("gemm_vs_torch: %s, torch %s (CUDA %s, blas %s), ours cuBLASLt %d with %d MiB "
          "workspace; cuBLASLt libraries mapped: %s" % (
              meta["gpu"], meta["torch"], meta["torch_cuda"], meta["torch_preferred_blas"],
              meta["ours_cublaslt_version"], meta["ours_workspace_bytes"] >> 20,
              ", ".join(meta["libcublasLt_mapped"]) or "none"), flush=True)

    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)

    def uniform(rows, cols, scale):
        # Drawn in fp32 and rounded, as overlapd fills its inputs: low-entropy mantissas
        # (torch.rand straight in bf16) draw less power and would flatter both sides.
        return (torch.rand(rows, cols, device=device, generator=gen) * 2 - 1) * scale

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    t_begin = time.time()
    # Shape by shape, each dtype in turn: a budget cut leaves out the last shapes of both.
    for i, (label, m, k, n) in enumerate(shapes):
        if args.budget_s and time.time() - t_begin > args.budget_s:
            print("gemm_vs_torch: time budget of %.0f s spent: the last %d shapes skipped" % (
                args.budget_s, len(shapes) - i), flush=True)
            break
        for dtype in dtypes:
            with torch.cuda.stream(stream):
                row = one_shape(torch, shim, nvml, stream, stream_ptr, start, end, uniform,
                                label, dtype, m, k, n, args)
            if row is not None:
                rows.append(row)
                print(format_table([row]).splitlines()[-1], flush=True)
            torch.cuda.empty_cache()

    if not rows:
        print("gemm_vs_torch: no shape measured")
        return 1
    print()
    print(format_table(rows))
    summary, result = format_summary(rows)
    print(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "verdict": result}, f, indent=1)
    return 0 if result["pass"] and all(r["check"]["ok"] for r in rows) else 1


def one_shape(torch, shim, nvml, stream, stream_ptr, start, end, uniform, label, dtype, m, k,
              n, args):
    fp8 = dtype == "fp8"
    a32 = uniform(m, k, 1.0)
    # fp8: B is stored [n, k] (overlapd's TN layout; torch._scaled_mm reads it as .t()).
    b32 = uniform(n, k, 1.0) if fp8 else uniform(k, n, 0.01)
    c_ours = torch.empty(m, n, device=a32.device, dtype=torch.bfloat16)
    c_torch = torch.empty_like(c_ours)
    if fp8:
        e4m3 = torch.float8_e4m3fn
        a, b = a32.to(e4m3), b32.to(e4m3)
        sa = torch.tensor(0.5, device=a.device, dtype=torch.float32)
        sb = torch.tensor(0.0625, device=a.device, dtype=torch.float32)
        bt = b.t()
        try:
            torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.bfloat16, out=c_torch)
            torch_call = lambda: torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.bfloat16,
                                                  out=c_torch)
        except (TypeError, RuntimeError):
            # No out= overload: each call allocates from the caching allocator.
            torch_call = lambda: c_torch.copy_(torch._scaled_mm(a, bt, sa, sb,
                                                                out_dtype=torch.bfloat16))
        args_ours = (m, n, k, 1, a.data_ptr(), b.data_ptr(), c_ours.data_ptr(), sa.data_ptr(),
                     sb.data_ptr(), stream_ptr)
    else:
        a, b = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        torch_call = lambda: torch.matmul(a, b, out=c_torch)
        args_ours = (m, n, k, 0, a.data_ptr(), b.data_ptr(), c_ours.data_ptr(), None, None,
                     stream_ptr)
    del a32, b32

    def ours_call():
        shim.run(*args_ours)

    calls = {"ours": ours_call, "torch": torch_call}
    # Once each (ours tunes its algorithm here, on an idle device, as the daemon does),
    # then the outputs against each other.
    ours_call()
    torch_call()
    torch.cuda.synchronize()
    diff = (c_ours.float() - c_torch.float())
    ref_max = c_torch.float().abs().max().item()
    rel = diff.abs().max().item() / max(ref_max, 1e-30)
    fro = (diff.norm() / max(c_torch.float().norm().item(), 1e-30)).item()
    check = {"max_rel_error": rel, "frobenius_rel_error": fro, "tolerance": args.tolerance,
             "ok": rel <= args.tolerance and math.isfinite(rel) and ref_max > 0}
    del diff
    if not check["ok"]:
        print("gemm_vs_torch: %s %dx%dx%d %s: outputs differ (max rel %.3g, tolerance %.3g): "
              "not timed" % (dtype, m, k, n, label, rel, args.tolerance), flush=True)
        return None

    def block(side, count):
        fn = calls[side]
        e0 = nvml.energy_j()
        w0 = time.perf_counter()
        start.record(stream)
        for _ in range(count):
            fn()
        end.record(stream)
        reading = nvml.sample()  # while the block runs: the host enqueues far ahead
        end.synchronize()
        wall = time.perf_counter() - w0
        e1 = nvml.energy_j()
        reading.update({"ms": start.elapsed_time(end) / count, "calls": count, "wall_s": wall,
                        "joules": None if e0 is None or e1 is None else e1 - e0})
        return reading

    # Per-call estimate, then warm-up of both sides, alternating, for about warm_ms.
    est = max(min(block("ours", 3)["ms"], block("torch", 3)["ms"]), 1e-3)
    count = max(args.min_calls, min(args.max_calls, int(math.ceil(args.block_ms / est))))
    warm_until = time.perf_counter() + args.warm_ms / 1e3
    while time.perf_counter() < warm_until:
        block("ours", count)
        block("torch", count)
    blocks = interleaved(["ours", "torch"], args.rounds, lambda side: block(side, count))
    row = row_figures(label, dtype, m, k, n, blocks, check)
    row["calls_per_block"] = count
    return row


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--self-test", action="store_true",
                   help="check the statistics, verdict and table code on made-up timings (no GPU)")
    p.add_argument("--json", help="write the rows, the meta data and the verdict here")
    p.add_argument("--lib", help="liboverlapd_gemm_shim.so (default: .device/lib, then build/)")
    p.add_argument("--sets", default="sweep,llama", help="shape sets: sweep, llama (default both)")
    p.add_argument("--graph", action="append",
                   help="take the llama set's GEMMs from this `overlapctl graph` YAML "
                        "(repeatable; default: the built-in llama3-8b/70b forward shapes)")
    p.add_argument("--shapes", help="more GEMMs, MxKxN,...")
    p.add_argument("--dtypes", default="bf16,fp8")
    p.add_argument("--challenger-margin", type=float,
                   help="ours: keep a cuBLASLt candidate over the heuristic's first pick only "
                        "when faster by more than this share (default: the daemon's; 0: the "
                        "fastest as timed; 1e9: always the first pick)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--block-ms", type=float, default=20.0, help="GPU time per timed block")
    p.add_argument("--min-calls", type=int, default=5)
    p.add_argument("--max-calls", type=int, default=200)
    p.add_argument("--warm-ms", type=float, default=250.0, help="warm-up per shape, both sides")
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="max |ours - torch| / max |torch| before timing")
    p.add_argument("--budget-s", type=float, default=0, help="stop starting shapes after this")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    return run_gpu(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
