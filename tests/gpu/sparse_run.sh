#!/usr/bin/env bash
# Activation sparsity (sparse/) on the GPU machine: the sparse GEMV test
# against its CPU oracle (both dtypes), compute-sanitizer memcheck on it, and
# gp_bench_sparse on the Llama-3-8B projections. Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build sparse_gemv gp_bench_sparse
"$b/tests/sparse_gemv" > "$out/sparse_gemv.log" 2>&1; echo "sparse_gemv rc $?"
grep -E "PASSED|FAILED|ERROR|mismatch" "$out/sparse_gemv.log" | head -12
echo "# $(cat .gp-commit 2>/dev/null) gp_bench_sparse" > "$out/bench_sparse.log"
timeout 240 "$b/bench/gp_bench_sparse" >> "$out/bench_sparse.log" 2>&1; echo "gp_bench_sparse rc $?"
grep -E "^#|^\| [a-z]" "$out/bench_sparse.log"
[[ ${GP_SPARSE_SAN:-1} == 0 ]] || {
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/sparse_gemv" > "$out/san_sparse.log" 2>&1
  echo "memcheck sparse_gemv: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_sparse.log" | head -1)"
}
