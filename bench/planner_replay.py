#!/usr/bin/env python3
"""Judges the planner's pruning and its predictions on recorded bench sweeps.

For each `overlapctl plan --replay` output (one per recorded run), checks:
- the candidates the planner would have `auto` measure include one within
  --window (2%) of the run's best measured candidate (stage-one best medians)
  on at least --hit-rate (90%) of the shapes;
- it measures at most a third of the candidates;
- the median absolute error of the predicted step of the schedule auto chose
  is at most --max-error (10%), over every run together.
Prints a table per run, and exits 1 when a target is missed."""
import argparse
import json
import statistics
import sys


def judge(path, window):
    doc = json.load(open(path))
    rows = []
    for row in doc["rows"]:
        measured = {m["schedule"]: m["best_ms"] for m in row["measured"] if m["best_ms"] > 0}
        if not measured:
            continue
        best = min(measured, key=measured.get)
        pruned = row["to_measure"]
        got = min(measured[s] for s in pruned if s in measured)
        predicted = row.get("predicted_auto_ms")
        rows.append({
            "shape": "%s %dx%dx%d" % (row["type"], row["m"], row["k"], row["n"]),
            "best": best, "best_ms": measured[best], "pruned_best_ms": got,
            "hit": got <= measured[best] * (1 + window), "measured": len(pruned),
            "candidates": len(measured), "auto": row["auto_mode"], "step_ms": row["step_ms"],
            "predicted_ms": predicted,
            "error": None if predicted is None else (predicted - row["step_ms"]) / row["step_ms"],
        })
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("replays", nargs="+", help="overlapctl plan --replay outputs")
    p.add_argument("--window", type=float, default=0.02)
    p.add_argument("--hit-rate", type=float, default=0.90)
    p.add_argument("--max-error", type=float, default=0.10)
    p.add_argument("--json", help="write the verdicts here")
    args = p.parse_args()
    failed = []
    errors = []
    verdicts = {}
    for path in args.replays:
        rows = judge(path, args.window)
        if not rows:
            failed.append("%s: no rows with measured candidates" % path)
            continue
        print(path)
        print("%-28s %-16s %9s %9s %4s %8s %-18s %9s %9s %7s" % (
            "shape", "best", "best ms", "pruned ms", "hit", "measured", "auto chose",
            "step ms", "pred ms", "error"))
        for r in rows:
            err = "-" if r["error"] is None else "%+.1f%%" % (100 * r["error"])
            pred = "-" if r["predicted_ms"] is None else "%.3f" % r["predicted_ms"]
            print("%-28s %-16s %9.3f %9.3f %4s %5d/%-2d %-18s %9.3f %9s %7s" % (
                r["shape"], r["best"], r["best_ms"], r["pruned_best_ms"],
                "yes" if r["hit"] else "NO", r["measured"], r["candidates"], r["auto"],
                r["step_ms"], pred, err))
            if r["error"] is not None:
                errors.append(abs(r["error"]))
        hits = sum(r["hit"] for r in rows)
        most = max(r["measured"] / r["candidates"] for r in rows)
        print("hits %d of %d (%.0f%%), most measured %.0f%% of the candidates\n" % (
            hits, len(rows), 100.0 * hits / len(rows), 100 * most))
        verdicts[path] = {"hits": hits, "shapes": len(rows), "most_measured_fraction": most}
        if hits < args.hit_rate * len(rows):
            failed.append("%s: a candidate within %.0f%% of the best on %d of %d shapes" % (
                path, 100 * args.window, hits, len(rows)))
        if most > 1 / 3 + 1e-9:
            failed.append("%s: measures %.0f%% of the candidates" % (path, 100 * most))
    median = statistics.median(errors) if errors else float("nan")
    print("median absolute error of the predicted step: %.1f%% over %d shapes" % (
        100 * median, len(errors)))
    if not errors or median > args.max_error:
        failed.append("median absolute error %.1f%% above %.0f%%" % (100 * median,
                                                                    100 * args.max_error))
    if args.json:
        json.dump({"runs": verdicts, "median_abs_error": median, "failed": failed},
                  open(args.json, "w"), indent=1)
    for f in failed:
        print("MISSED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
