#!/usr/bin/env bash
# Two GPUs of one host (device tool, nvidia-h100-x2 or nvidia-h200-x2): the
# multi-GPU tests (NCCL and the one-shot all-reduce over peer memory, the
# tensor-parallel engine against the whole one, generate and serve --tp,
# attention and FFN on two GPUs against the one-GPU engine, the embedding
# cut by vocabulary), the vocabulary gather and the embedding under
# compute-sanitizer, then the benchmarks: gp_bench_tp (8B decode with peer
# and NCCL sums in each row, the sums left out for what they cost, prefill;
# the 70B rows) and gp_bench_afd (attention and FFN on the two GPUs, and
# pipeline parallelism by layers, beside one GPU), and the case study on
# GPU 0, all with --csv, joined by bench/placement_report.py into one
# report. NCCL's NVLink multicast stays off (the machine notes). Needs .deps
# (docs/ARCHITECTURE.md §8); logs in $OUT. PARTS chooses among "tests 8b
# 70b cs" (default all: one device call may not hold them all);
# AFD_WORKLOADS, AFD_70B_WORKLOADS, TP_70B_WORKLOADS, CS_WORKLOADS choose
# rows.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
parts=" ${PARTS:-tests 8b 70b cs} "
has() { [[ $parts == *" $1 "* ]]; }
gp_build comm_nccl comm_group engine_tp engine_vocab_gather engine_embed engine_graph_capture engine_model ref_tp \
  pipeline_afd greenpipe gp_bench_tp gp_bench_afd decode_pipeline_case_study
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/device.txt"
nvidia-smi topo -m >> "$out/device.txt" 2>&1
git log -1 --format=%H >> "$out/device.txt" 2>/dev/null
if has tests; then
  ctest --test-dir $b --output-on-failure -V -R \
    '^(comm_nccl|engine_tp|engine_vocab_gather|engine_embed|engine_graph_capture|engine_model|cli_gen_tp_cuda|cli_serve_tp_cuda|comm_group|ref_tp|pipeline_afd)$' \
    > "$out/tests.log" 2>&1
  grep -E 'Passed|Failed|Skipped|\*\*\*' "$out/tests.log" | tail -14
  for t in engine_vocab_gather engine_embed; do
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $b/tests/$t > "$out/san_$t.log" 2>&1
    echo "memcheck $t: rc $?"
  done
fi
tp=$b/bench/gp_bench_tp afd=$b/bench/gp_bench_afd
if has 8b; then
  $afd --workloads "${AFD_WORKLOADS:-64:1024,256:1024,64:4096,256:4096,1024:384}" --csv "$out/afd_8b.csv" \
    > "$out/afd_8b.md" 2>&1; echo "afd 8b: rc $?"
  $tp --tp 2 --workloads 1:1024,8:1024,64:1024,256:1024,64:4096,256:4096,1024:384 --csv "$out/tp_8b.csv" \
    > "$out/tp_8b.md" 2>&1; echo "tp 8b: rc $?"
  $tp --tp 2 --workloads 1:1024,64:1024 --sums-off > "$out/tp_8b_sums_off.md" 2>&1; echo "8b sums off: rc $?"
  $tp --tp 2 --prefill > "$out/tp_8b_prefill.md" 2>&1; echo "8b prefill: rc $?"
fi
if has 70b; then
  $tp --tp 2 --model llama3-70b --workloads "${TP_70B_WORKLOADS:-1:1024,64:1024,256:1024,1024:128}" --repeat 10 \
    --csv "$out/tp_70b.csv" > "$out/tp_70b.md" 2>&1; echo "tp 70b: rc $?"
  $afd --model llama3-70b --workloads "${AFD_70B_WORKLOADS:-64:1024,256:1024,1024:128}" --csv "$out/afd_70b.csv" \
    > "$out/afd_70b.md" 2>&1; echo "afd 70b: rc $?"
fi
if has cs; then
  CUDA_VISIBLE_DEVICES=0 $b/case_studies/decode_pipeline_case_study \
    --workload "${CS_WORKLOADS:-64:1024,256:1024,64:4096,256:4096,1024:384}" --csv "$out/cs_8b.csv" \
    > "$out/cs_8b.md" 2>&1; echo "case study 8b: rc $?"
fi
csvs=$(ls "$out"/*.csv 2>/dev/null)
[[ -n $csvs ]] && python3 bench/placement_report.py --out "$out/placement_report.md" $csvs
# every log in one archive (the device tool brings back a few files), the tables on stdout
cat "$out"/*.md
cd "$out" && tar czf all.tgz *.md *.log *.txt *.csv 2>/dev/null && rm -f *.md *.log *.csv
