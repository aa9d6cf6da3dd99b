#!/usr/bin/env bash
# On the GPU machine (device tool): build this tree, run its GPU tests, check
# greenpipe generate's engines against each other, and time the sequential
# step and the best split with this tree's case study and with the one of
# an earlier commit checked out in .before (carried), alternately in one run.
# Making .before here: echo /.before/ >> .git/info/exclude;
#   git worktree add --detach .before REV; echo REV > .before/.gp-commit
# then carry [".deps", ".before", ".gp-commit"].
# Logs in $OUT. Needs .deps (docs/ARCHITECTURE.md section 8).
#   tests/gpu/ab_run.sh [tests] [generate] [main] [ab N] [sanitize]
# main: the README's main job (the case study with no arguments) and the
# attention benchmark.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
gp_build
nvidia-smi -L > "$out/env.txt"; cat .gp-commit >> "$out/env.txt" 2>/dev/null
if [[ " $* " == *" tests "* ]]; then
  timeout 300 ctest --test-dir $b -L gpu --output-on-failure -j1 > "$out/ctest_gpu.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*|sec$' "$out/ctest_gpu.log" | cut -c1-120 | head -60
  for t in engine_model pipeline_cuda; do $b/tests/$t > "$out/$t.log" 2>&1; echo "$t rc=$?"; done
  grep -E 'vs|relayed|FAILED' "$out/engine_model.log" "$out/pipeline_cuda.log" | cut -c1-200 | head -30
fi
if [[ " $* " == *" generate "* ]]; then
  g=$b/tools/greenpipe
  a=(generate --backend cuda --model llama3.2-1b --prompt-ids "5,17,42;11,200,2;7;1,2,3,4,5" --steps 24)
  $g "${a[@]}" > "$out/gen_seq.txt" 2> "$out/gen_seq.err"; echo "generate seq rc=$?"
  for s in "--micro-batches 2" "--micro-batches 4 --sm-split 32" "--micro-batches 2 --sm-split 16:116"; do
    $g "${a[@]}" --engine pipelined $s > "$out/gen_pipe.txt" 2>> "$out/gen_pipe.err"
    echo "generate pipelined $s rc=$? same tokens: $(cmp -s "$out/gen_seq.txt" "$out/gen_pipe.txt" && echo yes || echo NO)"
  done
  tail -2 "$out/gen_pipe.err"
fi
if [[ " $* " == *" main "* ]]; then
  timeout 240 $b/case_studies/decode_pipeline_case_study --no-progress > "$out/cs_default.md" 2> "$out/cs_default.err"
  echo "case study rc=$?"
  grep -E '^\| (small|large)' "$out/cs_default.md" | cut -d'|' -f2,4,10,22,23
  grep -A3 'Decode-attention kernel' "$out/cs_default.md"
  timeout 120 $b/bench/gp_bench_attn > "$out/bench_attn.md" 2>&1; echo "gp_bench_attn rc=$?"; tail -8 "$out/bench_attn.md"
fi
if [[ " $* " == *" ab "* ]]; then
  n=$(sed -E 's/.* ab ([0-9]+).*/\1/' <<<" $* ")
  (cd .before && cmake -B build-gpu -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$out/build_before.log" 2>&1 &&
     cmake --build build-gpu -j16 --target decode_pipeline_case_study >> "$out/build_before.log" 2>&1) ||
    { grep -E error "$out/build_before.log" | head; exit 1; }
  C=(--workload large --sm-splits seq,24 --micro-batches 2 --placement qkvo-f --gemm-tune 16 --repeat 3 --steps 6
     --no-progress)
  for i in $(seq "$n"); do
    for side in before after; do
      cs=$b/case_studies/decode_pipeline_case_study; [[ $side == before ]] && cs=.before/build-gpu/case_studies/decode_pipeline_case_study
      timeout 200 $cs "${C[@]}" > "$out/ab_${side}_$i.md" 2> "$out/ab_${side}_$i.err"
      echo "$side $i rc=$?"; grep -E '^\| large' "$out/ab_${side}_$i.md" | cut -d'|' -f4,10-12
    done
  done
fi
if [[ " $* " == *" sanitize "* ]]; then
  for t in engine_model pipeline_cuda attn_decode_attn; do
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $b/tests/$t > "$out/san_$t.log" 2>&1
    echo "memcheck $t rc=$? $(grep -cE 'ERROR SUMMARY: 0 errors' "$out/san_$t.log") clean summaries"
  done
fi
cd "$out" && tar czf logs.tgz --exclude=logs.tgz * && find . -maxdepth 1 -type f ! -name logs.tgz ! -name 'ab_*.md' -delete
