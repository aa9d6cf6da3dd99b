#!/usr/bin/env python3
"""greenpipe calibrate end to end: calibrate.py GREENPIPE DATA_DIR checks
- on the tiny preset and the tiny checkpoint (random ids): the file's format,
  target, tokens, shape and layers, each projection's recorded share of
  dropped inputs within 0.01 of S, the down frequencies averaging the share
  kept, a seed that repeats the file byte for byte and another that does not,
  S = 0 giving all thresholds 0, and the printed summary;
- on small-gqa copied beside gen_text.py's byte-level BPE tokenizer.json,
  --prompts FILE: the tokens are each non-empty line's ids with BOS (as
  greenpipe tokenize gives them, CRLF and empty lines handled), cut at
  --tokens, a note when the file holds fewer; a file with no prompt and a
  line of invalid UTF-8 are refused naming the line."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_text  # noqa: E402  (its tokenizer.json)


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(exe, args, code=0):
    r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != code:
        fail("exit %d, wanted %d: %s\n%s%s" % (r.returncode, code, args, r.stdout.decode(errors="replace"),
                                              r.stderr.decode(errors="replace")))
    return r.stdout.decode(), r.stderr.decode()


def load(path):
    with open(path) as f:
        return json.load(f)


def check_file(d, S, tokens, n_layers, ffn, what):
    if d["format"] != "greenpipe-sparsity" or d["version"] != 1:
        fail("%s: format %s version %s" % (what, d["format"], d["version"]))
    if d["target"] != S or d["tokens"] != tokens or len(d["layers"]) != n_layers:
        fail("%s: target %s tokens %s layers %d" % (what, d["target"], d["tokens"], len(d["layers"])))
    if d["shape"]["n_layers"] != n_layers or d["shape"]["ffn"] != ffn:
        fail("%s: shape %s" % (what, d["shape"]))
    for l, layer in enumerate(d["layers"]):
        for p in ("qkv", "o", "gate_up", "down"):
            z = layer["zeros"][p]
            if abs(z - S) > 0.01:
                fail("%s layer %d %s drops %.4f, S = %g" % (what, l, p, z, S))
            if (layer[p] > 0) != (S > 0):
                fail("%s layer %d %s threshold %g at S = %g" % (what, l, p, layer[p], S))
        if len(layer["freq"]) != ffn:
            fail("%s layer %d: %d frequencies, ffn %d" % (what, l, len(layer["freq"]), ffn))
        kept = sum(layer["freq"]) / ffn
        if abs(kept - (1 - layer["zeros"]["down"])) > 1e-5:
            fail("%s layer %d: mean frequency %.6f, down keeps %.6f" % (what, l, kept, 1 - layer["zeros"]["down"]))


def random_ids(exe, data, d):
    for model, what in (("tiny", "preset"), (os.path.join(data, "tiny"), "checkpoint")):
        a, b, c, z = (os.path.join(d, "%s_%s.json" % (what, x)) for x in "abcz")
        out, _ = run(exe, ["calibrate", "--model", model, "--sparsity", "0.5", "--out", a, "--threads", "2"])
        for p in ("qkv", "o", "gate_up", "down"):
            if not any(line.split()[:1] == [p] for line in out.splitlines()):
                fail("%s: summary lacks %s:\n%s" % (what, p, out))
        if "512 tokens" not in out or "wrote " + a not in out:
            fail("%s: summary:\n%s" % (what, out))
        check_file(load(a), 0.5, 512, 2, 128, what)
        extra = ["--seed", "3"] if what == "preset" else []
        run(exe, ["calibrate", "--model", model, "--sparsity", "0.5", "--out", b] + extra)
        same = open(a, "rb").read() == open(b, "rb").read()
        if same != (what == "checkpoint"):
            fail("%s: seed 0 and %s give %s files" % (what, extra or "seed 0", "the same" if same else "other"))
        run(exe, ["calibrate", "--model", model, "--sparsity", "0.5", "--out", c, "--seed", "9"])
        if load(a)["layers"] == load(c)["layers"]:
            fail("%s: seeds 0 and 9 give the same thresholds" % what)
        run(exe, ["calibrate", "--model", model, "--sparsity", "0", "--out", z, "--tokens", "100", "--seq-len", "30"])
        check_file(load(z), 0, 100, 2, 128, what + " S=0")


def prompts(exe, data, d):
    m = os.path.join(d, "model")
    os.mkdir(m)
    src = os.path.join(data, "small-gqa")
    for f in os.listdir(src):
        if f.endswith(".safetensors") or f.endswith(".json") and not f.startswith("expected"):
            shutil.copy(os.path.join(src, f), m)
    with open(os.path.join(m, "tokenizer.json"), "w") as f:
        json.dump(gen_text.tokenizer_json()[0], f, ensure_ascii=False)
    lines = ["Hello world, the end is near", "", "the cat sat on the mat\r", "an ordinary third prompt"]
    pf = os.path.join(d, "prompts.txt")
    with open(pf, "wb") as f:
        f.write("\n".join(lines).encode() + b"\n\n")
    counts = []
    for line in lines:
        text = line.rstrip("\r")
        if text:
            out, _ = run(exe, ["tokenize", "--model", m, "--text", text])
            ids = out.split()
            if ids[0] != str(gen_text.BOS):
                fail("tokenize gives no BOS for %r" % text)
            counts.append(len(ids))
    total = sum(counts)
    o = os.path.join(d, "p.json")
    out, err = run(exe, ["calibrate", "--model", m, "--sparsity", "0.4", "--out", o, "--prompts", pf])
    if "holds %d tokens, fewer than --tokens 512" % total not in err:
        fail("no note of the short prompts file:\n" + err)
    doc = load(o)
    if doc["tokens"] != total or "prompts " + pf not in doc["source"] or "3 line(s)" not in doc["source"]:
        fail("prompts: tokens %d (want %d), source %r" % (doc["tokens"], total, doc["source"]))
    if doc["model"] != "model" or len(doc["layers"]) != 3:
        fail("prompts: model %r, %d layers" % (doc["model"], len(doc["layers"])))
    cut = counts[0] + 2  # into the second prompt
    run(exe, ["calibrate", "--model", m, "--sparsity", "0.4", "--out", o, "--prompts", pf, "--tokens", str(cut)])
    doc = load(o)
    if doc["tokens"] != cut or "2 line(s)" not in doc["source"]:
        fail("--tokens %d: tokens %d, source %r" % (cut, doc["tokens"], doc["source"]))

    empty = os.path.join(d, "empty.txt")
    with open(empty, "w") as f:
        f.write("\n\r\n\n")
    _, err = run(exe, ["calibrate", "--model", m, "--sparsity", "0.4", "--out", o, "--prompts", empty], 2)
    if "holds no prompt" not in err:
        fail("empty prompts file: " + err)
    bad = os.path.join(d, "bad.txt")
    with open(bad, "wb") as f:
        f.write(b"fine\nab\xffc\n")
    _, err = run(exe, ["calibrate", "--model", m, "--sparsity", "0.4", "--out", o, "--prompts", bad], 2)
    if "line 2: " not in err or "UTF-8" not in err:
        fail("invalid UTF-8: " + err)


def main():
    exe, data = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        random_ids(exe, data, d)
        prompts(exe, data, d)
    print("ok")


if __name__ == "__main__":
    main()
