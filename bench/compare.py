#!/usr/bin/env python3
"""Puts `overlapctl bench` JSON beside the PyTorch peers' JSON (bench/peers/torch_tp.py).

Usage: python3 bench/compare.py bench.json torch_peers.json [more_peers.json ...]
Prints a Markdown table. With several peer runs (e.g. one before and one after our sweep, so
that neither side alone gets the cooler GPU), each baseline is the best of its runs.
"""
import json
import math
import sys


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ours = json.load(open(sys.argv[1]))
    by_shape = {}
    for path in sys.argv[2:]:
        for r in json.load(open(path))["rows"]:
            key = (r["op"], r["m"], r["k"], r["n"])
            best = by_shape.setdefault(key, r)
            for name in ("serial", "async_tp"):
                if name in r and (name not in best or
                                  r[name]["median_ms"] < best[name]["median_ms"]):
                    best[name] = r[name]
    print("| op | m x k x n | auto chose | auto ms | our serial ms | torch serial ms "
          "| torch async-TP ms | vs best torch | step / ideal |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    speedups, ratios = [], []
    for r in ours["rows"]:
        p = by_shape.get((r["op"], r["m"], r["k"], r["n"]))
        if p is None:
            continue
        serial = p["serial"]["median_ms"]
        fused = p.get("async_tp", {}).get("median_ms")
        best = min(serial, fused) if fused else serial
        speedup = best / r["step_ms"]
        ratio = r["step_ms"] / r["ideal_ms"]
        speedups.append(speedup)
        ratios.append(ratio)
        fused_text = f"{fused:.3f}" if fused else "-"
        print(f"| {r['op']} | {r['m']}x{r['k']}x{r['n']} | {r['auto_mode']} | {r['step_ms']:.3f} "
              f"| {r['serial_ms']:.3f} | {serial:.3f} | {fused_text} | {speedup:.2f}x | {ratio:.3f} |")
    print(f"\ngeomean vs best torch: {geomean(speedups):.3f}x (min {min(speedups):.2f}x); "
          f"step/ideal geomean {geomean(ratios):.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
