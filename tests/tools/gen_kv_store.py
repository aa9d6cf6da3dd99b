#!/usr/bin/env python3
"""greenpipe generate --kv-store-size on the cuda backend (exit 77, skipped,
when no GPU is usable): gen_kv_store.py GREENPIPE CHECKPOINT. Prompts that
share leading blocks reuse what the earlier ones stored, in one process and,
through --kv-store DIR, in the next; a pool of one block evicts. In every
case the greedy tokens on stdout are those of the run without the store."""
import json
import os
import re
import subprocess
import sys
import tempfile

from gen_text import skip_without_gpu

# prompt 1 shares its first 8 tokens (2 blocks of 4) with prompt 0; prompt 2 none
PROMPTS = "5,17,42,7,99,3,8,1,60,4;5,17,42,7,99,3,8,1,61;11,200,2"
BLOCK = 4


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(exe, ckpt, extra):
    r = subprocess.run([exe, "generate", "--backend", "cuda", "--model", ckpt, "--prompt-ids", PROMPTS,
                        "--steps", "4"] + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("exit %d: %s\n%s" % (r.returncode, extra, r.stderr))
    return r.stdout, r.stderr


def reused(err, s):
    m = re.search(r"^greenpipe: prompt %d: (\d+) tokens, (\d+) reused" % s, err, re.M)
    if not m:
        fail("no line for prompt %d in:\n%s" % (s, err))
    return int(m.group(2))


def expect(cond, what, err):
    if not cond:
        fail(what + "\n--- stderr:\n" + err)


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    skip_without_gpu(exe)
    with open(os.path.join(ckpt, "config.json")) as f:
        c = json.load(f)
    kv_heads = c.get("num_key_value_heads", c["num_attention_heads"])
    head_dim = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    block_bytes = 2 * c["num_hidden_layers"] * BLOCK * kv_heads * head_dim * 2  # K and V, 16-bit

    plain, _ = run(exe, ckpt, [])
    with tempfile.TemporaryDirectory() as d:
        flags = ["--kv-store-size", "1M", "--kv-store-block", str(BLOCK), "--kv-store", d]
        out, err = run(exe, ckpt, flags)
        expect(out == plain, "tokens with the store differ:\n%s\nwithout:\n%s" % (out, plain), err)
        expect([reused(err, s) for s in range(3)] == [0, 8, 0], "reuse in one process, wanted 0, 8, 0", err)
        expect("prompt lookups: 2 block hit(s)" in err, "the summary's hits", err)
        files = sorted(f for f in os.listdir(d) if f.endswith(".kvb"))
        # prompt 0 stores its 2 whole blocks, prompt 1 finds both held, prompt 2 has none
        expect(len(files) == 2, "block files %s, wanted prompt 0's 2" % files, err)
        # a new process: prompt 0 now reloads its 2 blocks from the files
        out, err = run(exe, ckpt, flags)
        expect(out == plain, "tokens with the files differ:\n%s\nwithout:\n%s" % (out, plain), err)
        expect([reused(err, s) for s in range(3)] == [8, 8, 0], "reuse from the files, wanted 8, 8, 0", err)
        expect("disk: 2 block(s) loaded" in err, "the summary's disk loads", err)
    # a pool of one block: prompt 0's second block evicts its first, so prompt 1 reuses nothing
    out, err = run(exe, ckpt, ["--kv-store-size", str(block_bytes), "--kv-store-block", str(BLOCK)])
    expect(out == plain, "tokens with a one-block pool differ", err)
    expect("a pinned pool of 1 blocks" in err, "the pool as allocated", err)
    expect(reused(err, 1) == 0, "prompt 1 reused an evicted block", err)
    expect(re.search(r"[1-9]\d* evicted", err), "no eviction counted", err)
    print("ok")


if __name__ == "__main__":
    main()
