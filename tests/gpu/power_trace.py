#!/usr/bin/env python3
"""Measurement helper (not part of the greenpipe library): runs one command
(the case study with --progress) while nvidia-smi samples SM clock, power and
the clock-event (throttle) reasons every 20 ms, and splits the samples by the
case study's progress lines, so each row gets its own clock/power figures.

  power_trace.py OUT_PREFIX -- COMMAND...

Writes OUT_PREFIX.samples.csv (time, row, clocks, power, reasons) and prints
a per-row summary (medians over the row's samples, share of samples with the
power cap or a slowdown reason active)."""
import statistics
import subprocess
import sys
import threading
import time

FIELDS = "clocks.sm,clocks.mem,power.draw,power.limit,clocks_event_reasons.active,utilization.gpu"
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
           0x80: "hw_power_brake"}


def main():
    prefix, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    row = ["setup"]
    samples = []
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + FIELDS, "--format=csv,noheader,nounits",
                            "-lms", "20"], stdout=subprocess.PIPE, text=True)

    def read_smi():
        for line in smi.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 6:
                samples.append((time.time(), row[0], parts))

    threading.Thread(target=read_smi, daemon=True).start()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    buf = b""
    while True:
        ch = proc.stderr.read(1)
        if not ch:
            break
        if ch in (b"\r", b"\n"):
            text = buf.decode(errors="replace").strip()
            if text.startswith("["):
                row[0] = text.split("]", 1)[1].strip()
            elif text:
                sys.stderr.write(text + "\n")
            buf = b""
        else:
            buf += ch
    rc = proc.wait()
    time.sleep(0.1)
    smi.terminate()
    with open(prefix + ".samples.csv", "w") as f:
        f.write("t,row," + FIELDS + "\n")
        for t, r, p in samples:
            f.write("%.3f,%s,%s\n" % (t, r.replace(",", ";"), ",".join(p)))
    print("| row | samples | SM MHz median (min) | mem MHz | W median (max) | limit W | power cap | other slowdowns |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    rows = []
    for _, r, _ in samples:
        if r not in rows:
            rows.append(r)
    for r in rows:
        s = [p for _, rr, p in samples if rr == r and p[5] not in ("0", "[N/A]")]
        if not s:
            continue
        try:
            sm = [float(p[0]) for p in s]
            mem = [float(p[1]) for p in s]
            w = [float(p[2]) for p in s]
            lim = float(s[0][3])
            reasons = [int(p[4], 16) for p in s]
        except ValueError:
            continue
        cap = sum(1 for x in reasons if x & 0x4) / len(s)
        other = {n: sum(1 for x in reasons if x & b) for b, n in REASONS.items() if b != 0x4}
        other = ", ".join("%s %d" % (n, c) for n, c in other.items() if c) or "-"
        print("| %s | %d | %.0f (%.0f) | %.0f | %.0f (%.0f) | %.0f | %.0f%% | %s |" % (
            r, len(s), statistics.median(sm), min(sm), statistics.median(mem),
            statistics.median(w), max(w), lim, 100 * cap, other))
    sys.exit(rc)


if __name__ == "__main__":
    main()
