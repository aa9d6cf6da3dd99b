#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
gp_build attn_kv_copy engine_prefix gp_bench_prefix greenpipe gp_bench_cold_ffn engine_prefill
"$b/tests/engine_prefill" > "$out/engine_prefill.log" 2>&1; echo "engine_prefill rc $?"
python3 tests/tools/gen_kv_store.py "$b/tools/greenpipe" tests/data/small-gqa > "$out/gen_kv_store.log" 2>&1; echo "gen_kv_store rc $?"; tail -3 "$out/gen_kv_store.log"
ids=$(python3 -c "
import random; r=random.Random(5); p=[r.randrange(128256) for _ in range(8192)]
a=p+[r.randrange(128256) for _ in range(64)]; b=p+[r.randrange(128256) for _ in range(64)]
print(','.join(map(str,a))+';'+','.join(map(str,b)))")
timeout 200 "$b/tools/greenpipe" generate --backend cuda --model llama3-8b --prompt-ids "$ids" --steps 4 --kv-store-size 2G > "$out/gen_8b.log" 2>&1; echo "generate 8b rc $?"; grep -v "^[0-9 ]*$" "$out/gen_8b.log" | cut -c1-400
timeout 120 "$b/bench/gp_bench_cold_ffn" --layers 4 > "$out/cold_ffn.log" 2>&1; echo "cold_ffn rc $?"; cat "$out/cold_ffn.log"
GP_PREFIX_SAN=0 GP_PREFIX_VARIANTS=0 bash tests/gpu/prefix_run.sh
timeout 200 "$b/bench/gp_bench_prefix" --prefix 8192 --no-overlap > "$out/bench_prefix_nooverlap.log" 2>&1; grep "^| [0-9]" "$out/bench_prefix_nooverlap.log"
