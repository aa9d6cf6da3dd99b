#!/usr/bin/env python3
"""Where attention and FFN apart pay, one GPU and two, in one report.

Reads the --csv files of decode_pipeline_case_study (one GPU: the
sequential engine and attention/FFN on green partitions), gp_bench_tp (TP
and one GPU) and gp_bench_afd (one GPU, AFD and PP over two GPUs), and
writes one Markdown report: per model and workload, every placement's
tokens/s per GPU against the one-GPU engine (data parallelism's rate per
GPU), what bounds each row, and the winner line.

    placement_report.py [--out FILE] CSV...
"""
import argparse
import csv
import sys

# The columns each kind of file must have (the ones read here).
CASE_STUDY_KEYS = {"model", "gpu", "B", "C", "seq", "a_got", "f_got", "partitioned", "M", "ok", "ms_median",
                   "tokens_per_s", "floor_share", "attn_idle_share", "ffn_idle_share"}
PLACEMENT_KEYS = {"model", "device", "phase", "placement", "gpus", "B", "C", "M", "ok", "error", "ms_median",
                  "tokens_per_s_per_gpu", "floor_ms", "floor_bound", "busy_gpu0", "busy_gpu1", "cross_mb"}
ORDER = {"one GPU": 0, "green": 1, "TP": 2, "AFD": 3, "PP": 4}


class ReportError(Exception):
    pass


def num(s):
    """A figure of a CSV field; None when empty."""
    return float(s) if s not in (None, "") else None


def model_name(s):
    """The case study writes 'llama3-8b (synthetic weights)': the preset is the first word."""
    return s.split(" (")[0].strip()


def read_case_study(rows, path):
    """One GPU: the sequential row and the best green-partition row of each workload."""
    out = []
    for r in rows:
        if r.get("ok") != "1":
            continue
        seq = r["seq"] == "1"
        if not seq and r.get("partitioned") != "1":
            continue  # a split row that got no partitions is the sequential engine again
        ms = num(r["ms_median"])
        rate = num(r["tokens_per_s"])
        if ms is None or rate is None:
            continue
        row = {"model": model_name(r["model"]), "device": r.get("gpu", ""), "phase": "decode",
               "B": int(r["B"]), "C": int(r["C"]), "gpus": 1, "ms": ms, "rate": rate, "ok": True,
               "source": path}
        if seq:
            row.update(kind="one GPU", label="one GPU, sequential (case study)",
                       bound=floor_text(num(r.get("floor_share")), None))
        else:
            a_idle, f_idle = num(r.get("attn_idle_share")), num(r.get("ffn_idle_share"))
            row.update(kind="green", M=int(r["M"]),
                       label="A/F on green partitions, %s:%s SMs, M = %s" % (r["a_got"], r["f_got"], r["M"]),
                       bound="one HBM for both partitions" + (
                           "; attention busy %.0f%%, FFN %.0f%%" % (100 * (1 - a_idle), 100 * (1 - f_idle))
                           if a_idle is not None and f_idle is not None else ""))
        out.append(row)
    # the best green row of each workload stands for the split (the case study sweeps many)
    best = {}
    for row in out:
        if row["kind"] == "green":
            k = (row["model"], row["B"], row["C"])
            if k not in best or row["rate"] > best[k]["rate"]:
                best[k] = row
    return [r for r in out if r["kind"] != "green"] + list(best.values())


def floor_text(share, what):
    if share is None:
        return ""
    return "%s%.0f%% of its floor" % (what + ": " if what else "", 100 * share)


def bound_of(r, ms, floor_ms, floor_bound):
    """What bounds a benchmark row, from what it measured."""
    kind, M = r["placement"], int(r["M"])
    share = floor_ms / ms if floor_ms and ms else None
    resource = "HBM" if floor_bound != "tensor cores" else "tensor cores"
    if kind == "one GPU":
        return floor_text(share, resource)
    if kind == "TP":
        return ("each GPU's %s, its shard (%s) and an all-reduce after o and down in every layer"
                % (resource, floor_text(share, "").strip() or "floor not stated"))
    b0, b1, cross = num(r.get("busy_gpu0")), num(r.get("busy_gpu1")), num(r.get("cross_mb"))
    crossing = "%.1f MB crossing a step" % cross if cross is not None else ""
    if kind == "AFD":
        if b0 is None or b1 is None:
            return crossing
        if max(b0, b1) >= 85:
            which = "GPU 0 (attention, KV cache)" if b0 >= b1 else "GPU 1 (FFN)"
            return "%s: busy %.0f%%, the other %.0f%%; %s" % (which, max(b0, b1), min(b0, b1), crossing)
        return ("the crossing and the ping-pong's bubbles: GPU 0 busy %.0f%%, GPU 1 %.0f%%; %s"
                % (b0, b1, crossing))
    if kind == "PP":
        if M == 1:
            return "the halves of the layers in turn: one GPU idle at a time; " + crossing
        return ("the halves in turn over %d micro-batches, each re-reading its GPU's weights; %s"
                % (M, crossing))
    return ""


def read_placements(rows, path):
    out = []
    for r in rows:
        ok = r["ok"] == "1"
        ms, rate = num(r["ms_median"]), num(r["tokens_per_s_per_gpu"])
        kind, M, gpus = r["placement"], int(r["M"]), int(r["gpus"])
        if kind not in ORDER:
            raise ReportError("%s: placement '%s': expected one of one GPU, TP, AFD, PP" % (path, kind))
        label = {"one GPU": "one GPU (DP's rate per GPU)", "TP": "TP = %d" % gpus,
                 "AFD": "AFD, M = %d" % M, "PP": "PP = %d, M = %d" % (gpus, M)}[kind]
        out.append({"model": r["model"], "device": r["device"], "phase": r["phase"], "B": int(r["B"]),
                    "C": int(r["C"]), "gpus": gpus, "kind": kind, "M": M, "label": label, "ok": ok,
                    "error": r.get("error", ""), "ms": ms, "rate": rate, "source": path,
                    "bound": bound_of(r, ms, num(r["floor_ms"]), r["floor_bound"]) if ok else ""})
    return out


def read_all(paths):
    rows = []
    for p in paths:
        try:
            with open(p, newline="") as f:
                rd = csv.DictReader(f)
                cols = set(rd.fieldnames or [])
                data = list(rd)
        except OSError as e:
            raise ReportError("%s: %s" % (p, e.strerror or e))
        try:
            if CASE_STUDY_KEYS <= cols:
                rows += read_case_study(data, p)
            elif PLACEMENT_KEYS <= cols:
                rows += read_placements(data, p)
            else:
                raise ReportError("%s: neither a case study --csv nor a gp_bench_tp/gp_bench_afd --csv "
                                  "(columns: %s)" % (p, ", ".join(sorted(cols)) or "none"))
        except ValueError as e:
            raise ReportError("%s: a field that is not a number: %s" % (p, e))
    return rows


def fmt_rate(x):
    return "{:,.0f}".format(x)


def workload_section(rows, model, device, phase, B, C):
    w = [r for r in rows if (r["model"], r["device"], r["phase"], r["B"], r["C"]) == (model, device, phase, B, C)]
    # the one-GPU reference: the benchmarks' own row first (same run as the two-GPU rows), else the case study's
    ones = [r for r in w if r["kind"] == "one GPU" and r["ok"]]
    ref = next((r for r in ones if "case study" not in r["label"]), ones[0] if ones else None)
    w.sort(key=lambda r: (ORDER[r["kind"]], r["M"] if "M" in r else 0, r["label"]))
    unit = "ms/step" if phase == "decode" else "ms/prefill"
    what = "C = %d" % C if phase == "decode" else "prompts of %d tokens" % C
    lines = ["## B = %d, %s (%s), %s" % (B, what, phase, device), "",
             "| placement | GPUs | %s | tokens/s per GPU | vs one GPU | bound |" % unit,
             "|---|---:|---:|---:|---:|---|"]
    for r in w:
        if not r["ok"]:
            why = r["error"] or "failed"
            why = why if len(why) <= 100 else why[:99] + "…"  # the benchmark's log has the whole message
            lines.append("| %s | %d | (%s) | - | - | |" % (r["label"], r["gpus"], why))
            continue
        vs = "%.2f" % (r["rate"] / ref["rate"]) if ref else "-"
        lines.append("| %s | %d | %.3f | %s | %s | %s |" % (r["label"], r["gpus"], r["ms"], fmt_rate(r["rate"]), vs,
                                                            r["bound"]))
    ok = [r for r in w if r["ok"]]
    lines.append("")
    if not ok:
        lines.append("No placement ran.")
        return lines, None
    win = max(ok, key=lambda r: r["rate"])
    line = "**Winner: %s**, %s tokens/s per GPU" % (win["label"], fmt_rate(win["rate"]))
    if ref and win["kind"] != "one GPU":
        line += ", %.2fx the one-GPU engine" % (win["rate"] / ref["rate"])
    lines.append(line + ".")
    apart = []
    best = lambda k: max((r for r in ok if r["kind"] == k), key=lambda r: r["rate"], default=None)
    seq = next((r for r in ok if r["kind"] == "one GPU" and "case study" in r["label"]), None)
    green = best("green")
    if green and seq:
        apart.append("on one GPU, green partitions give %.2fx the sequential engine" % (green["rate"] / seq["rate"]))
    afd = best("AFD")
    if afd:
        others = [(k, best(k)) for k in ("TP", "PP")] + [("one GPU", ref)]
        vs = ["%.2fx %s" % (afd["rate"] / o["rate"], "DP" if k == "one GPU" else k) for k, o in others if o]
        apart.append("on two GPUs, AFD (%s) gives %s per GPU" % ("M = %d" % afd["M"], ", ".join(vs)))
    if apart:
        lines.append("Attention and FFN apart: " + "; ".join(apart) + ".")
    return lines, win


def report(rows):
    models = sorted({r["model"] for r in rows})
    out = ["# Attention and FFN apart, on one GPU and on two", "",
           "Tokens/s per GPU: a step's tokens over its median time, divided by the GPUs it holds; the one-GPU "
           "engine's rate is also data parallelism's per GPU (an engine on each GPU) where the model fits one "
           "GPU. Rows are compared only with rows of the same device. Floors are docs/ARCHITECTURE.md §5's, at "
           "the project's H100 rates. Sources: " + ", ".join(sorted({r["source"] for r in rows})) + ".", ""]
    summary = []
    for m in models:
        out += ["# %s" % m, ""]
        keys = sorted({(r["device"], r["phase"], r["B"], r["C"]) for r in rows if r["model"] == m},
                      key=lambda k: (k[0], k[1] != "decode", k[2], k[3]))
        for device, phase, B, C in keys:
            lines, win = workload_section(rows, m, device, phase, B, C)
            out += lines + [""]
            if win:
                summary.append("| %s | %s | %s | %d | %d | %s | %s |" % (m, device, phase, B, C, win["label"],
                                                                       fmt_rate(win["rate"])))
    out += ["# Winners", "", "| model | device | phase | B | C | winner | tokens/s per GPU |",
            "|---|---|---|---:|---:|---|---:|"]
    out += summary
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description="One report of every placement's --csv rows.")
    ap.add_argument("--out", help="write the report here (default: standard output)")
    ap.add_argument("csv", nargs="+", help="--csv files of decode_pipeline_case_study, gp_bench_tp, gp_bench_afd")
    a = ap.parse_args(argv)
    try:
        rows = read_all(a.csv)
    except ReportError as e:
        print("placement_report.py: %s" % e, file=sys.stderr)
        return 2
    if not rows:
        print("placement_report.py: no rows in %s" % ", ".join(a.csv), file=sys.stderr)
        return 2
    text = report(rows)
    if a.out:
        try:
            with open(a.out, "w") as f:
                f.write(text)
        except OSError as e:
            print("placement_report.py: --out %s: %s" % (a.out, e.strerror or e), file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
