# The scheduler end to end on the CPU executor (no GPU): pipelined == sequential.
gp_add_test(pipeline_cpu SOURCES pipeline/test_pipeline_cpu.c support/relay_exec.c LIBS gp_pipeline)
# gp_backend's parameters, refused before anything is loaded (no GPU needed).
gp_add_test(pipeline_backend SOURCES pipeline/test_backend.c LIBS gp_pipeline_cuda)
# The pipeline on the GPU against the sequential engine (skips without a GPU).
gp_add_test(pipeline_cuda SOURCES pipeline/test_pipeline_cuda.c support/relay_exec.c LIBS gp_pipeline_cuda GPU)
# Attention and FFN on two GPUs against the one-GPU engine (skips without two).
gp_add_test(pipeline_afd SOURCES pipeline/test_pipeline_afd.c LIBS gp_pipeline_cuda GPU)
# Tensor-parallel serving's leader and follower on CPU executors in two
# processes (no GPU): the follower repeats the leader's operations exactly.
gp_add_test(pipeline_tp_mirror SOURCES pipeline/test_tp_mirror.c LIBS gp_pipeline_tp)
# The rebalancer over the real runner and the simulated executor (no GPU):
# convergence to the brute-force best pair, hysteresis, no flapping.
gp_add_test(pipeline_rebalance SOURCES pipeline/test_rebalance.c support/sim_exec.c LIBS gp_pipeline)

# The rebalancer's formulas, fit and decision rules, and the simulated executor.
gp_add_test(pipeline_rebalance_units SOURCES pipeline/test_rebalance_units.c support/sim_exec.c LIBS gp_pipeline)
# The prefill/decode latency model (fit, profile file) and the planner's rule (no GPU).
gp_add_test(pipeline_pd_model SOURCES pipeline/test_pd_model.c LIBS gp_pipeline)

# Everything below is ThreadSanitizer only, left out of a GP_SANITIZE build
# (one sanitizer runtime per process); the normal build runs it.
if(GP_SANITIZE)
  return()
endif()

# The scheduler test and the rebalancer test (the real runner threads over the
# simulated executor) under ThreadSanitizer: the runner, the rings and the
# reference's stages compiled in instrumented once, as an object library (the
# ring with the TSan mapping of queues/gp_ring_ck.h), so a missing
# happens-before between the producer, the consumer and the stage threads
# fails CI. The rebalancer's unit test runs no threads and is not repeated.
get_target_property(_gp_p_src gp_pipeline SOURCES)
get_target_property(_gp_p_dir gp_pipeline SOURCE_DIR)
list(TRANSFORM _gp_p_src PREPEND "${_gp_p_dir}/")
get_target_property(_gp_pq_src gp_queues SOURCES)
get_target_property(_gp_pq_dir gp_queues SOURCE_DIR)
list(TRANSFORM _gp_pq_src PREPEND "${_gp_pq_dir}/")
get_target_property(_gp_r_src gp_reference SOURCES)
get_target_property(_gp_r_dir gp_reference SOURCE_DIR)
list(TRANSFORM _gp_r_src PREPEND "${_gp_r_dir}/")
add_library(gp_pipeline_tsan_objs OBJECT ${_gp_p_src} ${_gp_pq_src} ${_gp_r_src})
target_include_directories(gp_pipeline_tsan_objs PUBLIC ${_gp_p_dir} ${_gp_pq_dir} ${_gp_r_dir})
target_compile_definitions(gp_pipeline_tsan_objs PUBLIC CK_USE_CC_BUILTINS=1 GP_RING_TSAN=1)
target_compile_options(gp_pipeline_tsan_objs PUBLIC -fsanitize=thread -g -O1)
target_link_options(gp_pipeline_tsan_objs INTERFACE -fsanitize=thread)
target_link_libraries(gp_pipeline_tsan_objs PUBLIC gp_model gp_kvcache gp_stage gp_common gp_dep_ck gp_dep_jansson gp_dep_cmocka
                      Threads::Threads m)
# gp_pipeline_tsan_test(NAME SOURCE): NAME under TSan; the first report fails it (exit 66).
function(gp_pipeline_tsan_test name src)
  add_executable(${name}_bin ${src} ${ARGN})
  target_link_libraries(${name}_bin PRIVATE gp_pipeline_tsan_objs gp_test_support)
  add_test(NAME ${name} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/queues/tsan_run.sh $<TARGET_FILE:${name}_bin>)
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS tsan
                       ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 exitcode=66 second_deadlock_stack=1")
  add_dependencies(gp_cpu_tests ${name}_bin)
endfunction()
gp_pipeline_tsan_test(pipeline_cpu_tsan pipeline/test_pipeline_cpu.c support/relay_exec.c)
gp_pipeline_tsan_test(pipeline_rebalance_tsan pipeline/test_rebalance.c support/sim_exec.c)
