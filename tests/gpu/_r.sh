#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
gp_build attn_kv_copy engine_prefix gp_bench_prefix engine_prefill
"$b/tests/engine_prefill" > "$out/engine_prefill.log" 2>&1; echo "engine_prefill rc $?"
bash tests/gpu/prefix_run.sh
