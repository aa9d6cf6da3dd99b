#!/usr/bin/env python3
"""greenpipe generate --cpu-ffn on the cuda backend (exit 77, skipped, when no
GPU is usable): gen_cpu_ffn.py GREENPIPE. The tiny preset calibrated at
S = 0.5, then generated with --sparsity alone and with a quarter of each
layer's FFN neurons hot (24K: tiny's neuron is 3 x 64 x 2 bytes, 2 layers,
so 32 of 128): the run succeeds, says what it split on the status line and
its statistics at the end, and its greedy tokens mostly agree with the
all-GPU sparse run's (both --sparse-always: the masks on every step) (each side masks its own roundings, so a near-tie may
flip; test_engine_cpu_ffn.c holds the logits to a bound). Then beyond VRAM:
--vram-budget 144K with --cpu-ffn 24K inside it (the FFN weights on demand,
the attention projections' transposed copies beside the budget), against the
resident --cpu-ffn run of a calibration whose qkv and o thresholds are 0: the
status line says so and the tokens mostly agree."""
import json
import os
import re
import subprocess
import sys
import tempfile

from gen_text import skip_without_gpu

PROMPTS = "5,17,42,7;11,200,2;3,3,9,1,4"
STEPS = 12


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(exe, args):
    r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("exit %d: %s\n%s" % (r.returncode, " ".join(args), r.stderr))
    return r.stdout, r.stderr


def main():
    exe = sys.argv[1]
    skip_without_gpu(exe)
    with tempfile.TemporaryDirectory() as d:
        cal = os.path.join(d, "cal.json")
        run(exe, ["calibrate", "--model", "tiny", "--sparsity", "0.5", "--tokens", "256", "--out", cal])
        gen = ["generate", "--backend", "cuda", "--model", "tiny", "--prompt-ids", PROMPTS, "--steps", str(STEPS),
               "--sparsity", cal, "--sparse-always"]
        sparse, _ = run(exe, gen)
        out, err = run(exe, gen + ["--cpu-ffn", "24K", "--cpu-ffn-threads", "2"])
        with open(cal) as f:
            doc = json.load(f)
        for layer in doc["layers"]:
            layer["qkv"] = layer["o"] = 0.0
        cal_ffn = os.path.join(d, "cal_ffn.json")
        with open(cal_ffn, "w") as f:
            json.dump(doc, f)
        ffn = ["generate", "--backend", "cuda", "--model", "tiny", "--prompt-ids", PROMPTS, "--steps", str(STEPS),
               "--sparsity", cal_ffn, "--sparse-always", "--cpu-ffn", "24K", "--cpu-ffn-threads", "2"]
        resident, _ = run(exe, ffn)
        streamed, serr = run(exe, ffn + ["--vram-budget", "144K"])
    if "within the VRAM budget" not in serr or "transposed copies beside the budget" not in serr:
        fail("no streamed split on the status line:\n" + serr)
    if not re.search(r"cpu-ffn: 32 of 128 neurons per layer hot .*; (\d+) step\(s\) with a CPU share", serr):
        fail("no cpu-ffn statistics line on streamed weights:\n" + serr)
    a, b = resident.split(), streamed.split()
    same_s = sum(x == y for x, y in zip(a, b))
    if len(a) != len(b) or same_s < 0.8 * len(a):
        fail("tokens with --vram-budget 144K --cpu-ffn 24K:\n%s\nresident:\n%s" % (streamed, resident))
    if "CPU-assisted FFN: 32 of 128 neurons per layer hot" not in err:
        fail("no split on the status line:\n" + err)
    m = re.search(r"cpu-ffn: 32 of 128 neurons per layer hot .*; (\d+) step\(s\) with a CPU share: hot hit rate "
                  r"([0-9.]+)", err)
    if not m:
        fail("no cpu-ffn statistics line:\n" + err)
    # the first token comes from the prefill; an EOS may end the run sooner
    if not 1 <= int(m.group(1)) <= STEPS - 1 or not 0.0 < float(m.group(2)) < 1.0:
        fail("cpu-ffn statistics: %s steps (wanted 1..%d), hit rate %s (wanted in (0, 1)):\n%s"
             % (m.group(1), STEPS - 1, m.group(2), err))
    a, b = sparse.split(), out.split()
    same = sum(x == y for x, y in zip(a, b))
    if len(a) != len(b) or same < 0.8 * len(a):
        fail("tokens with --cpu-ffn:\n%s\nwithout:\n%s" % (out, sparse))
    print("ok: %d of %d tokens as the all-GPU sparse run; %s; streamed: %d of %d as resident"
          % (same, len(a), m.group(0), same_s, len(resident.split())))


if __name__ == "__main__":
    main()
