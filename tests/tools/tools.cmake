# Tools: parser unit tests and end-to-end checks of the greenpipe command.
gp_add_test(tools_parse SOURCES tools/test_parse.c LIBS gp_tools)

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
gp_cli_test(gen_missing_steps 2 "--prompt-ids and --steps are required" generate --model tiny --prompt-ids 1)
gp_cli_test(gen_bad_steps 2 "--steps: 'abc' is not an integer" generate --model tiny --prompt-ids 1 --steps abc)
gp_cli_test(gen_zero_steps 2 "--steps: 0 is out of range" generate --model tiny --prompt-ids 1 --steps 0)
gp_cli_test(gen_bad_prompt 2 "sequence 1 is empty" generate --model tiny --prompt-ids "1,2$<SEMICOLON>" --steps 1)
gp_cli_test(gen_vocab 2 "token 256 in sequence 0 is outside the vocabulary" generate --model tiny --prompt-ids 256 --steps 1)
gp_cli_test(gen_bad_model 2 "'nosuch' is neither a checkpoint directory nor a preset" generate --model nosuch --prompt-ids 1 --steps 1)
gp_cli_test(gen_bad_backend 2 "--backend 'gpu' is not available" generate --model tiny --prompt-ids 1 --steps 1 --backend gpu)
gp_cli_test(gen_unknown_flag 2 "unknown option '--bogus'" generate --bogus)
gp_cli_test(gen_too_long 2 "exceeds the model's max context 256" generate --model tiny --prompt-ids 1 --steps 300)
gp_cli_test(gen_tiny 0 "^[0-9]+ [0-9]+ [0-9]+$" generate --model tiny --prompt-ids "5,17,42$<SEMICOLON>11,200" --steps 3)
gp_cli_test(inspect_missing 1 "not found" inspect /nonexistent/dir)
gp_cli_test(inspect_usage 2 "usage: greenpipe inspect DIR" inspect)
# Without a GPU: exit 1 and one plain line; with one: the device list.
gp_cli_test(devices "0|1" "greenpipe: no CUDA GPU usable: |device 0: " devices)
