#!/usr/bin/env bash
# On the GPU machine (device tool): the streaming attention kernel
# (attention/decode_attn_stream.cu). Its kernel tests (with and without
# compute-sanitizer memcheck), then gp_bench_attn on green partitions and on
# the whole GPU, split kernel ($GP_ATTN_STREAM=0) against the streaming one
# at each ring depth; the cost of scattered blocks (layout); and the case
# study's large workload over the given splits. Logs in $OUT. Needs .deps.
#   tests/gpu/attn_stream_run.sh [tests] [bench] [layout] [cs SPLITS]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gp_build
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
if [[ " $* " == *" tests "* ]]; then
  timeout 240 ctest --test-dir $b -R 'attn_decode_attn|attn_attn_steps' --output-on-failure -j4 \
    > "$out/ctest.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*' "$out/ctest.log" | cut -c1-110 | head -20
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for s in 2 3; do
    GP_ATTN_STREAM=1 GP_ATTN_STREAM_STAGES=$s timeout 240 $san --tool memcheck --error-exitcode 9 \
      $b/tests/attn_decode_attn > "$out/memcheck_stream$s.log" 2>&1
    echo "memcheck stream$s rc=$? $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$out/memcheck_stream$s.log") errors"
  done
fi
if [[ " $* " == *" bench "* ]]; then
  ba=$b/attention/gp_bench_attn
  for g in ${GREENS:-16 24 32 48 0}; do
    flag=(); [[ $g -gt 0 ]] && flag=(--green $g)
    for k in ${KERNELS:-split stream2 stream3 stream4}; do
      case $k in split) env=(GP_ATTN_STREAM=0);; *) env=(GP_ATTN_STREAM=1 GP_ATTN_STREAM_STAGES=${k#stream});; esac
      env "${env[@]}" timeout 120 $ba "${flag[@]}" --repeats 10 --case 1024:384 --case 256:1024 --case 2048:128 --case 8:1024 \
        > "$out/bench_g${g}_$k.log" 2>&1
      echo "green=$g $k: $(grep decode_attn "$out/bench_g${g}_$k.log" | awk '{printf "%s %s %sms %sGB/s | ", $2, $3, $5, $7}')"
    done
  done
fi
if [[ " $* " == *" layout "* ]]; then
  ba=$b/attention/gp_bench_attn
  for g in 16 32; do
    for k in split stream; do
      for l in random contig; do
        GP_ATTN_STREAM=$([[ $k == split ]] && echo 0 || echo 1) timeout 120 $ba --green $g --blocks $l --repeats 10 \
          --case 1024:384 --case 256:1024 > "$out/layout_g${g}_${k}_$l.log" 2>&1
        echo "green=$g $k $l: $(grep decode_attn "$out/layout_g${g}_${k}_$l.log" | awk '{printf "%s %s %sms %sGB/s | ", $2, $3, $5, $7}')"
      done
    done
  done
fi
if [[ " $* " == *" cs "* ]]; then
  splits=; prev=
  for a in "$@"; do [[ $prev == cs ]] && splits=$a; prev=$a; done
  cs=$b/case_studies/decode_pipeline_case_study
  C="--repeat 3 --steps 6 --no-progress --workload large --placement qkvo-a,qkvo-f --micro-batches 1,2"
  timeout 300 $cs $C --gemm-tune 16 --sm-splits "$splits" --json "$out/cs.json" > "$out/cs.md" 2> "$out/cs.err"
  echo "cs rc=$?"; grep -E '^\| large' "$out/cs.md" | cut -d'|' -f4,6,8,10,14,15,23
fi
cd "$out" && tar czf logs.tgz *.log *.md *.err *.json env.txt 2>/dev/null; rm -f *.log *.err
