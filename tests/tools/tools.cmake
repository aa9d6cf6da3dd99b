# Tools: parser unit tests and end-to-end checks of the greenpipe command.
gp_add_test(tools_parse SOURCES tools/test_parse.c LIBS gp_tools)
gp_add_test(tools_sample SOURCES tools/test_sample.c LIBS gp_tools)
gp_add_test(tools_gen_eos SOURCES tools/test_gen_eos.c LIBS gp_tools)

# gp_cli_test(NAME CODE REGEX args...): run greenpipe, expect exit CODE and
# output matching REGEX.
function(gp_cli_test name code regex)
  add_test(NAME cli_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh ${code} ${regex} --
                   $<TARGET_FILE:greenpipe> ${ARGN})
endfunction()

set(GP_TINY_DATA ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny)
gp_cli_test(no_command 2 "usage: greenpipe")
gp_cli_test(unknown_command 2 "unknown command 'frobnicate'" frobnicate)
gp_cli_test(gen_missing_steps 2 "a prompt .--prompt, --prompt-file or --prompt-ids. and --steps are required" generate --model tiny --prompt-ids 1)
gp_cli_test(gen_bad_steps 2 "--steps: 'abc' is not an integer" generate --model tiny --prompt-ids 1 --steps abc)
gp_cli_test(gen_zero_steps 2 "--steps: 0 is out of range" generate --model tiny --prompt-ids 1 --steps 0)
gp_cli_test(gen_bad_prompt 2 "sequence 1 is empty" generate --model tiny --prompt-ids "1,2$<SEMICOLON>" --steps 1)
gp_cli_test(gen_vocab 2 "token 256 in sequence 0 is outside the vocabulary" generate --model tiny --prompt-ids 256 --steps 1)
gp_cli_test(gen_bad_model 2 "'nosuch' is neither a checkpoint directory nor a preset" generate --model nosuch --prompt-ids 1 --steps 1)
gp_cli_test(gen_bad_backend 2 "--backend .gpu. is not available. allowed: cpu, cuda" generate --model tiny --prompt-ids 1 --steps 1 --backend gpu)
gp_cli_test(gen_unknown_flag 2 "unknown option '--bogus'" generate --bogus)
gp_cli_test(gen_too_long 2 "exceeds the model's max context 256" generate --model tiny --prompt-ids 1 --steps 300)
gp_cli_test(gen_tiny 0 "^[0-9]+ [0-9]+ [0-9]+$" generate --model tiny --prompt-ids "5,17,42$<SEMICOLON>11,200" --steps 3)
gp_cli_test(inspect_missing 1 "not found" inspect /nonexistent/dir)
gp_cli_test(inspect_usage 2 "usage: greenpipe inspect DIR" inspect)
# Without a GPU: exit 1 and one plain line; with one: the device list.
gp_cli_test(devices "0|1" "greenpipe: no CUDA GPU usable: |device 0: " devices)

# The committed HF checkpoints (tests/hf/make_reference.py) through the command:
# inspect accepts them, and generate reproduces HF's greedy tokens.
set(GP_DATA ${CMAKE_CURRENT_SOURCE_DIR}/data)
gp_cli_test(inspect_tiny 0 "loadable: yes" inspect ${GP_DATA}/tiny)
gp_cli_test(inspect_sharded 0 "model-00003-of-00003.safetensors" inspect ${GP_DATA}/small-gqa)
gp_cli_test(gen_hf_tiny 0 "^29 155 50 61 189 155$"
            generate --model ${GP_DATA}/tiny --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6)
gp_cli_test(gen_hf_small_gqa 0 "^77 99 290 272 231 255$"
            generate --model ${GP_DATA}/small-gqa --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6)
# The pipelined engine (CPU executor: threads stand in for the partitions)
# gives the sequential engine's tokens and logits bit for bit.
gp_cli_test(gen_pipelined_hf_small_gqa 0 "^77 99 290 272 231 255$"
            generate --model ${GP_DATA}/small-gqa --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6
            --engine pipelined --sm-split 2:1)
add_test(NAME cli_pipelined_same_logits
         COMMAND bash -c "g=$<TARGET_FILE:greenpipe>; a='generate --model ${GP_DATA}/small-gqa --prompt-ids 5,17,42$<SEMICOLON>11,200,2$<SEMICOLON>7$<SEMICOLON>1,2,3,4 --steps 5'; $g $a --dump-logits seq.json > seq.txt && $g $a --engine pipelined --micro-batches 3 --dump-logits pipe.json > pipe.txt && cmp seq.txt pipe.txt && cmp seq.json pipe.json")
# All prompts are prefilled in one batched call: the tokens, --dump-logits (byte
# for byte) and --dump-prompt-logits are each prompt's own, and the last prompt
# position's logits are the first generated token's.
add_test(NAME cli_prefill_batched_same
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/prefill_same.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
gp_cli_test(gen_bad_engine 2 "--engine 'fast': allowed seq, pipelined" generate --model tiny --prompt-ids 1 --steps 1 --engine fast)
gp_cli_test(gen_split_needs_pipelined 2 "an SM split or micro-batches .--sm-split, --micro-batches. without pipelined steps .--engine pipelined.: an SM split and micro-batches shape pipelined steps" generate --model tiny --prompt-ids 1 --steps 1 --sm-split 1:1)
gp_cli_test(gen_micro_too_many 2 "--micro-batches 3: each needs a sequence and there are 2" generate --model tiny --prompt-ids "1$<SEMICOLON>2" --steps 1 --engine pipelined --micro-batches 3)
gp_cli_test(gen_micro_range 2 "--micro-batches: 5 is out of range" generate --model tiny --prompt-ids 1 --steps 1 --engine pipelined --micro-batches 5)
gp_cli_test(gen_split_zero 2 "--sm-split 0:1: each side needs at least one thread" generate --model tiny --prompt-ids 1 --steps 1 --engine pipelined --sm-split 0:1)
gp_cli_test(gen_cpu_split_rest 2 "the cpu backend counts threads" generate --model tiny --prompt-ids 1 --steps 1 --engine pipelined --sm-split 2)
gp_cli_test(gen_cuda_pipelined_hf_tiny "0|1" "^29 155 50 61 189 155$|greenpipe generate: loading the model: no usable GPU: "
            generate --backend cuda --engine pipelined --model ${GP_DATA}/tiny --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6)
add_test(NAME cli_dump_logits
         COMMAND bash -c "$<TARGET_FILE:greenpipe> generate --model tiny --prompt-ids '1,2$<SEMICOLON>3' --steps 2 --dump-logits dump.json > /dev/null && python3 -c \"import json; d=json.load(open('dump.json')); assert len(d['tokens'])==2 and len(d['tokens'][0])==2, d['tokens']; assert len(d['logits'][1][1])==256; import math; assert max(range(256), key=lambda v: d['logits'][0][0][v])==d['tokens'][0][0]\"")
# A corrupt checkpoint: inspect exits 1 naming the file and the rule broken.
add_test(NAME cli_inspect_truncated
         COMMAND bash -c "d=$(mktemp -d) && cp ${GP_DATA}/tiny/config.json $d/ && head -c 5000 ${GP_DATA}/tiny/model.safetensors > $d/model.safetensors && bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 1 'model.safetensors.*(past the end|truncated|shorter)' -- $<TARGET_FILE:greenpipe> inspect $d; rc=$?; rm -rf $d; exit $rc")
# The CUDA backend: without a GPU, one plain line and exit 1; with one, HF's tokens.
gp_cli_test(gen_cuda_hf_tiny "0|1" "^29 155 50 61 189 155$|greenpipe generate: loading the model: no usable GPU: "
            generate --backend cuda --model ${GP_DATA}/tiny --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6)

# ---- Reliability (docs/RELIABILITY.md): bad inputs, their messages and exit codes.
# Broken copies of the tiny checkpoint (tools/bad_checkpoints.py), made once
# for every test that names the fixture; CTest adds the set-up to a -R run.
set(GP_BAD_CKPT ${CMAKE_BINARY_DIR}/tests/bad_checkpoints)
add_test(NAME bad_checkpoints_setup
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/bad_checkpoints.py ${GP_DATA}/tiny ${GP_BAD_CKPT})
set_tests_properties(bad_checkpoints_setup PROPERTIES FIXTURES_SETUP bad_checkpoints)
function(gp_cli_ckpt_test name code regex)
  gp_cli_test(${name} ${code} ${regex} ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES FIXTURES_REQUIRED bad_checkpoints)
endfunction()

gp_cli_test(gen_missing_value 2 "--steps needs a value" generate --model tiny --prompt-ids 1 --steps)
gp_cli_test(gen_junk_number 2 "--steps: '8x' is not an integer" generate --model tiny --prompt-ids 1 --steps 8x)
gp_cli_test(gen_block_size_range 2 "--block-size: 2000 is out of range. allowed: .1, 1024."
            generate --model tiny --prompt-ids 1 --steps 1 --block-size 2000)
gp_cli_test(gen_seed_junk 2 "--seed: '12abc' is not a non-negative integer"
            generate --model tiny --prompt-ids 1 --steps 1 --seed 12abc)
gp_cli_test(gen_duplicate 2 "--steps given more than once" generate --model tiny --prompt-ids 1 --steps 2 --steps 3)
gp_cli_test(gen_seed_checkpoint 2 "--seed 3: --model .* is a checkpoint, not a preset"
            generate --model ${GP_DATA}/tiny --prompt-ids 1 --steps 1 --seed 3)
gp_cli_test(gen_dump_flag 2 "--dump-logits '--seed': looks like a flag"
            generate --model tiny --prompt-ids 1 --steps 1 --dump-logits --seed 3)
gp_cli_test(inspect_extra_args 2 "usage: greenpipe inspect DIR" inspect ${GP_DATA}/tiny extra)
gp_cli_test(devices_args 2 "greenpipe devices: takes no arguments, got 'foo'" devices foo)
foreach(cmd inspect generate)
  if(cmd STREQUAL inspect)
    set(pre inspect)
    set(code 1)
  else()
    set(pre generate --prompt-ids 1 --steps 1 --model)
    set(code 2)
  endif()
  gp_cli_ckpt_test(${cmd}_no_config ${code} "no_config/config.json: not found" ${pre} ${GP_BAD_CKPT}/no_config)
  gp_cli_ckpt_test(${cmd}_bad_config ${code} "bad_config/config.json: invalid JSON" ${pre} ${GP_BAD_CKPT}/bad_config)
  gp_cli_ckpt_test(${cmd}_cut_safetensors ${code} "truncated/model.safetensors: .*run past the end"
                   ${pre} ${GP_BAD_CKPT}/truncated)
  gp_cli_ckpt_test(${cmd}_no_weights ${code} "no weights: looked for model.safetensors"
                   ${pre} ${GP_BAD_CKPT}/no_weights)
endforeach()
# A missing tensor is found when the weights are checked: by inspect's check,
# by generate when it loads them (a runtime failure, exit 1).
gp_cli_ckpt_test(inspect_missing_tensor 1 "not loadable: .*tensor 'model.layers.0.mlp.down_proj.weight' is missing"
                 inspect ${GP_BAD_CKPT}/missing_tensor)
gp_cli_ckpt_test(generate_missing_tensor 1 "loading the model: .*tensor 'model.layers.0.mlp.down_proj.weight' is missing"
                 generate --prompt-ids 1 --steps 1 --model ${GP_BAD_CKPT}/missing_tensor)
gp_cli_test(gen_positional 2 "unexpected argument 'extra'" generate --model tiny --prompt-ids 1 --steps 1 extra)
gp_cli_test(gen_prefill_chunk_cpu 2 "the cpu backend .--backend cpu. with a prefill chunk .prefill_chunk, --prefill-chunk.: the CPU reference prefills position by position"
            generate --model tiny --prompt-ids 1 --steps 1 --prefill-chunk 64)
gp_cli_test(gen_dtype_cpu 2 "--dtype fp16 applies to --backend cuda only .* allowed on cpu: auto .the default., or use --backend cuda"
            generate --model tiny --prompt-ids 1 --steps 1 --dtype fp16)
gp_cli_test(gen_dtype_junk 2 "dtype 'fp8' is not known. allowed .any case.: auto, bf16, fp16"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --dtype fp8)
gp_cli_test(gen_vram_budget_junk 2 "--vram-budget: '4Q' is not a size. expected a size in bytes > 0"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --vram-budget 4Q)
gp_cli_test(gen_vram_budget_cpu 2 "the cpu backend .--backend cpu. with streamed weights .vram_budget, --vram-budget.: the CPU reference holds every weight in host memory"
            generate --model tiny --prompt-ids 1 --steps 1 --vram-budget 4G)
gp_cli_test(gen_vram_budget_small 2 "--vram-budget: streaming the weights of config tiny .* below the minimum working set"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --vram-budget 4K)
gp_cli_test(gen_vram_budget_small_pipelined 2 "below the minimum working set"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --engine pipelined --vram-budget 4K)
gp_cli_test(gen_prefill_chunk_range 2 "--prefill-chunk: 0 is out of range. allowed: .1, 65536."
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --prefill-chunk 0)
gp_cli_test(gen_prefill_chunk_junk 2 "--prefill-chunk: '2k' is not an integer"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --prefill-chunk 2k)
gp_cli_test(gen_dump_prompt_flag 2 "--dump-prompt-logits '--seed': looks like a flag"
            generate --model tiny --prompt-ids 1 --steps 1 --dump-prompt-logits --seed 3)
gp_cli_test(gen_dump_prompt_same_file 2 "--dump-prompt-logits 'd.json' is also the --dump-logits file"
            generate --model tiny --prompt-ids 1 --steps 1 --dump-logits d.json --dump-prompt-logits d.json)
gp_cli_test(gen_dump_prompt_unwritable 2 "--dump-prompt-logits '/nonexistent-gp-dir/p.json': cannot write: No such file or directory"
            generate --model tiny --prompt-ids 1 --steps 1 --dump-prompt-logits /nonexistent-gp-dir/p.json)
# The CUDA engine's prefill in chunks of 2 tokens (prompts span chunks, chunks
# hold two prompts): HF's tokens; without a GPU, one plain line and exit 1.
gp_cli_test(gen_cuda_prefill_chunk_hf_tiny "0|1" "^29 155 50 61 189 155$|greenpipe generate: loading the model: no usable GPU: "
            generate --backend cuda --prefill-chunk 2 --model ${GP_DATA}/tiny --prompt-ids "5,17,42,7,99$<SEMICOLON>11,200,2" --steps 6)
gp_cli_test(gen_dump_unwritable 2 "--dump-logits '/nonexistent-gp-dir/d.json': cannot write: No such file or directory"
            generate --model tiny --prompt-ids 1 --steps 1 --dump-logits /nonexistent-gp-dir/d.json)

# ---- Text prompts, EOS and sampling (docs/RELIABILITY.md, greenpipe: bad input).
# End to end on small-gqa with a byte-level BPE tokenizer.json the script writes:
# streamed text, EOS from generation_config.json, batches, --prompt-file, seeds.
add_test(NAME cli_gen_text
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_text.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
add_test(NAME cli_gen_text_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_text.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa cuda)
set_tests_properties(cli_gen_text_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
gp_cli_test(gen_prompt_preset 2 "--prompt: --model tiny is a preset .synthetic weights. and has no tokenizer.*tokenizer.json or tokenizer.model"
            generate --model tiny --prompt hi --steps 1)
gp_cli_test(gen_prompt_no_tokenizer 2 "--prompt needs the checkpoint's tokenizer: .*tokenizer.json and .*tokenizer.model"
            generate --model ${GP_DATA}/tiny --prompt hi --steps 1)
gp_cli_test(gen_prompt_two_sources 2 "give exactly one of --prompt .repeatable., --prompt-file and --prompt-ids"
            generate --model tiny --prompt-ids 1 --prompt hi --steps 1)
gp_cli_test(gen_prompt_file_twice 2 "--prompt-file given more than once"
            generate --model tiny --prompt-file a --prompt-file b --steps 1)
gp_cli_test(gen_prompt_file_missing 2 "--prompt-file: .*nosuch-prompt.txt.*not found"
            generate --model ${GP_DATA}/tiny --prompt-file nosuch-prompt.txt --steps 1)
gp_cli_test(gen_ignore_eos_ids 2 "--ignore-eos applies to --prompt and --prompt-file"
            generate --model tiny --prompt-ids 1 --steps 1 --ignore-eos)
gp_cli_test(gen_temperature_range 2 "--temperature 200 is out of range. allowed: .0, 100."
            generate --model tiny --prompt-ids 1 --steps 1 --temperature 200)
gp_cli_test(gen_temperature_junk 2 "--temperature: 'warm' is not a finite decimal number"
            generate --model tiny --prompt-ids 1 --steps 1 --temperature warm)
gp_cli_test(gen_top_p_range 2 "--top-p 0 is out of range. allowed: .0, 1.."
            generate --model tiny --prompt-ids 1 --steps 1 --temperature 1 --top-p 0)
gp_cli_test(gen_top_k_vocab 2 "--top-k 300 is out of range. allowed: .0, 256."
            generate --model tiny --prompt-ids 1 --steps 1 --temperature 1 --top-k 300)
gp_cli_test(gen_top_k_greedy 2 "--temperature 0 asks for greedy decoding and --top-k shapes sampling. allowed: --temperature above 0, or leave it out"
            generate --model tiny --prompt-ids 1 --steps 1 --top-k 5 --temperature 0)
# --seed seeds sampling too: accepted with a checkpoint when sampling.
gp_cli_test(gen_seed_checkpoint_sampling 0 "^[0-9]+ [0-9]+ [0-9]+$"
            generate --model ${GP_DATA}/tiny --prompt-ids 5,17,42 --steps 3 --temperature 0.8 --seed 3)

# ---- greenpipe calibrate (activation sparsity thresholds on the CPU reference):
# end to end (random ids on the tiny preset and checkpoint, text prompts through
# a tokenizer on small-gqa), then every bad input (docs/RELIABILITY.md).
add_test(NAME cli_calibrate
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/calibrate.py $<TARGET_FILE:greenpipe> ${GP_DATA})
gp_cli_test(cal_tiny 0 "^down +[0-9.e-]+ +0\\.49[0-9]* \\(" calibrate --model tiny --sparsity 0.5 --out cal_tiny.json)
gp_cli_test(cal_missing 2 "--model, --sparsity and --out are required. missing: --sparsity --out" calibrate --model tiny)
gp_cli_test(cal_sparsity_range 2 "--sparsity 1 is out of range. allowed .0, 1." calibrate --model tiny --sparsity 1 --out c.json)
gp_cli_test(cal_sparsity_negative 2 "--sparsity -0.1 is out of range. allowed .0, 1." calibrate --model tiny --sparsity -0.1 --out c.json)
gp_cli_test(cal_sparsity_junk 2 "--sparsity: 'half' is not a finite decimal number" calibrate --model tiny --sparsity half --out c.json)
gp_cli_test(cal_tokens_range 2 "--tokens: 0 is out of range" calibrate --model tiny --sparsity 0.5 --out c.json --tokens 0)
gp_cli_test(cal_threads_range 2 "--threads: 17 is out of range. allowed: .0, 16." calibrate --model tiny --sparsity 0.5 --out c.json --threads 17)
gp_cli_test(cal_seq_len_context 2 "--seq-len 300 is beyond the model's max context 256" calibrate --model tiny --sparsity 0.5 --out c.json --seq-len 300)
gp_cli_test(cal_seq_len_prompts 2 "--seq-len applies to random ids" calibrate --model tiny --sparsity 0.5 --out c.json --seq-len 10 --prompts p.txt)
gp_cli_test(cal_prompts_preset 2 "--prompts: --model tiny is a preset .synthetic weights. and has no tokenizer" calibrate --model tiny --sparsity 0.5 --out c.json --prompts p.txt)
gp_cli_test(cal_prompts_no_tokenizer 2 "--prompts needs the checkpoint's tokenizer: .*tokenizer.json and .*tokenizer.model"
            calibrate --model ${GP_DATA}/tiny --sparsity 0.5 --out c.json --prompts ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/corpus.txt)
gp_cli_test(cal_prompts_missing 2 "--prompts: .*nosuch-prompts.txt.*not found"
            calibrate --model ${GP_DATA}/tiny --sparsity 0.5 --out c.json --prompts nosuch-prompts.txt)
gp_cli_test(cal_seed_prompts 2 "--seed 3: --model .* is a checkpoint and --prompts gives the tokens"
            calibrate --model ${GP_DATA}/tiny --sparsity 0.5 --out c.json --prompts p.txt --seed 3)
gp_cli_test(cal_out_dir 2 "--out '/nonexistent-gp-dir/c.json': cannot write: No such file or directory"
            calibrate --model tiny --sparsity 0.5 --out /nonexistent-gp-dir/c.json)
gp_cli_test(cal_out_flag 2 "--out '--tokens': looks like a flag" calibrate --model tiny --sparsity 0.5 --out --tokens 3)
# a directory as the file: found before the calibration
gp_cli_test(cal_out_unwritable 2 "--out '.': cannot write: Is a directory" calibrate --model tiny --sparsity 0.5 --tokens 8 --out .)
gp_cli_test(cal_bad_model 2 "--model: 'nosuch' is neither a checkpoint directory nor a preset" calibrate --model nosuch --sparsity 0.5 --out c.json)
gp_cli_test(cal_unknown_flag 2 "unknown option '--bogus'" calibrate --bogus)
gp_cli_test(cal_duplicate 2 "--sparsity given more than once" calibrate --model tiny --sparsity 0.5 --sparsity 0.6 --out c.json)
gp_cli_test(cal_missing_value 2 "--tokens needs a value" calibrate --model tiny --sparsity 0.5 --out c.json --tokens)
gp_cli_test(cal_dtype_junk 2 "dtype 'fp8' is not known" calibrate --model tiny --sparsity 0.5 --out c.json --dtype fp8)
gp_cli_test(cal_positional 2 "unexpected argument 'extra'" calibrate --model tiny --sparsity 0.5 --out c.json extra)

# ---- greenpipe generate --sparsity: refusals before anything loads
gp_cli_test(gen_sparsity_missing 2 "--sparsity /nonexistent/cal.json: /nonexistent/cal.json: not found"
            generate --model tiny --prompt-ids 1,2 --steps 2 --sparsity /nonexistent/cal.json)
gp_cli_test(gen_sparsity_flag 2 "--sparsity '--steps': looks like a flag, not a file"
            generate --model tiny --prompt-ids 1,2 --sparsity --steps 2)
# sparse projections on streamed weights combine (with their statistics, and
# beside the CPU-assisted FFN): refused only later, by the missing file
gp_cli_test(gen_sparsity_vram 2 "--sparsity cal.json: cal.json: not found"
            generate --model tiny --prompt-ids 1,2 --steps 2 --backend cuda --vram-budget 1G --sparsity cal.json)
gp_cli_test(gen_sparsity_stats_vram 2 "--sparsity cal.json: cal.json: not found"
            generate --model tiny --prompt-ids 1,2 --steps 2 --backend cuda --vram-budget 1G --sparsity cal.json --cpu-ffn 1M --sparsity-stats s.json)
gp_cli_test(gen_sparsity_stats_alone 2 "sparsity statistics .--sparsity-stats. without sparse projections .sparse_thresholds, --sparsity.: they count the inputs"
            generate --model tiny --prompt-ids 1,2 --steps 2 --backend cuda --sparsity-stats s.json)
gp_cli_test(gen_sparsity_stats_cpu 2 "the cpu backend .--backend cpu. with sparsity statistics .--sparsity-stats.: the active inputs are counted by the CUDA engine.s sparse kernels"
            generate --model tiny --prompt-ids 1,2 --steps 2 --sparsity-stats s.json)
gp_cli_test(gen_sparse_always_alone 2 "sparse projections on every step .sparse_always, --sparse-always. without sparse projections .sparse_thresholds, --sparsity.: it keeps a calibration.s masks"
            generate --model tiny --prompt-ids 1,2 --steps 2 --backend cuda --sparse-always)
gp_cli_test(gen_sparse_always_cpu 2 "the cpu backend .--backend cpu. with sparse projections on every step .sparse_always, --sparse-always.: the CPU reference masks every step already"
            generate --model tiny --prompt-ids 1,2 --steps 2 --sparse-always)

# ---- greenpipe generate --kv-store-size (stored prefixes, cuda): refusals
# before anything loads (exit 2, the value and what is allowed), then the
# store end to end on the GPU (skipped without one).
gp_cli_test(gen_kv_store_dir_alone 2 "--kv-store '/tmp/gp-blocks' needs --kv-store-size SIZE .* allowed: both, or neither"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store /tmp/gp-blocks)
gp_cli_test(gen_kv_store_block_alone 2 "--kv-store-block 64 needs --kv-store-size SIZE .* allowed: both, or neither"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-block 64)
gp_cli_test(gen_kv_store_cpu 2 "the cpu backend .--backend cpu. with stored prefixes .kv_store_bytes, --kv-store-size.: stored prefixes are reloaded into the CUDA engine.s paged device cache"
            generate --model tiny --prompt-ids 1 --steps 1 --kv-store-size 1G)
gp_cli_test(gen_kv_store_dump_prompt 2 "prompt logits .--dump-prompt-logits. with stored prefixes .kv_store_bytes, --kv-store-size.: prompt positions reloaded from the store are not recomputed"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size 1G --dump-prompt-logits p.json)
gp_cli_test(gen_kv_store_size_zero 2 "--kv-store-size: '0' is zero. expected a size in bytes > 0"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size 0)
gp_cli_test(gen_kv_store_size_junk 2 "--kv-store-size: '4 G' is not a size. expected a size in bytes > 0: digits, optionally followed by K, M, G, T or KiB, MiB, GiB, TiB .binary"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size "4 G")
gp_cli_test(gen_kv_store_size_missing 2 "--kv-store-size needs a value"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size)
gp_cli_test(gen_kv_store_block_range 2 "--kv-store-block: 0 is out of range. allowed: .1, 65536."
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size 1G --kv-store-block 0)
gp_cli_test(gen_kv_store_block_junk 2 "--kv-store-block: '1k' is not an integer"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size 1G --kv-store-block 1k)
gp_cli_test(gen_kv_store_dir_flag 2 "--kv-store '--steps': looks like a flag"
            generate --model tiny --prompt-ids 1 --backend cuda --kv-store-size 1G --kv-store --steps 1)
gp_cli_test(gen_kv_store_twice 2 "--kv-store-size given more than once"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-store-size 1G --kv-store-size 2G)
# found from the config, still before loading: a pool below one block (tiny:
# 8 tokens x 2 layers x K and V x 2 KV heads x 16 dims x 2 bytes), and the
# default 256-token block beside prompts that cannot fill one
gp_cli_test(gen_kv_store_size_small 2 "--kv-store-size 1024 bytes: less than one stored block of 8 tokens of tiny .2048 bytes.* allowed: at least 2048 bytes"
            generate --model tiny --prompt-ids 1,2,3,4,5,6,7,8,9 --steps 1 --backend cuda --kv-store-size 1K --kv-store-block 8)
gp_cli_test(gen_kv_store_block_context 2 "--kv-store-block 256 .the default.: the longest prompt has 3 token.s., fewer than one block.* allowed: at most 3"
            generate --model tiny --prompt-ids 1,2,3 --steps 3 --backend cuda --kv-store-size 1G)
add_test(NAME cli_gen_kv_store_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_kv_store.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
set_tests_properties(cli_gen_kv_store_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

# --kv-vram-budget (offloaded KV cache): the cuda backend's sequential engine, not beside streamed
# weights; a stored prefix reloads into it (refused here only by the prompt, shorter than a block).
gp_cli_test(gen_kv_vram_cpu 2 "the cpu backend .--backend cpu. with an offloaded KV cache .kv_vram_budget, --kv-vram-budget.: the CPU reference.s KV cache is in host memory already"
            generate --model tiny --prompt-ids 1 --steps 1 --kv-vram-budget 1G)
gp_cli_test(gen_kv_vram_pipelined 2 "an offloaded KV cache .kv_vram_budget, --kv-vram-budget. with pipelined steps .--engine pipelined.: the offloaded blocks are copied in ahead of each layer.s attention"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --engine pipelined --kv-vram-budget 1G)
gp_cli_test(gen_kv_vram_streamed 2 "an offloaded KV cache .kv_vram_budget, --kv-vram-budget. with streamed weights .vram_budget, --vram-budget.: both cross the one host-to-device link"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-vram-budget 1G --vram-budget 1G)
gp_cli_test(gen_kv_vram_junk 2 "--kv-vram-budget: '1x' is not a size"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --kv-vram-budget 1x)

# --cpu-ffn (the CPU-assisted FFN): cuda, --engine seq, with
# --sparsity, within --vram-budget when both are given; then end to end on
# the GPU (skipped without one).
gp_cli_test(gen_cpu_ffn_over_vram 2 "the CPU-assisted FFN .cpu_ffn_budget, --cpu-ffn. of 1048576 bytes within streamed weights .vram_budget, --vram-budget. of 1048576 bytes: the hot cache is part of the VRAM budget"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --sparsity cal.json --cpu-ffn 1M --vram-budget 1M)
gp_cli_test(gen_cpu_ffn_no_sparsity 2 "the CPU-assisted FFN .cpu_ffn_budget, --cpu-ffn. without sparse projections .sparse_thresholds, --sparsity.: its hot and cold neurons are the calibration.s"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --cpu-ffn 1M)
gp_cli_test(gen_cpu_ffn_cpu 2 "the cpu backend .--backend cpu. with the CPU-assisted FFN .cpu_ffn_budget, --cpu-ffn.: it splits the CUDA engine.s FFN between the GPU and CPU threads"
            generate --model tiny --prompt-ids 1 --steps 1 --sparsity cal.json --cpu-ffn 1M)
gp_cli_test(gen_cpu_ffn_pipelined 2 "the CPU-assisted FFN .cpu_ffn_budget, --cpu-ffn. with pipelined steps .--engine pipelined.: every layer.s FFN waits for the CPU threads"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --engine pipelined --sparsity cal.json --cpu-ffn 1M)
gp_cli_test(gen_cpu_ffn_size_junk 2 "--cpu-ffn: '1Mi' is not a size"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --sparsity cal.json --cpu-ffn 1Mi)
gp_cli_test(gen_cpu_ffn_threads_alone 2 "the CPU-assisted FFN.s threads .cpu_ffn_threads, --cpu-ffn-threads. without the CPU-assisted FFN"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --sparsity cal.json --cpu-ffn-threads 2)
gp_cli_test(gen_cpu_ffn_threads_range 2 "--cpu-ffn-threads: 17 is out of range"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --sparsity cal.json --cpu-ffn 1M --cpu-ffn-threads 17)
add_test(NAME cli_gen_cpu_ffn_cuda COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_cpu_ffn.py $<TARGET_FILE:greenpipe>)
set_tests_properties(cli_gen_cpu_ffn_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
include(tools/cli_inputs.cmake)
include(${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_generate.cmake)

# Calibration identity, progress and the cpu backend's memory statement.
include(${CMAKE_CURRENT_LIST_DIR}/cli_calib.cmake)
# ---- --tp (tensor parallel): the refusals made before anything loads (no GPU)
gp_cli_test(gen_tp_range 2 "--tp: 9 is out of range. allowed: .1, 8." generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --tp 9)
gp_cli_test(gen_tp_heads 2 "--tp 3: model tiny has 4 query heads .num_attention_heads., not a multiple of 3"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --tp 3)
gp_cli_test(gen_tp_cpu 2 "tensor parallel .--tp. with the cpu backend .--backend cpu.: tensor parallel cuts the CUDA engine.s weights over GPUs"
            generate --model tiny --prompt-ids 1 --steps 1 --tp 2)
gp_cli_test(gen_tp_pipelined 2 "tensor parallel .--tp. with pipelined steps .--engine pipelined.: both cut the step"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --engine pipelined --tp 2)
gp_cli_test(gen_tp_chat 2 "--tp does not apply to a conversation: the ranks are processes of their own"
            chat --model tiny --tp 2)
gp_cli_test(gen_tp_peer_alone 2 "the ranks. sums over peer memory .tp_peer_bytes, --tp-peer-bytes. without tensor parallel .--tp.: it sizes the sums"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --tp-peer-bytes 1M)
gp_cli_test(gen_tp_peer_junk 2 "--tp-peer-bytes"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --tp 2 --tp-peer-bytes 1Q)
# --tp 2 on two GPUs: the one-GPU run's tokens (GPU; skipped without two)
add_test(NAME cli_gen_tp_cuda COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_tp.py $<TARGET_FILE:greenpipe>
         ${PROJECT_SOURCE_DIR}/tests/data)
set_tests_properties(cli_gen_tp_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
# --engine afd on two GPUs: the one-GPU run's tokens (GPU; skipped without two)
add_test(NAME cli_gen_afd_cuda COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_afd.py $<TARGET_FILE:greenpipe>
         ${PROJECT_SOURCE_DIR}/tests/data)
set_tests_properties(cli_gen_afd_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
gp_cli_test(gen_afd_cpu 2 "attention and FFN on two GPUs .afd, --engine afd. with the cpu backend"
            generate --model tiny --prompt-ids 1 --steps 1 --engine afd)
gp_cli_test(gen_afd_sm_split 2 "--sm-split with --engine afd: each side runs on a whole GPU"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --engine afd --sm-split 8)
