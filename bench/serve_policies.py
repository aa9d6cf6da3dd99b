#!/usr/bin/env python3
"""Scheduling policies side by side, from bench/serve_bench.sh's pd and
pd-short results:
    bench/serve_policies.py RESULT_DIR SCENARIO OUT.svg
reads RESULT_DIR/<SCENARIO>_<policy>_<rate>.json (bench-serve's --result-json)
and, where present, the .lanes.json beside each; prints a markdown table (TTFT,
TPOT, output tokens/s, goodput, and for the pd-mux policies each lane's busy
fraction and each split's share of the wall time), the winner at each rate,
and writes goodput against the request rate as an SVG, a line per policy.
    bench/serve_policies.py --lanes BEFORE AFTER T0 T1
prints as JSON the increase of every greenpipe:lane_*_total counter between
two /metrics scrapes taken at times T0 and T1 (seconds)."""
import json
import math
import os
import re
import sys

from serve_curve_svg import fmt, legend, load, panel

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf"]
# the script's order: baselines first, then the splits
ORDER = ["prefill-first", "chunked", "pd"]

SAMPLE = re.compile(r'^greenpipe:(lane_[a-z_]+)_total\{([^}]*)\}\s+(\S+)\s*$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# the counters' names in the lanes file; any other lane counter keeps its own
FIELDS = {"lane_busy_seconds": "busy_s", "lane_selected_seconds": "selected_s", "lane_batches": "batches"}


def lane_counters(path):
    """{(lane, partition): {field: value}} of a Prometheus text scrape."""
    out = {}
    for line in open(path):
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        key = (labels.get("lane", "?"), labels.get("partition", "?"))
        field = FIELDS.get(m.group(1), m.group(1)[len("lane_"):])
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        # summed over the labels not keyed on (model_name)
        out.setdefault(key, {})
        out[key][field] = out[key].get(field, 0.0) + v
    return out


def lanes_diff(before, after, t0, t1):
    a, b = lane_counters(before), lane_counters(after)
    lanes = []
    for key in sorted(b):
        d = {f: v - a.get(key, {}).get(f, 0.0) for f, v in b[key].items()}
        if "batches" in d:
            d["batches"] = int(round(d["batches"]))
        lanes.append(dict(lane=key[0], partition=key[1], **d))
    return {"wall_s": t1 - t0, "lanes": lanes}


def policy_key(name):
    for i, p in enumerate(ORDER):
        if name.startswith(p):
            digits = re.sub(r"\D", "", name)
            return (i, int(digits) if digits else 1 << 30, name)
    return (len(ORDER), 0, name)


def lanes_of(d, scenario, policy, rate_s):
    """The lanes file of one row, or None (a policy without lanes, a scrape
    that failed, or a server without the counters)."""
    path = os.path.join(d, "%s_%s_%s.lanes.json" % (scenario, policy, rate_s))
    try:
        j = json.load(open(path))
    except (OSError, ValueError):
        return None
    return j if j.get("lanes") and j.get("wall_s", 0) > 0 else None


def lane_cells(j):
    """The busy fraction of each lane, a partition to a line, and each
    split's share of the wall time, the most selected first."""
    if not j:
        return "-", "-"
    wall = j["wall_s"]
    busy, share = {}, {}
    for ln in j["lanes"]:
        if "busy_s" in ln:
            busy.setdefault(ln["partition"], []).append("%s %.2f" % (ln["lane"], ln["busy_s"] / wall))
        if ln["partition"] != "all" and "selected_s" in ln:
            # both lanes of a pair carry its selected time: one figure a pair
            share[ln["partition"]] = max(share.get(ln["partition"], 0.0), ln["selected_s"] / wall)
    order = sorted(busy, key=lambda p: (p == "all", -share.get(p, 0.0), p))
    return ("<br>".join("%s: %s" % (p, ", ".join(sorted(busy[p]))) for p in order) or "-",
            "<br>".join("%s %.2f" % (p, s) for p, s in sorted(share.items(), key=lambda x: -x[1])) or "-")


def good(r):
    return r["goodput"] if r["goodput"] is not None else float("-inf")


def tpot99(r):
    return r["tpot99"] if not math.isnan(r["tpot99"]) else float("inf")


def report(d, scenario, svg_path):
    rows = load(d, scenario)
    if not rows:
        sys.exit("serve_policies: no %s_<policy>_<rate>.json in %s" % (scenario, d))
    policies = sorted(rows, key=policy_key)
    series = [(p, COLORS[i % len(COLORS)]) for i, p in enumerate(policies)]

    print("## %s: every policy at each rate\n" % scenario)
    print("| policy | rate (req/s) | done / failed | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | output tok/s | "
          "goodput (req/s) | lane busy (busy / wall) | split share (selected / wall) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for p in policies:
        for r in rows[p]:
            busy, share = lane_cells(lanes_of(d, scenario, p, r["rate_s"]))
            print("| %s | %g | %d / %d | %.0f / %.0f | %.1f / %.1f | %.0f | %s | %s | %s |" % (
                p, r["rate"], r["completed"], r["failed"], r["ttft50"], r["ttft99"], r["tpot50"], r["tpot99"],
                r["out_tps"], fmt(r["goodput"], "%.2f"), busy, share))

    # the winner: most goodput, then the lower TPOT p99; against the best
    # chunked prefill, the baseline the splits must beat
    print("\n## %s: winner per rate (most goodput; ties: lower TPOT p99)\n" % scenario)
    print("| rate (req/s) | winner | goodput (req/s) | TPOT p99 (ms) | best chunked | its goodput | winner / it |")
    print("|---:|---|---:|---:|---|---:|---:|")
    rates = sorted({r["rate"] for p in policies for r in rows[p]})
    for rate in rates:
        at = [(p, r) for p in policies for r in rows[p] if r["rate"] == rate]
        wp, wr = max(at, key=lambda x: (good(x[1]), -tpot99(x[1])))
        ch = [(p, r) for p, r in at if p.startswith("chunked")]
        cp, cr = max(ch, key=lambda x: (good(x[1]), -tpot99(x[1]))) if ch else ("-", None)
        cg = cr["goodput"] if cr else None
        ratio = wr["goodput"] / cg if cg and wr["goodput"] is not None else None
        print("| %g | %s | %s | %.1f | %s | %s | %s |" % (rate, wp, fmt(wr["goodput"], "%.2f"), wr["tpot99"], cp,
                                                          fmt(cg, "%.2f"), fmt(ratio, "%.2fx")))

    W, H = 640, 360
    per_row = 4
    n_leg = (len(series) + per_row - 1) // per_row
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (
        W, H + 10 + 18 * n_leg)]
    svg.append('<rect width="100%" height="100%" fill="white"/>')
    svg += panel(0, 0, W, H, "%s: request goodput%s" % (scenario, slo_text(d, scenario)), "req/s", rows,
                 ["goodput"], series=series)
    svg += legend(40, H + 16, series, (W - 40) // per_row, per_row)
    svg.append("</svg>")
    open(svg_path, "w").write("\n".join(svg) + "\n")


def slo_text(d, scenario):
    """The SLO bench-serve recorded in one of the rows, as ' (TTFT <= 2000 ms, ...)'."""
    for name in sorted(os.listdir(d)):
        if name.startswith(scenario + "_") and name.endswith(".json") and not name.endswith(".lanes.json"):
            try:
                g = json.load(open(os.path.join(d, name))).get("goodput")
            except (OSError, ValueError):
                continue
            if g:
                return " (%s)" % ", ".join("%s <= %g ms" % (k.upper(), v) for k, v in g.items())
    return ""


def main():
    a = sys.argv[1:]
    if len(a) == 5 and a[0] == "--lanes":
        json.dump(lanes_diff(a[1], a[2], float(a[3]), float(a[4])), sys.stdout, indent=1)
        print()
    elif len(a) == 3:
        report(*a)
    else:
        sys.exit("usage: serve_policies.py RESULT_DIR SCENARIO OUT.svg\n"
                 "       serve_policies.py --lanes BEFORE AFTER T0 T1")


if __name__ == "__main__":
    main()
