#!/usr/bin/env python3
"""greenpipe generate prefills all prompts in one batched call; this checks
that batching changes nothing: prefill_same.py GREENPIPE MODEL runs several
prompts of different lengths together and each alone (a one-prompt call is
what the per-sequence prefill was) and requires the same generated tokens,
--dump-logits byte for byte, the same --dump-prompt-logits, and that the
last prompt position's logits are the first generated token's."""
import json
import os
import subprocess
import sys
import tempfile

PROMPTS = ["5,17,42,7,99", "11", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20", "200,2,9"]
STEPS = "4"


def run(exe, model, prompts, d, tag):
    logits, prompt_logits = os.path.join(d, tag + ".json"), os.path.join(d, tag + "_prompt.json")
    out = subprocess.run([exe, "generate", "--model", model, "--prompt-ids", ";".join(prompts), "--steps", STEPS,
                          "--dump-logits", logits, "--dump-prompt-logits", prompt_logits],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(logits) as f:
        raw = f.read()
    with open(prompt_logits) as f:
        return out.stdout, raw, json.load(f)


def split_dump(raw):
    """The compact dump's one sequence: its tokens and logits text."""
    head, mid = '{"tokens":[', '],"logits":['
    if not raw.startswith(head) or not raw.endswith("]}") or mid not in raw:
        sys.exit("unexpected --dump-logits layout: %s..." % raw[:80])
    tokens, logits = raw[len(head):-2].split(mid, 1)
    return tokens, logits


def main():
    exe, model = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        out, raw, prompt = run(exe, model, PROMPTS, d, "all")
        alone = [run(exe, model, [p], d, "alone%d" % i) for i, p in enumerate(PROMPTS)]
    if out != "".join(a[0] for a in alone):
        sys.exit("generated tokens differ:\n together:\n%s alone:\n%s" % (out, "".join(a[0] for a in alone)))
    parts = [split_dump(a[1]) for a in alone]
    want = '{"tokens":[' + ",".join(t for t, _ in parts) + '],"logits":[' + ",".join(l for _, l in parts) + "]}"
    if raw != want:
        sys.exit("--dump-logits of the batched prefill is not byte-identical to the prompts' own dumps")
    dump = json.loads(raw)
    for s, p in enumerate(PROMPTS):
        ids = [int(v) for v in p.split(",")]
        if prompt["prompts"][s] != ids or len(prompt["logits"][s]) != len(ids):
            sys.exit("--dump-prompt-logits: sequence %d has %d rows for prompt %s" % (s, len(prompt["logits"][s]), ids))
        if prompt["logits"][s] != alone[s][2]["logits"][0]:
            sys.exit("--dump-prompt-logits: sequence %d differs from its prompt prefilled alone" % s)
        if prompt["logits"][s][-1] != dump["logits"][s][0]:
            sys.exit("sequence %d: the last prompt position's logits are not those of the first generated token" % s)
    print("%d prompts of lengths %s: tokens, --dump-logits (byte for byte) and --dump-prompt-logits equal to "
          "each prompt alone" % (len(PROMPTS), [len(p.split(",")) for p in PROMPTS]))


if __name__ == "__main__":
    main()
