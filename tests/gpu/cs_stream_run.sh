#!/usr/bin/env bash
# The case study on streamed weights (--vram-budget) on the GPU machine: the
# streaming, case-study and streamed-engine tests; tiny at its least budget
# (every row's streaming figures, the trace's copy tracks checked) and
# resident for comparison; llama3-8b at 8G with seq and a split, M 1 and 2;
# the NVTX copy ranges under nsys when it is there. Logs and reports under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build streaming_cuda streaming_params engine_streamed decode_pipeline_case_study cs_cli cs_writers cs_trace_svg \
  cs_memory
ctest --test-dir "$b" -R '^(streaming|engine_streamed|cs_)' --output-on-failure > "$out/cs_stream_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed" "$out/cs_stream_tests.log"
"$b/tests/streaming_cuda" > "$out/streaming_cuda.log" 2>&1; echo "streaming_cuda rc $?"
grep -E "stalls on copies|PASSED|FAILED" "$out/streaming_cuda.log"
cs="$b/case_studies/decode_pipeline_case_study"
common=(--workload 8:64 --sm-splits seq,56 --micro-batches 1,2 --steps 4 --repeat 2 --no-progress)
least=$("$cs" --model tiny "${common[@]}" --vram-budget 1K 2>&1 | grep -oE 'allowed: at least [0-9]+' | grep -oE '[0-9]+$')
echo "tiny: least budget ${least:-NOT FOUND in the 1K refusal}"
"$cs" --model tiny "${common[@]}" --json "$out/cs_tiny_res.json" > "$out/cs_tiny_res.md" 2>&1
echo "tiny resident rc $?"
"$cs" --model tiny "${common[@]}" --vram-budget "${least:-1M}" --json "$out/cs_tiny_str.json" \
  --csv "$out/cs_tiny_str.csv" --trace "$out/cs_tiny_str_trace.json" > "$out/cs_tiny_str.md" 2>&1
echo "tiny streamed rc $?"
sed -n '/^Weights streamed/,/^GPU:/p' "$out/cs_tiny_str.md"
python3 - "$out/cs_tiny_str.json" "$out/cs_tiny_str_trace.json" "$out/cs_tiny_res.json" <<'EOF'
import json, sys
rep, trace, res = (json.load(open(p)) for p in sys.argv[1:4])
bad = []
w = rep["meta"].get("weights")
if not w or not w["streamed"]:
    bad.append("meta.weights missing")
ok_rows = [r for r in rep["rows"] if r["ok"]]
for r in ok_rows:
    s, c = r.get("streaming"), r.get("weight_copies")
    name = "%s %s M=%s" % (r["workload"], "seq" if r["seq"] else r["split"]["a_req"], r["M"])
    if not s:
        bad.append(name + ": no streaming figures"); continue
    if s["gb_per_step"] > 0 and not s["copy_gbps"]:
        bad.append(name + ": bytes streamed without a copy rate")
    if not c or not c["copies"]:
        bad.append(name + ": no weight copies of the traced step")
    print("%-22s GB/step %.4f copy GB/s %s copy ms %.3f wait attn %.3f ffn %.3f ms, misses %.1f, copies in the "
          "traced step %d" % (name, s["gb_per_step"], s["copy_gbps"], s["copy_ms_per_step"],
                               s["wait_ms_per_step"]["attn"], s["wait_ms_per_step"]["ffn"], s["misses_per_step"],
                               len(c["copies"]) if c else 0))
copy_tids = {(e["pid"], e["tid"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "copy"}
slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and (e["pid"], e["tid"]) in copy_tids]
print("trace: %d copy tracks, %d copy slices, e.g. %s" % (len(copy_tids), len(slices),
      ", ".join("%s %.1f-%.1f us" % (e["name"], e["ts"], e["ts"] + e["dur"]) for e in slices[:4])))
if len(copy_tids) != len(ok_rows):
    bad.append("%d copy tracks for %d ok rows" % (len(copy_tids), len(ok_rows)))
if "weights" in res["meta"] or any("streaming" in r for r in res["rows"]):
    bad.append("the resident report has streaming fields")
print("checks: " + ("; ".join(bad) if bad else "all fine"))
EOF
"$cs" --model tiny "${common[@]}" --vram-budget 1T > "$out/cs_tiny_big.txt" 2>&1
echo "tiny --vram-budget 1T rc $? (2 expected): $(head -c 300 "$out/cs_tiny_big.txt")"
# llama3-8b: 8 GiB of 15 on the GPU, the small workload, seq and one split at M 1 and 2
timeout 580 "$cs" --model llama3-8b --vram-budget 8G --workload 8:1024 --sm-splits seq,56 --micro-batches 1,2 \
  --steps 4 --repeat 2 --no-progress --json "$out/cs_8b_str.json" --csv "$out/cs_8b_str.csv" \
  --trace "$out/cs_8b_str_trace.json" > "$out/cs_8b_str.md" 2>&1
echo "llama3-8b 8G rc $?"
grep -E "^\| small|^\| 8:1024|^Weights|error" "$out/cs_8b_str.md" | head -20
if command -v nsys > /dev/null; then
  timeout 300 nsys profile -t cuda,nvtx -o "$out/cs_tiny_nsys" --force-overwrite true \
    "$cs" --model tiny --workload 8:64 --sm-splits seq --steps 2 --repeat 1 --vram-budget "${least:-1M}" \
    > "$out/nsys.log" 2>&1
  nsys stats --report nvtx_sum "$out/cs_tiny_nsys.nsys-rep" 2>/dev/null | grep -E "copy (attn|ffn|head)" | head -5
fi
