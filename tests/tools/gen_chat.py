#!/usr/bin/env python3
"""Chat end to end on the CPU backend (or the one a third argument names; cuda:
exit 77, skipped, without a GPU): gen_chat.py GREENPIPE CHECKPOINT copies
the checkpoint (vocabulary of 300) into a temporary directory with a small
byte-level BPE tokenizer.json holding ChatML's special tokens and a
tokenizer_config.json with Qwen2's chat_template, then checks that
- generate --chat prefills the template's rendering of --system and the
  prompt, tokenized with no BOS added (greenpipe tokenize's ids of it),
- greenpipe chat answers each line, keeps the KV cache between turns
  (turn 2 prefills only the end of answer 1 and the new turn), and its
  answer to turn 2 is what generate gives for the whole conversation's ids,
- a message beyond --max-context is dropped and the conversation goes on,
- the template's end-of-turn id ends an answer of generate --chat and of
  chat, unprinted, and chat's next turn prefills the text after it,
- the refusals: chat with a prompt flag, on a preset, an unknown
  --chat-template, no chat template, generate's chat flags without --chat."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_text import U2B, copy_checkpoint, skip_without_gpu  # noqa: E402
from gen_text import tokenizer_json as gen_text_tokenizer  # noqa: E402

IM_START, IM_END, EOT = 0, 1, 2  # <|im_start|>, <|im_end|>, <|endoftext|>
SYSTEM_DEFAULT = "You are a helpful assistant."


def tokenizer_json():
    return gen_text_tokenizer(specials=("<|im_start|>", "<|im_end|>", "<|endoftext|>"), bos=None)


def decode(ids, id2tok):
    raw = b"".join(bytes(U2B[c] for c in id2tok[i]) for i in ids if i > EOT)
    return raw.decode("utf-8", errors="replace")


def render(msgs):
    """Qwen2's template: a default system message when none is given."""
    out = ""
    if msgs[0][0] != "system":
        out += "<|im_start|>system\n%s<|im_end|>\n" % SYSTEM_DEFAULT
    for role, text in msgs:
        out += "<|im_start|>%s\n%s<|im_end|>\n" % (role, text)
    return out + "<|im_start|>assistant\n"


def chat_checkpoint(ckpt, d):
    """ckpt copied into d/model with the ChatML tokenizer, EOS <|endoftext|>
    and Qwen2's chat template, and into d/bare the same without
    tokenizer_config.json. Returns (model dir, bare dir, id -> token)."""
    templates = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat",
                                            "templates.json")))
    m = copy_checkpoint(ckpt, d)
    tj, id2tok = tokenizer_json()
    with open(os.path.join(m, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(m, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": EOT}, f)
    bare = os.path.join(d, "bare")
    shutil.copytree(m, bare)
    with open(os.path.join(m, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": templates["qwen2"]["template"], "eos_token": "<|im_end|>"}, f)
    return m, bare, id2tok


def fail(msg):
    sys.exit("FAIL: " + msg)


BACKEND = sys.argv[3] if len(sys.argv) > 3 else "cpu"


def run(exe, args, code=0, stdin=None):
    if args[0] in ("chat", "generate"):
        args = [args[0], "--backend", BACKEND] + args[1:]
    r = subprocess.run([exe] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if r.returncode != code:
        fail("exit %d, wanted %d: %s\n%s" % (r.returncode, code, args, r.stderr.decode(errors="replace")))
    return r.stdout.decode("utf-8", errors="surrogateescape"), r.stderr.decode(errors="replace")


def turn_ids(err, turn, what):
    m = re.search(r"greenpipe: turn %d %s[^(]*\((\d+)\):([ 0-9]*)\n" % (turn, what), err)
    if not m:
        fail("no turn %d %s ids in:\n%s" % (turn, what, err))
    ids = [int(v) for v in m.group(2).split()]
    if len(ids) != int(m.group(1)):
        fail("turn %d %s: %d ids, the line says %s" % (turn, what, len(ids), m.group(1)))
    return ids


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    if BACKEND != "cpu":
        skip_without_gpu(exe)
    with tempfile.TemporaryDirectory() as d:
        m, bare, id2tok = chat_checkpoint(ckpt, d)
        tok = lambda text: [int(v) for v in run(exe, ["tokenize", "--model", m, "--text", text])[0].split()]

        # generate --chat: the rendering of --system and the prompt, no BOS added
        out, err = run(exe, ["generate", "--model", m, "--chat", "--system", "Be brief.", "--prompt", "Hello",
                             "--steps", "6", "--dump-prompt-logits", os.path.join(d, "p.json")])
        want = tok(render([("system", "Be brief."), ("user", "Hello")]))
        got = json.load(open(os.path.join(d, "p.json")))["prompts"][0]
        if got != want or got[0] != IM_START:
            fail("generate --chat prefilled %s, wanted %s" % (got, want))
        if "chat template qwen2; answers end at end-of-turn id(s) 1" not in err:
            fail("generate --chat: no template line in\n" + err)

        # chat: two turns; the second prefills only its own tokens
        steps = 6
        out, err = run(exe, ["chat", "--model", m, "--verbose-prompt", "--steps", str(steps)],
                       stdin=b"Hello\n\nHow are you\n")
        pf1, gen1 = turn_ids(err, 1, "prefill"), turn_ids(err, 1, "generated")
        pf2, gen2 = turn_ids(err, 2, "prefill"), turn_ids(err, 2, "generated")
        if pf1 != tok(render([("user", "Hello")])):
            fail("turn 1 prefilled %s" % pf1)
        if "whole conversation" in err or "turn 3" in err:
            fail("turn 2 re-prefilled the conversation, or an empty line made a turn:\n" + err)
        stopped1 = gen1[-1] in (IM_END, EOT)
        reply1 = decode(gen1[:-1] if stopped1 else gen1, id2tok)
        delta = tok("<|im_end|>\n<|im_start|>user\nHow are you<|im_end|>\n<|im_start|>assistant\n")
        if pf2 != ([] if stopped1 else [gen1[-1]]) + delta:
            fail("turn 2 prefilled %s, wanted the end of answer 1 and %s" % (pf2, delta))
        stopped2 = gen2[-1] in (IM_END, EOT)
        if out != reply1 + "\n" + decode(gen2[:-1] if stopped2 else gen2, id2tok) + "\n":
            fail("chat stdout %r" % out)
        # the kept cache answers as the whole conversation prefilled at once
        full = pf1 + gen1[:-1] + pf2
        ref, _ = run(exe, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, full)),
                           "--steps", str(len(gen2))])
        if [int(v) for v in ref.split()] != gen2:
            fail("turn 2 gave %s, the whole conversation's ids give %s" % (gen2, ref))
        for t in (1, 2):
            if not re.search(r"greenpipe: turn %d: \d+ token\(s\) \(stop reason: (length|stop token|EOS)\)" % t, err):
                fail("no status line of turn %d in\n%s" % (t, err))

        # the end-of-turn id ends an answer unprinted: the first of these
        # messages whose greedy answer (the whole ids, no stop) reaches it
        steps = 40
        for i in range(64):
            msg = "Question number %d" % i
            ids = tok(render([("user", msg)]))
            ref, _ = run(exe, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, ids)),
                               "--steps", str(steps)])
            ref = [int(v) for v in ref.split()]
            if IM_END in ref and (EOT not in ref or ref.index(IM_END) < ref.index(EOT)):
                break
        else:
            fail("no message of the 64 tried has <|im_end|> in its greedy answer")
        k = ref.index(IM_END)
        out, err = run(exe, ["generate", "--model", m, "--chat", "--prompt", msg, "--steps", str(steps),
                             "--dump-logits", os.path.join(d, "e.json")])
        got = json.load(open(os.path.join(d, "e.json")))["tokens"][0]
        if got != ref[:k + 1] or out != decode(ref[:k], id2tok) + "\n" or "(stop reason: stop token)" not in err:
            fail("generate --chat %r: tokens %s, stdout %r, wanted %s ending at <|im_end|>:\n%s"
                 % (msg, got, out, ref[:k + 1], err))
        # chat: the same answer, and the next turn prefills the template's
        # text after it, the unprinted end-of-turn id not fed twice
        out, err = run(exe, ["chat", "--model", m, "--verbose-prompt", "--steps", str(steps)],
                       stdin=(msg + "\nThanks\n").encode())
        if turn_ids(err, 1, "generated") != ref[:k + 1] or "turn 1: %d token(s) (stop reason: stop token)" % (k + 1) \
                not in err:
            fail("chat %r: turn 1 generated %s, wanted %s:\n%s" % (msg, turn_ids(err, 1, "generated"), ref[:k + 1],
                                                                  err))
        if turn_ids(err, 2, "prefill") != tok("<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"
                                               "<|im_start|>assistant\n"):
            fail("chat turn 2 after an end-of-turn stop prefilled %s" % turn_ids(err, 2, "prefill"))

        # a message beyond --max-context is dropped, the conversation goes on
        out, err = run(exe, ["chat", "--model", m, "--max-context", str(len(pf1) + 2), "--steps", "2"],
                       stdin=b"Hello\nHow are you today, my friend\n")
        if "the message is dropped" not in err or "turn 1:" not in err:
            fail("--max-context: stderr\n" + err)

        # refusals
        run(exe, ["chat", "--model", m, "--prompt", "hi"], code=2)
        run(exe, ["chat", "--model", "tiny"], code=2)
        _, err = run(exe, ["chat", "--model", m, "--chat-template", "jinja9"], code=2, stdin=b"hi\n")
        if "qwen2" not in err or "jinja9" not in err:
            fail("unknown template: " + err)
        _, err = run(exe, ["chat", "--model", bare], code=2, stdin=b"hi\n")
        if "--chat-template" not in err:
            fail("no chat template: " + err)
        out, _ = run(exe, ["chat", "--model", bare, "--chat-template", "CHATML", "--steps", "2"], stdin=b"hi\n")
        run(exe, ["generate", "--model", m, "--system", "x", "--prompt", "hi", "--steps", "1"], code=2)
        run(exe, ["generate", "--model", m, "--chat", "--prompt-ids", "5", "--steps", "1"], code=2)
        run(exe, ["generate", "--model", m, "--prompt", "hi", "--steps", "1", "--max-context", "9"], code=2)
    print("chat: all checks passed")


if __name__ == "__main__":
    main()
