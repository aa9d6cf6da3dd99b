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
#   pd        the curve's prompts at each of PD_RATES requests/s (default
#             2 4 6) on each of PD_CONFIGS (default chunked 32 48 64:
#             chunked prefill, then pd-mux with the decode lane on that many
#             SMs and the prefill lane on the rest; a w after the count adds
#             --pd-idle-whole); goodput under TTFT <= 2 s and TPOT <= 40 ms
# Each bench-serve run writes OUT_DIR/NAME.txt (its report) and NAME.json; each
# server OUT_DIR/NAME.serve.log (its status lines, the shutdown summary last).
# A scenario that fails is reported and the next one runs.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
gp=$1 benchdir=$2 out=$3
shift 3
mkdir -p "$out"
# the engine and model (SERVE_BACKEND, SERVE_MODEL, SERVE_VOCAB: for a smoke
# run of the script on the cpu backend and a small preset)
backend=${SERVE_BACKEND:-cuda}
model=${SERVE_MODEL:-llama3-8b}
vocab=${SERVE_VOCAB:-128256}
failed=0

# serve NAME SERVE_ARGS...: start a server; sets $port and $pid
serve() {
  local name=$1
  shift
  "$gp" serve --backend "$backend" --model "$model" --port 0 "$@" 2>"$out/$name.serve.log" &
  pid=$!
  port=
  for _ in $(seq 600); do
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
  grep -E "ready in|stopping after|steps:|pd-mux:" "$out/$1.serve.log"
}

# long_prompts: 512..7680 random ids, answers of 128..512 tokens, uniform
# (the longest fits the preset's context of 8192), CURVE_PROMPTS of them
long_prompts() {
  python3 -c '
import json, random, sys
r = random.Random(1)
for _ in range(int(sys.argv[1])):
    n = r.randint(512, 7680)
    print(json.dumps({"prompt": [r.randrange(int(sys.argv[2])) for _ in range(n)], "max_tokens": r.randint(128, 512)}))
' "${CURVE_PROMPTS:-48}" "$vocab" >"$out/long_prompts.jsonl"
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
    long_prompts
    for cfg in ${PD_CONFIGS:-chunked 32 48 64}; do
      flag=(--schedule chunked)
      [ $cfg != chunked ] && flag=(--schedule pd-mux --pd-split "${cfg%w}")
      [ "${cfg%w}" != "$cfg" ] && flag+=(--pd-idle-whole)
      serve pd_$cfg --max-batch 32 --max-context 8192 --max-num-batched-tokens 2048 --no-prefix-cache "${flag[@]}" ||
        { failed=1; continue; }
      for rate in ${PD_RATES:-2 4 6}; do
        load pd_${cfg}_$rate --dataset-path "$out/long_prompts.jsonl" --request-rate "$rate" --seed 1 \
          --goodput ttft:2000 tpot:40
      done
      stop
      summary pd_$cfg
    done
    ;;
  *)
    echo "serve_bench: unknown scenario '$scenario'; allowed: overhead, latency, prefix, tier, curve, pd" >&2
    failed=1
    ;;
  esac
done
exit $failed
