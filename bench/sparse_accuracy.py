#!/usr/bin/env python3
"""What activation sparsity costs in accuracy on checkpoints.

For each checkpoint and sparsity S: `greenpipe calibrate` (random ids), then
`greenpipe generate --backend cpu` (the float32 reference, masking as the
engine does; calibrated on its fp32 activations) with and without `--sparsity`, greedy, on
a batch of random-id prompts. Reported per sequence and then summed:
- agree: greedy tokens equal to the dense run's, up to its first divergence
  (after one, the two runs read different inputs and are no longer compared);
- drift: max |sparse - dense| / max |dense| over the logits of the steps
  before the first divergence (the same inputs on both sides).

Usage: sparse_accuracy.py GREENPIPE [--models DIR,...] [--sparsity 0,0.25,0.4,0.5]
       [--batch 8] [--steps 24] [--prompt-len 12]
Prints a markdown table. Needs no GPU.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("sparse_accuracy: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    return r


def generate(gp, model, ids, steps, out, sparsity=None):
    cmd = [gp, "generate", "--model", model, "--backend", "cpu", "--prompt-ids", ids,
           "--steps", str(steps), "--dump-logits", out]
    if sparsity:
        cmd += ["--sparsity", sparsity]
    run(cmd)
    with open(out) as f:
        return json.load(f)


def compare(dense, sparse):
    """Per sequence: tokens agreeing up to the first divergence, the drift before it."""
    agree = total = 0
    drift = 0.0
    for s, (td, ts) in enumerate(zip(dense["tokens"], sparse["tokens"])):
        total += len(td)
        for t in range(len(td)):
            ld, ls = dense["logits"][s][t], sparse["logits"][s][t]
            m = max(abs(v) for v in ld) or 1.0
            drift = max(drift, max(abs(a - b) for a, b in zip(ld, ls)) / m)
            if td[t] != ts[t]:
                break
            agree += 1
    return agree, total, drift


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("greenpipe")
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "tests", "data")
    ap.add_argument("--models", default=",".join(os.path.join(data, m) for m in
                                                 ("tiny", "small-gqa", "long-gqa", "qwen2-tiny", "mistral-tiny")))
    ap.add_argument("--sparsity", default="0,0.25,0.4,0.5")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--prompt-len", type=int, default=12)
    a = ap.parse_args()
    if not 1 <= a.batch <= 16:
        sys.exit("sparse_accuracy: --batch %d: allowed 1..16 (larger decode batches run dense)" % a.batch)
    rng = random.Random(0)
    print("| model | S | tokens agreeing (before the first divergence) | logit drift before it |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            with open(os.path.join(model, "config.json")) as f:
                vocab = json.load(f)["vocab_size"]
            ids = ";".join(",".join(str(rng.randrange(vocab)) for _ in range(a.prompt_len)) for _ in range(a.batch))
            dense = generate(a.greenpipe, model, ids, a.steps, os.path.join(tmp, "dense.json"))
            for s in a.sparsity.split(","):
                cal = os.path.join(tmp, "cal.json")
                run([a.greenpipe, "calibrate", "--model", model, "--sparsity", s, "--tokens", "512", "--seq-len",
                     "32", "--dtype", "fp32", "--out", cal])
                sp = generate(a.greenpipe, model, ids, a.steps, os.path.join(tmp, "sparse.json"), cal)
                agree, total, drift = compare(dense, sp)
                print("| %s | %s | %d of %d (%.0f%%) | %.3g |" % (os.path.basename(model), s, agree, total,
                                                                   100.0 * agree / total, drift))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
