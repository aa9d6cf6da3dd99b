#!/usr/bin/env bash
# Weights beyond VRAM where they do not fit (the 70B shape) and where
# compute outweighs the copies: gp_bench_decode on llama3-8b at B = 1024
# with 1.5-2.1 GB streamed per step, beside the resident engine, and the
# llama3-70b shape at 16G. GP_70B_LAYERS=N (default 40) measures its first N
# layers, all the H100 machine's 128 GiB host holds pinned; 80 is the whole
# model (141 GB pinned: the two-H200 machine, 256 GiB of host memory).
# GP_VRAM_SAN=1 adds compute-sanitizer on engine_streamed and streaming_cuda. Logs under $OUT.
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
if [[ ${GP_SKIP_8B:-0} != 1 ]]; then
  # B = 1024 computes ~41 ms a step; 14G and 14848M leave about 2.1 and 1.5 GB to stream (38 and 28 ms of link):
  # the resident row in its own run, as the KV cache of B = 1024 does not fit beside both copies of the weights
  run --workloads 1024:384
  run --workloads 1024:384 --vram-budget 14G --no-resident
  run --workloads 1024:384 --vram-budget 14848M --no-resident
fi
layers=${GP_70B_LAYERS:-40}
lflag=(); [[ $layers == 80 ]] || lflag=(--layers "$layers")
[[ ${GP_SKIP_70B:-0} == 1 ]] || run --model llama3-70b "${lflag[@]}" --workloads 1:1024,64:1024,256:1024,1024:256 --vram-budget 16G \
  --no-resident --warmup 1 --repeat 5
grep -vE "^\|[-:|]+\|$" "$log" | grep -E "^#|^\| [0-9]|error|kept|No resident|rror" | head -60
[[ ${GP_VRAM_SAN:-0} == 1 ]] && {
  gp_build engine_streamed streaming_cuda
  for tool in memcheck synccheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/engine_streamed" > "$out/san_es_$tool.log" 2>&1
    echo "$tool engine_streamed: rc $? $(grep -hE 'ERROR SUMMARY' "$out/san_es_$tool.log" | head -1)"
  done
  for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/streaming_cuda" > "$out/san_sc_$tool.log" 2>&1
    echo "$tool streaming_cuda: rc $? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_sc_$tool.log" | head -1)"
  done
}
