# Tests of queues/ (ring validation, stress, TSan build).
gp_add_test(queues_ring_params SOURCES queues/test_ring_params.c LIBS gp_queues)
gp_add_test(queues_ring_fifo SOURCES queues/test_ring_fifo.c LIBS gp_queues)
gp_add_test(queues_ring_block SOURCES queues/test_ring_block.c LIBS gp_queues)
gp_add_test(queues_ring_stress SOURCES queues/test_ring_stress.c LIBS gp_queues)
# Ten million payloads with random delays on both sides, closes and reopens.
gp_add_test(queues_ring_soak SOURCES queues/test_ring_soak.c LIBS gp_queues)

# Everything below is ThreadSanitizer only, left out of a GP_SANITIZE build
# (one sanitizer runtime per process); the normal build runs it. ASan/UBSan
# look for memory errors, not races: 2 million soak payloads do there.
if(GP_SANITIZE)
  set_tests_properties(queues_ring_soak PROPERTIES ENVIRONMENT GP_SOAK_TOTAL=2000000)
  return()
endif()

# The FIFO, blocking and stress tests again under ThreadSanitizer, with the ring
# sources compiled into the executable (instrumented) instead of gp_queues.
# CK_USE_CC_BUILTINS=1 drops ck's x86-64 inline asm for gcc builtins, and
# GP_RING_TSAN routes ck_ring's counter loads/stores to __atomic (see
# queues/gp_ring_ck.h for why both are needed).
get_target_property(_gp_q_src gp_queues SOURCES)
get_target_property(_gp_q_dir gp_queues SOURCE_DIR)
list(TRANSFORM _gp_q_src PREPEND "${_gp_q_dir}/")
add_executable(queues_ring_tsan_bin queues/test_ring_tsan_main.c queues/test_ring_fifo.c
                                    queues/test_ring_block.c queues/test_ring_stress.c ${_gp_q_src})
target_include_directories(queues_ring_tsan_bin PRIVATE ${_gp_q_dir})
target_compile_definitions(queues_ring_tsan_bin PRIVATE CK_USE_CC_BUILTINS=1 GP_RING_TSAN=1 GP_QTEST_NO_MAIN=1)
target_compile_options(queues_ring_tsan_bin PRIVATE -fsanitize=thread -g -O1)
target_link_options(queues_ring_tsan_bin PRIVATE -fsanitize=thread)
target_link_libraries(queues_ring_tsan_bin PRIVATE gp_common gp_dep_ck gp_dep_cmocka Threads::Threads)
# halt_on_error: the first report fails the run (exit 66) instead of a warning.
add_test(NAME queues_ring_tsan COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/queues/tsan_run.sh
                                       $<TARGET_FILE:queues_ring_tsan_bin>)
set_tests_properties(queues_ring_tsan PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS tsan
                     ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 exitcode=66 second_deadlock_stack=1")

# The soak test under TSan with 2 million payloads (about 8 s here: the random
# delays, not TSan, set the pace), the ring compiled as above.
add_executable(queues_ring_soak_tsan_bin queues/test_ring_soak.c ${_gp_q_src})
target_include_directories(queues_ring_soak_tsan_bin PRIVATE ${_gp_q_dir})
target_compile_definitions(queues_ring_soak_tsan_bin PRIVATE CK_USE_CC_BUILTINS=1 GP_RING_TSAN=1
                           GP_QTEST_SOAK_TOTAL=2000000ull)
target_compile_options(queues_ring_soak_tsan_bin PRIVATE -fsanitize=thread -g -O1)
target_link_options(queues_ring_soak_tsan_bin PRIVATE -fsanitize=thread)
target_link_libraries(queues_ring_soak_tsan_bin PRIVATE gp_common gp_dep_ck gp_dep_cmocka Threads::Threads)
add_test(NAME queues_ring_soak_tsan COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/queues/tsan_run.sh
                                            $<TARGET_FILE:queues_ring_soak_tsan_bin>)
set_tests_properties(queues_ring_soak_tsan PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS tsan
                     ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 exitcode=66 second_deadlock_stack=1")
add_dependencies(gp_cpu_tests queues_ring_tsan_bin queues_ring_soak_tsan_bin)
