#!/usr/bin/env python3
"""The serving load curve as an SVG and a markdown table, from
bench/serve_bench.sh's curve results; also the home of the result loading,
percentile and SVG helpers bench/serve_policies.py shares:
    bench/serve_curve_svg.py RESULT_DIR OUT.svg
reads RESULT_DIR/curve_<policy>_<rate>.json (bench-serve's --result-json) for
the policies chunked and prefill-first, plots TTFT, TPOT and ITL (p50 solid,
p99 dashed) and request goodput against the request rate, and prints the
table on stdout. Plain SVG: no plotting package needed."""
import glob
import html
import json
import math
import os
import re
import sys

POLICIES = [("chunked", "#1f77b4"), ("prefill-first", "#d62728")]


def pct(values, p):
    """numpy's linear-interpolation percentile."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    f = math.floor(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def load(d, prefix="curve"):
    """RESULT_DIR/<prefix>_<policy>_<rate>.json, bench-serve's result JSON,
    as {policy: rows by rate}."""
    rows = {}
    pat = re.compile(re.escape(prefix) + r"_(.+)_([0-9.]+)\.json$")
    for path in glob.glob(os.path.join(d, prefix + "_*.json")):
        m = pat.match(os.path.basename(path))
        if not m:
            continue
        try:
            j = json.load(open(path))
        except (OSError, ValueError) as e:
            print("serve_curve_svg: %s skipped: %s" % (path, e), file=sys.stderr)
            continue
        itls = [x for per in j.get("itls", []) for x in per]
        rows.setdefault(m.group(1), []).append({
            "rate": float(m.group(2)), "rate_s": m.group(2),
            "ttft50": j["median_ttft_ms"], "ttft99": j["p99_ttft_ms"],
            "tpot50": j["median_tpot_ms"], "tpot99": j["p99_tpot_ms"],
            "itl50": pct(itls, 50) * 1e3 if itls else j["median_itl_ms"],
            "itl99": pct(itls, 99) * 1e3 if itls else j["p99_itl_ms"],
            # null when the run had no --goodput
            "goodput": j.get("request_goodput"), "throughput": j["request_throughput"],
            "out_tps": j.get("output_throughput", float("nan")),
            "completed": j["completed"], "failed": j["failed"]})
    for r in rows.values():
        r.sort(key=lambda x: x["rate"])
    return rows


def positive(r, k):
    return r[k] is not None and r[k] > 0


def panel(x0, y0, w, h, title, ylabel, rows, keys, log=False, series=POLICIES):
    """One plot of rows' keys against the rate, a line per (policy, colour)
    of series; p99 keys dashed."""
    out = ['<g transform="translate(%d,%d)">' % (x0, y0)]
    xs = [r["rate"] for p in rows.values() for r in p]
    ys = [r[k] for p in rows.values() for r in p for k in keys if positive(r, k)] or [1.0]
    xmin, xmax = 0.0, max(xs) * 1.05
    if log:
        ymin, ymax = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1
    else:
        ymin, ymax = 0.0, max(ys) * 1.1
    fx = lambda x: 50 + (x - xmin) / (xmax - xmin) * (w - 60)
    fy = lambda y: h - 35 - ((math.log10(y) if log else y) - ymin) / (ymax - ymin) * (h - 60)
    out.append('<rect x="50" y="25" width="%d" height="%d" fill="none" stroke="#888"/>' % (w - 60, h - 60))
    out.append('<text x="%d" y="15" font-size="13" text-anchor="middle">%s</text>' % (w / 2, html.escape(title)))
    out.append('<text x="12" y="%d" font-size="11" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>'
               % (h / 2, h / 2, html.escape(ylabel)))
    out.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">request rate (req/s)</text>'
               % (w / 2, h - 5))
    for x in sorted(set(xs)):
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%g</text>' % (fx(x), h - 22, x))
    ticks = [10 ** e for e in range(math.floor(ymin), math.ceil(ymax) + 1)] if log else \
        [ymax / 1.1 * i / 4 for i in range(5)]
    for t in ticks:
        if (math.log10(t) if log else t) < ymin or (math.log10(t) if log else t) > ymax:
            continue
        out.append('<text x="46" y="%.1f" font-size="10" text-anchor="end">%s</text>' % (fy(t) + 3, "%g" % float(
            "%.3g" % t)))
        out.append('<line x1="50" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (w - 10, fy(t), fy(t)))
    for policy, color in series:
        for k in keys:
            pts = [(fx(r["rate"]), fy(r[k])) for r in rows.get(policy, []) if positive(r, k)]
            if not pts:
                continue
            dash = ' stroke-dasharray="5,3"' if k.endswith("99") else ""
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>' % (
                color, dash, " ".join("%.1f,%.1f" % p for p in pts)))
            out.extend('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (x, y, color) for x, y in pts)
    out.append("</g>")
    return out


def legend(x, y, series, step, per_row=None):
    """A line sample and the name of each (policy, colour), per_row to a row."""
    out = []
    per_row = per_row or len(series)
    for i, (policy, color) in enumerate(series):
        lx, ly = x + (i % per_row) * step, y + (i // per_row) * 18
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (
            lx, lx + 30, ly - 4, ly - 4, color))
        out.append('<text x="%d" y="%d" font-size="12">%s</text>' % (lx + 36, ly, html.escape(policy)))
    return out


def fmt(x, f):
    """f % x, or "-" for a missing or NaN figure."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f % x


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: serve_curve_svg.py RESULT_DIR OUT.svg")
    rows = load(sys.argv[1])
    if not rows:
        sys.exit("serve_curve_svg: no curve_<policy>_<rate>.json in %s" % sys.argv[1])
    W, H = 440, 260
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (2 * W,
                                                                                                   2 * H + 30)]
    svg.append('<rect width="100%" height="100%" fill="white"/>')
    svg += panel(0, 0, W, H, "time to first token (p50 solid, p99 dashed)", "ms (log)", rows, ["ttft50", "ttft99"],
                 log=True)
    svg += panel(W, 0, W, H, "time per output token", "ms", rows, ["tpot50", "tpot99"])
    svg += panel(0, H, W, H, "inter-token latency", "ms (log)", rows, ["itl50", "itl99"], log=True)
    svg += panel(W, H, W, H, "request goodput (TTFT <= 2 s, TPOT <= 50 ms)", "req/s", rows, ["goodput"])
    svg += legend(60, 2 * H + 18, POLICIES, 200)
    svg.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")
    print("| policy | rate (req/s) | done | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | ITL p50 / p99 (ms) | "
          "throughput (req/s) | goodput (req/s) |")
    print("|---|---|---|---|---|---|---|---|")
    for policy, _ in POLICIES:
        for r in rows.get(policy, []):
            print("| %s | %g | %d | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %.2f | %s |" % (
                policy, r["rate"], r["completed"], r["ttft50"], r["ttft99"], r["tpot50"], r["tpot99"], r["itl50"],
                r["itl99"], r["throughput"], fmt(r["goodput"], "%.2f")))


if __name__ == "__main__":
    main()
