#!/usr/bin/env bash
# Issue #6, fifth round, on the GPU machine (device tool): the pipeline's fill
# and drain on the whole GPU (--fill-drain whole) against on the partitions
# (--fill-drain partition). tests: every GPU test, and compute-sanitizer
# memcheck of the pipeline's tiny-model cases. cs SPLITS: the case study's
# large workload, qkvo-f, M = 2, timed GEMMs, once per mode, back to back,
# then the fill and drain times read off each row's trace (cs_edges.py).
# Logs in $OUT. Needs .deps (DESIGN.md section 6).
#   tests/gpu/fill_drain_run.sh [tests] [cs SPLITS] [place PLACEMENTS]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
here=$PWD/tests/gpu
gp_build
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
arg() { local prev= a; for a in "${@:2}"; do [[ $prev == "$1" ]] && echo "$a"; prev=$a; done; }
if [[ " $* " == *" tests "* ]]; then
  timeout 420 ctest --test-dir $b -L gpu --output-on-failure -j1 > "$out/ctest_gpu.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*' "$out/ctest_gpu.log" | cut -c1-120 | head -30
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  GP_TEST_FILTER='test_tiny_graphs*' timeout 300 $san --tool memcheck --error-exitcode 9 \
    $b/tests/pipeline_cuda > "$out/memcheck_pipeline.log" 2>&1
  echo "memcheck pipeline_cuda (tiny, graphs) rc=$? $(grep -c 'ERROR SUMMARY: [1-9]' "$out/memcheck_pipeline.log") error summaries"
fi
if [[ " $* " == *" cs "* ]]; then
  splits=$(arg cs "$@"); place=$(arg place "$@"); place=${place:-qkvo-f}
  cs=$b/case_studies/decode_pipeline_case_study
  C="--repeat 3 --steps 6 --no-progress --workload large --micro-batches 2 --gemm-tune 16"
  for fd in whole partition; do
    timeout 280 $cs $C --placement "$place" --fill-drain $fd --sm-splits "$splits" --json "$out/cs_$fd.json" \
      > "$out/cs_$fd.md" 2> "$out/cs_$fd.err"
    echo "cs $fd rc=$?"
    python3 "$here/cs_edges.py" "$out/cs_$fd.json"
  done
fi
cd "$out" && tar czf logs.tgz *.log *.md *.err *.json env.txt 2>/dev/null; rm -f *.log *.err
