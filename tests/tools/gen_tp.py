#!/usr/bin/env python3
"""greenpipe generate --tp 2 on the cuda backend (exit 77, skipped, without
two GPUs): gen_tp.py GREENPIPE DATA_DIR. Three prompts, 12 greedy steps, on
the tiny preset and the small-gqa checkpoint: the tokens printed equal those
of the one-GPU run, and the status line is rank 0's (rank 1 writes to its
log, shown only when it fails)."""
import subprocess
import sys

from gen_text import skip_without_gpu

PROMPTS = "5,17,42,7;11,200,2;3,3,9,1,4"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(exe, model, extra):
    args = [exe, "generate", "--backend", "cuda", "--model", model, "--prompt-ids", PROMPTS, "--steps", "12"] + extra
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def main():
    exe, data = sys.argv[1], sys.argv[2]
    skip_without_gpu(exe)
    for model in ["tiny", data + "/small-gqa"]:
        code, out1, err1 = run(exe, model, [])
        if code != 0:
            fail("%s, one GPU: exit %d\n%s" % (model, code, err1))
        code, out2, err2 = run(exe, model, ["--tp", "2"])
        if code == 2 and "needs 2 GPUs" in err2:
            print("fewer than 2 GPUs: skipped")
            sys.exit(77)
        if code != 0:
            fail("%s, --tp 2: exit %d\n%s" % (model, code, err2))
        if out2 != out1:
            fail("%s: --tp 2 printed\n%s\nthe one-GPU run\n%s" % (model, out2, out1))
        if "tensor parallel rank 0 of 2" not in err2 or "rank 1" in err2:
            fail("%s: the status line is rank 0's alone:\n%s" % (model, err2))
        print("%s: --tp 2 printed the one-GPU run's tokens (%d lines)" % (model, len(out1.splitlines())))


if __name__ == "__main__":
    main()
