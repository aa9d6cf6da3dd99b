#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
GP_KVOFF_SAN=0 bash tests/gpu/kvoff_run.sh
echo "# $(cat .gp-commit) gp_bench_cpu_attn" > "$out/cpu_attn.log"
timeout 200 "$b/bench/gp_bench_cpu_attn" >> "$out/cpu_attn.log" 2>&1; echo "cpu_attn rc $?"; cat "$out/cpu_attn.log"
echo "done $(date +%T)"
