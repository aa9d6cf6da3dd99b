#!/usr/bin/env bash
# Issue #6 on the GPU machine (device tool): gp_bench_corun, the pure HBM
# reader beside the F side's GEMMs on green-context splits, for both GEMM sets
# (qkvo-a: FFN only; qkvo-f: QKV, O and FFN). Logs in $OUT. Needs .deps.
#   tests/gpu/corun_run.sh [extra gp_bench_corun flags]
set -uo pipefail
cd "$(dirname "$0")/../.."
deps=$PWD/.deps/root/usr
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu CMAKE_PREFIX_PATH=$deps
out=${OUT:-$PWD/gpu-logs}; mkdir -p "$out"
b=build-gpu
{ cmake -B $b -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $b -j16 --target gp_bench_corun; } \
  > "$out/build.log" 2>&1 || { grep -E 'error' "$out/build.log" | head; exit 1; }
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
for set in ffn all; do
  timeout 200 $b/pipeline/gp_bench_corun --set $set --splits 16,24,32,40,48,56 "$@" > "$out/corun_$set.md" 2>&1
  echo "$set rc=$?"; cat "$out/corun_$set.md"
done
