#!/usr/bin/env bash
# Two GPUs of one host (device tool, nvidia-h100-x2 or nvidia-h200-x2): the
# multi-GPU tests (NCCL and the one-shot all-reduce over peer memory, the
# tensor-parallel engine against the whole one, generate --tp, attention
# and FFN on two GPUs against the one-GPU engine), the vocabulary gather
# under compute-sanitizer, then the benchmarks: gp_bench_tp (8B decode with
# peer and NCCL sums in each row, the sums left out for what they cost,
# prefill; the 70B rows) and gp_bench_afd (attention and FFN on the two
# GPUs, and pipeline parallelism by layers, beside one GPU). NCCL's NVLink
# multicast stays off (the machine notes). Needs .deps (docs/ARCHITECTURE.md
# §8); logs in $OUT. RUN_TP=0, RUN_AFD=0, RUN_70B=0 leave those parts out;
# AFD_WORKLOADS, AFD_70B_WORKLOADS choose the AFD and PP rows.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gp_build comm_nccl comm_group engine_tp engine_vocab_gather ref_tp pipeline_afd greenpipe gp_bench_tp gp_bench_afd
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/device.txt"
nvidia-smi topo -m >> "$out/device.txt" 2>&1
git log -1 --format=%H >> "$out/device.txt" 2>/dev/null
ctest --test-dir $b -R '^(comm_nccl|engine_tp|engine_vocab_gather|cli_gen_tp_cuda|comm_group|ref_tp|pipeline_afd)$' \
  --output-on-failure -V > "$out/tests.log" 2>&1
grep -E 'Passed|Failed|Skipped|\*\*\*' "$out/tests.log" | tail -8
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $b/tests/engine_vocab_gather \
  > "$out/san_vocab_gather.log" 2>&1; echo "memcheck engine_vocab_gather: rc $?"
if [[ ${RUN_AFD:-1} != 0 ]]; then
  $b/bench/gp_bench_afd --workloads "${AFD_WORKLOADS:-64:1024,256:1024,64:4096,256:4096,1024:384}" \
    > "$out/afd_8b.md" 2>&1; echo "afd 8b: rc $?"
fi
tp=$b/bench/gp_bench_tp
if [[ ${RUN_TP:-1} != 0 ]]; then
  $tp --tp 2 --workloads 1:1024,8:1024,64:1024,256:1024,64:4096,256:4096,1024:384 > "$out/tp_8b.md" 2>&1
  echo "tp 8b: rc $?"
  $tp --tp 2 --workloads 1:1024,64:1024 --sums-off > "$out/tp_8b_sums_off.md" 2>&1; echo "8b sums off: rc $?"
  $tp --tp 2 --prefill > "$out/tp_8b_prefill.md" 2>&1; echo "8b prefill: rc $?"
fi
if [[ ${RUN_70B:-1} != 0 ]]; then
  [[ ${RUN_TP:-1} != 0 ]] && { $tp --tp 2 --model llama3-70b --workloads 1:1024,64:1024,256:1024 --repeat 10 \
    > "$out/tp_70b.md" 2>&1; echo "tp 70b: rc $?"; }
  [[ ${RUN_AFD:-1} != 0 ]] && { $b/bench/gp_bench_afd --model llama3-70b \
    --workloads "${AFD_70B_WORKLOADS:-64:1024,256:1024}" > "$out/afd_70b.md" 2>&1; echo "afd 70b: rc $?"; }
fi
# every log in one archive (the device tool brings back a few files), the tables on stdout
cat "$out"/*.md
cd "$out" && tar czf all.tgz *.md *.log *.txt && rm -f *.md *.log
