#!/usr/bin/env python3
"""The planner's answers to the sources' two what-if figures, with every
assumption written beside them. Needs no daemon and no GPU: it runs
`overlapctl graph` and `overlapctl plan --json` on a calibration
(bench/what_if_sources.sh fits the recorded two-H200 one).

1. A dense 70B model (llama3-70b), forward and backward, at SP = TP = 8 on
   8x H800; the source: 48.2 ms serial, 36.1 ms overlapped as the whole
   model's step, 96.8% of the communication hidden, MFU 38.4% -> 51.2%. It
   gives no token count: the tokens are derived from its MFU and step, for
   the whole model (as it states) and for one layer (the other reading), and
   the planner is set beside each in the same unit.
2. TP scaling on 8x H100 of a 70B MLP block; the source: parameter server
   1.85x, blocking ring all-reduce 6.2x, 4-chunk overlap 7.65x, 0.15 ms
   exposed per layer; no token count, so the planner's figures are given at
   several."""
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


# The source's dense 70B figures: the step of the whole model, forward and
# backward, on 8 GPUs at SP = TP = 8, serial and overlapped, with the MFU it
# gives for each and the share of the communication it hid.
SOURCE_70B = {"gpus": 8, "serial_ms": 48.2, "overlapped_ms": 36.1, "mfu_serial": 0.384,
              "mfu_overlapped": 0.512, "hidden": 0.968}
LAYERS_70B = 80
# llama3-70b's parameters: per decoder layer qkv 8192 x 10240, proj 8192 x 8192
# and the gated MLP 3 x 8192 x 28672; the embeddings and the LM head
# 128256 x 8192 each.
LAYER_PARAMS_70B = 8192 * 10240 + 8192 * 8192 + 3 * 8192 * 28672
MODEL_PARAMS_70B = LAYERS_70B * LAYER_PARAMS_70B + 2 * 128256 * 8192
# Training state per parameter under mixed precision with Adam: bf16 weights
# and gradients, fp32 master weights and two moments.
STATE_BYTES_PER_PARAM = 2 + 2 + 4 + 4 + 4
GPU_MEMORY_GB = 80  # H800 / H100 SXM


def source_tokens(step_ms, mfu, params, gpus):
    """Tokens one step must hold for the source's MFU at its step time:
    MFU = 6 x params x tokens / (gpus x peak x step), solved for tokens."""
    return mfu * gpus * PEAK_TFLOPS * 1e12 * (step_ms / 1e3) / (6.0 * params)


def multiple_of(value, tp):
    """The nearest count of tokens that splits over tp (sequence parallelism)."""
    return max(tp, tp * int(round(value / tp)))


def layer_plan(ctl, calibration, tmp, nvlink_gbps, tokens):
    """One llama3-70b decoder layer, forward and backward, at SP = TP = 8 over
    `tokens` tokens, as the planner predicts it."""
    graph = os.path.join(tmp, "llama3-70b-tp8-%d.yaml" % tokens)
    run([ctl, "graph", "--model", "llama3-70b", "--tp", "8", "--seq", str(tokens),
         "--micro-batch", "1", "--pass", "both", "--output-file", graph])
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
    return {
        "tokens": tokens, "serial_ms": serial, "overlapped_ms": overlapped,
        "hidden": 1 - exposed / comm if comm > 0 else 1.0,
        # Over the FLOPs the planner timed: the layer's GEMMs, 6 x its parameters x tokens.
        "mfu_serial": flops / (8 * PEAK_TFLOPS * 1e12 * serial / 1e3),
        "mfu_overlapped": flops / (8 * PEAK_TFLOPS * 1e12 * overlapped / 1e3),
        "assumptions": p["assumptions"],
    }


def model_70b(ctl, calibration, tmp, nvlink_gbps):
    """The source's figures read two ways, each like with like: as it states
    them (the whole model's step: the planner's layer x 80, at the tokens the
    source's MFU and step imply for the whole model), and as one layer's step
    (the planner's layer at the tokens they imply for one layer)."""
    src = SOURCE_70B
    derived = {}
    for unit, params in (("model", MODEL_PARAMS_70B), ("layer", LAYER_PARAMS_70B)):
        serial = source_tokens(src["serial_ms"], src["mfu_serial"], params, src["gpus"])
        overlapped = source_tokens(src["overlapped_ms"], src["mfu_overlapped"], params,
                                   src["gpus"])
        derived[unit] = {"params": params, "tokens_from_serial": serial,
                         "tokens_from_overlapped": overlapped,
                         "tokens": multiple_of((serial + overlapped) / 2, 8)}
    model = layer_plan(ctl, calibration, tmp, nvlink_gbps, derived["model"]["tokens"])
    for key in ("serial_ms", "overlapped_ms"):
        model[key] *= LAYERS_70B  # the whole model: 80 such layers, one after another
    layer = layer_plan(ctl, calibration, tmp, nvlink_gbps, derived["layer"]["tokens"])
    state_gb = MODEL_PARAMS_70B * STATE_BYTES_PER_PARAM / 1e9
    with open(calibration) as f:
        smallest_m = min(g["m"] for g in json.load(f)["gemm"])
    return {"source": src, "derived": derived, "as_stated": model, "per_layer": layer,
            "training_state_gb": state_gb, "gpu_memory_gb": src["gpus"] * GPU_MEMORY_GB,
            "smallest_calibrated_rows": smallest_m}


MLP = """name: mlp-tp-scaling
ops:
  - {{id: fc1, type: gemm, m: {t}, k: 8192, n: 57344}}
  - {{id: fc2, type: gemm, m: {t}, k: 28672, n: 8192, parallel: row, after: [fc1]}}
  - {{id: ar, type: all_reduce, m: {t}, n: 8192, after: [fc2]{algorithm}}}
  - {{id: fused, type: gemm_ar, m: {t}, k: 28672, n: 8192, after: [fc1]}}
"""


def tp_scaling(ctl, calibration, tmp, tokens, nvlink_gbps):
    out = {"tokens": tokens}
    for name, algorithm in (("ring", ""), ("ps", ", algorithm: ps")):
        path = os.path.join(tmp, "mlp-%s-%d.yaml" % (name, tokens))
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


def print_70b(m, nvlink_gbps):
    src, d = m["source"], m["derived"]
    print("1. A dense 70B model (llama3-70b), forward + backward, SP = TP = 8 on 8x H800.")
    print("   The source gives the whole model's step (48.2 ms serial, 36.1 ms overlapped) and its")
    print("   MFU (38.4%, 51.2%), but no token count. Tokens per step from its own figures:")
    print("   tokens = MFU x 8 GPUs x %.0f TFLOP/s x step / (6 x parameters)" % PEAK_TFLOPS)
    for unit, label in (("model", "whole model, %.2fB parameters" % (d["model"]["params"] / 1e9)),
                        ("layer", "one layer, %.1fM parameters" % (d["layer"]["params"] / 1e6))):
        print("     %-34s %8.1f (serial) %8.1f (overlapped) -> %d tokens (a multiple of tp 8)"
              % (label + ":", d[unit]["tokens_from_serial"], d[unit]["tokens_from_overlapped"],
                 d[unit]["tokens"]))
    rows = (("serial ms", "serial_ms", "%.1f", 1), ("overlapped ms", "overlapped_ms", "%.1f", 1),
            ("communication hidden", "hidden", "%.1f%%", 100),
            ("MFU serial", "mfu_serial", "%.1f%%", 100),
            ("MFU overlapped", "mfu_overlapped", "%.1f%%", 100))
    for key, title in (("as_stated", "as the source states it: the whole model's step = 80 "
                                     "layers at %d tokens" % d["model"]["tokens"]),
                       ("per_layer", "read as one layer's step, at %d tokens"
                                     % d["layer"]["tokens"])):
        print("   %s" % title)
        print("     %-24s %10s %10s" % ("", "source", "planner"))
        for label, field, fmt, scale in rows:
            print("     %-24s %10s %10s" % (label, fmt % (scale * src[field]),
                                           fmt % (scale * m[key][field])))
    print("   The source's figures do not hold together: as stated (the whole model), its MFU")
    print("   and step imply %.0f tokens per step, while the model's training state (bf16 weights and"
          % d["model"]["tokens_from_serial"])
    print("   gradients, Adam's fp32 master weights and moments: %d bytes a parameter) is %.0f GB"
          % (STATE_BYTES_PER_PARAM, m["training_state_gb"]))
    print("   against the 8 GPUs' %d GB; read per layer, the same figures imply %.0f tokens, a"
          % (m["gpu_memory_gb"], d["layer"]["tokens_from_serial"]))
    print("   plausible micro-batch, but that is not what the source says it measured. Both")
    print("   readings are shown; neither is the source's own.")
    print("   whole-model reading: every GEMM has the %d tokens as its rows or (the weight"
          % d["model"]["tokens"])
    print("   gradients) its depth, far below the calibrated shapes' %d rows and more; the planner"
          % m["smallest_calibrated_rows"])
    print("   scales a GEMM's time linearly from the nearest calibrated shape, keeping its")
    print("   throughput, which GEMMs this thin do not reach: its times there are a lower bound and")
    print("   its MFU an upper bound (unverified)")
    print("   assumptions, both readings: H800 = the calibrated H200's GEMMs (same GH100 compute);")
    print("   NVLink at %.0f GB/s bus bandwidth (H800: 400 GB/s NVLink, 200 each way, ~80%% of it);"
          % nvlink_gbps)
    print("   the planner's time and FLOPs are the decoder layers' GEMMs and their communication:")
    print("   the attention core, norms, embeddings and LM head (3% of the FLOPs) and the optimizer")
    print("   step are in neither; MFU over %.0f TFLOP/s per GPU (dense bf16)" % PEAK_TFLOPS)
    for line in m["as_stated"]["assumptions"]:
        print("   - " + line)


def print_tp_scaling(runs, nvlink_gbps):
    print("2. TP scaling of a 70B MLP block (fc1 8192 -> 57344, SwiGLU, fc2 28672 -> 8192), 8 GPUs")
    print("   against 1. The source gives no token count, and the speedups depend on it: the")
    print("   planner's at each assumed count")
    header = "   %-28s %10s" % ("", "source")
    for r in runs:
        header += " %12s" % ("%d tokens" % r["tokens"])
    print(header)
    for label, field, source, fmt in (("parameter server", "ps", "1.85x", "%.2fx"),
                                      ("blocking ring all-reduce", "ring", "6.2x", "%.2fx"),
                                      ("4-chunk overlap", "chunked4", "7.65x", "%.2fx"),
                                      ("exposed per block (4-chunk)", "chunked4_exposed_ms",
                                       "0.15 ms", "%.3f ms")):
        line = "   %-28s %10s" % (label, source)
        for r in runs:
            line += " %12s" % (fmt % r[field])
        print(line)
    print("   assumptions: H100 = the calibrated H200's GEMMs; NVLink at %.0f GB/s bus bandwidth "
          "(8x H100 over NVSwitch); the parameter server pulls every share through one GPU's "
          "link and pushes the sum back (8x the ring's time at 8 ranks); the 4-chunk overlap is "
          "gemm_ar chunked/4 over NCCL; 1 GPU runs both GEMMs whole (%s ms)"
          % (nvlink_gbps, " / ".join("%.2f" % r["t1_ms"] for r in runs)))
    for line in runs[0]["assumptions"]:
        print("   - " + line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", required=True)
    p.add_argument("--overlapctl", default="build/client/overlapctl")
    p.add_argument("--h800-nvlink-gbps", type=float, default=160.0)
    p.add_argument("--h100-nvlink-gbps", type=float, default=360.0)
    p.add_argument("--mlp-tokens", default="2048,8192,32768",
                   help="token counts of the TP-scaling block (the source gives none)")
    p.add_argument("--json")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m = model_70b(a.overlapctl, a.calibration, tmp, a.h800_nvlink_gbps)
        runs = [tp_scaling(a.overlapctl, a.calibration, tmp, int(t), a.h100_nvlink_gbps)
                for t in a.mlp_tokens.split(",")]
    print_70b(m, a.h800_nvlink_gbps)
    print()
    print_tp_scaling(runs, a.h100_nvlink_gbps)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model_70b": m, "tp_scaling": runs}, f, indent=1)


if __name__ == "__main__":
    main()
