#!/usr/bin/env bash
# Weights beyond VRAM where they do not fit (issue #17's 70B target) and where
# compute outweighs the copies: gp_bench_decode on llama3-8b at 15G (B = 256
# and 1024, little streamed per step) beside the resident engine, and the
# llama3-70b shape at 16G. GP_70B_LAYERS=N (default 40) measures its first N
# layers, all the H100 machine's 128 GiB host holds pinned; 80 is the whole
# model (141 GB pinned: the two-H200 machine, 256 GiB of host memory).
# Logs under $OUT.
set -u
source "$(dirname "$0")/gpu_env.sh"
gp_build gp_bench_decode
bd="$b/bench/gp_bench_decode"
log="$out/bench_beyond.log"
: > "$log"
run() {
  echo "# $(cat .gp-commit 2>/dev/null) gp_bench_decode $*" >> "$log"
  timeout 280 "$bd" "$@" >> "$log" 2>&1; echo "bench '$*' rc $?"
}
[[ ${GP_SKIP_8B:-0} == 1 ]] || run --workloads 256:1024,1024:384 --vram-budget 15G
layers=${GP_70B_LAYERS:-40}
lflag=(); [[ $layers == 80 ]] || lflag=(--layers "$layers")
run --model llama3-70b "${lflag[@]}" --workloads 1:1024,64:1024,256:1024,1024:256 --vram-budget 16G \
  --no-resident --warmup 1 --repeat 5
grep -vE "^\|[-:|]+\|$" "$log" | grep -E "^#|^\| [0-9]|error|kept|No resident|rror" | head -60
