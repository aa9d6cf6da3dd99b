#!/usr/bin/env bash
# compute-sanitizer over the GPU tests (device tool): memcheck,
# racecheck, synccheck and initcheck, the four tools in parallel, each test
# under a time limit. engine_oom and engine_device_fault are left out: they
# provoke allocation failures and a trap on purpose. pipeline_cuda runs its
# tiny-model cases only (GP_TEST_FILTER; $GP_PIPELINE_FILTER narrows them),
# the 1B case exceeds the limit.
# Needs .deps (docs/ARCHITECTURE.md §8); summary on stdout, logs in $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gp_build
limit=${GP_SANITIZE_LIMIT:-150}
# GP_SANITIZE_TESTS: a regex choosing a subset (default: every GPU test).
# Each test's command and environment come from CTest (ctest_cmds.py).
ctest --test-dir $b --show-only=json-v1 | python3 "$(dirname "$0")/ctest_cmds.py" --label gpu \
  --regex "${GP_SANITIZE_TESTS:-.}" | grep -vE '^engine_(oom|device_fault)	' > "$out/san_tests.tsv"
run_tool() {
  local tool=$1 t envs cmd
  while IFS=$'\t' read -r t envs cmd; do
    [[ $envs == - ]] && envs=
    [[ $t == pipeline_cuda ]] && envs+=" GP_TEST_FILTER='${GP_PIPELINE_FILTER:-test_tiny_graphs*}'"
    echo "=== $tool $t" >> "$out/san_$tool.log"
    local s=$SECONDS
    eval "env $envs timeout $limit compute-sanitizer --tool $tool --error-exitcode 99 $cmd" \
      >> "$out/san_$tool.log" 2>&1
    local rc=$?
    local verdict=clean
    [ $rc = 99 ] && verdict="ERRORS"
    [ $rc = 124 ] && verdict="timed out (${limit} s)"
    [ $rc != 0 ] && [ $rc != 99 ] && [ $rc != 124 ] && verdict="test failed (rc $rc)"
    echo "$tool $t: $verdict ($((SECONDS - s)) s)" >> "$out/san_summary_$tool.txt"
  done < "$out/san_tests.tsv"
}
for tool in memcheck racecheck synccheck initcheck; do run_tool $tool & done
wait
cat "$out"/san_summary_*.txt
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Error' "$out"/san_*.log | sort | uniq -c | sort -rn | head -20
cd "$out" && tar czf sanitizer_logs.tgz san_*.log san_tests.tsv build.log && rm -f san_*.log build.log
