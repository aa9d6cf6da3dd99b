#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
gp_build
echo "build done $(date +%T)"
bash tests/gpu/dtype_run.sh tests
echo "ctest done $(date +%T)"
for t in engine_kvoff engine_prefix; do
  for tool in memcheck synccheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/$t" > "$out/san_${tool}_$t.log" 2>&1
    echo "$tool $t: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_${tool}_$t.log" | head -1)"
  done
done
