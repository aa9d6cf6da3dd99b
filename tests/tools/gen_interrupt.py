#!/usr/bin/env python3
"""Ctrl-C during generate, without races: gen_interrupt.py GREENPIPE
CHECKPOINT (small-gqa, vocabulary 300) copies the checkpoint beside a
tokenizer.json whose ids print 60 bytes each (the prompt's two letters
apart), and runs one streamed sequence on the CPU backend into a pipe of
4096 bytes that the test stops reading. The program cannot finish before
the test drains the pipe (its whole text is checked to be far longer), so a
SIGINT sent once output has begun always lands during generation. Checks:
- exit 130, the text streamed so far plus a newline on stdout (the decode of
  the dumped tokens, fewer than --steps), the summary with stop reason
  "interrupted" and the prefill/decode line on stderr;
- the handler resets itself: with the program asleep in a write to the
  full pipe (/proc: it then cannot leave the loop, interrupted or not), once
  the first SIGINT is taken (SigCgt) a second one ends the program at once
  (killed by SIGINT)."""
import fcntl
import json
import os
import select
import signal
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_text  # noqa: E402

F_SETPIPE_SZ = 1031
PIPE = 4096
STEPS = 400
DEADLINE = 120  # seconds for any one wait: a hang fails, it does not stall CI


def fail(msg):
    sys.exit("FAIL: " + msg)


def tokenizer(vocab):
    """BOS 0, EOS 1 (special), 'a' and 'b' for the prompt, every other id a
    60-byte piece of its own."""
    tj, _ = gen_text.tokenizer_json()
    v = {"<|bos|>": 0, "<|eos|>": 1, "a": 2, "b": 3}
    for i in range(4, vocab):
        v["<%03d>" % i * 12] = i
    tj["model"]["vocab"] = v
    tj["model"]["merges"] = []
    id2tok = {i: t for t, i in v.items()}
    return tj, lambda ids: b"".join(id2tok[i].encode() for i in ids if i > 1)


def catches_sigint(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def start(exe, args, errf, fill):
    """The program with stdout into a PIPE-byte pipe, once it has written
    (generation has begun: the loop's handler is in place); fill: once it
    has filled the pipe, else the first byte read."""
    r, w = os.pipe()
    fcntl.fcntl(r, F_SETPIPE_SZ, PIPE)
    proc = subprocess.Popen([exe, "generate"] + args, stdout=w, stderr=errf)
    os.close(w)
    if not select.select([r], [], [], DEADLINE)[0]:
        proc.kill()
        fail("no output within %d s" % DEADLINE)
    if not fill:
        return proc, r, os.read(r, 1)
    end = time.monotonic() + DEADLINE
    while not blocked_writing(proc.pid):
        if time.monotonic() > end:
            proc.kill()
            fail("the program was not seen blocked writing stdout within %d s" % DEADLINE)
        time.sleep(0.01)
    return proc, r, b""


WRITE = {"x86_64": "1", "aarch64": "64"}.get(platform.machine())


def blocked_writing(pid):
    """The main thread (the loop's) asleep in write(1, ...): on a pipe nobody
    reads, it stays there until the test reads."""
    with open("/proc/%d/stat" % pid) as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    with open("/proc/%d/syscall" % pid) as f:
        call = f.read().split()
    return state == "S" and call[:2] == [WRITE, "0x1"]


def drain(proc, r, got):
    end = time.monotonic() + DEADLINE
    while True:
        if not select.select([r], [], [], max(0.0, end - time.monotonic()))[0]:
            proc.kill()
            fail("output did not end within %d s" % DEADLINE)
        b = os.read(r, 65536)
        if not b:
            break
        got += b
    os.close(r)
    return got, proc.wait(timeout=DEADLINE)


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        m = gen_text.copy_checkpoint(ckpt, d)
        with open(os.path.join(m, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        tj, decode = tokenizer(vocab)
        with open(os.path.join(m, "tokenizer.json"), "w") as f:
            json.dump(tj, f)
        args = ["--model", m, "--prompt", "ab", "--steps", str(STEPS), "--ignore-eos", "--backend", "cpu"]

        # the premise: the whole text is far beyond what the pipe holds
        full = subprocess.run([exe, "generate"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=DEADLINE)
        if full.returncode != 0 or len(full.stdout) < 4 * PIPE:
            fail("the uninterrupted run: exit %d, %d bytes (wanted > %d)\n%s" % (
                full.returncode, len(full.stdout), 4 * PIPE, full.stderr.decode(errors="replace")))

        # one SIGINT: stops at a step boundary, prints what it has, exit 130
        dump = os.path.join(d, "i.json")
        with open(os.path.join(d, "err1"), "w+b") as errf:
            proc, r, got = start(exe, args + ["--dump-logits", dump], errf, False)
            proc.send_signal(signal.SIGINT)
            out, rc = drain(proc, r, got)
            errf.seek(0)
            err = errf.read().decode(errors="replace")
        if rc != 130:
            fail("exit %d after SIGINT, wanted 130\n%s" % (rc, err))
        with open(dump) as f:
            toks = json.load(f)["tokens"][0]
        if not 0 < len(toks) < STEPS:
            fail("%d tokens after SIGINT, wanted between 1 and %d" % (len(toks), STEPS - 1))
        if out != decode(toks) + b"\n" or not full.stdout.startswith(out[:-1]):
            fail("stdout after SIGINT is not the decode of the %d tokens generated plus a newline" % len(toks))
        if "greenpipe: %d token(s) generated (stop reason: interrupted)" % len(toks) not in err or \
                "decode step(s) of batch 1" not in err or "interrupted (Ctrl-C)" not in err:
            fail("stderr after SIGINT: %s" % err)

        # a second SIGINT once the first is taken: the default action
        if WRITE is None:
            print("a second SIGINT: not checked (write's syscall number on %s unknown here)" % platform.machine())
            return
        with open(os.path.join(d, "err2"), "w+b") as errf:
            proc, r, got = start(exe, args, errf, True)
            proc.send_signal(signal.SIGINT)
            end = time.monotonic() + DEADLINE
            while catches_sigint(proc.pid):  # blocked writing: the handler runs, resets itself
                if time.monotonic() > end:
                    proc.kill()
                    fail("the SIGINT handler was not reset within %d s" % DEADLINE)
                time.sleep(0.01)
            proc.send_signal(signal.SIGINT)
            _, rc = drain(proc, r, got)
        if rc != -signal.SIGINT:
            fail("a second SIGINT: exit %d, wanted death by SIGINT (%d)" % (rc, -signal.SIGINT))
    print("SIGINT: exit 130 after %d of %d tokens, partial text and summary; a second one kills: ok" %
          (len(toks), STEPS))


if __name__ == "__main__":
    main()
