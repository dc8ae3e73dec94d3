#!/usr/bin/env python3
"""The --html chart pages, loaded in headless Chromium and checked by structure.

Each fixture in tests/charts/fixtures is made into a page by chart_pages (the functions
overlapctl's bench, commbench, compare and timeline call); chart_check.js is injected into
it, and Chromium's --dump-dom hands back what the script measured in the laid-out page:
every SVG text's box, the value ticks, grid and reference lines, legend entries and bars.
Then, for every chart: no two labels overlap, every label lies inside its SVG, the value
ticks are evenly spaced at a 1-2-5 step with one number of decimals, a ratio chart has its
line at 1 where the axis puts 1, there is a legend of coloured swatches, and a bar or span
is at least 2 px wide; for every page: it fits a 1024-px window and carries the caveats
of its backend. broken_page.html, a page with each of those faults, must fail every check.

Chromium is required: without it the test fails, saying how to install it, unless
OVERLAPD_SKIP_CHROMIUM=1 (then it exits 77, which ctest counts as skipped).
"""
import argparse
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

WINDOW_PX = 1024
SKIP = 77

# Expectations per fixture: how many charts, the sections holding ratio charts (a line at
# 1), the caveat words the page must carry, and those it must not.
EXPECTED = {
    "bench_host_12_shapes.json": {
        "charts": 2, "ratio": ["Step against ideal against serial, per shape"],
        "caveats": ["host backend: the timings mean nothing"],
        "categories": {"Step against ideal against serial, per shape": 12,
                       "Communication hidden, per shape": 12}},
    "bench_cuda_predicted.json": {
        "charts": 3,
        "ratio": ["Step against ideal against serial, per shape", "Predicted beside measured"],
        "caveats": [], "no_caveats": ["host backend"],
        "categories": {"Step against ideal against serial, per shape": 12,
                       "Predicted beside measured": 9}},
    "commbench_host.json": {
        "charts": 2, "ratio": [], "caveats": ["host backend: the timings mean nothing"]},
    "commbench_nodes_shared_gpu.json": {
        "charts": 1, "ratio": [], "caveats": ["ranks share GPUs"],
        "no_caveats": ["host backend"]},
    "compare_host_12_ops.json": {
        "charts": 2, "ratio": ["B against A"],
        "caveats": ["host backend: the timings mean nothing"],
        "categories": {"The two jobs' ops side by side": 13, "B against A": 10}},
    "timeline_host.json": {
        "charts": 1, "ratio": [], "caveats": ["host backend: the timings mean nothing"],
        "categories": {"op fc1 (ring/6/p2p)": 4}},
}
CHECKS = ["overlap", "outside", "ticks", "reference", "legend", "width", "sliver", "caveat"]


def find_chromium():
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser",
                 "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def measure(chromium, page_path, work):
    """Loads the page with the checker injected; returns what chart_check.js wrote."""
    checker = open(os.path.join(os.path.dirname(__file__), "chart_check.js")).read()
    page = open(page_path, encoding="utf-8").read()
    if "</body>" not in page:
        raise ValueError(f"{page_path}: no </body>")
    checked = os.path.join(work, "checked-" + os.path.basename(page_path))
    with open(checked, "w", encoding="utf-8") as f:
        f.write(page.replace("</body>", f"<script>{checker}</script></body>", 1))
    run = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--hide-scrollbars", f"--window-size={WINDOW_PX},800",
         f"--user-data-dir={os.path.join(work, 'profile')}",
         "--virtual-time-budget=2000", "--dump-dom", "file://" + os.path.abspath(checked)],
        capture_output=True, text=True, timeout=60)
    found = None  # the last one: the page's own text could hold the same words
    for found in re.finditer(r'<pre id="chart-check">(.*?)</pre>', run.stdout, re.S):
        pass
    if run.returncode != 0 or not found:
        raise RuntimeError(f"{page_path}: chromium exit {run.returncode}, no results:\n"
                           f"{run.stderr[-2000:]}")
    return json.loads(html.unescape(found.group(1)))


def overlaps(a, b, slack=0.5):
    return (min(a[2], b[2]) - max(a[0], b[0]) > slack and
            min(a[3], b[3]) - max(a[1], b[1]) > slack)


def decimals(text):
    number = re.match(r"-?\d+(?:\.(\d+))?", text.strip())
    return None if not number else len(number.group(1) or "")


def center(b, axis):
    return (b[0] + b[2]) / 2 if axis == "x" else (b[1] + b[3]) / 2


def evenly_spaced(positions, tolerance=0.75):
    gaps = [b - a for a, b in zip(positions, positions[1:])]
    return gaps and all(abs(g - gaps[0]) <= tolerance for g in gaps) and abs(gaps[0]) > 1


def nice_step(step):
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5, 10))


def check_chart(chart, expect, fail):
    where = f"{chart['kind']} chart in '{chart['section']}'"
    texts = chart["texts"]
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if a["text"].strip() and b["text"].strip() and overlaps(a["box"], b["box"]):
                fail("overlap", f"{where}: '{a['text']}' overlaps '{b['text']}'")
    svg = chart["box"]
    for t in texts:
        b = t["box"]
        if b[0] < svg[0] - 0.5 or b[1] < svg[1] - 0.5 or b[2] > svg[2] + 0.5 or b[3] > svg[3] + 0.5:
            fail("outside", f"{where}: '{t['text']}' {b} outside the svg {svg}")
    if svg[2] > WINDOW_PX:
        fail("width", f"{where}: ends at {svg[2]:.0f} px, past a {WINDOW_PX}-px window")

    ticks = chart["ticks"]
    if len(ticks) < 3:
        fail("ticks", f"{where}: {len(ticks)} value ticks")
    for axis in sorted({t["axis"] for t in ticks}):
        on_axis = sorted((t for t in ticks if t["axis"] == axis), key=lambda t: t["value"])
        values = [t["value"] for t in on_axis]
        steps = [b - a for a, b in zip(values, values[1:])]
        if not steps or any(abs(s - steps[0]) > 1e-9 * max(1, abs(steps[0])) for s in steps):
            fail("ticks", f"{where}: uneven tick values {values}")
        elif not nice_step(steps[0]):
            fail("ticks", f"{where}: step {steps[0]} is not 1, 2 or 5 times a power of ten")
        places = {decimals(t["text"]) for t in on_axis}
        if len(places) != 1 or None in places:
            fail("ticks", f"{where}: tick labels with mixed decimals: "
                          f"{[t['text'] for t in on_axis]}")
        if not evenly_spaced([center(t["box"], axis) for t in on_axis]):
            fail("ticks", f"{where}: tick labels unevenly spaced: "
                          f"{[round(center(t['box'], axis), 1) for t in on_axis]}")
        grid = sorted((g for g in chart["grid"] if g["axis"] == axis), key=lambda g: g["value"])
        if len(grid) != len(on_axis) or not evenly_spaced([center(g["box"], axis) for g in grid]):
            fail("ticks", f"{where}: grid lines missing or unevenly spaced")

    if chart["section"] in expect.get("ratio", []):
        at_one = [r for r in chart["references"] if abs(r["value"] - 1) < 1e-9]
        grid = sorted((g for g in chart["grid"] if at_one and g["axis"] == at_one[0]["axis"]),
                      key=lambda g: g["value"])
        if not at_one:
            fail("reference", f"{where}: a ratio chart without a line at 1")
        elif len(grid) >= 2:
            axis = at_one[0]["axis"]
            lo, hi = grid[0], grid[-1]
            p_lo, p_hi = center(lo["box"], axis), center(hi["box"], axis)
            want = p_lo + (p_hi - p_lo) * (1 - lo["value"]) / (hi["value"] - lo["value"])
            got = center(at_one[0]["box"], axis)
            if abs(got - want) > 1.0:
                fail("reference", f"{where}: the line at 1 is drawn at {got:.1f} px, the axis "
                                  f"puts 1 at {want:.1f} px")

    # Every row named: labels kept apart by layout, not by leaving some out.
    rows = expect.get("categories", {}).get(chart["section"])
    if rows is not None:
        shown = [t for t in texts if "category" in t["cls"].split()]
        if len(shown) != rows:
            fail("overlap", f"{where}: {len(shown)} category labels of {rows}")

    legend = chart["legend"]
    if not legend:
        fail("legend", f"{where}: no legend")
    fills = [e["fill"] for e in legend]
    if any(not f or e["swatch"] is None or not e["name"] for f, e in zip(fills, legend)):
        fail("legend", f"{where}: a legend entry without a swatch or a name")
    elif len(set(fills)) != len(fills):
        fail("legend", f"{where}: legend swatches share colours {fills}")
    else:
        for e in legend:
            s, t = e["swatch"], e["text"]
            if not (s[2] - s[0] >= 6 and t[0] >= s[2] - 0.5 and t[1] < s[3] and s[1] < t[3]):
                fail("legend", f"{where}: '{e['name']}' does not sit beside its swatch")

    for mark in chart["marks"]:
        width = mark["box"][2] - mark["box"][0]
        if width < 2:
            fail("sliver", f"{where}: a {mark['cls']} {width:.2f} px wide")


def check_page(found, expect, fail):
    if found["scroll_width"] > WINDOW_PX:
        fail("width", f"page {found['scroll_width']} px wide in a {WINDOW_PX}-px window")
    if "charts" in expect and len(found["charts"]) != expect["charts"]:
        fail("overlap", f"{len(found['charts'])} charts, expected {expect['charts']}")
    caveats = " ".join(found["caveats"])
    for words in expect.get("caveats", []):
        if words not in caveats:
            fail("caveat", f"no caveat saying '{words}' (caveats: {found['caveats']})")
    for words in expect.get("no_caveats", []):
        if words in caveats:
            fail("caveat", f"a caveat saying '{words}' on a page it does not apply to")
    for chart in found["charts"]:
        check_chart(chart, expect, fail)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", required=True, help="the chart_pages binary")
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--keep", help="a folder to keep the pages in")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        if os.environ.get("OVERLAPD_SKIP_CHROMIUM") == "1":
            print("SKIP: chromium not found and OVERLAPD_SKIP_CHROMIUM=1")
            return SKIP
        print("FAIL: chromium not found: the chart test loads the --html pages in headless "
              "Chromium. Install it (`scripts/install-deps.sh --test`, or `apt-get install "
              "chromium`), name it in $CHROMIUM, or set OVERLAPD_SKIP_CHROMIUM=1 to skip.")
        return 1
    failures = []
    with tempfile.TemporaryDirectory(prefix="overlap-charts-") as work:
        out_dir = args.keep or work
        os.makedirs(out_dir, exist_ok=True)
        for name in sorted(EXPECTED):
            page = os.path.join(out_dir, name.replace(".json", ".html"))
            made = subprocess.run([args.pages, os.path.join(args.fixtures, name), page],
                                  capture_output=True, text=True, timeout=30)
            if made.returncode != 0:
                failures.append(f"{name}: chart_pages failed: {made.stderr.strip()}")
                continue
            found = measure(chromium, page, work)
            page_failures = []
            check_page(found, EXPECTED[name],
                       lambda check, what: page_failures.append(f"{name}: {check}: {what}"))
            failures += page_failures
            print(f"{name}: {len(found['charts'])} charts, "
                  f"{sum(len(c['texts']) for c in found['charts'])} labels, "
                  f"{'ok' if not page_failures else f'{len(page_failures)} failures'}")
        # The checks can fail: a page with every fault must trip every one of them.
        broken = os.path.join(os.path.dirname(os.path.abspath(__file__)), "broken_page.html")
        tripped = set()
        check_page(measure(chromium, broken, work),
                   {"charts": 1, "ratio": ["ratio"], "caveats": ["host backend"]},
                   lambda check, what: tripped.add(check))
        for check in CHECKS:
            if check not in tripped:
                failures.append(f"broken_page.html: the '{check}' check passed a page made to "
                                f"fail it")
        print(f"broken_page.html: tripped {sorted(tripped)}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
