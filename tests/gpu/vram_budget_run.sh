#!/usr/bin/env bash
# Weights beyond VRAM (issue #17) on the GPU machine: engine_streamed (bitwise
# against resident weights), greenpipe generate resident vs --vram-budget
# (same tokens and logits dump), gp_bench_decode resident and at 4G and 8G,
# and compute-sanitizer on engine_streamed. Logs under $OUT; GP_VRAM_BENCH=0
# leaves the benchmarks out.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build engine_streamed greenpipe gp_bench_decode tools_parse engine_prefill engine_model
ctest --test-dir "$b" -R '^(engine_streamed|tools_parse|engine_prefill|engine_model)$' --output-on-failure \
  > "$out/vram_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed" "$out/vram_tests.log"
"$b/tests/engine_streamed" > "$out/engine_streamed.log" 2>&1; echo "engine_streamed rc $?"
grep -E "least budget|evictions|PASSED|FAILED" "$out/engine_streamed.log"
g="$b/tools/greenpipe"
for m in tiny tests/data/small-gqa tests/data/qwen2-tiny; do
  tag=$(basename "$m")
  "$g" generate --model "$m" --backend cuda --prompt-ids "1,2,3,4,5;7,8" --steps 12 \
    --dump-logits "$out/gen_res_$tag.json" > "$out/gen_res_$tag.txt" 2> "$out/gen_res_$tag.err"
  # the least budget: the refusal of 1K names the minimum working set (and checks that message)
  least=$("$g" generate --model "$m" --backend cuda --prompt-ids "1,2" --steps 1 --vram-budget 1K 2>&1 |
          grep -oE 'minimum working set of [0-9]+' | grep -oE '[0-9]+$')
  echo "generate $tag: least budget ${least:-NOT FOUND in the 1K refusal}"
  "$g" generate --model "$m" --backend cuda --prompt-ids "1,2,3,4,5;7,8" --steps 12 --vram-budget "${least:-1M}" \
    --dump-logits "$out/gen_str_$tag.json" > "$out/gen_str_$tag.txt" 2> "$out/gen_str_$tag.err"
  echo "generate $tag: rc tokens $(cmp -s "$out/gen_res_$tag.txt" "$out/gen_str_$tag.txt" && echo same || echo DIFFERENT)," \
       "logits $(cmp -s "$out/gen_res_$tag.json" "$out/gen_str_$tag.json" && echo same || echo DIFFERENT)"
  grep -h "backend" "$out/gen_str_$tag.err" | head -1
  grep -h "greenpipe generate:" "$out/gen_str_$tag.err" | head -2
done
bd="$b/bench/gp_bench_decode"; wl=1:1024,8:1024,64:1024,256:1024
[[ ${GP_VRAM_BENCH:-1} == 0 ]] || for args in "" "--eager" "--vram-budget 4G" "--vram-budget 8G" "--vram-budget 4G --prefetch 1" "--vram-budget 2G"; do
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --workloads $wl $args" >> "$out/bench_vram.log"
  timeout 150 "$bd" --workloads $wl $args >> "$out/bench_vram.log" 2>&1; echo "bench '$args' rc $?"
done
grep -vE "^\|[-:|]+\|$" "$out/bench_vram.log" | grep -E "^#|^\| [0-9]|error" | head -80
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/engine_streamed" > "$out/san_$tool.log" 2>&1
  echo "$tool engine_streamed: rc $? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_$tool.log" | head -1)"
done
