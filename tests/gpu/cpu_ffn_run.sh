#!/usr/bin/env bash
# The CPU-assisted FFN on the GPU machine: engine_cpu_ffn (hot
# and cold against the all-GPU sparse engine, reloads, streamed weights with
# FFN groups on demand) and the generate end-to-end test, compute-sanitizer
# memcheck on engine_cpu_ffn unless GP_CPU_FFN_SAN=0, then gp_bench_cpu_ffn
# on llama3-8b beyond VRAM: --vram-budget GP_VRAM (default 8G) with a hot
# cache of GP_HOT (default 2G) inside it, beside the resident dense and
# sparse engines and the weights streamed alone at that budget, at batches
# GP_BATCHES (default 1) and C = 1024. Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build engine_cpu_ffn greenpipe gp_bench_cpu_ffn
"$b/tests/engine_cpu_ffn" > "$out/engine_cpu_ffn.log" 2>&1; echo "engine_cpu_ffn rc $?"
grep -E "PASSED|FAILED|ERROR|LINE|against" "$out/engine_cpu_ffn.log" | head -16
python3 tests/tools/gen_cpu_ffn.py "$b/tools/greenpipe" > "$out/gen_cpu_ffn.log" 2>&1; echo "gen_cpu_ffn rc $?"
tail -3 "$out/gen_cpu_ffn.log"
[[ ${GP_CPU_FFN_SAN:-1} == 0 ]] || {
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/engine_cpu_ffn" \
    > "$out/san_engine_cpu_ffn.log" 2>&1
  echo "memcheck engine_cpu_ffn: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_engine_cpu_ffn.log" | head -1)"
}
args=(--cpu-ffn-budget "${GP_HOT:-2G}" --vram-budget "${GP_VRAM:-8G}" --batches "${GP_BATCHES:-1}" --context 1024)
echo "# $(cat .gp-commit 2>/dev/null) gp_bench_cpu_ffn ${args[*]}" > "$out/bench_cpu_ffn.log"
timeout 420 "$b/bench/gp_bench_cpu_ffn" "${args[@]}" >> "$out/bench_cpu_ffn.log" 2>&1
echo "gp_bench_cpu_ffn rc $?"
grep -vE "^\|[-:|]+\|$" "$out/bench_cpu_ffn.log" | grep -E "^#|^\| [0-9]|rror" | head -20
