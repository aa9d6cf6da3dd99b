#!/usr/bin/env bash
# On the GPU machine (device tool): SM clock, power and throttle
# reasons per case-study row (tests/gpu/power_trace.py), to see whether
# co-running attention and FFN are held back by the power cap rather than by
# HBM. Logs in $OUT (one tarball). Needs .deps (docs/ARCHITECTURE.md §8).
#   tests/gpu/power_run.sh [extra case-study flags]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
cs=$b/case_studies/decode_pipeline_case_study
gp_build decode_pipeline_case_study gp_bench_gemm gp_bench_attn
{ nvidia-smi -L; nvidia-smi -q -d POWER,CLOCK | grep -E 'Limit|Max|Default' | head -20; cat .gp-commit; } > "$out/env.txt"
C="--repeat 3 --steps 30 --progress --workload large"
python3 tests/gpu/power_trace.py "$out/large" -- $cs $C --sm-splits 32,48 --placement qkvo-a,qkvo-f \
  --micro-batches 1,2 "$@" --json "$out/large.json" > "$out/power_large.md" 2> "$out/power_large.err"
echo "rc=$?"; cat "$out/power_large.md" | grep -E '^\| (row|large|seq|[0-9])' | cut -c1-200
grep -E '^\| large' "$out/power_large.md" | cut -d'|' -f2-10,15-16,22
cd "$out" && tar czf logs.tgz *.md *.err *.csv *.json env.txt; rm -f *.err
