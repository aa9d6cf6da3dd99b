#!/usr/bin/env bash
set -uo pipefail
source tests/gpu/gpu_env.sh
gp_build greenpipe pipeline_afd
G=$b/tools/greenpipe
for args in "--schedule pd-mux --pd-split 32" "--schedule chunked"; do
  echo "=== serve $args"
  $G serve --backend cuda --model tiny --port 0 --max-batch 8 --max-num-batched-tokens 16 --max-context 256 $args > $out/srv.out 2> $out/srv.err &
  pid=$!
  sleep 15
  port=$(grep -o "127.0.0.1:[0-9]*" $out/srv.err | head -1)
  echo "port $port"; curl -s -m 5 http://$port/health; echo
  curl -s -m 20 http://$port/v1/completions -d '{"model":"tiny","prompt":[1,2,3],"max_tokens":4,"temperature":0}'; echo
  kill -TERM $pid; wait $pid; echo "rc $?"
  cat $out/srv.err | tail -20
done
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 $b/tests/pipeline_afd > "$out/san_afd.log" 2>&1
echo "memcheck pipeline_afd: rc $?"; grep -E "ERROR SUMMARY" "$out/san_afd.log"
