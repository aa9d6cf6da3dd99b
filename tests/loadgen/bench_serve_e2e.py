#!/usr/bin/env python3
"""greenpipe bench-serve end to end against mock_server.py (known delays per
token): bench_serve_e2e.py GREENPIPE. Checks the JSON (exact counts, TTFT
and ITL near the mock's delays within generous bounds, goodput), vLLM's
report lines, failures counted with their reasons (500s, streams without
[DONE]), --max-concurrency, the shared-prefix and JSONL datasets, Poisson
arrivals, --api-key, and the refusals before any request is sent."""
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import urllib.request

GP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 120  # seconds for any one wait: a hang fails, it does not stall CI
TTFT, ITL = 0.05, 0.02


def fail(msg):
    sys.exit("FAIL: " + msg)


class Mock:
    def __init__(self, *args):
        self.args = args

    def __enter__(self):
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_server.py"), *self.args],
                                  stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.p.stdout], [], [], DEADLINE)
        line = self.p.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            self.p.kill()
            fail("the mock server did not start: %r" % line)
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port
        return self

    def stats(self):
        with urllib.request.urlopen(self.url + "/stats", timeout=DEADLINE) as r:
            return json.load(r)

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait(timeout=DEADLINE)


def bench(url, *args, code=0):
    cmd = [GP, "bench-serve"] + (["--base-url", url] if url else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE)
    if p.returncode != code:
        fail("%s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s" % (" ".join(cmd), p.returncode, code, p.stdout,
                                                                      p.stderr))
    return p


def result(url, *args, code=0):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        p = bench(url, "--result-json", path, *args, code=code)
        with open(path) as f:
            return json.load(f), p


def line(label, value):
    return "%-40s %-10s" % (label, value)


def check_basic():
    with Mock("--ttft", str(TTFT), "--itl", str(ITL)) as m:
        j, p = result(m.url, "--num-prompts", "16", "--random-input-len", "8", "--random-output-len", "10",
                      "--vocab", "100", "--max-concurrency", "8", "--percentiles", "50,99",
                      "--goodput", "ttft:10000", "tpot:10000")
        st = m.stats()
    if (j["completed"], j["failed"], j["total_input_tokens"], j["total_output_tokens"]) != (16, 0, 128, 160):
        fail("basic: counts %s" % {k: j[k] for k in ("completed", "failed", "total_input_tokens",
                                                     "total_output_tokens")})
    if j["output_lens"] != [10] * 16 or j["input_lens"] != [8] * 16 or any(len(x) != 9 for x in j["itls"]):
        fail("basic: per-request arrays %s %s %s" % (j["output_lens"], j["input_lens"], [len(x) for x in j["itls"]]))
    # generous: a loaded CI machine is late, never early
    for t in j["ttfts"]:
        if not TTFT * 0.9 <= t <= TTFT + 2.0:
            fail("basic: TTFT %.4f s against the mock's %.3f s" % (t, TTFT))
    if not ITL * 0.9 <= j["median_itl_ms"] / 1e3 <= ITL + 0.2:
        fail("basic: median ITL %.2f ms against the mock's %.0f ms" % (j["median_itl_ms"], ITL * 1e3))
    if not ITL * 0.9 <= j["mean_tpot_ms"] / 1e3 <= ITL + 0.2:
        fail("basic: mean TPOT %.2f ms against the mock's %.0f ms" % (j["mean_tpot_ms"], ITL * 1e3))
    for e, t in zip(j["e2els"], j["ttfts"]):
        if not e >= t + 9 * ITL * 0.9:
            fail("basic: E2EL %.4f s below TTFT %.4f s + 9 gaps" % (e, t))
    if j["good_requests"] != 16 or abs(j["request_goodput"] - j["request_throughput"]) > 1e-9:
        fail("basic: goodput %s of %s" % (j["request_goodput"], j["request_throughput"]))
    if abs(j["request_throughput"] - 16 / j["duration"]) > 1e-6 or "p50_ttft_ms" not in j or "p99_e2el_ms" not in j:
        fail("basic: throughput or percentile keys: %s" % sorted(j))
    if not 2 <= st["max_in_flight"] <= 8 or st["requests"] != 16:
        fail("basic: the mock saw %s" % {k: st[k] for k in ("requests", "max_in_flight")})
    out = p.stdout.splitlines()
    want = ["============ Serving Benchmark Result ============", line("Successful requests:", "16"),
            line("Failed requests:", "0"), line("Maximum request concurrency:", "8"),
            line("Total input tokens:", "128"), line("Total generated tokens:", "160"),
            "---------------Time to First Token----------------",
            "-----Time per Output Token (excl. 1st token)------",
            "---------------Inter-token Latency----------------",
            "----------------End-to-end Latency----------------", "=" * 50,
            "Traffic request rate: inf", "Burstiness factor: 1.0 (Poisson process)"]
    for w in want:
        if w not in out:
            fail("basic: the report lacks the line %r:\n%s" % (w, p.stdout))
    labels = ["Benchmark duration (s):", "Request throughput (req/s):", "Request goodput (req/s):",
              "Output token throughput (tok/s):", "Total Token throughput (tok/s):"]
    for m_ in ("TTFT", "TPOT", "ITL", "E2EL"):
        labels += ["Mean %s (ms):" % m_, "Median %s (ms):" % m_, "P50 %s (ms):" % m_, "P99 %s (ms):" % m_]
    for lab in labels:
        hit = [x for x in out if x.startswith(lab)]
        if len(hit) != 1 or len(hit[0]) != 51 or not hit[0][40] == " ":
            fail("basic: the line %r is not vLLM's '{:<40} {:<10.2f}': %r" % (lab, hit))


def check_failures():
    # the mock's requests 4, 8, 12, 16, 20 answer 500; 7 and 14 end without [DONE]; 6 and 18 are cut
    with Mock("--ttft", "0.01", "--itl", "0.005", "--fail-every", "4", "--truncate-every", "7",
              "--drop-every", "6") as m:
        j, p = result(m.url, "--num-prompts", "20", "--random-input-len", "4", "--random-output-len", "5",
                      "--vocab", "100")
    if (j["completed"], j["failed"], j["total_output_tokens"]) != (11, 9, 55):
        fail("failures: completed %d failed %d output %d, expected 11, 9, 55" % (
            j["completed"], j["failed"], j["total_output_tokens"]))
    errs = [e for e in j["errors"] if e]
    if (sum("HTTP 500" in e for e in errs), sum("[DONE]" in e for e in errs),
            sum(e.startswith("connection:") for e in errs)) != (5, 2, 2):
        fail("failures: reasons %s" % errs)
    if any(j["ttfts"][i] or j["itls"][i] for i, e in enumerate(j["errors"]) if e):
        fail("failures: a failed request is timed")
    if "9 of 20 requests failed" not in p.stderr or line("Failed requests:", "9") not in p.stdout.splitlines():
        fail("failures: the report does not say 9 failed:\n%s%s" % (p.stdout, p.stderr))


def check_shared_prefix():
    with Mock("--ttft", "0.001", "--itl", "0.001") as m:
        j, _ = result(m.url, "--dataset-name", "shared-prefix", "--prefix-groups", "3", "--requests-per-group", "4",
                      "--prefix-len", "16", "--question-len", "4", "--prefix-output-len", "3", "--vocab", "50")
        prompts = m.stats()["prompts"]
    if j["completed"] != 12 or j["dataset"] != "shared-prefix" or j["total_input_tokens"] != 12 * 20:
        fail("shared-prefix: %s" % {k: j[k] for k in ("completed", "dataset", "total_input_tokens")})
    groups = {}
    for q in prompts:
        if len(q) != 20:
            fail("shared-prefix: a prompt of %d ids" % len(q))
        groups.setdefault(tuple(q[:16]), []).append(q)
    if sorted(len(v) for v in groups.values()) != [4, 4, 4]:
        fail("shared-prefix: groups of %s" % [len(v) for v in groups.values()])


def check_jsonl():
    with tempfile.TemporaryDirectory() as d, Mock("--ttft", "0.001", "--itl", "0.001") as m:
        path = os.path.join(d, "p.jsonl")
        with open(path, "w") as f:
            f.write('{"prompt": "one two three", "max_tokens": 2}\n{"prompt": [5, 6], "max_tokens": 4}\n')
        j, _ = result(m.url, "--dataset-path", path)
        if (j["completed"], j["total_input_tokens"], j["total_output_tokens"]) != (2, 5, 6):
            fail("jsonl: %s" % {k: j[k] for k in ("completed", "total_input_tokens", "total_output_tokens")})
        with open(path, "a") as f:
            f.write('{"prompt": [1], "max_tokens": "many"}\n')
        p = bench(m.url, "--dataset-path", path, code=2)
        if path + ":3:" not in p.stderr or "max_tokens" not in p.stderr:
            fail("jsonl: the bad line 3 is not named: %s" % p.stderr)
        if m.stats()["requests"] != 2:
            fail("jsonl: requests were sent for a refused file")


def check_rate():
    with Mock("--ttft", "0.001", "--itl", "0.001") as m:
        j, p = result(m.url, "--num-prompts", "20", "--random-input-len", "4", "--random-output-len", "2",
                      "--vocab", "100", "--request-rate", "40", "--seed", "5")
    s = j["send_times"]
    if j["completed"] != 20 or s[0] > 0.05 or any(b < a for a, b in zip(s, s[1:])) or s[-1] < 0.1:
        fail("rate: send times %s" % s)
    if j["request_rate"] != 40 or "Traffic request rate: 40.0" not in p.stdout:
        fail("rate: %s / %s" % (j["request_rate"], p.stdout))
    if line("Request rate configured (RPS):", "40.00") not in p.stdout.splitlines():
        fail("rate: no configured-rate line:\n" + p.stdout)


def check_api_key():
    with Mock("--api-key", "s3cret") as m:
        p = bench(m.url, "--num-prompts", "1", "--vocab", "10", code=1)
        if "401" not in p.stderr or "--api-key" not in p.stderr:
            fail("api key: %s" % p.stderr)
        j, _ = result(m.url, "--num-prompts", "2", "--random-input-len", "3", "--random-output-len", "2",
                      "--vocab", "10", "--api-key", "s3cret")
        if j["completed"] != 2:
            fail("api key: %s" % j["errors"])


def check_refusals():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    p = bench(closed, "--num-prompts", "1", code=1)
    if "cannot be reached" not in p.stderr or closed not in p.stderr:
        fail("unreachable: %s" % p.stderr)
    usage = [
        (["--random-range-ratio", "1.5"], "--random-range-ratio 1.5 is out of range; allowed: [0, 1)"),
        (["--prefix-len", "5"], "--prefix-len applies to --dataset-name shared-prefix, not random"),
        (["--dataset-name", "shared-prefix", "--num-prompts", "5"], "--prefix-groups x --requests-per-group"),
        (["--goodput", "itl:5"], "unknown metric 'itl'"),
        (["--dataset-name", "sharegpt"], "allowed: random, shared-prefix, jsonl"),
        (["--num-prompts", "0"], "--num-prompts: 0 is out of range"),
        (["--request-rate", "-1"], "--request-rate -1 is out of range"),
        (["--max-concurrency", "x"], "--max-concurrency: 'x' is not an integer"),
        (["--percentiles", "0"], "allowed: numbers in (0, 100]"),
        (["--dataset-name", "jsonl"], "reads --dataset-path FILE"),
        (["--seed", "1", "--seed", "2"], "--seed given more than once"),
        (["stray"], "unexpected argument 'stray'"),
        (["--endpoint", "v1/completions"], "must be a path starting with '/'"),
    ]
    for args, needle in usage:
        p = bench(closed, *args, code=2)
        if needle not in p.stderr:
            fail("usage %s: %r lacks %r" % (args, p.stderr, needle))
    h = bench(None, "--help")
    for flag in ("--base-url", "--endpoint", "--model", "--api-key", "--dataset-name", "--num-prompts", "--seed",
                 "--vocab", "--random-input-len", "--random-output-len", "--random-range-ratio", "--prefix-groups",
                 "--requests-per-group", "--prefix-len", "--question-len", "--prefix-output-len", "--dataset-path",
                 "--request-rate", "--burstiness", "--max-concurrency", "--percentiles", "--goodput",
                 "--result-json", "--ready-timeout", "--request-timeout"):
        if flag not in h.stdout:
            fail("--help lacks " + flag)
    with Mock("--max-model-len", "16") as m:
        p = bench(m.url, "--num-prompts", "2", "--random-input-len", "12", "--random-output-len", "10",
                  "--vocab", "10", code=2)
        if "exceed the server's max_model_len 16" not in p.stderr or m.stats()["requests"] != 0:
            fail("max_model_len: %s" % p.stderr)


for check in (check_basic, check_failures, check_shared_prefix, check_jsonl, check_rate, check_api_key,
              check_refusals):
    check()
    print("ok", check.__name__)
