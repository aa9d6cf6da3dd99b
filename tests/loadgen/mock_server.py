#!/usr/bin/env python3
"""A mock OpenAI completions server for bench-serve's end-to-end test:
http.server's ThreadingHTTPServer on an ephemeral port of 127.0.0.1 (its
first stdout line is "PORT n"), streaming max_tokens chunks as server-sent
events with known delays (--ttft before the first, --itl between the
others), each event written in two pieces so clients see events split; the
last chunk carries finish_reason and usage, then "data: [DONE]".
Failures on purpose: every --fail-every-th request is a 500, every
--truncate-every-th stream ends without [DONE], every --drop-every-th
connection closes after the first token. GET /stats tells what it
saw: requests, the most in flight at once, the bodies' prompts."""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompts = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each piece leaves at once: the delays are the mock's own

    def log_message(self, fmt, *a):  # quiet: the test prints what matters
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        key = self.server.state.args.api_key
        if key and self.headers.get("Authorization") != "Bearer " + key:
            self.send_json(401, {"error": {"message": "missing or wrong API key", "type": "authentication_error",
                                           "param": None, "code": 401}})
            return False
        return True

    def do_GET(self):
        st = self.server.state
        if self.path == "/health":
            self.send_json(200, {})
        elif self.path == "/v1/models":
            if self.authorized():
                entry = {"id": st.args.model, "object": "model", "owned_by": "mock",
                         "max_model_len": st.args.max_model_len}
                self.send_json(200, {"object": "list", "data": [entry]})
        elif self.path == "/stats":
            with st.lock:
                self.send_json(200, {"requests": st.count, "max_in_flight": st.max_in_flight,
                                     "prompts": st.prompts})
        else:
            self.send_json(404, {"error": {"message": "no route " + self.path}})

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        half = len(data) // 2
        self.chunk(data[:half])
        self.chunk(data[half:])

    def do_POST(self):
        st = self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if not self.authorized():
            return
        with st.lock:
            st.count += 1
            k = st.count
            st.prompts.append(body.get("prompt"))
        a = st.args
        if a.fail_every and k % a.fail_every == 0:
            self.send_json(500, {"error": {"message": "mock failure of request %d" % k, "type": "server_error",
                                           "param": None, "code": 500}})
            return
        ok = (body.get("model") == a.model and body.get("stream") is True and body.get("ignore_eos") is True
              and body.get("temperature") == 0 and isinstance(body.get("max_tokens"), int))
        if not ok:
            self.send_json(400, {"error": {"message": "unexpected body %s" % json.dumps(body)[:200]}})
            return
        with st.lock:
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
        try:
            self.stream(body, truncate=bool(a.truncate_every and k % a.truncate_every == 0),
                        drop=bool(a.drop_every and k % a.drop_every == 0))
        finally:
            with st.lock:
                st.in_flight -= 1

    def stream(self, body, truncate, drop):
        a = self.server.state.args
        n = body["max_tokens"]
        prompt = body["prompt"]
        n_prompt = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):
            time.sleep(a.ttft if i == 0 else a.itl)
            choice = {"index": 0, "text": "t%d " % i, "finish_reason": None}
            chunk = {"id": "cmpl-mock", "object": "text_completion", "model": a.model, "choices": [choice]}
            if i == n - 1:
                choice["finish_reason"] = "length"
                chunk["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": n,
                                  "total_tokens": n_prompt + n}
            self.event(chunk)
            if drop:  # the chunked body never ends: the client sees the connection cut
                self.close_connection = True
                return
        if not truncate:
            self.event(b"[DONE]")
        self.chunk(b"")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mock-model")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--truncate-every", type=int, default=0)
    ap.add_argument("--drop-every", type=int, default=0)
    ap.add_argument("--api-key")
    args = ap.parse_args()
    ThreadingHTTPServer.request_queue_size = 256  # all clients may connect at once
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.state = State(args)
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
