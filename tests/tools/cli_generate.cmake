# greenpipe generate as llama-cli users drive it: the sampling flags, stop
# strings, --threads, the end-of-run summary and Ctrl-C (docs/RELIABILITY.md,
# "Text prompts, EOS and sampling"). Included from tools.cmake.

# refusals: exit 2, the flag, the value and what is allowed, before anything loads
gp_cli_test(gen_min_p_range 2 "--min-p 1.5 is out of range. allowed: .0, 1. .0: off."
            generate --model tiny --prompt-ids 1 --steps 1 --min-p 1.5)
gp_cli_test(gen_min_p_junk 2 "--min-p: 'most' is not a finite decimal number"
            generate --model tiny --prompt-ids 1 --steps 1 --min-p most)
gp_cli_test(gen_min_p_greedy 2 "--temperature 0 asks for greedy decoding and --top-p --min-p shape sampling"
            generate --model tiny --prompt-ids 1 --steps 1 --temperature 0 --top-p 0.9 --min-p 0.1)
gp_cli_test(gen_repeat_penalty_range 2 "--repeat-penalty 0 is out of range. allowed: .0, 100. .1: off."
            generate --model tiny --prompt-ids 1 --steps 1 --repeat-penalty 0)
gp_cli_test(gen_repeat_last_n_range 2 "--repeat-last-n -2 is out of range. allowed: -1 .the whole context., 0 .off. or a count of tokens"
            generate --model tiny --prompt-ids 1 --steps 1 --repeat-penalty 1.1 --repeat-last-n -2)
gp_cli_test(gen_repeat_last_n_alone 2 "--repeat-last-n 32 is the window of --repeat-penalty. give --repeat-penalty R too"
            generate --model tiny --prompt-ids 1 --steps 1 --repeat-last-n 32)
gp_cli_test(gen_stop_ids 2 "--stop 'END' matches generated text, and --prompt-ids prints ids. allowed: --stop with --prompt or --prompt-file"
            generate --model tiny --prompt-ids 1 --steps 1 --stop END)
# (through bash: CMake drops an empty list element)
add_test(NAME cli_gen_stop_empty
         COMMAND bash -c "bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 2 \"--stop '': an empty stop string would end every sequence before its first token\" -- $<TARGET_FILE:greenpipe> generate --model tiny --prompt hi --steps 1 --stop ''")
gp_cli_test(gen_threads_cuda 2 "the cuda backend .--backend cuda. with the reference.s worker threads .cpu_threads, --threads.: they size the CPU reference.s worker"
            generate --model tiny --prompt-ids 1 --steps 1 --backend cuda --threads 2)
gp_cli_test(gen_threads_range 2 "--threads: 17 is out of range. allowed: .1, 16."
            generate --model tiny --prompt-ids 1 --steps 1 --threads 17)
gp_cli_test(gen_threads_twice 2 "--threads given more than once"
            generate --model tiny --prompt-ids 1 --steps 1 --threads 1 --threads 2)

# accepted: --top-k alone samples at temperature 1 and says so; --threads' count is reported
gp_cli_test(gen_top_k_alone 0 "sampling at temperature 1 .the default when --top-k, --top-p or --min-p is given., top-k 5"
            generate --model tiny --prompt-ids 5,17 --steps 3 --top-k 5)
gp_cli_test(gen_threads_obtained 0 "held exactly. 3 worker thread.s."
            generate --model tiny --prompt-ids 5,17 --steps 3 --threads 3)
gp_cli_test(gen_summary 0 "greenpipe: \\[1\\] 4 token.s. generated .stop reason: length.. time to first token [0-9.]+ s .prefill included.. decode [0-9.]+ tokens/s"
            generate --model tiny --prompt-ids "5,17$<SEMICOLON>3" --steps 4)

# end to end on small-gqa with gen_text.py's tokenizer: stop strings, repeat penalty, min-p, --threads
add_test(NAME cli_gen_sampling
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_sampling.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
# Ctrl-C: exit 130, partial text and summary; a second one kills (race-free: see the script)
add_test(NAME cli_gen_interrupt
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_interrupt.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
set_tests_properties(cli_gen_interrupt PROPERTIES TIMEOUT 600)

# Chat: generate --chat and the greenpipe chat conversation (its KV cache kept
# between turns) on small-gqa with a ChatML tokenizer and Qwen2's template.
add_test(NAME cli_gen_chat
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_chat.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
add_test(NAME cli_gen_chat_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/gen_chat.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa cuda)
set_tests_properties(cli_gen_chat_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
gp_cli_test(chat_help 0 "usage: greenpipe chat" chat --help)
gp_cli_test(chat_prompt_ids 2 "--prompt-ids does not apply to a conversation" chat --model tiny --prompt-ids 1)
gp_cli_test(chat_preset 2 "--model tiny is a preset .synthetic weights. and has no tokenizer or chat template" chat --model tiny)
gp_cli_test(chat_max_context 2 "--max-context 300 is beyond the model's max context 256" chat --model ${GP_DATA}/tiny --max-context 300)
gp_cli_test(gen_system_needs_chat 2 "--system applies to --chat" generate --model tiny --prompt hi --steps 1 --system x)
gp_cli_test(gen_chat_prompt_ids 2 "--chat renders text messages through the chat template, and --prompt-ids gives token ids"
            generate --model tiny --prompt-ids 1 --steps 1 --chat)
gp_cli_test(gen_max_context_chat_only 2 "--max-context applies to greenpipe chat"
            generate --model tiny --prompt-ids 1 --steps 1 --max-context 9)
