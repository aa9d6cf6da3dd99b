# The command line's inputs and outputs: prompts from pipes and standard
# input, empty prompts, output paths tried before the work, and the words of
# refusals (docs/RELIABILITY.md, greenpipe: bad input).
set(GP_TOK_LLAMA3 ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer/bl_llama3/tokenizer.json)
set(GP_CLI_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh)

# A prompt from a pipe arrives whole: --file /dev/stdin, --file - and <(...)
# give the ids --text gives for the same bytes (BOS and more).
foreach(src "/dev/stdin" "-")
  string(REPLACE "/" "_" tag "${src}")
  add_test(NAME cli_tokenize_pipe${tag}
           COMMAND bash -c "set -o pipefail; g=$<TARGET_FILE:greenpipe>; want=$($g tokenize --tokenizer ${GP_TOK_LLAMA3} --text $'hello pipe\\n') && got=$(echo 'hello pipe' | $g tokenize --tokenizer ${GP_TOK_LLAMA3} --file ${src}) && echo \"got: $got; want: $want\" && [ \"$got\" = \"$want\" ] && [ $(wc -w <<<\"$got\") -gt 1 ]")
endforeach()
add_test(NAME cli_tokenize_process_substitution
         COMMAND bash -c "g=$<TARGET_FILE:greenpipe>; want=$($g tokenize --tokenizer ${GP_TOK_LLAMA3} --text 'from a fifo') && got=$($g tokenize --tokenizer ${GP_TOK_LLAMA3} --file <(printf 'from a fifo')) && echo \"got: $got; want: $want\" && [ \"$got\" = \"$want\" ] && [ $(wc -w <<<\"$got\") -gt 1 ]")
# calibrate --prompts - reads standard input too: on a copy of tiny with a
# tokenizer, an empty pipe holds no prompt, and a line's tokens arrive (they
# fall outside tiny's vocabulary, which names the line).
add_test(NAME cli_cal_prompts_stdin
         COMMAND bash -c "d=$(mktemp -d) && ln -s ${GP_DATA}/tiny/* $d/ && cp ${GP_TOK_LLAMA3} $d/ && bash ${GP_CLI_EXPECT} 2 '--prompts - holds no prompt' -- $<TARGET_FILE:greenpipe> calibrate --model $d --sparsity 0.5 --out c_stdin.json --prompts - < /dev/null && echo 'hello there' | bash ${GP_CLI_EXPECT} 2 'token [0-9]+ on --prompts line 1, outside' -- $<TARGET_FILE:greenpipe> calibrate --model $d --sparsity 0.5 --out c_stdin.json --prompts -; rc=$?; rm -rf $d; exit $rc")

# An empty prompt is refused unless asked for: from a pipe, a file, --prompt.
add_test(NAME cli_gen_empty_prompt_pipe
         COMMAND bash -c "printf '' | bash ${GP_CLI_EXPECT} 2 '--prompt-file -: the prompt is empty .0 bytes read from standard input.; allowed: a non-empty prompt, or --allow-empty-prompt' -- $<TARGET_FILE:greenpipe> generate --model tiny --prompt-file - --steps 1")
add_test(NAME cli_gen_empty_prompt_substitution
         COMMAND bash -c "bash ${GP_CLI_EXPECT} 2 '--prompt-file /dev/fd/[0-9]+: the prompt is empty .0 bytes read from /dev/fd/' -- $<TARGET_FILE:greenpipe> generate --model tiny --prompt-file <(true) --steps 1")
gp_cli_test(gen_empty_prompt_text 2 "--prompt: prompt 1 is empty .0 bytes.. allowed: a non-empty prompt, or --allow-empty-prompt"
            generate --model tiny --prompt a --prompt= --steps 1)
gp_cli_test(gen_allow_empty_prompt_ids 2 "--allow-empty-prompt applies to --prompt and --prompt-file"
            generate --model tiny --prompt-ids 1 --steps 1 --allow-empty-prompt)
gp_cli_test(gen_allow_empty_prompt_help 0 "--allow-empty-prompt" generate --help)

# Output paths: tried before the model loads; a late write failure names its reason.
add_test(NAME cli_out_paths
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/out_paths.sh $<TARGET_FILE:greenpipe>
                 $<TARGET_FILE:decode_pipeline_case_study>)

# --dtype: auto, the default, is accepted on the cpu backend too; any case.
gp_cli_test(gen_dtype_auto_cpu 0 "^[0-9]+$" generate --model tiny --prompt-ids 1 --steps 1 --dtype auto)
gp_cli_test(gen_dtype_upper_cpu 2 "--dtype bf16 applies to --backend cuda only" generate --model tiny --prompt-ids 1 --steps 1 --dtype BF16)
gp_cli_test(gen_dtype_upper_cuda "0|1" "^[0-9]+$|loading the model: no usable GPU: "
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --dtype BF16)
gp_cli_test(cal_dtype_upper 0 "wrote cal_upper.json" calibrate --model tiny --sparsity 0.5 --tokens 8 --out cal_upper.json --dtype FP32)
gp_cli_test(gen_dtype_help 0 "cpu: only auto, the checkpoint's own values held in float32" generate --help)

# --sm-split on the cpu backend: worker threads, checked before the run.
gp_cli_test(gen_cpu_split_range 2 "--sm-split 64:64: the cpu backend runs 1..16 worker threads on each side. allowed: A:F with A and F in 1..16"
            generate --model tiny --prompt-ids 1 --steps 1 --engine pipelined --sm-split 64:64)
gp_cli_test(gen_cpu_split_max 0 "^[0-9]+$" generate --model tiny --prompt-ids 1 --steps 1 --engine pipelined --sm-split 16:1)

# Sizes: K..T and KiB..TiB binary, KB..TB decimal, any case; the bytes read are echoed.
gp_cli_test(gen_size_decimal 2 "greenpipe: --vram-budget 4GB = 4000000000 bytes"
            generate --model tiny --prompt-ids 1 --steps 1 --vram-budget 4GB)
gp_cli_test(gen_size_iec 2 "greenpipe: --kv-store-size 4gib = 4294967296 bytes"
            generate --model tiny --prompt-ids 1 --steps 1 --kv-store-size 4gib)
gp_cli_test(gen_size_binary 2 "greenpipe: --vram-budget 512m = 536870912 bytes"
            generate --model tiny --prompt-ids 1 --steps 1 --vram-budget 512m)
gp_cli_test(gen_size_help 0 "KB, MB, GB, TB decimal" generate --help)

# Without a GPU: say that no driver or GPU was found (not the runtime's
# "driver version is insufficient") and what runs without one; one line, exit 1.
gp_cli_test(devices_no_gpu_words "0|1" "^greenpipe: no CUDA GPU usable: (no NVIDIA driver or GPU was found|the NVIDIA driver [^;]*)$<SEMICOLON> greenpipe generate --backend cpu runs the float32 CPU reference$|device 0: " devices)
gp_cli_test(gen_cuda_no_gpu_words "0|1" "^[0-9]+$|^greenpipe generate: loading the model: no usable GPU: no CUDA GPU usable: (no NVIDIA driver or GPU was found|the NVIDIA driver [^;]*)$<SEMICOLON> --backend cpu runs the float32 CPU reference instead$"
            generate --backend cuda --model tiny --prompt-ids 1 --steps 1)

# greenpipe --version and greenpipe version: the version and the build's commit.
gp_cli_test(version 0 "^greenpipe [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit [0-9A-Za-z._+-]+\\)$" --version)
gp_cli_test(version_command 0 "^greenpipe [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit " version)
gp_cli_test(version_in_usage 0 "version +the version and the commit" --help)
gp_cli_test(version_extra 2 "greenpipe version: takes no arguments, got 'x'" version x)

# inspect PRESET: a preset is named as one, with the presets and its config.
gp_cli_test(inspect_preset 0 "'tiny' is a preset .synthetic weights.*not a checkpoint directory$<SEMICOLON> presets: tiny, " inspect tiny)
gp_cli_test(inspect_preset_config 0 "layers 2, hidden 64" inspect tiny)

# Every benchmark answers --help and -h with its usage on stdout, exit 0
# (the bench folder's gp_bench_* targets, so a new one is checked too).
get_property(gp_bench_dir_targets DIRECTORY ${PROJECT_SOURCE_DIR}/bench PROPERTY BUILDSYSTEM_TARGETS)
set(gp_bench_files "")
foreach(t IN LISTS gp_bench_dir_targets)
  if(t MATCHES "^gp_bench_")
    list(APPEND gp_bench_files $<TARGET_FILE:${t}>)
  endif()
endforeach()
add_test(NAME tools_bench_help
         COMMAND bash -c "n=0; for b in \"$@\"; do for h in --help -h; do out=$(\"$b\" $h 2>/dev/null) || { echo \"$b $h: exit $?\"; exit 1; }; grep -qi usage <<<\"$out\" || { echo \"$b $h: no usage on stdout\"; exit 1; }; done; n=$((n+1)); done; echo \"$n benchmarks\"; [ $n -gt 0 ]" bench_help ${gp_bench_files})

# A tiktoken tokenizer.model in a checkpoint directory: BOS from config.json's
# bos_token_id, as HF's Llama 3 tokenizer; none when add_bos_token is false
# or no id is known; an id outside the vocabulary is refused.
set(GP_TIKTOKEN ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer/tiktoken/tokenizer.model)
add_test(NAME cli_tokenize_tiktoken_bos
         COMMAND bash -c "g=$<TARGET_FILE:greenpipe>; e=${GP_CLI_EXPECT}; d=$(mktemp -d); trap 'rm -rf $d' EXIT; cp ${GP_TIKTOKEN} $d/ && bash $e 0 '^305$' -- $g tokenize --model $d --text hi && echo '{\"bos_token_id\": 695, \"vocab_size\": 700}' > $d/config.json && bash $e 0 '^695 305$' -- $g tokenize --model $d --text hi && bash $e 0 '^305$' -- $g tokenize --tokenizer $d/tokenizer.model --text hi && echo '{\"add_bos_token\": false}' > $d/tokenizer_config.json && bash $e 0 '^305$' -- $g tokenize --model $d --text hi && rm $d/tokenizer_config.json && echo '{\"bos_token_id\": 900, \"vocab_size\": 700}' > $d/config.json && bash $e 2 'config.json: bos_token_id is not a token id in .0, 700.' -- $g tokenize --model $d --text hi")
