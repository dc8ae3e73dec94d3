#!/usr/bin/env python3
"""The planner's answers to the sources' two what-if figures, with every
assumption written beside them. Needs no daemon and no GPU: it runs
`overlapctl graph` and `overlapctl plan --json` on a calibration
(bench/what_if_sources.sh fits the recorded two-H200 one).

1. A dense 70B model (llama3-70b), forward and backward, at SP = TP = 8 on
   8x H800; the source: 48.2 ms serial, 36.1 ms overlapped, 96.8% of the
   communication hidden, MFU 38.4% -> 51.2%.
2. TP scaling on 8x H100 of a 70B MLP block; the source: parameter server
   1.85x, blocking ring all-reduce 6.2x, 4-chunk overlap 7.65x, 0.15 ms
   exposed per layer."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PEAK_TFLOPS = 989.0  # H100 / H800 SXM dense bf16, the datasheet's


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd), done.returncode, done.stderr))
    return done.stdout


def plan(ctl, graph, calibration, *extra):
    return json.loads(run([ctl, "plan", graph, "--calibration", calibration, "--json", *extra]))


def gemm_flops(op):
    """Every rank's GEMMs together: 2 m n k of the op's global shape."""
    if op["type"] in ("all_gather", "reduce_scatter", "all_reduce"):
        return 0.0
    return 2.0 * op["m"] * op["n"] * op["k"]


def candidate(op, name):
    for c in op["candidates"]:
        if c["schedule"] == name:
            return c
    sys.exit("op %s has no prediction for %s (cannot say: %s)" % (
        op["op"], name, op.get("cannot_say")))


def model_70b(ctl, calibration, tmp, nvlink_gbps, tokens_seq, micro_batch, layers):
    graph = os.path.join(tmp, "llama3-70b-tp8.yaml")
    run([ctl, "graph", "--model", "llama3-70b", "--tp", "8", "--seq", str(tokens_seq),
         "--micro-batch", str(micro_batch), "--pass", "both", "-o", graph])
    p = plan(ctl, graph, calibration, "--what-if", "tp=8,nvlink-gbps=%g" % nvlink_gbps)
    serial = overlapped = gemm = comm = flops = 0.0
    for op in p["ops"]:
        flops += gemm_flops(op)
        best = op["candidates"][0]
        # Serial: every collective after (or before) its GEMM over NCCL.
        nccl = [c for c in op["candidates"] if c["schedule"] in ("serial/nccl", "serial")]
        serial += (nccl[0] if nccl else best)["step_ms"]
        overlapped += best["step_ms"]
        gemm += best["gemm_alone_ms"]
        comm += best["comm_alone_ms"] if op["type"] not in ("all_gather",) else 0.0
        if op["type"] == "all_gather":  # a collective alone hides nothing here
            comm += best["step_ms"]
    exposed = overlapped - gemm
    hidden = 1 - exposed / comm if comm > 0 else 1.0

    def mfu(ms):
        return flops / (8 * PEAK_TFLOPS * 1e12 * ms / 1e3)

    return {
        "tokens": tokens_seq * micro_batch, "layers": layers, "flops_per_layer": flops,
        "serial_ms": serial, "overlapped_ms": overlapped, "hidden": hidden,
        "mfu_serial": mfu(serial), "mfu_overlapped": mfu(overlapped),
        "assumptions": p["assumptions"],
    }


MLP = """name: mlp-tp-scaling
ops:
  - {{id: fc1, type: gemm, m: {t}, k: 8192, n: 57344}}
  - {{id: fc2, type: gemm, m: {t}, k: 28672, n: 8192, parallel: row, after: [fc1]}}
  - {{id: ar, type: all_reduce, m: {t}, n: 8192, after: [fc2]{algorithm}}}
  - {{id: fused, type: gemm_ar, m: {t}, k: 28672, n: 8192, after: [fc1]}}
"""


def tp_scaling(ctl, calibration, tmp, tokens, nvlink_gbps):
    out = {}
    for name, algorithm in (("ring", ""), ("ps", ", algorithm: ps")):
        path = os.path.join(tmp, "mlp-%s.yaml" % name)
        with open(path, "w") as f:
            f.write(MLP.format(t=tokens, algorithm=algorithm))
        one = plan(ctl, path, calibration, "--tp", "1")
        eight = plan(ctl, path, calibration, "--what-if", "tp=8,nvlink-gbps=%g" % nvlink_gbps)
        ops1 = {op["op"]: op for op in one["ops"]}
        ops8 = {op["op"]: op for op in eight["ops"]}
        t1 = ops1["fc1"]["candidates"][0]["step_ms"] + ops1["fc2"]["candidates"][0]["step_ms"]
        fc1 = ops8["fc1"]["candidates"][0]["step_ms"]
        if name == "ring":
            fc2 = ops8["fc2"]["candidates"][0]["step_ms"]
            out["ring"] = t1 / (fc1 + fc2 + candidate(ops8["ar"], "serial/nccl")["step_ms"])
            chunked = candidate(ops8["fused"], "chunked/4/nccl")
            out["chunked4"] = t1 / (fc1 + chunked["step_ms"])
            out["chunked4_exposed_ms"] = chunked["step_ms"] - chunked["gemm_alone_ms"]
            out["t1_ms"] = t1
            out["assumptions"] = eight["assumptions"]
        else:
            fc2 = ops8["fc2"]["candidates"][0]["step_ms"]
            out["ps"] = t1 / (fc1 + fc2 + candidate(ops8["ar"], "serial/p2p/ps")["step_ms"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", required=True)
    p.add_argument("--overlapctl", default="build/client/overlapctl")
    p.add_argument("--h800-nvlink-gbps", type=float, default=160.0)
    p.add_argument("--h100-nvlink-gbps", type=float, default=360.0)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--mlp-tokens", type=int, default=8192)
    p.add_argument("--json")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m = model_70b(a.overlapctl, a.calibration, tmp, a.h800_nvlink_gbps, a.seq, a.micro_batch, 80)
        s = tp_scaling(a.overlapctl, a.calibration, tmp, a.mlp_tokens, a.h100_nvlink_gbps)
    print("1. llama3-70b, one decoder layer forward + backward, SP = TP = 8, %d tokens "
          "(seq %d x micro-batch %d); the model is 80 such layers" % (m["tokens"], a.seq,
                                                                     a.micro_batch))
    print("   %-26s %12s %12s" % ("", "source", "planner"))
    print("   %-26s %12s %12.1f  (80 layers: %.0f ms)" % ("serial ms / layer", "48.2",
                                                           m["serial_ms"], 80 * m["serial_ms"]))
    print("   %-26s %12s %12.1f  (80 layers: %.0f ms)" % ("overlapped ms / layer", "36.1",
                                                           m["overlapped_ms"],
                                                           80 * m["overlapped_ms"]))
    print("   %-26s %12s %11.1f%%" % ("communication hidden", "96.8%", 100 * m["hidden"]))
    print("   %-26s %12s %5.1f%% -> %.1f%%" % ("MFU serial -> overlapped", "38.4% -> 51.2%",
                                             100 * m["mfu_serial"], 100 * m["mfu_overlapped"]))
    print("   assumptions: H800 = the calibrated H200's GEMMs (same GH100 compute); NVLink at "
          "%.0f GB/s bus bandwidth (H800: 400 GB/s NVLink, 200 each way, ~80%% of it); MFU over "
          "%.0f TFLOP/s per GPU; the attention core and norms left out (no communication)"
          % (a.h800_nvlink_gbps, PEAK_TFLOPS))
    for line in m["assumptions"]:
        print("   - " + line)
    print()
    print("2. TP scaling of a 70B MLP block (fc1 8192 -> 57344, SwiGLU, fc2 28672 -> 8192) at %d "
          "tokens, 8 GPUs against 1" % a.mlp_tokens)
    print("   %-26s %12s %12s" % ("", "source", "planner"))
    print("   %-26s %12s %11.2fx" % ("parameter server", "1.85x", s["ps"]))
    print("   %-26s %12s %11.2fx" % ("blocking ring all-reduce", "6.2x", s["ring"]))
    print("   %-26s %12s %11.2fx" % ("4-chunk overlap", "7.65x", s["chunked4"]))
    print("   %-26s %12s %10.3f ms" % ("exposed per layer (4-chunk)", "0.15 ms",
                                       s["chunked4_exposed_ms"]))
    print("   assumptions: H100 = the calibrated H200's GEMMs; NVLink at %.0f GB/s bus bandwidth "
          "(8x H100 over NVSwitch); the parameter server pulls every share through one GPU's "
          "link and pushes the sum back (8x the ring's time at 8 ranks); the 4-chunk overlap is "
          "gemm_ar chunked/4 over NCCL; 1 GPU runs both GEMMs whole (%.2f ms)"
          % (a.h100_nvlink_gbps, s["t1_ms"]))
    for line in s["assumptions"]:
        print("   - " + line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model_70b": m, "tp_scaling": s}, f, indent=1)


if __name__ == "__main__":
    main()
