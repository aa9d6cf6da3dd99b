#!/usr/bin/env bash
# Activation sparsity (issue #19) on the GPU machine: the sparse GEMV test
# against its CPU oracle (both dtypes) and engine_sparse (thresholds 0
# against dense, S = 0.5 masks against the CPU reference); gp_bench_sparse on
# the Llama-3-8B projections; llama3-8b calibrated by greenpipe calibrate
# (synthetic weights, random ids) at S = 0.25, 0.4, 0.5 and
# gp_bench_decode --sparsity at B = 1 and 8 beside the dense engine (its
# context a prefill of C random ids; the calibration's sequences as long,
# GP_CAL_SEQ, as the attention output's magnitudes depend on the length);
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
    --tokens ${GP_CAL_TOKENS:-1024} --seq-len ${GP_CAL_SEQ:-1024} --out "$out/cal_8b_$s.json" > "$out/cal_8b_$s.log" 2>&1; echo "calibrate $s rc $?"
  tail -6 "$out/cal_8b_$s.log"
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --workloads 1:1024,8:1024 --sparsity cal_8b_$s.json" \
    > "$out/bench_decode_sparse_$s.log"
  timeout 200 "$b/bench/gp_bench_decode" --workloads 1:1024,8:1024 --sparsity "$out/cal_8b_$s.json" \
    >> "$out/bench_decode_sparse_$s.log" 2>&1; echo "bench S=$s rc $?"
  grep -vE "^\|[-:|]+\|$" "$out/bench_decode_sparse_$s.log" | grep -E "^#|^\| [0-9]|^Activation|rror" | head -16
done
[[ ${GP_SPARSE_SAN:-1} == 0 ]] || for t in sparse_gemv engine_sparse; do
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/$t" > "$out/san_$t.log" 2>&1
  echo "memcheck $t: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_$t.log" | head -1)"
done
