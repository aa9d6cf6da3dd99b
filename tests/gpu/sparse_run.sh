#!/usr/bin/env bash
# Activation sparsity on the GPU machine: the sparse GEMV test
# against its CPU oracle (both dtypes) and engine_sparse (thresholds 0
# against dense, S = 0.5 masks against the CPU reference); gp_bench_sparse on
# the Llama-3-8B projections; llama3-8b calibrated by greenpipe calibrate
# (synthetic weights, random ids) at S = 0.25, 0.4, 0.5 and
# gp_bench_decode --sparsity at B = 1 and 8 beside the dense engine (its
# context a prefill of C random ids), and at S = 0.5 once more with the O
# projection dense (its threshold 0): the CPU reference calibrates on short
# sequences (GP_CAL_SEQ, 16: a long one costs a weight pass per position),
# and the attention output at C = 1024 is smaller than at 16;
# compute-sanitizer memcheck on both tests unless GP_SPARSE_SAN=0. Logs
# under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build sparse_gemv engine_sparse gp_bench_sparse gp_bench_decode greenpipe
for t in sparse_gemv engine_sparse; do
  "$b/tests/$t" > "$out/$t.log" 2>&1; echo "$t rc $?"
  grep -E "PASSED|FAILED|ERROR|LINE|mismatch|against" "$out/$t.log" | head -14
done
[[ ${GP_SPARSE_KBENCH:-1} == 0 ]] || {
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_sparse --batches 1,8" > "$out/bench_sparse.log"
  timeout 200 "$b/bench/gp_bench_sparse" --batches 1,8 >> "$out/bench_sparse.log" 2>&1; echo "gp_bench_sparse rc $?"
  grep -E "^#|^\| [a-z]" "$out/bench_sparse.log"
}
g="$b/tools/greenpipe"
for s in ${GP_SPARSE_LEVELS:-0.25 0.4 0.5}; do
  /usr/bin/time -f "calibrate S=$s: %e s" timeout 400 "$g" calibrate --model llama3-8b --sparsity "$s" \
    --tokens ${GP_CAL_TOKENS:-128} --seq-len ${GP_CAL_SEQ:-16} --out "$out/cal_8b_$s.json" > "$out/cal_8b_$s.log" 2>&1; echo "calibrate $s rc $?"
  tail -6 "$out/cal_8b_$s.log"
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --workloads 1:1024,8:1024 --sparsity cal_8b_$s.json" \
    > "$out/bench_decode_sparse_$s.log"
  timeout 200 "$b/bench/gp_bench_decode" --workloads 1:1024,8:1024 --sparsity "$out/cal_8b_$s.json" \
    >> "$out/bench_decode_sparse_$s.log" 2>&1; echo "bench S=$s rc $?"
  grep -vE "^\|[-:|]+\|$" "$out/bench_decode_sparse_$s.log" | grep -E "^#|^\| [0-9]|^Activation|rror" | head -16
done
if [[ -f "$out/cal_8b_0.5.json" ]]; then
  python3 - "$out/cal_8b_0.5.json" "$out/cal_8b_0.5_odense.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for l in c["layers"]:
    l["o"] = 0.0
json.dump(c, open(sys.argv[2], "w"))
PY
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --workloads 1:1024,8:1024 --sparsity cal_8b_0.5_odense.json" \
    > "$out/bench_decode_sparse_odense.log"
  timeout 200 "$b/bench/gp_bench_decode" --workloads 1:1024,8:1024 --sparsity "$out/cal_8b_0.5_odense.json" \
    >> "$out/bench_decode_sparse_odense.log" 2>&1; echo "bench S=0.5, O dense rc $?"
  grep -vE "^\|[-:|]+\|$" "$out/bench_decode_sparse_odense.log" | grep -E "^\| [0-9]|rror" | head -16
fi
[[ ${GP_SPARSE_SAN:-1} == 0 ]] || for t in sparse_gemv engine_sparse; do
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/$t" > "$out/san_$t.log" 2>&1
  echo "memcheck $t: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_$t.log" | head -1)"
done
