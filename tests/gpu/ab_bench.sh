#!/usr/bin/env bash
# On the GPU machine (device tool): the must-not-change timings of a change,
# this tree against an earlier commit checked out in .before (carried), run
# alternately ROUNDS times in one call so both sides see the same device:
# sequential decode 8:1024 and 1024:384, the best split of the large
# workload, prefill 1:2048 and 1:8192, the stored-prefix TTFT at 8k, weights
# streamed at 8G and sparse decode at B = 1 (a calibration made first).
# Making .before here: echo /.before/ >> .git/info/exclude;
#   git worktree add --detach .before REV; echo REV > .before/.gp-commit
# then carry [".deps", ".before"].
#   tests/gpu/ab_bench.sh [ROUNDS [SET...]]   (default 3 rounds of every set; logs and summary.txt in $OUT)
# SET: decode, split, prefill, prefix, stream, sparse, or core (the first four); builds are incremental, so a
# second call on a warm machine goes straight to the timings.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rounds=${1:-3}; shift || true
sets=" ${*:-core stream sparse} "; sets=${sets/ core / decode split prefill prefix }
has() { [[ $sets == *" $1 "* ]]; }
benches=(gp_bench_decode gp_bench_prefill gp_bench_prefix decode_pipeline_case_study greenpipe)
gp_build "${benches[@]}"
(cd .before && cmake -B "$b" -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build "$b" -j16 --target "${benches[@]}") \
  > "$out/build_before.log" 2>&1 || { echo "before build failed"; grep -E error "$out/build_before.log" | head; exit 1; }
bin() { # side name -> path
  local root=.; [[ $1 == before ]] && root=.before
  find "$root/$b" -type f -name "$2" -perm -u+x | head -1
}
# each side names the commit its build was made from (the device copy may hold no git checkout)
{ nvidia-smi -L; echo "after: $("$(bin after greenpipe)" --version) before: $("$(bin before greenpipe)" --version)"; } \
  > "$out/summary.txt"
if has sparse; then
  timeout 400 "$(bin after greenpipe)" calibrate --model llama3-8b --sparsity 0.5 --tokens 8 --seq-len 8 \
    --out "$out/cal.json" > "$out/cal.log" 2>&1 || { echo "calibration failed"; tail -3 "$out/cal.log"; }
fi
for i in $(seq "$rounds"); do
  for side in before after; do
    o="$out/${side}_$i"
    has decode && timeout 120 "$(bin $side gp_bench_decode)" --workloads 8:1024,1024:384 > "$o.decode.md" 2>&1
    has split && timeout 200 "$(bin $side decode_pipeline_case_study)" --workload large --sm-splits seq,24 \
      --micro-batches 2 --placement qkvo-f --gemm-tune 16 --repeat 3 --steps 6 --no-progress > "$o.split.md" 2>&1
    has prefill && timeout 120 "$(bin $side gp_bench_prefill)" --workloads 1:2048,1:8192 --repeats 5 \
      > "$o.prefill.md" 2>&1
    has prefix && timeout 120 "$(bin $side gp_bench_prefix)" --prefix 8192 --suffix 256 --repeats 5 \
      > "$o.prefix.md" 2>&1
    has stream && timeout 200 "$(bin $side gp_bench_decode)" --workloads 1:1024 --repeat 10 --vram-budget 8G \
      > "$o.stream.md" 2>&1
    has sparse && [[ -s $out/cal.json ]] && timeout 120 "$(bin $side gp_bench_decode)" --workloads 1:1024 \
      --sparsity "$out/cal.json" > "$o.sparse.md" 2>&1
    echo "round $i $side done"
  done
done
{ for i in $(seq "$rounds"); do for side in before after; do
    echo "== $side $i"
    grep -hE '^\| (8|1024|1) \| (1024|384) \|' "$out/${side}_$i.decode.md" "$out/${side}_$i.stream.md" \
      "$out/${side}_$i.sparse.md" 2>/dev/null | cut -d'|' -f2-6
    grep -hE '^\| large' "$out/${side}_$i.split.md" 2>/dev/null | cut -d'|' -f4,10-12
    grep -hE '^\| 1 \| (2048|8192) \|' "$out/${side}_$i.prefill.md" 2>/dev/null | cut -d'|' -f2-5
    grep -hE '^\| 8192 \|' "$out/${side}_$i.prefix.md" 2>/dev/null | cut -d'|' -f2,3,9,10
  done; done; } >> "$out/summary.txt"
cat "$out/summary.txt"
cd "$out" && tar czf logs.tgz --exclude=logs.tgz *.md *.log *.json 2>/dev/null; find . -maxdepth 1 -type f -name '*_*.*.md' -delete
