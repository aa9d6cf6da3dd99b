#!/usr/bin/env python3
"""Broken copies of a good checkpoint, one per way a checkpoint goes wrong, for
the command-line tests of greenpipe and decode_pipeline_case_study:
bad_checkpoints.py SRC_DIR OUT_DIR makes OUT_DIR/<kind> for each kind below."""
import json
import os
import shutil
import struct
import sys

# The tensor the missing-tensor copy lacks: any one the config needs.
DROPPED = "model.layers.0.mlp.down_proj.weight"


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, chunks):
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)  # the format's 8-byte alignment of the data
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(body)) + body + b"".join(chunks))


def without_tensor(src, dst, name):
    """A valid file without one tensor: the data is repacked so that the
    reader sees no gap, only the absence."""
    header, data = read_safetensors(src)
    meta = header.pop("__metadata__", None)
    del header[name]
    out, chunks, off = {}, [], 0
    for key, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        chunks.append(data[b:e])
        out[key] = dict(t, data_offsets=[off, off + e - b])
        off += e - b
    if meta is not None:
        out["__metadata__"] = meta
    write_safetensors(dst, out, chunks)


def main():
    src, out = sys.argv[1], sys.argv[2]
    cfg, st = os.path.join(src, "config.json"), os.path.join(src, "model.safetensors")
    shutil.rmtree(out, ignore_errors=True)

    def kind(name):
        d = os.path.join(out, name)
        os.makedirs(d)
        return d

    shutil.copy(st, kind("no_config"))
    d = kind("bad_config")
    shutil.copy(st, d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"hidden_size": 64,\n')  # cut off mid-object
    d = kind("truncated")
    shutil.copy(cfg, d)
    with open(st, "rb") as f, open(os.path.join(d, "model.safetensors"), "wb") as g:
        g.write(f.read(5000))
    shutil.copy(cfg, kind("no_weights"))
    d = kind("missing_tensor")
    shutil.copy(cfg, d)
    without_tensor(st, os.path.join(d, "model.safetensors"), DROPPED)


if __name__ == "__main__":
    main()
