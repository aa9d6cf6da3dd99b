#!/usr/bin/env bash
# On the GPU machine (device tool): gp_bench_corun, the pure HBM
# reader beside the F side's GEMMs on green-context splits, for both GEMM sets
# (qkvo-a: FFN only; qkvo-f: QKV, O and FFN). Logs in $OUT. Needs .deps.
#   tests/gpu/corun_run.sh [extra gp_bench_corun flags]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gp_build gp_bench_corun
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
for set in ffn all; do
  timeout 200 $b/bench/gp_bench_corun --set $set --splits 16,24,32,40,48,56 "$@" > "$out/corun_$set.md" 2>&1
  echo "$set rc=$?"; cat "$out/corun_$set.md"
done
