# The scheduler end to end on the CPU executor (no GPU): pipelined == sequential.
gp_add_test(pipeline_cpu SOURCES pipeline/test_pipeline_cpu.c LIBS gp_pipeline)
# The pipeline on the GPU against the sequential engine (skips without a GPU).
gp_add_test(pipeline_cuda SOURCES pipeline/test_pipeline_cuda.c LIBS gp_pipeline_cuda GPU)
# The rebalancer over the real runner and the simulated executor (no GPU):
# convergence to the brute-force best pair, hysteresis, no flapping.
gp_add_test(pipeline_rebalance SOURCES pipeline/test_rebalance.c LIBS gp_pipeline)

# The same scheduler test under ThreadSanitizer: the runner, the rings and the
# reference's stages compiled in instrumented (the ring with the TSan mapping
# of queues/gp_ring_ck.h), so a missing happens-before between the producer,
# the consumer and the stage threads fails CI.
get_target_property(_gp_p_src gp_pipeline SOURCES)
get_target_property(_gp_p_dir gp_pipeline SOURCE_DIR)
list(TRANSFORM _gp_p_src PREPEND "${_gp_p_dir}/")
get_target_property(_gp_pq_src gp_queues SOURCES)
get_target_property(_gp_pq_dir gp_queues SOURCE_DIR)
list(TRANSFORM _gp_pq_src PREPEND "${_gp_pq_dir}/")
get_target_property(_gp_m_dir gp_model SOURCE_DIR)
add_executable(pipeline_cpu_tsan_bin pipeline/test_pipeline_cpu.c ${_gp_p_src} ${_gp_pq_src}
               ${_gp_m_dir}/reference.c ${_gp_m_dir}/ref_pool.c ${_gp_m_dir}/ref_ops.c)
target_include_directories(pipeline_cpu_tsan_bin PRIVATE ${_gp_p_dir} ${_gp_pq_dir} ${_gp_m_dir})
target_compile_definitions(pipeline_cpu_tsan_bin PRIVATE CK_USE_CC_BUILTINS=1 GP_RING_TSAN=1)
target_compile_options(pipeline_cpu_tsan_bin PRIVATE -fsanitize=thread -g -O1)
target_link_options(pipeline_cpu_tsan_bin PRIVATE -fsanitize=thread)
target_link_libraries(pipeline_cpu_tsan_bin PRIVATE gp_model gp_common gp_dep_ck gp_dep_jansson gp_dep_cmocka
                      Threads::Threads m)
add_test(NAME pipeline_cpu_tsan COMMAND sh ${PROJECT_SOURCE_DIR}/tests/queues/tsan_run.sh
                                        $<TARGET_FILE:pipeline_cpu_tsan_bin>)
set_tests_properties(pipeline_cpu_tsan PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 exitcode=66 second_deadlock_stack=1")
# The rebalancer's formulas, fit and decision rules, and the simulated executor.
gp_add_test(pipeline_rebalance_units SOURCES pipeline/test_rebalance_units.c LIBS gp_pipeline)
