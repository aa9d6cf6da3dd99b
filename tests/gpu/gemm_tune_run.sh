#!/usr/bin/env bash
# On the GPU machine (device tool): the timed GEMM choice (--gemm-tune): its
# GPU tests, then the large workload over small attention partitions, both
# placements, M = 1 (each side alone) and 2, and the untuned sequential row.
# Logs in $OUT (one tarball). Needs .deps (docs/ARCHITECTURE.md §8).
#   tests/gpu/gemm_tune_run.sh [tests] [cs]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
cs=$b/case_studies/decode_pipeline_case_study
gp_build
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
if [[ " $* " == *" tests "* ]]; then
  timeout 300 ctest --test-dir $b -R 'engine_gemm|attn_decode_attn|attn_attn_steps|pipeline_cuda$|engine_model' \
    --output-on-failure -j1 > "$out/ctest.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*|Passed|sec$' "$out/ctest.log" | cut -c1-110 | head -30
  grep -E '  tune M=' "$out/ctest.log" | head -9
fi
if [[ " $* " == *" cs "* ]]; then
  C="--repeat 3 --steps 6 --no-progress --workload large --placement qkvo-a,qkvo-f --micro-batches 1,2"
  timeout 200 $cs $C --gemm-tune 16 --sm-splits 16,24,32,40,48 \
    --json "$out/cs_tuned.json" > "$out/cs_tuned.md" 2> "$out/cs_tuned.err"; echo "tuned rc=$?"
  grep -E '^\| large' "$out/cs_tuned.md" | cut -d'|' -f4,6,8,10,14,15,23
  timeout 60 $cs --repeat 3 --steps 6 --no-progress --workload large --sm-splits seq > "$out/cs_seq_untuned.md" 2>&1
  echo "untuned seq:"; grep -E '^\| large' "$out/cs_seq_untuned.md" | cut -d'|' -f4,10,23
fi
cd "$out" && tar czf logs.tgz *.log *.md *.err *.json env.txt 2>/dev/null; rm -f *.log *.err
