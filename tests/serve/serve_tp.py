#!/usr/bin/env python3
"""greenpipe serve --tp 2 end to end: serve_tp.py GREENPIPE CHECKPOINT, on
the checkpoint serve_e2e.py writes (small-gqa with a ChatML tokenizer). The
server runs tensor parallel over two GPUs (rank 0 serves, rank 1 repeats its
every batch); 32 concurrent streaming clients get, each, the text and token
count one-GPU `greenpipe generate` gives (greedy), prefill chunks mixed with
decode rows; prompts sharing a long prefix take its blocks from the prefix
cache (the retained and attached blocks repeated on rank 1) with the same
outputs; under a tiny KV budget requests are preempted and recomputed with
no output changed; the ready line names the ranks; SIGTERM ends both ranks
with exit 0. Exit 77 (skipped) without two usable GPUs."""
import os
import sys

sys.argv = sys.argv[:3] + ["cuda"]  # serve_e2e's helpers, on the cuda backend
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_e2e as e2e  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402


def gpus(exe):
    r = subprocess.run([exe, "devices"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return 0 if r.returncode != 0 else sum(1 for line in r.stdout.splitlines() if line.startswith("device "))


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    e2e.skip_without_gpu(exe)
    if gpus(exe) < 2:
        print("fewer than 2 GPUs: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        m, _, id2tok = e2e.chat_checkpoint(ckpt, d)
        steps = 10
        prompts = e2e.prompts_for(32)
        want = e2e.generate(exe, m, prompts, steps, d=d)
        srv = e2e.Server(exe, m, ["--tp", "2", "--max-batch", "8", "--max-num-batched-tokens", "16",
                                  "--max-context", "256"])
        try:
            e2e.concurrent_streams(srv, prompts, steps, want, id2tok, "--tp 2, 32 clients")
            base = srv.metric("greenpipe:prefix_cache_hits_total")
            shared = ["the end is near, hello world, ask the sea and the stone ring %d: " % i for i in range(8)]
            want_shared = e2e.generate(exe, m, shared, steps, d=d)
            e2e.concurrent_streams(srv, shared[:1], steps, want_shared[:1], id2tok, "--tp 2, shared prefix, first")
            e2e.concurrent_streams(srv, shared[1:], steps, want_shared[1:], id2tok, "--tp 2, shared prefix, rest")
            hits = srv.metric("greenpipe:prefix_cache_hits_total") - base
            if hits < 16 * 7:
                e2e.fail("--tp 2, shared prefix: %d prompt tokens from the prefix cache, wanted a block each" % hits)
            ready = "".join(l for l in srv.err if "ready in" in l)
            if "tensor parallel rank 0 of 2" not in ready:
                e2e.fail("--tp 2: the ready line does not name the ranks:\n%s" % ready)
        finally:
            srv.stop()
        srv = e2e.Server(exe, m, ["--tp", "2", "--max-batch", "8", "--max-num-batched-tokens", "16",
                                  "--max-context", "64", "--block-size", "4", "--kv-blocks", "24",
                                  "--no-prefix-cache"])
        try:
            e2e.concurrent_streams(srv, prompts[:16], steps, want[:16], id2tok, "--tp 2, tiny KV budget")
            pre = srv.metric("greenpipe:num_preemptions_total")
            if pre < 1:
                e2e.fail("--tp 2, tiny KV budget: no preemption happened; the test no longer tests it")
        finally:
            srv.stop()
        print("--tp 2: 32 clients with generate's outputs, %d prompt tokens from the prefix cache, %d preemptions: "
              "ok" % (hits, pre))


if __name__ == "__main__":
    main()
