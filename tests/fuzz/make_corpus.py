#!/usr/bin/env python3
"""Writes the fuzz seed corpus: small valid and corrupt inputs for each
target under tests/fuzz/corpus/<target>/. Rerun after changing it; the files
are checked in so neither CI nor the replay test needs Python."""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
OUT = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    assert len(data) <= 8192, (target, name, len(data))


# ------------------------------------------------------------ safetensors

def st_raw(header, data=b"", length=None):
    """8-byte little-endian header length (or a forged one), header, data."""
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if length is None else length) + h + data


SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2,
         "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def st_file(tensors, meta=True, pad=False):
    """tensors: (name, dtype, shape); packed in order, data bytes 0, 1, 2..."""
    h = {"__metadata__": {"format": "pt"}} if meta else {}
    off = 0
    for name, dt, shape in tensors:
        n = SIZES[dt]
        for s in shape:
            n *= s
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(h, separators=(",", ":"))
    if pad:  # the reference writer pads to 8 bytes with spaces
        text += " " * (-len(text) % 8)
    return st_raw(text, bytes(i % 251 for i in range(off)))


def safetensors():
    t = "safetensors"
    put(t, "valid_small", st_file([("w", "F32", [2, 2]), ("b", "BF16", [3]),
                                   ("e", "U8", [0]), ("s", "F16", [])], pad=True))
    put(t, "valid_all_dtypes", st_file([("t_" + d, d, [2]) for d in SIZES], meta=False))
    put(t, "valid_empty", st_raw("{}"))
    put(t, "valid_metadata_only", st_raw('{"__metadata__":{"format":"pt","a":"b"}}'))
    # The tiny model's real header, shapes shrunk so the file stays small.
    with open(os.path.join(DATA, "tiny", "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    names = [k for k in hdr if k != "__metadata__"]
    put(t, "valid_tiny_names", st_file([(k, "BF16", [1, 2] if i % 2 else [2]) for i, k in enumerate(names)]))
    one = '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'
    put(t, "bad_short", b"\x02\x00\x00")
    put(t, "bad_header_past_end", st_raw(one, b"abcd", length=1000))
    put(t, "bad_header_over_cap", st_raw(one, b"abcd", length=100 * 1024 * 1024 + 1))
    put(t, "bad_header_u64_max", st_raw(one, b"abcd", length=2**64 - 1))
    put(t, "bad_not_json", st_raw('{"a": {"dtype": ', b""))
    put(t, "bad_array", st_raw("[1,2,3]"))
    put(t, "bad_nested", st_raw('{"__metadata__":' + "[" * 60 + "]" * 60 + "}"))
    put(t, "bad_past_end", st_raw('{"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', b"1234"))
    put(t, "bad_overlap", st_raw('{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},'
                                 '"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}', bytes(12)))
    put(t, "bad_gap", st_raw('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                             '"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}', bytes(12)))
    put(t, "bad_trailing", st_raw(one, bytes(6)))
    put(t, "bad_wrong_size", st_raw('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)))
    put(t, "bad_reversed", st_raw('{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}', bytes(4)))
    put(t, "bad_negative_dim", st_raw('{"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}}', bytes(16)))
    put(t, "bad_overflow", st_raw('{"w":{"dtype":"F64","shape":[4611686018427387904,4],'
                                  '"data_offsets":[0,8]}}', bytes(8)))
    put(t, "bad_2e40_elements", st_raw('{"w":{"dtype":"U8","shape":[1048576,1048576],'
                                       '"data_offsets":[0,1099511627776]}}', bytes(8)))
    put(t, "bad_dtype", st_raw('{"w":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}', b"x"))
    put(t, "bad_duplicate", st_raw('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                   '"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"))
    put(t, "bad_extra_key", st_raw('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}', b"x"))
    put(t, "bad_metadata", st_raw('{"__metadata__":{"format":1}}'))
    put(t, "bad_too_many_dims", st_raw('{"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],'
                                       '"data_offsets":[0,1]}}', b"x"))


# ------------------------------------------------------------ config.json

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "vocab_size": 256,
        "max_position_embeddings": 256}


def cfg(**kw):
    c = dict(BASE)
    for k, v in kw.items():
        if v is ...:
            c.pop(k, None)
        else:
            c[k] = v
    return json.dumps(c)


def config():
    t = "config"
    for m in ("tiny", "small-gqa"):
        with open(os.path.join(DATA, m, "config.json"), "rb") as f:
            put(t, "valid_" + m.replace("-", "_"), f.read())
    put(t, "valid_minimal", cfg())
    put(t, "valid_llama31_classic", cfg(
        model_type="llama", hidden_act="silu", num_key_value_heads=2, rope_theta=500000.0,
        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False))
    put(t, "valid_old_type_key", cfg(rope_scaling={"type": "default"}, num_key_value_heads=None))
    put(t, "bad_missing_layers", cfg(num_hidden_layers=...))
    put(t, "bad_negative_heads", cfg(num_attention_heads=-4))
    put(t, "bad_zero_vocab", cfg(vocab_size=0))
    put(t, "bad_int_range", cfg(num_hidden_layers=99999999999))
    # (INT_MAX heads, kv heads and head_dim overflowed int64 in validation:
    # tests/fuzz/regressions/config/qkv_rows_int64_overflow.json.)
    put(t, "bad_huge_float", cfg(rms_norm_eps=1e300))
    put(t, "bad_tiny_float", cfg(rms_norm_eps=1e-300))
    put(t, "bad_nan", cfg().replace("1e-06", "NaN"))
    put(t, "bad_string_int", cfg(head_dim="16"))
    put(t, "bad_float_int", cfg(head_dim=16.5))
    put(t, "bad_rope_yarn", cfg(rope_scaling={"rope_type": "yarn", "factor": 4}))
    put(t, "bad_rope_factors", cfg(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4,
                                                    "factor": 8, "low_freq_factor": 4,
                                                    "high_freq_factor": 1,
                                                    "original_max_position_embeddings": 64}))
    put(t, "bad_array", "[1, 2]")
    put(t, "bad_truncated", cfg()[:40])
    put(t, "bad_nested", '{"x":' + "[" * 100 + "]" * 100 + "," + cfg()[1:])


# ------------------------------------------------------------ index

def index():
    t = "index"
    with open(os.path.join(DATA, "small-gqa", "model.safetensors.index.json"), "rb") as f:
        put(t, "valid_small_gqa", f.read())
    put(t, "valid_two_shards", json.dumps({"metadata": None, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors",
        "c.weight": "model-00001-of-00002.safetensors"}}))
    put(t, "bad_shard_dotdot", json.dumps({"weight_map": {"a": "../model.safetensors"}}))
    put(t, "bad_shard_slash", json.dumps({"weight_map": {"a": "/etc/passwd"}}))
    put(t, "bad_shard_empty", json.dumps({"weight_map": {"a": ""}}))
    put(t, "bad_not_string", json.dumps({"weight_map": {"a": 1}}))
    put(t, "bad_empty_map", json.dumps({"weight_map": {}}))
    put(t, "bad_no_map", json.dumps({"metadata": {}}))
    put(t, "bad_metadata", json.dumps({"metadata": [1], "weight_map": {"a": "x.safetensors"}}))
    put(t, "bad_duplicate", '{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}')
    put(t, "bad_array", '["weight_map"]')
    put(t, "bad_truncated", '{"weight_map": {"a": "x.safe')


# ------------------------------------------------------------ API requests

def api():
    """The first byte picks the endpoint: 'p' /v1/completions, 'c' chat."""
    t = "api"
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"}]
    put(t, "valid_prompt", "p" + json.dumps({"model": "tiny", "prompt": "Once upon", "max_tokens": 8}))
    put(t, "valid_prompt_ids", "p" + json.dumps({"prompt": [1, 2, 255], "temperature": 0, "seed": 7}))
    put(t, "valid_prompt_batch_of_one", "p" + json.dumps({"prompt": [[5, 6]], "stop": []}))
    put(t, "valid_all_fields", "p" + json.dumps({
        "model": "tiny", "prompt": ["x"], "max_tokens": 127, "temperature": 0.7, "top_p": 0.9,
        "top_k": -1, "min_p": 0.1, "seed": -5, "stop": ["\n", "END"], "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True, "n": 1, "echo": False,
        "logprobs": None, "best_of": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
        "user": "u", "logit_bias": {}, "extra": [1, {"a": None}]}))
    put(t, "valid_chat", "c" + json.dumps({"model": "tiny", "messages": msgs, "stream": True}))
    put(t, "valid_chat_limits", "c" + json.dumps({"messages": msgs[1:], "max_completion_tokens": 5,
                                                 "max_tokens": 9, "stop": "x", "top_k": 40}))
    put(t, "bad_not_json", 'p{"prompt": "hi",')
    put(t, "bad_array_body", "p[1, 2]")
    put(t, "bad_several_prompts", "p" + json.dumps({"prompt": ["a", "b"]}))
    put(t, "bad_token", "p" + json.dumps({"prompt": [1, 256]}))
    put(t, "bad_types", "p" + json.dumps({"prompt": "hi", "max_tokens": "8", "temperature": "x"}))
    put(t, "bad_ranges", "p" + json.dumps({"prompt": "hi", "temperature": -1, "top_p": 0, "max_tokens": 500}))
    put(t, "bad_stops", "p" + json.dumps({"prompt": "hi", "stop": ["a", "", "c", "d", "e"]}))
    put(t, "bad_unsupported", "p" + json.dumps({"prompt": "hi", "n": 2, "echo": True, "logprobs": 3}))
    put(t, "bad_model", "c" + json.dumps({"model": "gpt-4", "messages": msgs}))
    put(t, "bad_role", "c" + json.dumps({"messages": [{"role": "tool", "content": "x"}]}))
    put(t, "bad_content_parts", "c" + json.dumps({"messages": [{"role": "user", "content": [{"type": "text"}]}]}))
    put(t, "bad_invalid_utf8", b'p{"prompt": "\xff\xfe"}')
    put(t, "bad_nested", "c" + '{"messages":' + "[" * 60 + "]" * 60 + "}")


if __name__ == "__main__":
    safetensors()
    config()
    index()
    api()
    for t in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, t))
        size = sum(os.path.getsize(os.path.join(OUT, t, f)) for f in files)
        print(f"{t}: {len(files)} files, {size} bytes")
    sys.exit(0)
