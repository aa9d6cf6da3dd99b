#!/usr/bin/env python3
"""Text prompts end to end: gen_text.py GREENPIPE CHECKPOINT copies the
checkpoint (vocabulary of at least 300) into a temporary directory with a
small byte-level BPE tokenizer.json written here (256 byte tokens, BOS and
EOS, 42 merges: 300 ids) and checks on the CPU backend (or the one named
by a third argument, cuda: exit 77, skipped, when no GPU is usable) that
- the prompt is tokenized with BOS and decodes back to its text, as HF's
  tokenizer(text) (against the tokenizers package too when it is installed),
- the streamed stdout is the decode of the dumped tokens, EOS left out,
- the tokens and logits are those of --prompt-ids with the same ids,
- an EOS id from generation_config.json (the token greedy decoding gives at
  step k) stops the sequence there, and in a batch only that sequence,
- --prompt-file sends the file's exact bytes,
- sampling with one seed repeats, draws inside top-k and top-p, and another
  seed differs,
- a checkpoint without tokenizer files is refused naming the files."""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

STEPS = 12
PROMPT = "Hello world, the end is near"


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()
U2B = {c: b for b, c in B2U.items()}
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("o", "n"), ("Ġ", "a"),
          ("r", "e"), ("e", "n"), ("Ġ", "s"), ("l", "l"), ("o", "r"), ("Ġ", "w"), ("Ġ", "o"), ("Ġ", "c"),
          ("i", "s"), ("e", "s"), ("Ġ", "b"), ("a", "t"), ("e", "d"), ("n", "d"), ("Ġ", "h"), ("i", "t"),
          ("Ġ", "f"), ("Ġ", "i"), ("a", "r"), ("o", "u"), ("Ġ", "m"), ("Ġ", "p"), ("l", "e"), ("Ġ", "d"),
          ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"), ("H", "e"), ("He", "ll"), ("Hell", "o"), ("Ġ", "n"),
          ("e", "a"), ("Ġn", "ea"), ("Ġ", "e")]
BOS, EOS = 0, 1


def tokenizer_json(specials=("<|bos|>", "<|eos|>"), bos="<|bos|>"):
    """The tokenizer.json: specials (ids 0, 1, ...), the 256 byte tokens, then
    as many merges as fill 300 ids; bos: the special the post-processor puts
    before every text (None: no post-processor). Returns it and id -> token."""
    vocab = {c: i for i, c in enumerate(specials)}
    for b in range(256):
        vocab[B2U[b]] = len(specials) + b
    merges = MERGES[:300 - len(vocab)]
    for a, b in merges:
        assert a in vocab and b in vocab, (a, b)
        vocab[a + b] = len(vocab)
    assert len(vocab) == 300
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
    split = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|" \
            r"\s*[\r\n]+|\s+(?!\S)|\s+"
    post = None if bos is None else {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(i, c) for i, c in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }, {i: t for t, i in vocab.items()}


def decode(ids, id2tok):
    """HF's decode(ids, skip_special_tokens=True) of this tokenizer."""
    raw = b"".join(bytes(U2B[c] for c in id2tok[i]) for i in ids if i not in (BOS, EOS))
    return raw.decode("utf-8", errors="replace")


def copy_checkpoint(ckpt, d):
    """The checkpoint's weights and JSON files (not the expected outputs) in
    d/model, where a test may add a tokenizer; returns that directory."""
    m = os.path.join(d, "model")
    os.mkdir(m)
    for f in os.listdir(ckpt):
        if f.endswith(".safetensors") or f.endswith(".json") and not f.startswith("expected"):
            shutil.copy(os.path.join(ckpt, f), m)
    return m


def fail(msg):
    sys.exit("FAIL: " + msg)


def skip_without_gpu(exe):
    """Exit 77 (CTest's skip code) when greenpipe finds no usable GPU."""
    if subprocess.run([exe, "devices"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        print("no usable GPU: skipped")
        sys.exit(77)


BACKEND = sys.argv[3] if len(sys.argv) > 3 else "cpu"


def run(exe, args, code=0):
    r = subprocess.run([exe, "generate", "--backend", BACKEND] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if r.returncode != code:
        fail("exit %d, wanted %d: %s\n%s" % (r.returncode, code, args, r.stderr.decode(errors="replace")))
    return r.stdout.decode("utf-8", errors="surrogateescape"), r.stderr.decode(errors="replace")


def dump(path):
    with open(path) as f:
        return json.load(f)


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    if BACKEND != "cpu":
        skip_without_gpu(exe)
    with tempfile.TemporaryDirectory() as d:
        m = copy_checkpoint(ckpt, d)
        tj, id2tok = tokenizer_json()
        with open(os.path.join(m, "tokenizer.json"), "w") as f:
            json.dump(tj, f, ensure_ascii=False)
        p = lambda name: os.path.join(d, name)

        # the prompt's ids: BOS, then a round trip of the text
        out, err = run(exe, ["--model", m, "--prompt", PROMPT, "--steps", str(STEPS), "--dump-logits", p("t.json"),
                             "--dump-prompt-logits", p("tp.json")])
        prompt_ids = dump(p("tp.json"))["prompts"][0]
        if prompt_ids[0] != BOS or decode(prompt_ids, id2tok) != PROMPT:
            fail("prompt ids %s are not BOS + the text" % prompt_ids)
        try:
            import tokenizers
            hf = tokenizers.Tokenizer.from_file(os.path.join(m, "tokenizer.json")).encode(PROMPT).ids
            if hf != prompt_ids:
                fail("prompt ids %s, HF's tokenizer gives %s" % (prompt_ids, hf))
        except ImportError:
            pass
        # stdout: the streamed decode of the generated tokens, EOS (config: 2) left out
        toks = dump(p("t.json"))["tokens"][0]
        stopped = toks[-1] == 2 and len(toks) <= STEPS
        if not stopped and len(toks) != STEPS:
            fail("%d tokens without an EOS, wanted %d" % (len(toks), STEPS))
        if out != decode(toks[:-1] if stopped else toks, id2tok) + "\n":
            fail("stdout %r is not the decode of %s" % (out, toks))

        # the same ids through --prompt-ids: the same tokens and logits (no EOS stop there)
        ids_arg = ",".join(map(str, prompt_ids))
        out_ids, _ = run(exe, ["--model", m, "--prompt-ids", ids_arg, "--steps", str(STEPS),
                               "--dump-logits", p("i.json")])
        ref = [int(v) for v in out_ids.split()]
        if len(ref) != STEPS or ref[:len(toks)] != toks:
            fail("--prompt-ids gives %s, the text prompt %s" % (ref, toks))
        if dump(p("i.json"))["logits"][0][:len(toks)] != dump(p("t.json"))["logits"][0]:
            fail("the text prompt's logits are not those of --prompt-ids")

        # EOS from generation_config.json at step k: stops there, not printed
        k = next(i for i in range(2, STEPS) if ref[i] not in ref[:i] and ref[i] not in (BOS, EOS))
        with open(os.path.join(m, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": BOS, "eos_token_id": [ref[k], 299]}, f)
        out, err = run(exe, ["--model", m, "--prompt", PROMPT, "--steps", str(STEPS), "--dump-logits", p("e.json")])
        if dump(p("e.json"))["tokens"][0] != ref[:k + 1]:
            fail("EOS %d at step %d: tokens %s" % (ref[k], k, dump(p("e.json"))["tokens"][0]))
        if out != decode(ref[:k], id2tok) + "\n" or "EOS id(s) from generation_config.json: %d 299" % ref[k] not in err:
            fail("EOS %d at step %d: stdout %r, stderr %s" % (ref[k], k, out, err))
        # --ignore-eos: all steps again
        out, _ = run(exe, ["--model", m, "--prompt", PROMPT, "--steps", str(STEPS), "--ignore-eos"])
        if out != decode(ref, id2tok) + "\n":
            fail("--ignore-eos: stdout %r" % out)

        # a batch: the stopped sequence's line comes first, the other runs on with its own tokens
        other = "The cat sat on the mat"
        out2, _ = run(exe, ["--model", m, "--prompt", other, "--steps", str(STEPS), "--ignore-eos",
                            "--dump-logits", p("o.json")])
        oref = dump(p("o.json"))["tokens"][0]
        out, _ = run(exe, ["--model", m, "--prompt", other, "--prompt", PROMPT, "--steps", str(STEPS),
                           "--dump-logits", p("b.json")])
        bt = dump(p("b.json"))["tokens"]
        ostop = next((i for i, t in enumerate(oref) if t in (ref[k], 299)), None)
        want1 = oref[:ostop + 1] if ostop is not None else oref
        if bt[1] != ref[:k + 1] or bt[0] != want1:
            fail("batch tokens %s, wanted %s and %s" % (bt, want1, ref[:k + 1]))
        lines = {0: "[0] " + decode(want1[:ostop] if ostop is not None else want1, id2tok) + "\n",
                 1: "[1] " + decode(ref[:k], id2tok) + "\n"}
        order = sorted([0, 1], key=lambda s: (len(bt[s]), s))
        if out != lines[order[0]] + lines[order[1]]:
            fail("batch stdout %r, wanted %r" % (out, lines[order[0]] + lines[order[1]]))

        # --prompt-file: the exact bytes, trailing newline included
        with open(p("prompt.txt"), "wb") as f:
            f.write(b"Hello world\n")
        run(exe, ["--model", m, "--prompt-file", p("prompt.txt"), "--steps", "1", "--dump-prompt-logits", p("f.json")])
        run(exe, ["--model", m, "--prompt", "Hello world\n", "--steps", "1", "--dump-prompt-logits", p("g.json")])
        if dump(p("f.json")) != dump(p("g.json")) or decode(dump(p("f.json"))["prompts"][0], id2tok) != "Hello world\n":
            fail("--prompt-file and --prompt of the same bytes differ")

        # sampling: repeats per seed, draws inside top-k and the nucleus
        samp = ["--model", m, "--prompt", PROMPT, "--steps", "16", "--ignore-eos", "--temperature", "1.5",
                "--top-k", "40", "--top-p", "0.9"]
        s1, _ = run(exe, samp + ["--seed", "7", "--dump-logits", p("s1.json")])
        s2, _ = run(exe, samp + ["--seed", "7", "--dump-logits", p("s2.json")])
        s3, _ = run(exe, samp + ["--seed", "8", "--dump-logits", p("s3.json")])
        d1 = dump(p("s1.json"))
        if s1 != s2 or d1 != dump(p("s2.json")):
            fail("the same seed gave different tokens")
        if d1["tokens"] == dump(p("s3.json"))["tokens"]:
            fail("seeds 7 and 8 gave the same 16 tokens")
        if s1 != decode(d1["tokens"][0], id2tok) + "\n":
            fail("sampled stdout is not the decode of the sampled tokens")
        for t, row in zip(d1["tokens"][0], d1["logits"][0]):
            order = sorted(range(len(row)), key=lambda v: (-row[v], v))
            rank = order.index(t)
            w = [math.exp((row[v] - row[order[0]]) / 1.5) for v in order[:40]]
            cum, keep = 0.0, 0
            while keep < 40:
                cum += w[keep]
                keep += 1
                if cum >= 0.9 * sum(w):
                    break
            if rank >= keep:
                fail("sampled token %d has rank %d, outside the %d kept" % (t, rank, keep))

        # no tokenizer files: refused, naming them
        os.remove(os.path.join(m, "tokenizer.json"))
        _, err = run(exe, ["--model", m, "--prompt", PROMPT, "--steps", "2"], code=2)
        if "tokenizer.json" not in err or "tokenizer.model" not in err:
            fail("no tokenizer: message %s" % err)
    print("text prompts: BOS + text, streamed decode, --prompt-ids' tokens and logits, EOS at step %d, batch, "
          "--prompt-file, seeded sampling, missing tokenizer: ok" % k)


if __name__ == "__main__":
    main()
