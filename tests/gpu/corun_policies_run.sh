#!/usr/bin/env bash
# Co-running measurements on the GPU machine (device tool). Logs in $OUT.
# Needs .deps (docs/ARCHITECTURE.md §8).
#   tests    every GPU test (compute-sanitizer: sanitize_run.sh)
#   fd S     the case study's large workload (qkvo-f, M = 2, timed GEMMs) on
#            splits S with the fill and drain on the whole GPU, then on the
#            partitions (--fill-drain), back to back
#   warps    gp_bench_attn alone on 32 SMs with the streaming kernel capped
#            at $WARPS warps per SM (default "12 8 6 4"; --warps-cap)
#   bench    gp_bench_attn alone on 16, 24 SMs and the whole GPU, the
#            streaming kernel's K/V copies without and with L2 evict_first
#   mixed    the large, small and five mixed workloads, both placements,
#            splits 16-56, timed GEMMs, --autotune; then --sm-splits seq
#            --tuning with that profile (the rows it chooses)
#   rule F   only that second run, with profile F
# Each case-study run is followed by cs_edges.py: where its steps' time goes.
#   tests/gpu/corun_policies_run.sh [tests] [fd SPLITS] [warps] [bench] [mixed] [rule FILE]
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
here=$PWD/tests/gpu
gp_build
{ nvidia-smi -L; cat .gp-commit; } > "$out/env.txt"
arg() { local prev= a; for a in "${@:2}"; do [[ $prev == "$1" ]] && echo "$a"; prev=$a; done; }
cs=$b/case_studies/decode_pipeline_case_study
C="--repeat 3 --steps 6 --no-progress --workload large --micro-batches 2 --gemm-tune 16 --placement qkvo-f"
cs_run() { # name, case-study flags...
  local name=$1; shift
  timeout 280 $cs $C "$@" --json "$out/cs_$name.json" > "$out/cs_$name.md" 2> "$out/cs_$name.err"
  echo "cs $name rc=$?"
  python3 "$here/cs_edges.py" "$out/cs_$name.json"
}
if [[ " $* " == *" tests "* ]]; then
  timeout 420 ctest --test-dir $b -L gpu --output-on-failure -j1 > "$out/ctest_gpu.log" 2>&1
  grep -E 'tests passed|Failed|\*\*\*' "$out/ctest_gpu.log" | cut -c1-120 | head -30
fi
if [[ " $* " == *" fd "* ]]; then
  s=$(arg fd "$@")
  for fd in whole partition; do cs_run "fd_$fd" --fill-drain $fd --sm-splits "$s"; done
fi
if [[ " $* " == *" warps "* ]]; then
  for w in ${WARPS:-12 8 6 4}; do
    timeout 60 $b/bench/gp_bench_attn --green 32 --kernel stream --warps-cap $w --repeats 10 --case 1024:384 \
      > "$out/bench_g32_warps$w.log" 2>&1
    echo "alone, 32 SMs, $w warps/SM: $(grep decode_attn "$out/bench_g32_warps$w.log" | awk '{printf "%sms %sGB/s", $5, $7}')"
  done
fi
if [[ " $* " == *" bench "* ]]; then
  for g in 16 24 0; do
    flag=(); [[ $g -gt 0 ]] && flag=(--green $g)
    for ev in 0 1; do
      evict=(); [[ $ev == 0 ]] && evict=(--no-kv-evict)
      timeout 120 $b/bench/gp_bench_attn "${flag[@]}" "${evict[@]}" --repeats 10 --case 1024:384 \
        > "$out/bench_g${g}_evict$ev.log" 2>&1
      echo "green=$g evict=$ev: $(grep decode_attn "$out/bench_g${g}_evict$ev.log" | awk '{printf "%s %s %sms %sGB/s | ", $2, $3, $5, $7}')"
    done
  done
fi
W=large,small,256:1024,512:512,768:512,1024:256,2048:128
M="--repeat 3 --steps 6 --no-progress --micro-batches 2 --gemm-tune 16 --workload $W"
follow() { # profile: seq and the rows the profile chooses, every workload
  timeout 120 $cs $M --sm-splits seq --tuning "$1" --json "$out/cs_rule.json" > "$out/cs_rule.md" 2> "$out/cs_rule.err"
  echo "rule rc=$?"; grep -E '^\| |Tuning rule' "$out/cs_rule.md" | cut -c1-200
}
if [[ " $* " == *" mixed "* ]]; then
  timeout 480 $cs $M --placement qkvo-a,qkvo-f --sm-splits 16,24,32,40,48,56 --autotune \
    --tuning-out "$out/tuning.json" --json "$out/cs_mixed.json" > "$out/cs_mixed.md" 2> "$out/cs_mixed.err"
  echo "mixed rc=$?"
  python3 "$here/cs_edges.py" "$out/cs_mixed.json" | grep -E 'json|seq|M=2' | head -100
  follow "$out/tuning.json"
fi
if [[ " $* " == *" rule "* ]]; then follow "$(arg rule "$@")"; fi
cd "$out" && tar czf logs.tgz *.log *.md *.err *.json env.txt 2>/dev/null; rm -f *.log *.err
