# The serving core on the CPU reference (no GPU).
# Requests from several threads, greedy and sampled, under both policies and
# preemption, each against the request run alone; cancellation; refusals.
gp_add_test(serve_core SOURCES serve/test_serve.c support/sched_cpu.c
            LIBS gp_serve gp_pipeline gp_reference gp_kvstore gp_tools)
# greenpipe serve end to end (small-gqa with a ChatML tokenizer the script
# writes): 64 concurrent streaming clients against generate, the openai
# client, preemption under a tiny KV budget, disconnects, bad requests.
add_test(NAME cli_serve
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve/serve_e2e.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
add_test(NAME cli_serve_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve/serve_e2e.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa cuda)
set_tests_properties(cli_serve_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
# serve --tp 2 on two GPUs: the same outputs, the prefix cache and preemption
# repeated on the second rank (skipped without two GPUs).
add_test(NAME cli_serve_tp_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve/serve_tp.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
set_tests_properties(cli_serve_tp_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# greenpipe serve's refusals, before anything listens or loads.
gp_cli_test(serve_help 0 "OpenAI-compatible HTTP server" serve --help)
gp_cli_test(serve_bad_port 2 "--port: 70000 is out of range. allowed: .0, 65535." serve --model tiny --port 70000)
gp_cli_test(serve_bad_schedule 2 "--schedule 'fifo': allowed chunked, prefill-first" serve --model tiny --schedule fifo)
gp_cli_test(serve_twice 2 "--port given more than once" serve --model tiny --port 1 --port 2)
gp_cli_test(serve_empty_key 2 "--api-key '': an empty key would let every request in" serve --model tiny --api-key=)
gp_cli_test(serve_cuda_only 2 "--dtype applies to --backend cuda only" serve --model tiny --dtype bf16)
gp_cli_test(serve_max_context 2 "--max-context 100000 is beyond the model's max context 256" serve --model tiny --max-context 100000)
gp_cli_test(serve_kv_blocks 2 "--kv-blocks 100000 exceeds the 256 blocks --max-batch 16" serve --model tiny --kv-blocks 100000)
gp_cli_test(serve_prefix_offload 2 "the prefix cache .* with an offloaded KV cache .*: an offloaded sequence's oldest blocks"
            serve --model tiny --backend cuda --kv-vram-budget 1G)
gp_cli_test(serve_tp_cpu 2 "tensor parallel .--tp. with the cpu backend .--backend cpu." serve --model tiny --tp 2)
gp_cli_test(serve_tp_peer_alone 2 "sums over peer memory .tp_peer_bytes, --tp-peer-bytes. without tensor parallel"
            serve --model tiny --backend cuda --tp-peer-bytes 1M)
gp_cli_test(serve_max_body 2 "--max-body 2147483648 bytes: allowed at most 1G" serve --model tiny --max-body 2G)
gp_cli_test(serve_store_cpu 2 "stored prefixes .* are reloaded into the CUDA engine's paged device cache"
            serve --model tiny --kv-store-size 1G)
gp_cli_test(serve_store_no_cache 2 "--kv-store-size with --no-prefix-cache: the host store keeps the blocks the prefix cache evicts"
            serve --model tiny --backend cuda --kv-store-size 1G --no-prefix-cache)
gp_cli_test(serve_store_dir_alone 2 "--kv-store /tmp without --kv-store-size"
            serve --model tiny --backend cuda --kv-store /tmp)
gp_cli_test(serve_pd_no_split 2 "--schedule pd-mux on cuda needs --pd-split D:P" serve --model tiny --backend cuda --schedule pd-mux)
gp_cli_test(serve_pd_split_alone 2 "--pd-split: the two lanes run the pd-mux schedule's batches" serve --model tiny --pd-split 32)
gp_cli_test(serve_pd_cpu 2 "prefill and decode lanes .* with the cpu backend" serve --model tiny --pd-split 32 --schedule pd-mux)
gp_cli_test(serve_pd_store 2 "prefill and decode lanes .* with stored prefixes" serve --model tiny --backend cuda --pd-split 32 --schedule pd-mux --kv-store-size 1G)
gp_cli_test(serve_pd_idle_alone 2 "--pd-idle-whole: it places the decode rows of --pd-split's lanes" serve --model tiny --pd-idle-whole)
gp_cli_test(serve_pd_auto_idle 2 "--pd-idle-whole with --pd-split auto: the adaptive split already decodes on every SM"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split auto --pd-idle-whole)
gp_cli_test(serve_pd_splits_static 2 "--pd-splits tunes the adaptive split. give --pd-split auto"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split 32 --pd-splits 16,32)
gp_cli_test(serve_pd_tpot_static 2 "--pd-tpot-ms tunes the adaptive split. give --pd-split auto"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split 32 --pd-tpot-ms 30)
gp_cli_test(serve_pd_tpot_bad 2 "--pd-tpot-ms 0: allowed a number of milliseconds in \\(0, 60000\\]"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split auto --pd-tpot-ms 0)
gp_cli_test(serve_pd_hysteresis_bad 2 "--pd-hysteresis"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split auto --pd-hysteresis 0)
gp_cli_test(serve_pd_profile_both 2 "--pd-profile loads a profile, --pd-profile-save writes a measured one"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split auto --pd-profile /tmp/a.json
            --pd-profile-save /tmp/gp_pd_b.json)
gp_cli_test(serve_pd_trace_alone 2 "--pd-trace traces the prefill and decode lanes. give --pd-split"
            serve --model tiny --backend cuda --pd-trace /tmp/gp_pd_trace.json)
gp_cli_test(serve_pd_splits_bad 2 "--pd-splits"
            serve --model tiny --backend cuda --schedule pd-mux --pd-split auto --pd-splits 16,x)
