#!/usr/bin/env python3
"""The HTTP server over the fake serving core, driven by the official openai
client: completions and chat, whole and streamed (with and without
stream_options.include_usage), the model list, and the errors the client
turns into its typed exceptions. The fake echoes its prompt's ids, each as
"<id> ", text tokenized byte by byte after BOS 1 (tests/support/serve_fake.h).
Usage: test_openai_fake.py PATH_TO_http_fake_server"""
import os
import subprocess
import sys

try:
    import openai
except ImportError:
    print("the openai package is not installed: skipped")
    sys.exit(77)

KEY = "sekret"
MODEL = "fake-model"


def main():
    os.environ["NO_PROXY"] = "127.0.0.1"
    srv = subprocess.Popen([sys.argv[1], KEY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        base = f"http://127.0.0.1:{port}/v1"
        c = openai.OpenAI(base_url=base, api_key=KEY, timeout=30, max_retries=0)

        r = c.completions.create(model=MODEL, prompt="hi")
        assert r.choices[0].text == "1 104 105 ", r
        assert r.choices[0].finish_reason == "stop", r
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 3), r
        assert r.id.startswith("cmpl-"), r

        r = c.completions.create(model=MODEL, prompt=[7, 8, 9], max_tokens=2)
        assert r.choices[0].text == "7 8 " and r.choices[0].finish_reason == "length", r

        chunks = list(c.completions.create(model=MODEL, prompt="abc", stream=True))
        assert "".join(ch.choices[0].text for ch in chunks) == "1 97 98 99 ", chunks
        assert chunks[-1].choices[0].finish_reason == "stop", chunks
        assert chunks[-1].usage.completion_tokens == 4, chunks

        chunks = list(c.completions.create(model=MODEL, prompt="abc", stream=True,
                                           stream_options={"include_usage": True}))
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "1 97 98 99 ", chunks
        assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 4, chunks

        msgs = [{"role": "system", "content": "a"}, {"role": "user", "content": "xy"}]
        r = c.chat.completions.create(model=MODEL, messages=msgs)
        assert r.choices[0].message.role == "assistant", r
        assert r.choices[0].message.content == "97 120 121 ", r
        assert r.id.startswith("chatcmpl-"), r

        chunks = list(c.chat.completions.create(model=MODEL, messages=msgs, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant", chunks
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "97 120 121 ", chunks
        assert chunks[-1].choices[0].finish_reason == "stop", chunks

        assert [m.id for m in c.models.list().data] == [MODEL]

        try:
            c.completions.create(model="other-model", prompt="hi")
            raise AssertionError("an unknown model was served")
        except openai.BadRequestError as e:
            assert e.status_code == 400, e
        try:
            c.completions.create(model=MODEL, prompt="x" * 300)
            raise AssertionError("a prompt beyond the context was served")
        except openai.BadRequestError as e:
            assert "context" in str(e), e
        bad = openai.OpenAI(base_url=base, api_key="wrong", timeout=30, max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("a wrong key was let in")
        except openai.AuthenticationError as e:
            assert e.status_code == 401, e
    finally:
        srv.stdin.close()
        srv.wait(timeout=30)
    assert srv.returncode == 0, srv.returncode
    print("ok")


if __name__ == "__main__":
    main()
