#!/usr/bin/env bash
# Offloaded KV cache on the GPU machine: engine_kvoff (bitwise
# against the resident engine through chunked prefill and decode, every block
# on the host and half of them) and, unless GP_KVOFF_SAN=0, compute-sanitizer
# memcheck and synccheck on it; then gp_bench_kvoff at B = 8 and 64 with half
# of each context on the host (GP_KVOFF_WORKLOADS, default 8:4096,64:4096;
# extra arguments: GP_KVOFF_ARGS); greenpipe generate on llama3-8b with and
# without --kv-vram-budget (two prompts of 3000 random ids, 8 steps): the
# same tokens, the split on the status line. Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build engine_kvoff gp_bench_kvoff greenpipe
"$b/tests/engine_kvoff" > "$out/engine_kvoff.log" 2>&1; echo "engine_kvoff rc $?"
grep -E "PASSED|FAILED|ERROR|LINE|budget|rror" "$out/engine_kvoff.log" | head -20
echo "# $(cat .gp-commit 2>/dev/null) gp_bench_kvoff --workloads ${GP_KVOFF_WORKLOADS:-8:4096,64:4096}" > "$out/bench_kvoff.log"
timeout 400 "$b/bench/gp_bench_kvoff" --workloads "${GP_KVOFF_WORKLOADS:-8:4096,64:4096}" ${GP_KVOFF_ARGS:-} \
  >> "$out/bench_kvoff.log" 2>&1; echo "gp_bench_kvoff rc $?"
grep -E "^#|^\| [0-9]|rror" "$out/bench_kvoff.log"
[[ ${GP_KVOFF_SAN:-1} == 0 ]] || for tool in memcheck synccheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/engine_kvoff" > "$out/san_${tool}_kvoff.log" 2>&1
  echo "$tool engine_kvoff: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_${tool}_kvoff.log" | head -1)"
done
ids=$(python3 -c "
import random; r=random.Random(7)
print(';'.join(','.join(str(r.randrange(128256)) for _ in range(3000)) for _ in range(2)))")
for budget in none 500M; do
  extra=(); [[ $budget == none ]] || extra=(--kv-vram-budget $budget)
  timeout 300 "$b/tools/greenpipe" generate --backend cuda --model llama3-8b --prompt-ids "$ids" --steps 8 \
    "${extra[@]}" > "$out/gen_kvoff_$budget.out" 2> "$out/gen_kvoff_$budget.err"; echo "generate kv budget $budget rc $?"
  grep -E "backend|decode step" "$out/gen_kvoff_$budget.err" | cut -c1-500
done
cmp -s "$out/gen_kvoff_none.out" "$out/gen_kvoff_500M.out" && echo "generate: same tokens with and without --kv-vram-budget" \
  || { echo "generate: tokens DIFFER"; cat "$out/gen_kvoff_none.out" "$out/gen_kvoff_500M.out"; }
