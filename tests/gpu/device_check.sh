#!/usr/bin/env bash
# On the GPU machine: build with the carried Debian packages (.deps, see
# docs/ARCHITECTURE.md §8) and run what is asked, logs under $OUT (or
# ./gpu-logs), few files since the device tool returns at most eight.
#   tests/gpu/device_check.sh [test] [bench] [case-study] [sanitize[=REGEX]] [hf-data]
#   test      every CTest test, GPU ones included
#   bench     gp_bench_decode (its default workloads), gp_bench_attn, gp_bench_gemm
#   case-study  decode_pipeline_case_study with no arguments (the README's main
#             job), every output format written under $OUT
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck, initcheck over
#             the GPU tests (matching REGEX if given)
#   hf-data   remake the HF reference data (tests/hf/make_reference.py)
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh" # the repository root, the carried packages, $out
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
git rev-parse HEAD >> "$out/nvidia-smi.txt" 2>&1
status=0

for arg in "$@"; do [ "$arg" = hf-data ] && {
  PYTHONUNBUFFERED=1 python3 tests/hf/make_reference.py tests/data 2>&1 | tee "$out/hf.log"
  tar czf "$out/hf-data.tgz" tests/data; }; done

{ cmake -B build-gpu -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build-gpu -j16; } \
  > "$out/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$out/build.log" | head -30; exit 1; }

for arg in "$@"; do
  case "$arg" in
  test)
    ctest --test-dir build-gpu --output-on-failure > "$out/ctest.log" 2>&1 || status=1
    grep -E "tests passed|Failed|\*\*\*|worst" "$out/ctest.log" | head -40 ;;
  bench)
    ./build-gpu/bench/gp_bench_decode 2>&1 | tee "$out/bench_decode.md" || status=1
    { ./build-gpu/bench/gp_bench_attn; ./build-gpu/bench/gp_bench_gemm 76 20; } > "$out/bench_kernels.log" 2>&1 || status=1
    tail -30 "$out/bench_kernels.log" ;;
  sanitize*)
    regex=${arg#sanitize}; regex=${regex#=}
    for t in $(ctest --test-dir build-gpu -L gpu -N ${regex:+-R "$regex"} | awk '/Test +#/ {print $3}'); do
      exe=$(find build-gpu -type f -name "$t" -perm -u+x | head -1)
      for tool in memcheck racecheck synccheck initcheck; do
        echo "=== $tool $t" >> "$out/sanitizer.log"
        if timeout 300 compute-sanitizer --tool $tool --error-exitcode 99 "$exe" >> "$out/sanitizer.log" 2>&1; then
          echo "sanitizer $tool $t: clean"
        else
          echo "sanitizer $tool $t: FAILED or timed out (see sanitizer.log)"; status=1
        fi
      done
    done ;;
  case-study)
    start=$(date +%s)
    ./build-gpu/case_studies/decode_pipeline_case_study --json "$out/cs.json" --csv "$out/cs.csv" \
      --trace "$out/cs_trace.json" --svg "$out/cs.svg" --no-progress > "$out/cs.md" 2> "$out/cs.err" || status=1
    echo "case study: $(( $(date +%s) - start )) s"; cat "$out/cs.md" "$out/cs.err" ;;
  hf-data) ;;
  *) echo "unknown step '$arg'"; exit 2 ;;
  esac
done
exit $status
