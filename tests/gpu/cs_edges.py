#!/usr/bin/env python3
"""Where a pipelined step's time goes, from a case-study --json report: for
each pipelined row, the fill (uploads, embedding, QKVO_F's QKV(0), before the
first attention stage starts; then that stage), the body, the drain (the
last FFN stage) and the tail (LM head, argmax, copy-back), in ms of the
traced step. Analysis only; run on the GPU machine by fill_drain_run.sh."""
import json
import sys

for path in sys.argv[1:]:
    rep = json.load(open(path))
    print(path)
    print("  row                          ms/step  vs seq | pre   A(0,0) body    drain  tail  | A/layer F/layer")
    for r in rep["rows"]:
        name = "seq" if r["seq"] else f"{r['split']['a_got']}:{r['split']['f_got']} {r['placement']} M={r['M']}"
        if not r["ok"]:
            print(f"  {name:28s} failed: {r['error']}")
            continue
        sp = r.get("speedup_vs_seq")
        line = f"  {name:28s} {r['ms_median']:7.2f}  {'-' if sp is None else format(sp, '.3f'):>6s}"
        t = r.get("trace")
        if t:
            ab, ae, fb, fe = t["attn_begin_ms"], t["attn_end_ms"], t["ffn_begin_ms"], t["ffn_end_ms"]
            L, M = t["n_layers"], t["M"]
            pre, a00 = ab[0][0], ae[0][0] - ab[0][0]
            drain = fe[L - 1][M - 1] - fb[L - 1][M - 1]
            tail = t["step_ms"] - fe[L - 1][M - 1]
            body = fb[L - 1][M - 1] - ae[0][0]
            line += f" | {pre:5.2f} {a00:5.2f}  {body:6.2f}  {drain:5.2f}  {tail:5.2f} |"
            line += f" {r['attn_ms_per_layer']:.3f}   {r['ffn_ms_per_layer']:.3f}"
        print(line)
