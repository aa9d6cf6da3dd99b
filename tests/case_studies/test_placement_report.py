#!/usr/bin/env python3
"""bench/placement_report.py on made-up rows of each source, no GPU: the
rows join by model and workload, the best green split stands for the case
study, every row gets its bound, failed rows say why, the winner line and
the A/F ratios are right, and bad input exits 2 naming the file."""
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]

CASE_STUDY = """workload,B,C,seq,a_req,f_req,a_got,f_got,partitioned,M,ok,ms_median,tokens_per_s,attn_idle_share,\
ffn_idle_share,floor_share,model,gpu
small,64,1024,1,0,0,132,132,0,1,1,8.0,8000,,,0.80,llama3-8b (synthetic weights),NVIDIA H200
small,64,1024,0,66,66,66,66,1,2,1,8.5,7529.4,0.10,0.30,0.75,llama3-8b (synthetic weights),NVIDIA H200
small,64,1024,0,88,44,88,44,1,2,1,8.2,7804.9,0.05,0.40,0.78,llama3-8b (synthetic weights),NVIDIA H200
small,64,1024,0,44,88,44,88,0,2,1,7.0,9142.9,,,0.9,llama3-8b (synthetic weights),NVIDIA H200
small,64,1024,0,66,66,66,66,1,4,0,,,,,,llama3-8b (synthetic weights),NVIDIA H200
"""

HEADER = ("model,device,phase,placement,gpus,B,C,M,ok,error,ms_median,tokens_per_s_per_gpu,floor_ms,floor_bound,"
          "busy_gpu0,busy_gpu1,cross_mb\n")
TP = HEADER + """llama3-8b,NVIDIA H200,decode,TP,2,64,1024,1,1,"",10.0,3200.0,5.0,HBM,,,
llama3-8b,NVIDIA H200,decode,one GPU,1,64,1024,1,1,"",7.5,8533.3,6.0,HBM,,,
llama3-70b,NVIDIA H200,decode,TP,2,1,1024,1,1,"",21.0,23.8,17.0,HBM,,,
llama3-70b,NVIDIA H200,decode,one GPU,1,1,1024,1,0,"the whole model does not fit one GPU",,,40.0,HBM,,,
"""
AFD = HEADER + """llama3-8b,NVIDIA H200,decode,one GPU,1,64,1024,1,1,"",7.6,8421.1,6.0,HBM,,,
llama3-8b,NVIDIA H200,decode,AFD,2,64,1024,1,1,"",16.0,2000.0,,,95.0,40.0,2.1
llama3-8b,NVIDIA H200,decode,AFD,2,64,1024,2,1,"",15.0,2133.3,,,70.0,60.0,2.1
llama3-8b,NVIDIA H200,decode,PP,2,64,1024,2,1,"",14.0,2285.7,,,,,1.0
llama3-8b,NVIDIA H200,decode,PP,2,64,1024,4,0,"does not fit",,,,,,,
"""


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def expect(cond, what, text=""):
    if not cond:
        print("FAIL: %s\n%s" % (what, text))
        sys.exit(1)


with tempfile.TemporaryDirectory() as d:
    paths = {}
    for name, text in (("cs.csv", CASE_STUDY), ("tp.csv", TP), ("afd.csv", AFD)):
        paths[name] = os.path.join(d, name)
        with open(paths[name], "w") as f:
            f.write(text)
    out = os.path.join(d, "report.md")
    r = run(["--out", out, paths["cs.csv"], paths["tp.csv"], paths["afd.csv"]])
    expect(r.returncode == 0, "the report runs", r.stderr)
    rep = open(out).read()
    # the benchmarks' own one-GPU row is the reference: the first file that has one (tp.csv), 8533.3
    expect("| TP = 2 | 2 | 10.000 | 3,200 | 0.38 | each GPU's HBM, its shard (50% of its floor)" in rep,
           "TP's row, its ratio to the one-GPU engine and its bound", rep)
    # the best partitioned split (88:44) stands for the case study; the unpartitioned one is not a split
    expect("| A/F on green partitions, 88:44 SMs, M = 2 | 1 | 8.200 | 7,805 |" in rep, "best green", rep)
    expect("44:88" not in rep and "66:66" not in rep, "only the best split", rep)
    expect("attention busy 95%, FFN 60%" in rep, "the partitions' busy shares", rep)
    expect("| one GPU, sequential (case study) | 1 | 8.000 | 8,000 |" in rep, "the case study's seq", rep)
    expect("80% of its floor" in rep, "seq's floor share", rep)
    expect("GPU 0 (attention, KV cache): busy 95%, the other 40%; 2.1 MB crossing a step" in rep, "AFD M=1 bound", rep)
    expect("the crossing and the ping-pong's bubbles: GPU 0 busy 70%, GPU 1 60%" in rep, "AFD M=2 bound", rep)
    expect("| PP = 2, M = 4 | 2 | (does not fit) |" in rep, "a failed row says why", rep)
    expect("**Winner: one GPU (DP's rate per GPU)**, 8,533 tokens/s per GPU." in rep, "the winner line", rep)
    expect("on one GPU, green partitions give 0.98x the sequential engine" in rep, "green vs seq", rep)
    expect("on two GPUs, AFD (M = 2) gives 0.67x TP, 0.93x PP, 0.25x DP per GPU" in rep, "AFD vs the others", rep)
    # 70B: no one-GPU row ran, TP wins
    expect("| one GPU (DP's rate per GPU) | 1 | (the whole model does not fit one GPU) |" in rep,
           "70B's one GPU row", rep)
    expect("**Winner: TP = 2**, 24 tokens/s per GPU." in rep, "70B's winner", rep)
    expect("| llama3-70b | NVIDIA H200 | decode | 1 | 1024 | TP = 2 | 24 |" in rep, "the winners table", rep)
    # a row of another device is a section of its own, never compared with these
    with open(paths["tp.csv"], "a") as f:
        f.write('llama3-8b,NVIDIA H100,decode,TP,2,64,1024,1,1,"",9.0,3555.6,5.0,HBM,,,\n')
    r = run([paths["cs.csv"], paths["tp.csv"], paths["afd.csv"]])
    expect("## B = 64, C = 1024 (decode), NVIDIA H100" in r.stdout and "| TP = 2 | 2 | 9.000 | 3,556 | - |" in r.stdout,
           "another device's section", r.stdout)

    # a long reason is cut, its start kept
    with open(paths["afd.csv"], "a") as f:
        f.write('llama3-8b,NVIDIA H200,decode,AFD,2,64,1024,4,0,"%s",,,,,,,\n' % ("x" * 150))
    r = run([paths["afd.csv"]])
    expect("| AFD, M = 4 | 2 | (" + "x" * 99 + "…) |" in r.stdout, "a long reason cut", r.stdout)

    # bad input: exit 2, the file named
    r = run([os.path.join(d, "missing.csv")])
    expect(r.returncode == 2 and "missing.csv" in r.stderr, "a missing file", r.stderr)
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("a,b\n1,2\n")
    r = run([bad])
    expect(r.returncode == 2 and "bad.csv: neither a case study" in r.stderr, "unknown columns", r.stderr)
    with open(bad, "w") as f:
        f.write(HEADER + "llama3-8b,X,decode,TP,two,1,1,1,1,,1,1,,,,,\n")
    r = run([bad])
    expect(r.returncode == 2 and "not a number" in r.stderr, "a bad number", r.stderr)
    with open(bad, "w") as f:
        f.write(HEADER + "llama3-8b,X,decode,EP,2,1,1,1,1,,1,1,,,,,\n")
    r = run([bad])
    expect(r.returncode == 2 and "placement 'EP'" in r.stderr, "an unknown placement", r.stderr)
    with open(bad, "w") as f:
        f.write(HEADER)
    r = run([bad])
    expect(r.returncode == 2 and "no rows" in r.stderr, "no rows", r.stderr)
print("placement_report: ok")
