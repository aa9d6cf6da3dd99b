#!/usr/bin/env bash
# Tensor parallelism on a two-GPU machine (device tool, nvidia-h100-x2 or
# nvidia-h200-x2): the multi-GPU tests (NCCL and the one-shot all-reduce
# over peer memory, the engine against the whole one, generate --tp), the
# vocabulary gather under compute-sanitizer, then gp_bench_tp: the 8B decode
# rows (peer and NCCL sums in each; the whole head beside the split one;
# the sums left out, for what they cost),
# prefill, and the 70B rows. NCCL's NVLink multicast stays off (the machine
# notes). Needs .deps (docs/ARCHITECTURE.md §8); logs in $OUT.
# TP_RUN_70B=0 leaves the 70B rows out.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gp_build comm_nccl comm_group engine_tp engine_vocab_gather ref_tp greenpipe gp_bench_tp
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/device.txt"
nvidia-smi topo -m >> "$out/device.txt" 2>&1
git log -1 --format=%H >> "$out/device.txt" 2>/dev/null
ctest --test-dir $b -R '^(comm_nccl|engine_tp|engine_vocab_gather|cli_gen_tp_cuda|comm_group|ref_tp)$' \
  --output-on-failure -V > "$out/tests.log" 2>&1
grep -E 'Passed|Failed|Skipped|\*\*\*' "$out/tests.log" | tail -8
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 $b/tests/engine_vocab_gather \
  > "$out/san_vocab_gather.log" 2>&1; echo "memcheck engine_vocab_gather: rc $?"
bench=$b/bench/gp_bench_tp
$bench --tp 2 --workloads 1:1024,8:1024,64:1024,256:1024 > "$out/tp_8b.md" 2>&1; echo "8b: rc $?"
$bench --tp 2 --workloads 1:1024,64:1024 --whole-head > "$out/tp_8b_whole_head.md" 2>&1; echo "8b whole head: rc $?"
$bench --tp 2 --workloads 1:1024,64:1024 --sums-off > "$out/tp_8b_sums_off.md" 2>&1; echo "8b sums off: rc $?"
$bench --tp 2 --prefill > "$out/tp_8b_prefill.md" 2>&1; echo "8b prefill: rc $?"
if [[ ${TP_RUN_70B:-1} != 0 ]]; then
  $bench --tp 2 --model llama3-70b --workloads 1:1024,64:1024,256:1024 --repeat 10 > "$out/tp_70b.md" 2>&1
  echo "70b: rc $?"
fi
