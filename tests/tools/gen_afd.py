#!/usr/bin/env python3
"""greenpipe generate --engine afd on the cuda backend (exit 77, skipped,
without two GPUs): gen_afd.py GREENPIPE DATA_DIR. Three prompts, 12 greedy
steps, on the tiny preset and the small-gqa checkpoint, with 1 and 2
micro-batches: the tokens printed equal those of the one-GPU run, and the
status line says where the two sides run."""
import sys

from gen_tp import fail, run
from gen_text import skip_without_gpu


def main():
    exe, data = sys.argv[1], sys.argv[2]
    skip_without_gpu(exe)
    for model in ["tiny", data + "/small-gqa"]:
        code, want, err = run(exe, model, [])
        if code != 0:
            fail("%s, one GPU: exit %d\n%s" % (model, code, err))
        for m in ["1", "2"]:
            code, out, err = run(exe, model, ["--engine", "afd", "--micro-batches", m])
            if code != 0 and "need 2 GPUs" in err:
                print("fewer than 2 GPUs: skipped")
                sys.exit(77)
            if code != 0:
                fail("%s, --engine afd: exit %d\n%s" % (model, code, err))
            if out != want:
                fail("%s, --engine afd --micro-batches %s printed\n%s\nthe one-GPU run\n%s" % (model, m, out, want))
            if "attention and FFN on two GPUs" not in err or "engine afd" not in err:
                fail("%s: the status line does not say where the sides run:\n%s" % (model, err))
        print("%s: --engine afd printed the one-GPU run's tokens (%d lines), M = 1 and 2" % (model,
                                                                                        len(want.splitlines())))


if __name__ == "__main__":
    main()
