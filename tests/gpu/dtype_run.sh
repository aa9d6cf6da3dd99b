#!/usr/bin/env bash
# The bf16 and fp16 engines on the GPU machine: every test (both dtypes, the HF checkpoints of
# each family), the benchmarks in bf16 and fp16 on llama3-8b's shape, the
# case study's default run and generate on a checkpoint with a tokenizer.
# Logs under $OUT.
#   tests/gpu/dtype_run.sh tests        build, ctest (all), failures' output
#   tests/gpu/dtype_run.sh bench        gp_bench_decode and gp_bench_prefill, bf16 then fp16
#   tests/gpu/dtype_run.sh cs ARGS      decode_pipeline_case_study ARGS (default run without ARGS)
#   tests/gpu/dtype_run.sh generate     generate on tiny-fp16, qwen2-tiny and mistral-tiny, cuda vs cpu
#   tests/gpu/dtype_run.sh accuracy     the engine against the CPU reference and HF, every family and dtype (accuracy.log)
set -u
source "$(dirname "$0")/gpu_env.sh"
what=${1:-tests}; shift || true
[[ -x $b/tools/greenpipe ]] || gp_build
case $what in
tests)
  ctest --test-dir "$b" -j4 --output-on-failure --timeout 600 > "$out/ctest.log" 2>&1
  grep -E "tests passed|tests failed" "$out/ctest.log"
  grep -E "\*\*\*Failed|\*\*\*Timeout|\(Failed\)|\(Timeout\)" "$out/ctest.log" | head -30
  grep -E "\*\*\*Skipped" "$out/ctest.log" | head -20 ;;
bench)
  for dt in bf16 fp16; do
    echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --dtype $dt" >> "$out/bench.log"
    "$b/bench/gp_bench_decode" --workloads 1:1024,8:1024,64:1024,256:512,1024:384 --repeat 7 --dtype $dt 2>&1 | tee -a "$out/bench.log"
    echo "# $(cat .gp-commit 2>/dev/null) gp_bench_prefill --dtype $dt" >> "$out/bench.log"
    "$b/bench/gp_bench_prefill" --workloads 1:512,1:2048,1:8192,8:2048 --repeats 5 --dtype $dt 2>&1 | tee -a "$out/bench.log"
  done ;;
cs)
  "$b/case_studies/decode_pipeline_case_study" --json "$out/cs.json" "$@" > "$out/cs.log" 2>&1
  echo "rc $?"; tail -n 40 "$out/cs.log" ;;
generate)
  for m in tests/data/tiny-fp16 tests/data/qwen2-tiny tests/data/mistral-tiny; do
    for be in cpu cuda; do
      echo "== $m $be" >> "$out/generate.log"
      "$b/tools/greenpipe" generate --model "$m" --backend $be --prompt-ids "5,17,42,7,99" --steps 8 >> "$out/generate.log" 2>&1
    done
  done
  tail -n 40 "$out/generate.log" ;;
accuracy)
  "$b/tests/engine_model" 2>&1 | grep -E "worst|FAILED|PASSED" > "$out/accuracy.log"
  for a in "cuda" "cuda 16" "cuda 0 fp16"; do
    echo "== ref_hf_prefill $a" >> "$out/accuracy.log"
    "$b/tests/ref_hf_prefill" $a 2>&1 | grep -E "worst|FAILED|PASSED" >> "$out/accuracy.log"
  done
  cat "$out/accuracy.log" ;;
*) echo "dtype_run.sh: unknown step '$what' (tests, bench, cs, generate, accuracy)"; exit 2 ;;
esac
