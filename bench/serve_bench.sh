#!/usr/bin/env bash
# The serving measurements of docs/PERFORMANCE.md ("Serving"): greenpipe serve
# on the CUDA engine (llama3-8b shape, synthetic weights), loaded by greenpipe
# bench-serve, each scenario on a fresh server, with the engine's own
# benchmarks as the reference rows.
#   bench/serve_bench.sh GREENPIPE BENCH_DIR OUT_DIR SCENARIO...
# Scenarios:
#   overhead  256 streams, 1024-token prompts, 256-token answers; the server's
#             decode-only steps against gp_bench_decode at their batch and context
#   latency   one request at a time (1024 + 128 tokens) against gp_bench_prefill
#             and gp_bench_decode at B = 1
#   prefix    shared-prefix (PREFIX_GROUPS, default 32, x 16 requests, 2048 + 256
#             tokens, 128 out, PREFIX_RATE requests/s, default 16) with and
#             without the prefix cache
#   tier      shared-prefix (TIER_GROUPS, default 64, x 4 requests, 2048 + 256
#             tokens, TIER_OUT out, default 128, at each of TIER_RATES
#             requests/s, default 8 16) with a device
#             KV cache too small for the groups' prefixes (--kv-blocks
#             TIER_BLOCKS, default 3072): prefix cache off, on, and on with
#             the host store behind it (--kv-store-size TIER_STORE, default 32G);
#             each rate on the same server draws its own prompts (--seed RATE)
#   curve     long prompts (512..7680 tokens, 128..512 out; CURVE_PROMPTS of
#             them, default 48) at each of CURVE_RATES requests/s (default
#             2 4 6 8 10), chunked and prefill-first, no prefix cache (the
#             same prompts come at every rate)
#   pd        every scheduling policy side by side on long prompts (PD_PROMPTS,
#             default 64, of PD_MIN_PROMPT..PD_MAX_PROMPT tokens, default
#             1024..16384, answers PD_MIN_OUT..PD_MAX_OUT, default 128..512,
#             uniform) at each of PD_RATES requests/s (default 1 2 3 4),
#             Poisson arrivals, no prefix cache; goodput under TTFT <= 2 s and
#             TPOT <= 40 ms. One server per policy of PD_POLICIES (default
#             prefill-first chunked512 chunked1024 chunked2048 pd32w pd48w
#             pdauto: chunkedN chunked prefill at a budget of N tokens; pdD
#             pd-mux with the decode lane on D SMs and the prefill lane on the
#             rest, a w after it adding --pd-idle-whole; pdauto the adaptive
#             split aiming at PD_AUTO_TPOT ms a step (default the SLO's
#             TPOT), PD_AUTO_FLAGS added, its latency profile saved to
#             OUT_DIR/pd_profile.json by the first such server of the run and
#             loaded by the later ones (or PD_PROFILE loaded by every one), its
#             trace OUT_DIR/<scenario>_auto.trace.json).
#             Around each rate /metrics is scraped: NAME.lanes.json holds each
#             lane counter's increase over the rate and its wall time. Then
#             bench/serve_policies.py writes <scenario>_report.md and
#             <scenario>_goodput.svg
#   pd-short  the same policies on short prompts (PDS_PROMPTS, default 256, of
#             PDS_MIN_PROMPT..PDS_MAX_PROMPT tokens, default 64..1024, answers
#             PDS_MIN_OUT..PDS_MAX_OUT, default 32..256) at each of PDS_RATES
#             requests/s (default 8 16 24); goodput under TTFT <= 500 ms and
#             TPOT <= 40 ms
#   (PD_MAX_BATCH, PD_MAX_CONTEXT, PDS_MAX_BATCH, PDS_MAX_CONTEXT override the
#   servers' sizes, e.g. for a smoke run on the cpu backend and the tiny preset)
# Each bench-serve run writes OUT_DIR/NAME.txt (its report) and NAME.json; each
# server OUT_DIR/NAME.serve.log (its status lines, the shutdown summary last).
# A scenario that fails is reported and the next one runs.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,54p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
gp=$1 benchdir=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# the engine and model (SERVE_BACKEND, SERVE_MODEL, SERVE_VOCAB: for a smoke
# run of the script on the cpu backend and a small preset); SERVE_FLAGS: flags
# every server takes besides its scenario's (e.g. --tp 2)
backend=${SERVE_BACKEND:-cuda}
model=${SERVE_MODEL:-llama3-8b}
vocab=${SERVE_VOCAB:-128256}
failed=0

# serve NAME SERVE_ARGS...: start a server; sets $port and $pid. It waits
# $serve_wait seconds for "listening": the adaptive split may measure its
# latency profile before it listens (tens of seconds on an H100).
serve_wait=60
serve() {
  local name=$1
  shift
  # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
  "$gp" serve --backend "$backend" --model "$model" --port 0 ${SERVE_FLAGS:-} "$@" 2>"$out/$name.serve.log" &
  pid=$!
  port=
  for _ in $(seq $((serve_wait * 10))); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out/$name.serve.log" | head -1)
    [ -n "$port" ] && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "serve_bench: $name: the server did not start:" >&2
  cat "$out/$name.serve.log" >&2
  return 1
}

stop() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
}

# load NAME BENCH_ARGS...: bench-serve against the running server
load() {
  local name=$1
  shift
  "$gp" bench-serve --base-url "http://127.0.0.1:$port" --ready-timeout 900 \
    --result-json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 || {
    echo "serve_bench: $name: bench-serve failed (see $out/$name.txt)" >&2
    failed=1
  }
  cat "$out/$name.txt"
}

summary() {
  grep -E "ready in|stopping after|steps:|pd-mux:|serve: lane " "$out/$1.serve.log"
}

# prompts FILE N MIN MAX OUT_MIN OUT_MAX: N prompts of MIN..MAX random ids
# with answers of OUT_MIN..OUT_MAX tokens, uniform, as bench-serve's JSONL;
# seeded, so every rate and policy gets the same prompts
prompts() {
  python3 -c '
import json, random, sys
n, lo, hi, olo, ohi, vocab = map(int, sys.argv[1:])
r = random.Random(1)
for _ in range(n):
    k = r.randint(lo, hi)
    print(json.dumps({"prompt": [r.randrange(vocab) for _ in range(k)], "max_tokens": r.randint(olo, ohi)}))
' "$2" "$3" "$4" "$5" "$6" "$vocab" >"$1"
}

# long_prompts: 512..7680 tokens, answers of 128..512 (the longest fits the
# preset's context of 8192), CURVE_PROMPTS of them
long_prompts() {
  prompts "$out/long_prompts.jsonl" "${CURVE_PROMPTS:-48}" 512 7680 128 512
}

# scrape FILE: the server's /metrics into FILE, then the time after it on
# stdout (a lane counter's increase between two scrapes is over that wall time)
scrape() {
  curl -sf --max-time 30 "http://127.0.0.1:$port/metrics" >"$1" || rm -f "$1"
  date +%s.%N
}

# ready: wait for /health to answer 200 (the server listens while it loads,
# and the adaptive split may measure its profile then), so the first scrape
# sees the counters of a ready server
ready() {
  for _ in $(seq 900); do
    curl -sf --max-time 10 -o /dev/null "http://127.0.0.1:$port/health" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

# policy_flags NAME: the server flags of a policy into $pflags (see the
# header; pdauto's profile file into $profile); 1 for a name that is none.
# Pd-mux and prefill-first keep a 2048-token budget: pd-mux's prefill batch
# is that many rows, the figure the static splits were measured at.
pd_profile_shape='' pd_saved=' '
policy_flags() {
  local name=$1
  pflags=(--max-num-batched-tokens 2048)
  if [ "$name" = prefill-first ]; then
    pflags+=(--schedule prefill-first)
  elif [[ $name =~ ^chunked([0-9]+)$ ]]; then
    pflags=(--schedule chunked --max-num-batched-tokens "${BASH_REMATCH[1]}")
  elif [[ $name =~ ^pd([0-9]+)(w?)$ ]]; then
    pflags+=(--schedule pd-mux --pd-split "${BASH_REMATCH[1]}")
    [ -n "${BASH_REMATCH[2]}" ] && pflags+=(--pd-idle-whole)
  elif [ "$name" = pdauto ]; then
    # The profile measures the lanes, not the workload: the first adaptive
    # server of the run saves it and later ones of the same rows and context
    # load it (they start in seconds); one of another shape (pd-short's 256
    # rows against pd's 24) measures its own, beside it.
    # The planner aims at the SLO's TPOT (PD_AUTO_TPOT ms to aim lower): its
    # window keeps the mean step under the target, and a lower one leaves
    # long prompts' mixed chunks small (docs/PERFORMANCE.md: at three
    # quarters of the SLO the long-prompt goodput fell from 1.46 to 0.3-1.0).
    pflags+=(--schedule pd-mux --pd-split auto --pd-tpot-ms "${PD_AUTO_TPOT:-$slo_tpot}"
      --pd-trace "$out/${scen}_auto.trace.json")
    profile=${PD_PROFILE:-}
    if [ -n "$profile" ]; then
      pflags+=(--pd-profile "$profile")
    else
      if [ -z "$pd_profile_shape" ] || [ "$pd_profile_shape" = "$shape" ]; then
        profile=$out/pd_profile.json
      else
        profile=$out/pd_profile_$shape.json
      fi
      if [[ $pd_saved == *" $profile "* ]]; then
        pflags+=(--pd-profile "$profile")
      else
        rm -f "$profile"
        pflags+=(--pd-profile-save "$profile")
      fi
    fi
    # shellcheck disable=SC2206 # word splitting wanted: flags
    pflags+=(${PD_AUTO_FLAGS:-})
  else
    return 1
  fi
}

# policies SCENARIO PROMPTS RATES MAX_BATCH MAX_CONTEXT TTFT_MS TPOT_MS: one
# server per policy of $PD_POLICIES, every rate on that warm server, the
# lanes' counters around each rate; then the report of every row written
policies() {
  local file=$2 rates=$3 batch=$4 ctx=$5 ttft=$6 name rate run t0 t1
  scen=$1 slo_tpot=$7 shape=${4}x$5
  for name in ${PD_POLICIES:-prefill-first chunked512 chunked1024 chunked2048 pd32w pd48w pdauto}; do
    policy_flags "$name" || {
      echo "serve_bench: unknown policy '$name'; allowed: prefill-first, chunkedN, pdD, pdDw, pdauto" >&2
      failed=1
      continue
    }
    serve_wait=60
    [ "$name" = pdauto ] && serve_wait=600
    serve "${scen}_$name" --max-batch "$batch" --max-context "$ctx" --no-prefix-cache "${pflags[@]}" ||
      { failed=1; continue; }
    ready || {
      echo "serve_bench: ${scen}_$name: the server did not become ready:" >&2
      cat "$out/${scen}_$name.serve.log" >&2
      failed=1
      stop
      continue
    }
    if [ "$name" = pdauto ] && [ -s "$profile" ] && [[ $pd_saved != *" $profile "* ]]; then
      pd_saved+="$profile "
      pd_profile_shape=${pd_profile_shape:-$shape}
    fi
    for rate in $rates; do
      run=${scen}_${name}_$rate
      kill -0 "$pid" 2>/dev/null || {
        echo "serve_bench: ${scen}_$name: the server exited (see $out/${scen}_$name.serve.log)" >&2
        failed=1
        break
      }
      t0=$(scrape "$out/$run.metrics0")
      load "$run" --dataset-path "$file" --request-rate "$rate" --seed 1 --goodput "ttft:$ttft" "tpot:$slo_tpot"
      t1=$(scrape "$out/$run.metrics1")
      if [ -f "$out/$run.metrics0" ] && [ -f "$out/$run.metrics1" ]; then
        python3 "$here/serve_policies.py" --lanes "$out/$run.metrics0" "$out/$run.metrics1" "$t0" "$t1" \
          >"$out/$run.lanes.json" || failed=1
      else
        echo "serve_bench: $run: /metrics not scraped; no lane counters" >&2
      fi
    done
    stop
    summary "${scen}_$name"
  done
  python3 "$here/serve_policies.py" "$out" "$scen" "$out/${scen}_goodput.svg" | tee "$out/${scen}_report.md" ||
    failed=1
}

for scenario in "$@"; do
  echo "## $scenario"
  case $scenario in
  overhead)
    serve overhead --max-batch 256 --max-context 1280 --max-num-batched-tokens 2048 || { failed=1; continue; }
    load overhead --vocab $vocab --random-input-len 1024 --random-output-len 256 --num-prompts 1024 --max-concurrency 256
    stop
    summary overhead
    # the reference rows at the decode-only steps' mean batch and context
    line=$(grep "decode-only steps" "$out/overhead.serve.log")
    rows=$(sed -n 's/.*steps: \([0-9.]*\) rows at a mean context of \([0-9]*\) tokens.*/\1/p' <<<"$line")
    ctx=$(sed -n 's/.*steps: \([0-9.]*\) rows at a mean context of \([0-9]*\) tokens.*/\2/p' <<<"$line")
    if [ -n "$rows" ]; then
      b=$(printf '%.0f' "$rows")
      "$benchdir/gp_bench_decode" --workloads "$b:$ctx" 2>&1 | tee "$out/overhead.decode.txt"
      "$benchdir/gp_bench_decode" --workloads "$b:$ctx" --eager 2>&1 | tee "$out/overhead.decode_eager.txt"
    fi
    ;;
  latency)
    serve latency --max-batch 16 --max-context 2048 --max-num-batched-tokens 2048 || { failed=1; continue; }
    load latency --vocab $vocab --random-input-len 1024 --random-output-len 128 --num-prompts 16 --max-concurrency 1
    stop
    summary latency
    "$benchdir/gp_bench_prefill" --workloads 1:1024 2>&1 | tee "$out/latency.prefill.txt"
    "$benchdir/gp_bench_decode" --workloads 1:1088 2>&1 | tee "$out/latency.decode.txt"
    "$benchdir/gp_bench_decode" --workloads 1:1088 --eager 2>&1 | tee "$out/latency.decode_eager.txt"
    ;;
  prefix)
    for cache in on off; do
      flag=()
      [ $cache = off ] && flag=(--no-prefix-cache)
      serve prefix_$cache --max-batch 64 --max-context 2560 --max-num-batched-tokens 2048 "${flag[@]}" ||
        { failed=1; continue; }
      load prefix_$cache --vocab $vocab --dataset-name shared-prefix --prefix-groups ${PREFIX_GROUPS:-32} --requests-per-group 16 \
        --prefix-len 2048 --question-len 256 --prefix-output-len 128 --request-rate ${PREFIX_RATE:-16} \
        --max-concurrency 64
      stop
      summary prefix_$cache
    done
    ;;
  tier)
    for mode in off device host; do
      flag=()
      [ $mode = off ] && flag=(--no-prefix-cache)
      [ $mode = host ] && flag=(--kv-store-size "${TIER_STORE:-32G}")
      serve tier_$mode --max-batch 32 --max-context 2560 --max-num-batched-tokens 2048 \
        --kv-blocks "${TIER_BLOCKS:-3072}" "${flag[@]}" || { failed=1; continue; }
      for rate in ${TIER_RATES:-8 16}; do
        load tier_${mode}_$rate --vocab $vocab --dataset-name shared-prefix --prefix-groups ${TIER_GROUPS:-64} \
          --requests-per-group 4 --prefix-len 2048 --question-len 256 --prefix-output-len ${TIER_OUT:-128} \
          --request-rate "$rate" --max-concurrency 32 --seed "$rate" --goodput ttft:1000 tpot:50
      done
      stop
      summary tier_$mode
    done
    ;;
  curve)
    long_prompts
    for policy in chunked prefill-first; do
      serve curve_$policy --max-batch 32 --max-context 8192 --max-num-batched-tokens 2048 --schedule $policy \
        --no-prefix-cache ||
        { failed=1; continue; }
      for rate in ${CURVE_RATES:-2 4 6 8 10}; do
        load curve_${policy}_$rate --dataset-path "$out/long_prompts.jsonl" --request-rate "$rate" --seed 1 \
          --goodput ttft:2000 tpot:50
      done
      stop
      summary curve_$policy
    done
    ;;
  pd)
    # llama3-8b: the mean prompt is ~8.7k tokens, ~0.25 s of prefill on the
    # whole H100 (2048 tokens in 51 ms at the start of a prompt, 80 ms after
    # 8192). Measured with 24 requests, chunked prefill meets the SLO for every
    # request at 2 requests/s and for two thirds at 3 (its knee: 1.08 of 1.62
    # requests/s); 1 is the lightly loaded row, 4 beyond the knee, where the
    # queue shows in TTFT. KV: 32 layers x 8 heads x 128 x 2
    # (K, V) x 2 bytes = 128 KiB a token, 2.06 GiB a sequence at 16896 tokens;
    # 24 of them are 49.5 GiB, beside 15 GiB of weights and the step's and the
    # lanes' workspaces within the 79 GiB of an H100. The queue of 64 requests
    # is not bounded by it: at 2 requests/s about 8 decode at once.
    # The llama3-8b shape with Llama 3.1's 128k context (llama3-8b's is 8192).
    model=${SERVE_MODEL:-llama3.1-8b}
    lo=${PD_MIN_PROMPT:-1024} hi=${PD_MAX_PROMPT:-16384} olo=${PD_MIN_OUT:-128} ohi=${PD_MAX_OUT:-512}
    prompts "$out/pd_prompts.jsonl" "${PD_PROMPTS:-64}" "$lo" "$hi" "$olo" "$ohi"
    policies pd "$out/pd_prompts.jsonl" "${PD_RATES:-1 2 3 4}" "${PD_MAX_BATCH:-24}" \
      "${PD_MAX_CONTEXT:-$((hi + ohi))}" 2000 40
    model=${SERVE_MODEL:-llama3-8b}
    ;;
  pd-short)
    # Short prompts (mean 544 tokens, ~15 ms of prefill) and answers (mean
    # 144): decode bound. At 8 requests/s about 20 streams decode at once, at
    # 16 about 40 and at 24 about 60-70, with a prompt arriving every 40 ms,
    # i.e. beside nearly every decode step: where chunked prefill's chunks
    # stretch TPOT and a split lane would not. TTFT <= 500 ms is a few dozen
    # steps of queue over a prefill of tens of ms (an interactive chat's
    # bound); TPOT <= 40 ms as in pd. 256 sequences of 1280 tokens are
    # 40 GiB of KV; 256 requests fill them at 24 requests/s for ~10 s.
    lo=${PDS_MIN_PROMPT:-64} hi=${PDS_MAX_PROMPT:-1024} olo=${PDS_MIN_OUT:-32} ohi=${PDS_MAX_OUT:-256}
    prompts "$out/pd-short_prompts.jsonl" "${PDS_PROMPTS:-256}" "$lo" "$hi" "$olo" "$ohi"
    policies pd-short "$out/pd-short_prompts.jsonl" "${PDS_RATES:-8 16 24}" "${PDS_MAX_BATCH:-256}" \
      "${PDS_MAX_CONTEXT:-$((hi + ohi))}" 500 40
    ;;
  *)
    echo "serve_bench: unknown scenario '$scenario'; allowed: overhead, latency, prefix, tier, curve, pd, pd-short" >&2
    failed=1
    ;;
  esac
done
exit $failed
