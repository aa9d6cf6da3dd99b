#!/usr/bin/env bash
# On the GPU machine, after device_check.sh built build-gpu: the autotune ->
# --tuning round trip and a rebalancer run of decode_pipeline_case_study, the
# figures of docs/PERFORMANCE.md's pipeline section. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-logs}
cs=./build-gpu/case_studies/decode_pipeline_case_study
status=0
$cs --autotune --tuning-out "$out/tuning.json" --workload large,64:2048 --micro-batches 2 --repeat 2 --steps 4 \
    --no-progress > "$out/autotune.md" 2>&1 || status=1
$cs --tuning "$out/tuning.json" --workload large,512:512 --sm-splits seq --micro-batches 2 --repeat 3 \
    --no-progress > "$out/tuned.md" 2>&1 || status=1
$cs --sm-splits 40:92,56:76,72:60 --rebalance model --workload large --micro-batches 2 --repeat 3 --steps 16 \
    --json "$out/rebalance.json" --no-progress > "$out/rebalance.md" 2>&1 || status=1
exit $status
