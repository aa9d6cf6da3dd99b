# The load generator of greenpipe bench-serve: statistics and arrivals,
# datasets and the event-stream parser, and the command end to end against
# a mock streaming server (tests/loadgen/mock_server.py).
gp_add_test(loadgen_stats SOURCES loadgen/test_loadgen_stats.c LIBS gp_loadgen)
gp_add_test(loadgen_data SOURCES loadgen/test_loadgen_data.c LIBS gp_loadgen)
add_test(NAME loadgen_bench_serve
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/loadgen/bench_serve_e2e.py $<TARGET_FILE:greenpipe>)
set_tests_properties(loadgen_bench_serve PROPERTIES TIMEOUT 600)
