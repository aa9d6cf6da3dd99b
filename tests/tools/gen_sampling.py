#!/usr/bin/env python3
"""The llama-cli style flags of generate end to end on the CPU backend:
gen_sampling.py GREENPIPE CHECKPOINT copies the checkpoint beside
gen_text.py's byte-level BPE tokenizer.json and checks that
- --stop ends a sequence where its text first holds the string, printed up
  to it, the summary saying "stop string"; a string whose start appears but
  never completes holds nothing back at the end; several sequences each
  stop on their own,
- --repeat-penalty with greedy decoding takes the argmax of llama.cpp's
  penalised logits (recomputed here from the dumped model logits) over the
  last --repeat-last-n tokens, prompt included, and -1 over all of them,
- --min-p alone samples at temperature 1 (the status line says so), every
  draw inside the min-p set of the dumped logits,
- --threads 1 gives the default's tokens and the status line its count,
- the summary gives each sequence's tokens, stop reason, TTFT and rate."""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_text  # noqa: E402

PROMPT = "Hello world, the end is near"


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(exe, args, code=0):
    r = subprocess.run([exe, "generate"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if r.returncode != code:
        fail("exit %d, wanted %d: %s\n%s" % (r.returncode, code, args, r.stderr.decode(errors="replace")))
    return r.stdout, r.stderr.decode(errors="replace")


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def penalised_argmax(row, ctx, pen, last_n):
    window = ctx if last_n < 0 else ctx[-last_n:] if last_n else []
    lg = list(row)
    p = f32(pen)
    for t in set(window):
        lg[t] = f32(lg[t] * p) if lg[t] <= 0 else f32(lg[t] / p)
    return max(range(len(lg)), key=lambda v: (lg[v], -v))


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        m = gen_text.copy_checkpoint(ckpt, d)
        tj, id2tok = gen_text.tokenizer_json()
        with open(os.path.join(m, "tokenizer.json"), "w") as f:
            json.dump(tj, f, ensure_ascii=False)
        p = lambda name: os.path.join(d, name)
        base = ["--model", m, "--steps", "24", "--ignore-eos"]

        # the greedy text, then a stop string from its middle
        out, err = run(exe, base + ["--prompt", PROMPT, "--dump-logits", p("g.json")])
        text = out[:-1]
        if "24 token(s) generated (stop reason: length); time to first token" not in err or "tokens/s" not in err:
            fail("summary line: %s" % err)
        ok = lambda b: b"\x00" not in b and b"\n" not in b  # an argument, and one output line
        stop = next(text[i:i + 3] for i in range(6, len(text) - 3) if ok(text[i:i + 3]))
        cut = text.find(stop)
        out, err = run(exe, base + ["--prompt", PROMPT, "--stop", stop, "--stop", b"\x01never\x02"])
        if out != text[:cut] + b"\n" or "(stop reason: stop string)" not in err:
            fail("--stop %r: stdout %r, wanted %r; %s" % (stop, out, text[:cut] + b"\n", err))
        # a string whose first bytes show up but never complete: held back, then printed at the end
        near = next(text[i:i + 2] for i in range(len(text) - 2, 0, -1) if ok(text[i:i + 2])) + b"\x01"
        out, err = run(exe, base + ["--prompt", PROMPT, "--stop", near])
        if out != text + b"\n" or "(stop reason: length)" not in err:
            fail("--stop %r never completing: stdout %r, wanted %r" % (near, out, text + b"\n"))
        # two sequences: each cut at its own occurrence
        other = "The cat sat on the mat"
        o2, _ = run(exe, base + ["--prompt", other])
        otext = o2[:-1]
        out, err = run(exe, base + ["--prompt", PROMPT, "--prompt", other, "--stop", stop])
        ocut = otext.find(stop)
        a, b = b"[0] " + text[:cut] + b"\n", b"[1] " + (otext[:ocut] if ocut >= 0 else otext) + b"\n"
        if out not in (a + b, b + a) or "greenpipe: [0] " not in err or "(stop reason: stop string)" not in err:
            fail("two sequences with --stop: %r, wanted %r and %r" % (out, a, b))

        # repeat penalty, greedy: the argmax of the penalised dumped logits
        ids = "5,17,42,7,99,17,5"
        prompt = [int(v) for v in ids.split(",")]
        plain, _ = run(exe, ["--model", m, "--prompt-ids", ids, "--steps", "16"])
        # (R, N, whether greedy's tokens change: the whole context holds a token greedy picks late)
        for pen, last_n, changes in (("3", "8", False), ("3", "-1", True), ("0.5", "8", True)):
            out, err = run(exe, ["--model", m, "--prompt-ids", ids, "--steps", "16", "--repeat-penalty", pen,
                                 "--repeat-last-n", last_n, "--dump-logits", p("r.json")])
            toks = [int(v) for v in out.split()]
            with open(p("r.json")) as f:
                dumped = json.load(f)
            if dumped["tokens"][0] != toks:
                fail("dumped tokens %s, printed %s" % (dumped["tokens"][0], toks))
            for i, row in enumerate(dumped["logits"][0]):
                want = penalised_argmax(row, prompt + toks[:i], float(pen), int(last_n))
                if toks[i] != want:
                    fail("--repeat-penalty %s --repeat-last-n %s: token %d is %d, the penalised argmax %d" %
                         (pen, last_n, i, toks[i], want))
            if (toks != [int(v) for v in plain.split()]) != changes:
                fail("--repeat-penalty %s --repeat-last-n %s: tokens %s, without it %s" % (pen, last_n, toks, plain))
            if "repeat penalty %s over " % pen not in err or "before the greedy choice" not in err:
                fail("repeat penalty status line: %s" % err)

        # --min-p alone: sampling at temperature 1, inside the min-p set
        out, err = run(exe, ["--model", m, "--prompt-ids", ids, "--steps", "24", "--min-p", "0.3", "--seed", "4",
                             "--dump-logits", p("m.json")])
        if not re.search(r"sampling at temperature 1 \(the default when --top-k, --top-p or --min-p is given\), "
                         r"top-k 0, top-p 1, min-p 0.3, seed 4", err):
            fail("min-p status line: %s" % err)
        with open(p("m.json")) as f:
            dumped = json.load(f)
        for t, row in zip(dumped["tokens"][0], dumped["logits"][0]):
            top = max(row)
            if math.exp(row[t] - top) < 0.3 * (1 - 1e-6):
                fail("token %d has probability %g of the top's, below min-p 0.3" % (t, math.exp(row[t] - top)))

        # --threads: the same tokens, the count on the status line
        out1, err1 = run(exe, ["--model", m, "--prompt-ids", ids, "--steps", "8", "--threads", "1"])
        if out1.split() != plain.split()[:8]:
            fail("--threads 1 gives %r, the default %r" % (out1, plain))
        if "; 1 worker thread(s);" not in err1:
            fail("--threads 1 status line: %s" % err1)
    print("--stop, --repeat-penalty, --min-p, --threads and the summary: ok")


if __name__ == "__main__":
    main()
