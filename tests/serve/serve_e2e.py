#!/usr/bin/env python3
"""greenpipe serve end to end: serve_e2e.py GREENPIPE CHECKPOINT [cpu|cuda]
copies the checkpoint (vocabulary of 300) into a temporary directory with
the ChatML byte-level BPE tokenizer and Qwen2's chat template of
tests/tools/gen_chat.py, starts `greenpipe serve` on an ephemeral port of
127.0.0.1 and checks that
- 64 concurrent streaming clients get, each, the text and token count
  `greenpipe generate` gives for their prompt (greedy), whatever the batch
  composition (8 slots, 16 tokens a step: prefill chunks mixed with decodes),
  the stream framed as server-sent events ending in data: [DONE], usage in
  the last chunk;
- prompts sharing a long prefix take its blocks from the prefix cache, with
  generate's outputs;
- the official openai client drives completions and chat, streamed and not,
  with the same text as generate (and generate --chat);
- under a KV budget too small for the load, requests are preempted and
  recomputed with no request lost and no output changed;
- a client that disconnects mid-stream frees its request and KV blocks;
- --schedule pd-mux (cuda: the decode lane on 32 SMs, the prefill lane on
  the rest, with and without --pd-idle-whole; cpu: the two lanes in turn)
  gives generate's outputs;
- cuda: with a host store behind the prefix cache (--kv-store-size), a
  shared prefix evicted from the device by other requests is loaded back
  from the store, with generate's outputs;
- bad requests get OpenAI error objects with the right status.
cuda: exit 77 (skipped) without a usable GPU."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gen_chat import EOT, IM_END, chat_checkpoint  # noqa: E402
from gen_text import U2B, skip_without_gpu  # noqa: E402

BACKEND = sys.argv[3] if len(sys.argv) > 3 else "cpu"
NAME = "e2e-model"
KEY = "sekret"


def fail(msg):
    sys.exit("FAIL: " + msg)


def decode(ids, id2tok):
    """HF's decode(ids, skip_special_tokens=True) of the ChatML tokenizer."""
    raw = b"".join(bytes(U2B[c] for c in id2tok[i]) for i in ids if i > EOT)
    return raw.decode("utf-8", errors="replace")


class Server:
    """greenpipe serve on an ephemeral port; stderr kept for messages."""

    def __init__(self, exe, model, args, key=None):
        cmd = [exe, "serve", "--backend", BACKEND, "--model", model, "--port", "0",
               "--served-model-name", NAME] + args + (["--api-key", key] if key else [])
        self.key = key
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.err = []
        self.port = None
        got_port = threading.Event()

        def drain():
            for line in self.p.stderr:
                self.err.append(line)
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    got_port.set()
            got_port.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got_port.wait(60) or self.port is None:
            self.stop(check=False)
            fail("serve did not say its port:\n" + "".join(self.err))
        deadline = time.time() + 120
        while time.time() < deadline:
            status, _, _ = self.request("GET", "/health")
            if status == 200:
                return
            if self.p.poll() is not None:
                time.sleep(0.2)  # the rest of its messages
                fail("serve exited %d while loading:\n%s" % (self.p.returncode, "".join(self.err)))
            if status != 503:
                fail("/health answered %d while loading:\n%s" % (status, "".join(self.err)))
            time.sleep(0.05)
        fail("serve not ready in 120 s:\n" + "".join(self.err))

    def headers(self, extra=None):
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            data = raw if raw is not None else (json.dumps(body) if body is not None else None)
            c.request(method, path, body=data, headers=self.headers(headers) if headers is not False else {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        except (ConnectionError, OSError) as e:
            return 0, {}, str(e).encode()
        finally:
            c.close()

    def stream(self, path, body):
        """POST a streamed request: (status, [chunk objects], saw [DONE])."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers=self.headers())
        r = c.getresponse()
        if r.status != 200:
            return r.status, [json.loads(r.read())], False
        if not r.getheader("Content-Type", "").startswith("text/event-stream"):
            fail("stream content type %s" % r.getheader("Content-Type"))
        chunks, done, buf = [], False, b""
        while True:
            piece = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not piece:
                break
            buf += piece
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    fail("an event without 'data: ': %r" % event)
                data = event[6:]
                if data == b"[DONE]":
                    done = True
                elif done:
                    fail("data after [DONE]: %r" % data)
                else:
                    chunks.append(json.loads(data))
        c.close()
        return 200, chunks, done

    def metric(self, name):
        status, _, body = self.request("GET", "/metrics")
        if status != 200:
            fail("/metrics answered %d" % status)
        for line in body.decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        fail("no %s in /metrics:\n%s" % (name, body.decode()))

    def stop(self, check=True):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                fail("serve did not stop on SIGTERM")
        if check and self.p.returncode != 0:
            fail("serve exited %d:\n%s" % (self.p.returncode, "".join(self.err)))


def generate(exe, model, prompts, steps, chat=False, d="."):
    """generate's tokens per prompt (greedy, up to and including EOS)."""
    dump = os.path.join(d, "dump.json")
    args = [exe, "generate", "--backend", BACKEND, "--model", model, "--steps", str(steps), "--dump-logits", dump]
    if chat:
        args.append("--chat")
    for p in prompts:
        args += ["--prompt", p]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if r.returncode != 0:
        fail("generate exited %d: %s" % (r.returncode, r.stderr.decode(errors="replace")))
    out = []
    for toks in json.load(open(dump))["tokens"]:
        cut = next((i + 1 for i, t in enumerate(toks) if t == EOT or (chat and t == IM_END)), len(toks))
        out.append(toks[:cut])
    return out


def check_stream_result(what, chunks, done, want_text, want_n, kind="text_completion"):
    if not done:
        fail("%s: the stream did not end with data: [DONE]" % what)
    text = ""
    for ch in chunks:
        if ch.get("object") != kind:
            fail("%s: chunk object %r, wanted %r" % (what, ch.get("object"), kind))
        for c in ch.get("choices", []):
            text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    last = chunks[-1]
    usage = last.get("usage")
    if not usage or usage.get("completion_tokens") != want_n:
        fail("%s: last chunk's usage %r, wanted completion_tokens %d" % (what, usage, want_n))
    reasons = [c.get("finish_reason") for ch in chunks for c in ch.get("choices", []) if c.get("finish_reason")]
    if len(reasons) != 1:
        fail("%s: finish reasons %r, wanted exactly one" % (what, reasons))
    if text != want_text:
        fail("%s: text %r, generate gave %r" % (what, text, want_text))
    return reasons[0]


def prompts_for(n):
    words = ["the", "end", "is", "near", "hello", "world", "ask", "sea", "stone", "ring"]
    return ["%s %d: " % (" ".join(words[(i + k) % len(words)] for k in range(1 + i % 9)), i) for i in range(n)]


def concurrent_streams(srv, prompts, steps, want, id2tok, what):
    results = [None] * len(prompts)
    start = threading.Barrier(len(prompts))

    def client(i):
        start.wait()
        try:
            results[i] = srv.stream("/v1/completions", {"model": NAME, "prompt": prompts[i], "max_tokens": steps,
                                                        "temperature": 0})
        except Exception as e:  # noqa: BLE001 - reported below with the prompt
            results[i] = (0, [str(e)], False)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (status, chunks, done) in enumerate(results):
        if status != 200:
            fail("%s: client %d got %d: %s" % (what, i, status, chunks))
        reason = check_stream_result("%s client %d" % (what, i), chunks, done, decode(want[i], id2tok),
                                     len(want[i]))
        wanted = "stop" if want[i][-1] == EOT else "length"
        if reason != wanted:
            fail("%s client %d: finish_reason %s, wanted %s" % (what, i, reason, wanted))


def check_openai(srv, exe, m, id2tok, d):
    try:
        import openai
    except ImportError:  # CI installs it (tools/setup-deps.sh --test-data); a GPU machine may lack it
        print("openai client: skipped, the openai package is missing (pip install openai)")
        return
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key=KEY, max_retries=0)
    if [x.id for x in client.models.list().data] != [NAME]:
        fail("openai models.list: %r" % client.models.list())
    prompt = "hello world, the end"
    want = generate(exe, m, [prompt], 9, d=d)[0]
    r = client.completions.create(model=NAME, prompt=prompt, max_tokens=9, temperature=0)
    if r.choices[0].text != decode(want, id2tok) or r.usage.completion_tokens != len(want):
        fail("openai completion %r (%d tokens), generate %r" % (r.choices[0].text, r.usage.completion_tokens,
                                                                decode(want, id2tok)))
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=NAME, prompt=prompt, max_tokens=9, temperature=0, stream=True) if c.choices)
    if text != decode(want, id2tok):
        fail("openai streamed completion %r, generate %r" % (text, decode(want, id2tok)))
    want = generate(exe, m, ["Hi there"], 9, chat=True, d=d)[0]
    msgs = [{"role": "user", "content": "Hi there"}]
    r = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=9, temperature=0)
    if r.choices[0].message.content != decode(want, id2tok) or r.choices[0].message.role != "assistant":
        fail("openai chat %r, generate --chat %r" % (r.choices[0].message, decode(want, id2tok)))
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=NAME, messages=msgs, max_tokens=9, temperature=0, stream=True,
        stream_options={"include_usage": True}) if c.choices)
    if text != decode(want, id2tok):
        fail("openai streamed chat %r, generate --chat %r" % (text, decode(want, id2tok)))
    try:
        client.completions.create(model="other", prompt="x", max_tokens=2)
        fail("openai: an unknown model was served")
    except openai.BadRequestError as e:
        if "model" not in str(e):
            fail("openai unknown model: %s" % e)
    bad = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        fail("openai: a wrong key was let in")
    except openai.AuthenticationError:
        pass


def check_bad_requests(srv):
    cases = [
        ("malformed JSON", "/v1/completions", '{"prompt": "x", ', 400, None),
        ("wrong type", "/v1/completions", {"model": NAME, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
        ("unknown model", "/v1/completions", {"model": "nope", "prompt": "x"}, 400, "model"),
        ("max_tokens beyond the context", "/v1/completions", {"prompt": "x", "max_tokens": 10 ** 6}, 400,
         "max_tokens"),
        ("negative temperature", "/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
        ("prompt beyond the context", "/v1/completions", {"prompt": "word " * 600, "max_tokens": 4}, 400, None),
        ("chat without messages", "/v1/chat/completions", {"model": NAME}, 400, "messages"),
    ]
    for what, path, body, status, param in cases:
        got, _, data = srv.request("POST", path, raw=body if isinstance(body, str) else json.dumps(body))
        if got != status:
            fail("%s: status %d, wanted %d: %s" % (what, got, status, data))
        err = json.loads(data).get("error") or fail("%s: no error object in %s" % (what, data))
        if not err.get("message") or (param and err.get("param") != param):
            fail("%s: error %r, wanted param %r and a message" % (what, err, param))
    got, _, _ = srv.request("POST", "/v1/completions", raw="x" * (2 << 20))
    if got != 413:
        fail("a body over --max-body: status %d, wanted 413" % got)
    for method, path, want in (("GET", "/nope", 404), ("GET", "/v1/completions", 405),
                               ("DELETE", "/v1/models", 405)):
        got, hdr, _ = srv.request(method, path)
        if got != want:
            fail("%s %s: status %d, wanted %d" % (method, path, got, want))
    got, _, _ = srv.request("POST", "/v1/completions", body={"prompt": "x"}, headers=False)
    if got != 401:
        fail("no key: status %d, wanted 401" % got)
    got, _, _ = srv.request("POST", "/v1/completions", body={"prompt": "x"}, headers={"Authorization": "Bearer no"})
    if got != 401:
        fail("a wrong key: status %d, wanted 401" % got)


def check_disconnect(srv):
    """A stream closed after its first chunk: the request is cancelled and
    its blocks are free (no prefix cache on this server)."""
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"model": NAME, "prompt": "the end is near", "max_tokens": 40, "stream": True,
                       "ignore_eos": True})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    while b"data: " not in got:
        piece = s.recv(4096)
        if not piece:
            fail("disconnect: the stream ended before its first chunk: %r" % got)
        got += piece
    s.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        if (srv.metric("greenpipe:num_requests_running") == 0 and
                srv.metric("greenpipe:kv_cache_usage_perc") == 0):
            return
        time.sleep(0.05)
    fail("disconnect: the request still runs or holds KV blocks 30 s after the client left")


def check_pd_mux(exe, m, prompts, want, id2tok):
    """32 concurrent streams, decode rows on one lane while prefill chunks
    run on the other: outputs stay generate's."""
    args = ["--max-batch", "8", "--max-num-batched-tokens", "16", "--max-context", "256", "--schedule", "pd-mux"]
    variants = [["--pd-split", "32"], ["--pd-split", "32", "--pd-idle-whole"],
                ["--pd-split", "auto", "--pd-splits", "32,64"]] if BACKEND == "cuda" else [[]]
    for v in variants:
        srv = Server(exe, m, args + v)
        try:
            concurrent_streams(srv, prompts[:32], 10, want[:32], id2tok, "pd-mux " + " ".join(v))
            if "auto" in v:  # the planner's lanes kept their accounts
                if srv.metric("greenpipe:lane_batches_total") < 0:
                    fail("pd-mux auto: a negative lane batch count")
        finally:
            srv.stop()
    print("pd-mux: 32 concurrent streams with generate's outputs (%s)" % ", ".join(" ".join(v) or "cpu" for v in variants))


def check_host_store(exe, m, prompts, want, id2tok, d):
    """A shared prefix cached, evicted by 16 other requests (into the store),
    then loaded back for the rest of its group: outputs stay generate's."""
    steps = 10
    srv = Server(exe, m, ["--max-batch", "8", "--max-num-batched-tokens", "16", "--max-context", "128",
                          "--block-size", "4", "--kv-blocks", "48", "--kv-store-size", "64M"])
    try:
        shared = ["the end is near, hello world, ask the sea and the stone ring %d: " % i for i in range(8)]
        want_shared = generate(exe, m, shared, steps, d=d)
        concurrent_streams(srv, shared[:1], steps, want_shared[:1], id2tok, "host store, first")
        concurrent_streams(srv, prompts[:16], steps, want[:16], id2tok, "host store, evicting")
        off = srv.metric("greenpipe:kv_host_offloaded_blocks_total")
        for i in range(1, 8):  # one at a time: the first reloads, the rest share its device blocks
            concurrent_streams(srv, shared[i:i + 1], steps, want_shared[i:i + 1], id2tok, "host store, again")
        host = srv.metric("greenpipe:prefix_cache_host_hits_total")
        if off < 1 or host < 4:
            fail("host store: %d blocks offloaded, %d prompt tokens loaded back; wanted both" % (off, host))
        print("host store: %d blocks offloaded, %d prompt tokens loaded back layer by layer, outputs unchanged"
              % (off, host))
    finally:
        srv.stop()


def main():
    exe, ckpt = sys.argv[1], sys.argv[2]
    if BACKEND != "cpu":
        skip_without_gpu(exe)
    with tempfile.TemporaryDirectory() as d:
        m, _, id2tok = chat_checkpoint(ckpt, d)

        steps = 10
        prompts = prompts_for(64)
        want = generate(exe, m, prompts, steps, d=d)

        srv = Server(exe, m, ["--max-batch", "8", "--max-num-batched-tokens", "16", "--max-context", "256",
                              "--max-body", "1M"], key=KEY)
        try:
            concurrent_streams(srv, prompts, steps, want, id2tok, "64 clients")
            # a long shared prefix: later requests take its blocks from the
            # prefix cache, and their outputs stay generate's
            base = srv.metric("greenpipe:prefix_cache_hits_total")
            shared = ["the end is near, hello world, ask the sea and the stone ring %d: " % i for i in range(8)]
            want_shared = generate(exe, m, shared, steps, d=d)
            concurrent_streams(srv, shared[:1], steps, want_shared[:1], id2tok, "shared prefix, first")
            concurrent_streams(srv, shared[1:], steps, want_shared[1:], id2tok, "shared prefix, the rest")
            hits = srv.metric("greenpipe:prefix_cache_hits_total") - base
            if hits < 16 * 7:
                fail("shared prefix: %d prompt tokens from the prefix cache, wanted at least a block each" % hits)
            check_openai(srv, exe, m, id2tok, d)
            check_bad_requests(srv)
            print("64 concurrent streams, shared prefixes (%d tokens from the cache), openai client, bad requests: ok; "
                  "%d preemptions" % (hits, srv.metric("greenpipe:num_preemptions_total")))
        finally:
            srv.stop()

        # 16 clients, room for about 3 of them at once: preemption by recompute
        srv = Server(exe, m, ["--max-batch", "8", "--max-num-batched-tokens", "16", "--max-context", "64",
                              "--block-size", "4", "--kv-blocks", "24", "--no-prefix-cache"])
        try:
            concurrent_streams(srv, prompts[:16], steps, want[:16], id2tok, "tiny KV budget")
            pre = srv.metric("greenpipe:num_preemptions_total")
            if pre < 1:
                fail("tiny KV budget: no preemption happened; the test no longer tests it")
            check_disconnect(srv)
            print("tiny KV budget: %d preemptions, every output unchanged; disconnect frees its blocks" % pre)
        finally:
            srv.stop()
        check_pd_mux(exe, m, prompts, want, id2tok)
        if BACKEND == "cuda":
            check_host_store(exe, m, prompts, want, id2tok, d)
    print("ok")


if __name__ == "__main__":
    main()
