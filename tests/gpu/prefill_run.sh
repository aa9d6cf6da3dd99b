#!/usr/bin/env bash
# Prefill on the GPU machine: the correctness tests, compute-
# sanitizer over the prefill tests, and gp_bench_prefill beside the PyTorch
# peer (its script carried as .peer/torch_prefill_peer.py, because the
# device copy holds only the repository). Logs under $OUT.
#   tests/gpu/prefill_run.sh tests      build, run the GPU tests that prefill
#   tests/gpu/prefill_run.sh sanitize   compute-sanitizer memcheck on them, racecheck on the kernel test
#   tests/gpu/prefill_run.sh bench ARGS gp_bench_prefill ARGS (log bench.log, appended)
#   tests/gpu/prefill_run.sh peer ROWS  the PyTorch peer on B:T rows (log peer.log, appended)
#   tests/gpu/prefill_run.sh variant NAME FLAGS ARGS  gp_bench_prefill ARGS built with
#                                      CMAKE_CUDA_FLAGS=FLAGS in build-NAME (log variant-NAME.log)
set -u
source "$(dirname "$0")/gpu_env.sh"
what=${1:-tests}; shift || true
[[ -x $b/bench/gp_bench_prefill ]] || gp_build
case $what in
tests)
  ctest --test-dir "$b" -R '^(attn_prefill_attn|attn_rope_kv|engine_prefill|engine_model|pipeline_cuda|ref_hf_prefill|ref_hf_logits|engine_hf_prefill.*|cli_gen_cuda.*)$' \
    --output-on-failure > "$out/tests.log" 2>&1
  tail -n 15 "$out/tests.log"
  for t in attn_prefill_attn engine_prefill; do "$b/tests/$t" > "$out/$t.log" 2>&1; done
  for c in "" 16; do "$b/tests/ref_hf_prefill" cuda $c > "$out/engine_hf_prefill$c.log" 2>&1; done
  grep -hE "worst|ms|case" "$out/engine_prefill.log" "$out"/engine_hf_prefill*.log | head -30 ;;
sanitize)
  # racecheck of engine_prefill ran past 300 s (cuBLASLt's kernels): the
  # kernel test carries the shared-memory check
  for tool in memcheck racecheck; do
    for t in attn_prefill_attn $([[ $tool == memcheck ]] && echo engine_prefill); do
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/$t" > "$out/san_${tool}_$t.log" 2>&1
      echo "$tool $t: rc $? $(grep -c 'ERROR SUMMARY: 0' "$out/san_${tool}_$t.log") clean summaries"
    done
  done ;;
bench)
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_prefill $*" >> "$out/bench.log"
  "$b/bench/gp_bench_prefill" "$@" 2>&1 | tee -a "$out/bench.log" ;;
peer)
  echo "# torch_prefill_peer.py $*" >> "$out/peer.log"
  python3 .peer/torch_prefill_peer.py "$@" 2>&1 | tee -a "$out/peer.log" ;;
variant)
  name=$1 flags=$2; shift 2
  { cmake -B "build-$name" -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CUDA_FLAGS=$flags" &&
    cmake --build "build-$name" -j16 --target gp_bench_prefill; } > "$out/build-$name.log" 2>&1 || { tail "$out/build-$name.log"; exit 1; }
  echo "# $(cat .gp-commit 2>/dev/null) variant $name ($flags): gp_bench_prefill $*" >> "$out/variant-$name.log"
  "build-$name/bench/gp_bench_prefill" "$@" 2>&1 | tee -a "$out/variant-$name.log" ;;
*) echo "prefill_run.sh: unknown step '$what' (tests, sanitize, bench, peer, variant)"; exit 2 ;;
esac
