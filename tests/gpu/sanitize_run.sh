#!/usr/bin/env bash
# compute-sanitizer over the GPU tests (device tool; issue #7): memcheck,
# racecheck, synccheck and initcheck, the four tools in parallel, each test
# under a time limit. engine_oom and engine_device_fault are left out: they
# provoke allocation failures and a trap on purpose. pipeline_cuda runs its
# tiny-model cases only (GP_TEST_FILTER), the 1B case exceeds the limit.
# Needs .deps (DESIGN.md section 6); summary on stdout, logs in $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gp_build
limit=${GP_SANITIZE_LIMIT:-150}
# GP_SANITIZE_TESTS: a regex choosing a subset (default: every GPU test)
tests=$(ctest --test-dir $b -L gpu -N | awk '/Test +#/ {print $3}' | grep -vE '^engine_(oom|device_fault)$' \
  | grep -E "${GP_SANITIZE_TESTS:-.}")
run_tool() {
  local tool=$1
  for t in $tests; do
    local exe env=()
    local base=${t%_cudacore}; base=${base%_stages[0-9]}; base=${base%_stream[0-9]}
    exe=$(find $b -type f -name "$base" -perm -u+x | head -1)
    [[ $t == *_cudacore ]] && env=(GP_ATTN_MMA=0)
    [[ $t == *_stages[0-9] ]] && env=(GP_ATTN_MMA_STAGES=${t##*_stages})
    [[ $t == *_stream[0-9] ]] && env=(GP_ATTN_STREAM=1 GP_ATTN_STREAM_STAGES=${t##*_stream})
    [[ $t == pipeline_cuda ]] && env=(GP_TEST_FILTER='test_tiny_graphs*')
    echo "=== $tool $t" >> "$out/san_$tool.log"
    local s=$SECONDS
    env "${env[@]}" timeout $limit compute-sanitizer --tool "$tool" --error-exitcode 99 "$exe" >> "$out/san_$tool.log" 2>&1
    local rc=$?
    local verdict=clean
    [ $rc = 99 ] && verdict="ERRORS"
    [ $rc = 124 ] && verdict="timed out (${limit} s)"
    [ $rc != 0 ] && [ $rc != 99 ] && [ $rc != 124 ] && verdict="test failed (rc $rc)"
    echo "$tool $t: $verdict ($((SECONDS - s)) s)" >> "$out/san_summary_$tool.txt"
  done
}
for tool in memcheck racecheck synccheck initcheck; do run_tool $tool & done
wait
cat "$out"/san_summary_*.txt
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Error' "$out"/san_*.log | sort | uniq -c | sort -rn | head -20
cd "$out" && tar czf sanitizer_logs.tgz san_*.log build.log && rm -f san_*.log build.log
