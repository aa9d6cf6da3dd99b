#!/usr/bin/env bash
# On the GPU machine (device tool): every GPU test, then the case
# study over the large, small and mixed workloads with both placements, an
# autotune profile from those rows and a --tuning run that follows it.
# Logs in $OUT (one tarball). Needs .deps (docs/ARCHITECTURE.md §8).
#   tests/gpu/workloads_run.sh [tests] [cs]
set -uo pipefail
shopt -s nullglob
source "$(dirname "$0")/gpu_env.sh"
cs=$b/case_studies/decode_pipeline_case_study
gp_build
nvidia-smi -L > "$out/env.txt"; git rev-parse --short=12 HEAD >> "$out/env.txt" 2>/dev/null; cat .gp-commit >> "$out/env.txt"
if [[ " $* " == *" tests "* ]]; then
  timeout 420 ctest --test-dir $b -L gpu --output-on-failure -j1 > "$out/ctest_gpu.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*|sec$' "$out/ctest_gpu.log" | cut -c1-120 | head -40
fi
if [[ " $* " == *" cs "* ]]; then
W=large,small,256:1024,512:512,768:512,1024:256,2048:128
C="--repeat 3 --steps 6 --no-progress --micro-batches 2 --placement qkvo-a,qkvo-f --sm-splits 24,32,40,48,56"
timeout 240 $cs $C --workload $W --autotune --tuning-out "$out/tuning.json" --json "$out/cs_mixed.json" \
  > "$out/cs_mixed.md" 2> "$out/cs_mixed.err"; echo "mixed rc=$?"
timeout 60 $cs --repeat 3 --steps 6 --no-progress --workload $W --sm-splits seq --tuning "$out/tuning.json" \
  > "$out/cs_tuned.md" 2> "$out/cs_tuned.err"; echo "tuned rc=$?"
grep -E '^\| ' "$out/cs_mixed.md" | cut -d'|' -f2,3,4,9,10,14,15,22 | head -90
grep -E '^\| |Tuning rule' "$out/cs_tuned.md" | cut -c1-220
fi
cd "$out" && tar czf logs.tgz *.log *.md *.err *.json env.txt; rm -f *.log *.err
