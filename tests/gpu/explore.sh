#!/usr/bin/env bash
# Exploration on the GPU machine (device tool): build the pieces, check the
# attention kernels (the automatic choice and the CUDA-core kernel forced),
# then time them and the case study. Logs in $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
cs=$b/case_studies/decode_pipeline_case_study
gp_build decode_pipeline_case_study pipeline_cuda engine_model gp_bench_decode gp_bench_attn attn_decode_attn attn_attn_steps
nvidia-smi -L > "$out/env.txt"
for t in attn_decode_attn attn_attn_steps; do
  for k in auto cudacore; do
    timeout 300 $b/tests/$t --kernel $k > "$out/$t.$k.log" 2>&1; echo "$t --kernel $k rc=$?"
  done
done
timeout 300 $b/tests/engine_model > "$out/engine_model.log" 2>&1; echo "engine_model rc=$?"
grep -hE 'FAILED|worst|exceeds' "$out"/attn_*.log | head -20
for k in auto cudacore; do
  $b/bench/gp_bench_attn --kernel $k --case 8:1024 --case 64:2048 --case 256:1024 --case 512:384 \
    --case 1024:384 > "$out/bench_attn.$k.log" 2>&1
  for s in 16 32 48 64; do $b/bench/gp_bench_attn --kernel $k --sm $s --case 512:384 >> "$out/bench_attn_sm.$k.log" 2>&1; done
done
tail -8 "$out"/bench_attn.*.log
timeout 200 $b/tests/pipeline_cuda > "$out/pipeline_cuda.log" 2>&1; echo "pipeline_cuda rc=$?"
$b/bench/gp_bench_decode --workloads 8:1024,64:2048,256:1024,512:384,1024:384 > "$out/bench_decode.md" 2>&1
head -12 "$out/bench_decode.md"
C="--repeat 3 --steps 6 --no-progress --placement qkvo-a,qkvo-f"
timeout 240 $cs $C --workload large --sm-splits 24,32,40,48,56,64 --micro-batches 2 > "$out/cs_large.md" 2> "$out/cs_large.err"
timeout 100 $cs $C --workload 512:384 --sm-splits 24,32,40,48,56,64 --micro-batches 1 > "$out/cs_alone.md" 2> "$out/cs_alone.err"
grep -hE '^\| (large|512)' "$out"/cs_*.md | cut -d'|' -f2-10,15-16,22 
cd "$out" && tar czf logs.tgz *.log *.md *.err env.txt && rm -f *.log *.err
