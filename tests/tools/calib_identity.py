#!/usr/bin/env python3
"""A calibration is tied to the weights' content, not to a folder name:
calib_identity.py GREENPIPE TINY_DIR calibrates the tiny checkpoint (a copy
in a temp folder named tiny) and checks with generate --backend cpu
--sparsity that it is
- accepted on a byte-identical copy in another temp folder under another name;
- refused (exit 2) on a copy whose weights differ in a few bytes and whose
  folder keeps the name tiny, the message giving both fingerprints;
- refused (exit 2) as older than identities once its "identity" is removed,
  the message saying how to recalibrate;
and that the calibration of a preset is refused on another seed."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(exe, args, code):
    r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    if r.returncode != code:
        fail("exit %d, wanted %d: %s\n%s" % (r.returncode, code, " ".join(args), out))
    return out


def copy_tree(src, dst):
    shutil.copytree(src, dst)
    return dst


def change_weights(ckpt):
    """Flips the low bits of three elements in the middle of one weight tensor."""
    path = os.path.join(ckpt, "model.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    name = next(k for k in sorted(header) if k.endswith("mlp.down_proj.weight"))
    begin, end = header[name]["data_offsets"]
    mid = 8 + hlen + (begin + end) // 2
    for i in (0, 2, 4):
        data[mid + i] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


def main():
    exe, tiny = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="gp_calib_identity_")
    try:
        a = copy_tree(tiny, os.path.join(tmp, "a", "tiny"))
        cal = os.path.join(tmp, "cal.json")
        run(exe, ["calibrate", "--model", a, "--sparsity", "0.5", "--tokens", "64", "--out", cal], 0)
        fp = json.load(open(cal))["identity"]["fingerprint"]
        if not re.fullmatch(r"[0-9a-f]{16}", fp):
            fail("fingerprint %r" % fp)
        gen = ["generate", "--backend", "cpu", "--prompt-ids", "5,17,42", "--steps", "3", "--sparsity", cal,
               "--model"]

        same = copy_tree(tiny, os.path.join(tmp, "elsewhere", "renamed"))
        run(exe, gen + [same], 0)

        other = copy_tree(tiny, os.path.join(tmp, "b", "tiny"))
        change_weights(other)
        out = run(exe, gen + [other], 2)
        m = re.search(r"calibration: fingerprint ([0-9a-f]{16}), .*; this model: fingerprint ([0-9a-f]{16}), ", out)
        if "made on other weights" not in out or not m or m.group(1) != fp or m.group(2) == fp:
            fail("the refusal on changed weights lacks both fingerprints:\n" + out)

        old = os.path.join(tmp, "old.json")
        doc = json.load(open(cal))
        del doc["identity"]
        json.dump(doc, open(old, "w"))
        out = run(exe, gen[:-2] + [old, "--model", a], 2)
        if "predates calibrations identified by the weights' content" not in out or \
                "greenpipe calibrate --model DIR|PRESET --sparsity 0.5 --out FILE.json" not in out:
            fail("the refusal of an old file does not say so:\n" + out)

        pre = os.path.join(tmp, "preset.json")
        run(exe, ["calibrate", "--model", "tiny", "--sparsity", "0.5", "--tokens", "32", "--out", pre], 0)
        run(exe, ["generate", "--model", "tiny", "--prompt-ids", "1,2", "--steps", "2", "--sparsity", pre], 0)
        out = run(exe, ["generate", "--model", "tiny", "--seed", "1", "--prompt-ids", "1,2", "--steps", "2",
                        "--sparsity", pre], 2)
        if "preset tiny, seed 0" not in out or "preset tiny, seed 1" not in out:
            fail("the refusal on another seed does not name both:\n" + out)
    finally:
        shutil.rmtree(tmp)
    print("ok")


if __name__ == "__main__":
    main()
