#!/usr/bin/env bash
# Weights beyond VRAM on the GPU machine: engine_streamed (bitwise
# against resident weights, sequential and pipelined), greenpipe generate
# resident vs --vram-budget, seq and pipelined (same tokens and logits dump),
# gp_bench_decode at 4G and 8G with the resident row beside each (and 8G
# LRU), and compute-sanitizer on engine_streamed. Logs under $OUT;
# GP_VRAM_BENCH=0 leaves the benchmarks out, GP_VRAM_SAN=0 the sanitizers.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build engine_streamed streaming_cuda pipeline_cuda greenpipe gp_bench_decode tools_parse engine_prefill engine_model
ctest --test-dir "$b" -R '^(engine_streamed|streaming_cuda|pipeline_cuda|tools_parse|engine_prefill|engine_model)$' --output-on-failure \
  > "$out/vram_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed" "$out/vram_tests.log"
"$b/tests/engine_streamed" > "$out/engine_streamed.log" 2>&1; echo "engine_streamed rc $?"
grep -E "least budget|evictions|PASSED|FAILED|ERROR|LINE" "$out/engine_streamed.log"
g="$b/tools/greenpipe"
for m in tiny tests/data/small-gqa tests/data/qwen2-tiny; do
  tag=$(basename "$m")
  for eng in seq pipelined; do
    "$g" generate --model "$m" --backend cuda --engine $eng --prompt-ids "1,2,3,4,5;7,8" --steps 12 \
      --dump-logits "$out/gen_res_$tag$eng.json" > "$out/gen_res_$tag$eng.txt" 2> "$out/gen_res_$tag$eng.err"
    # the least budget: the refusal of 1K names the minimum working set (and checks that message and its exit code 2)
    least=$("$g" generate --model "$m" --backend cuda --engine $eng --prompt-ids "1,2" --steps 1 --vram-budget 1K 2>&1 |
            grep -oE 'minimum working set of [0-9]+' | grep -oE '[0-9]+$')
    "$g" generate --model "$m" --backend cuda --engine $eng --prompt-ids "1,2" --steps 1 --vram-budget 1K >/dev/null 2>&1
    echo "generate $tag $eng: least budget ${least:-NOT FOUND in the 1K refusal}, refusal exit $?"
    "$g" generate --model "$m" --backend cuda --engine $eng --prompt-ids "1,2,3,4,5;7,8" --steps 12 --vram-budget "${least:-1M}" \
      --dump-logits "$out/gen_str_$tag$eng.json" > "$out/gen_str_$tag$eng.txt" 2> "$out/gen_str_$tag$eng.err"
    echo "generate $tag $eng: rc $? tokens $(cmp -s "$out/gen_res_$tag$eng.txt" "$out/gen_str_$tag$eng.txt" && echo same || echo DIFFERENT)," \
         "logits $(cmp -s "$out/gen_res_$tag$eng.json" "$out/gen_str_$tag$eng.json" && echo same || echo DIFFERENT)"
    grep -h "backend" "$out/gen_str_$tag$eng.err" | head -1
    grep -h "greenpipe generate:" "$out/gen_str_$tag$eng.err" | head -2
  done
done
bd="$b/bench/gp_bench_decode"; wl=1:1024,8:1024,64:1024,256:1024
[[ ${GP_VRAM_BENCH:-1} == 0 ]] || for args in "--vram-budget 4G" "--vram-budget 8G" "--vram-budget 8G --lru --no-resident" "--vram-budget 2G"; do
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode --workloads $wl $args" >> "$out/bench_vram.log"
  timeout 200 "$bd" --workloads $wl $args >> "$out/bench_vram.log" 2>&1; echo "bench '$args' rc $?"
done
grep -vE "^\|[-:|]+\|$" "$out/bench_vram.log" | grep -E "^#|^\| [0-9]|error|kept|No resident" | head -100
[[ ${GP_VRAM_SAN:-1} == 0 ]] || for tool in memcheck racecheck synccheck; do
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/engine_streamed" > "$out/san_$tool.log" 2>&1
  echo "$tool engine_streamed: rc $? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_$tool.log" | head -1)"
done
