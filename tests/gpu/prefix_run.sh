#!/usr/bin/env bash
# Stored prefixes on the GPU machine: the token-row copy kernel
# against its oracle and engine_prefix (reuse bitwise against two-call
# prefills, files, eviction, refusals), both under compute-sanitizer memcheck
# unless GP_PREFIX_SAN=0 (racecheck and synccheck on the copy kernel too);
# then gp_bench_prefix on llama3-8b: prefixes 4k, 8k, 32k with a 256-token
# suffix (the issue's table), and at 8k the variants: 3 buffers, no overlap,
# 16-token blocks; the main table's trace (bench_prefix_trace.json);
# greenpipe generate on llama3-8b with two prompts sharing 4096 tokens
# (--kv-store-size 2G), the second reusing the first's blocks. Extra
# gp_bench_prefix arguments: GP_PREFIX_ARGS. Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build attn_kv_copy engine_prefix gp_bench_prefix greenpipe
for t in attn_kv_copy engine_prefix; do
  "$b/tests/$t" > "$out/$t.log" 2>&1; echo "$t rc $?"
  grep -E "PASSED|FAILED|ERROR|LINE|reused|rror" "$out/$t.log" | head -24
done
bench() { # name, then arguments
  local name=$1; shift
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_prefix $*" > "$out/bench_prefix_$name.log"
  timeout 300 "$b/bench/gp_bench_prefix" "$@" ${GP_PREFIX_ARGS:-} >> "$out/bench_prefix_$name.log" 2>&1
  echo "bench $name rc $?"
  grep -E "^#|^gp_bench|^\| [0-9]|rror" "$out/bench_prefix_$name.log"
}
bench main --prefix 4096,8192,32768 --suffix 256 --repeats 5 --trace "$out/bench_prefix_trace.json"
[[ ${GP_PREFIX_VARIANTS:-1} == 0 ]] || {
  bench buf3 --prefix 8192,32768 --suffix 256 --repeats 5 --buffers 3
  bench nooverlap --prefix 8192 --suffix 256 --repeats 5 --no-overlap
  bench block16 --prefix 8192 --suffix 256 --repeats 3 --block 16
}
[[ ${GP_PREFIX_SAN:-1} == 0 ]] || {
  for t in attn_kv_copy engine_prefix; do
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/$t" > "$out/san_$t.log" 2>&1
    echo "memcheck $t: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_$t.log" | head -1)"
  done
  for tool in racecheck synccheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/attn_kv_copy" > "$out/san_${tool}_kv_copy.log" 2>&1
    echo "$tool attn_kv_copy: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_${tool}_kv_copy.log" | head -1)"
  done
}
ids=$(python3 -c "
import random; r=random.Random(5); p=[r.randrange(128256) for _ in range(4096)]
print(';'.join(','.join(map(str, p + [r.randrange(128256) for _ in range(64)])) for _ in range(2)))")
timeout 300 "$b/tools/greenpipe" generate --backend cuda --model llama3-8b --prompt-ids "$ids" --steps 4 \
  --kv-store-size 2G > "$out/gen_prefix.out" 2> "$out/gen_prefix.err"; echo "generate --kv-store-size rc $?"
grep -E "backend|prompt|store|prefill" "$out/gen_prefix.err" | cut -c1-400
