#!/usr/bin/env bash
# Weight streaming on the GPU machine: the streaming tests
# (the CUDA backend's included), gp_bench_stream at several prefetch depths,
# chunk sizes and budgets, and compute-sanitizer on the backend's test.
# Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build streaming_cuda streaming_params streaming_residency streaming_property gp_bench_stream
ctest --test-dir "$b" -R '^streaming' --output-on-failure > "$out/stream_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed" "$out/stream_tests.log"
"$b/tests/streaming_cuda" > "$out/streaming_cuda.log" 2>&1; echo "streaming_cuda rc $?"; tail -n 12 "$out/streaming_cuda.log"
for args in "" "--depth 0" "--depth 4" "--chunk-mib 8" "--chunk-mib 128" "--no-reader --budget-mib 436"; do
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_stream $args" >> "$out/bench_stream.log"
  timeout 120 "$b/bench/gp_bench_stream" $args >> "$out/bench_stream.log" 2>&1
done
grep -E "^#|median|plain|peak" "$out/bench_stream.log"
for tool in memcheck racecheck synccheck initcheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/streaming_cuda" > "$out/san_$tool.log" 2>&1
  echo "$tool streaming_cuda: rc $? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_$tool.log" | head -1)"
done
