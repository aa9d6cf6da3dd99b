# Calibration identity and progress of long work (docs/RELIABILITY.md): a
# calibration follows the weights' content, not the folder's name; loading,
# synthesis and calibration report a line per phase when stderr is no
# terminal; the cpu backend states or refuses its host memory before loading.
add_test(NAME cli_calib_identity
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/calib_identity.py $<TARGET_FILE:greenpipe> ${GP_DATA}/tiny)
gp_cli_test(gen_progress_synth 0 "greenpipe: synthesizing weights: [0-9.]+ kB in [0-9.]+ s, [0-9.]+ GB/s"
            generate --model tiny --prompt-ids 1,2 --steps 2)
gp_cli_test(gen_progress_load 0 "greenpipe: loading weights: [0-9.]+ kB in [0-9.]+ s"
            generate --model ${GP_DATA}/tiny --prompt-ids 1,2 --steps 2)
gp_cli_test(gen_memory_statement 0 "greenpipe: the cpu backend holds --model tiny in host memory: [0-9.]+ kB .* of [0-9.]+ [kMG]B available"
            generate --model tiny --prompt-ids 1,2 --steps 2)
gp_cli_test(cal_progress 0 "greenpipe: calibrating .2 passes over the tokens.: 64 tokens in [0-9.]+ s"
            calibrate --model tiny --sparsity 0.5 --tokens 32 --out cal_progress.json)
# The memory refusal without a machine that lacks the memory: the test hook
# GP_FAULT_MEM_AVAILABLE stands in for MemAvailable.
gp_cli_test(gen_memory_refused 2 "the cpu backend needs 16.06 GB of host memory for --model llama3-8b .the default preset. .* and 8.00 GB are available .GP_FAULT_MEM_AVAILABLE.*allowed: a smaller model .--model tiny, or --model DIR of a checkpoint that fits., or --backend cuda"
            generate --prompt-ids 1,2 --steps 2)
set_tests_properties(cli_gen_memory_refused PROPERTIES ENVIRONMENT GP_FAULT_MEM_AVAILABLE=8000000000)
gp_cli_test(gen_memory_refused_tiny 2 "the cpu backend needs [0-9.]+ kB of host memory for --model tiny .* and 1.00 kB are available"
            generate --model tiny --prompt-ids 1,2 --steps 2)
set_tests_properties(cli_gen_memory_refused_tiny PROPERTIES ENVIRONMENT GP_FAULT_MEM_AVAILABLE=1000)
gp_cli_test(gen_memory_hook_junk 2 "environment variable GP_FAULT_MEM_AVAILABLE = '8G' is not an integer"
            generate --model tiny --prompt-ids 1,2 --steps 2)
set_tests_properties(cli_gen_memory_hook_junk PROPERTIES ENVIRONMENT GP_FAULT_MEM_AVAILABLE=8G)
