# The serving core on the CPU reference (no GPU).
# Requests from several threads, greedy and sampled, under both policies and
# preemption, each against the request run alone; cancellation; refusals.
gp_add_test(serve_core SOURCES serve/test_serve.c support/sched_cpu.c LIBS gp_serve gp_pipeline gp_reference gp_tools)
# greenpipe serve end to end (small-gqa with a ChatML tokenizer the script
# writes): 64 concurrent streaming clients against generate, the openai
# client, preemption under a tiny KV budget, disconnects, bad requests.
add_test(NAME cli_serve
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve/serve_e2e.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa)
add_test(NAME cli_serve_cuda
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve/serve_e2e.py $<TARGET_FILE:greenpipe> ${GP_DATA}/small-gqa cuda)
set_tests_properties(cli_serve_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
