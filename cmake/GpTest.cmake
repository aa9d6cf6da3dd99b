# gp_add_test(NAME SOURCES a.c b.c LIBS x y [GPU]): a cmocka test under CTest.
# GPU tests exit 77 when no GPU is usable; CTest reports them as skipped.
# gp_cpu_tests builds the executables of the tests that need no GPU (those of
# gp_add_test, and others that add themselves), so .ci/sanitizers.sh can skip
# the GPU-only ones; it builds what tests run through add_test (greenpipe) too.
add_custom_target(gp_cpu_tests)
function(gp_add_test name)
  cmake_parse_arguments(T "GPU" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} gp_test_support gp_dep_cmocka)
  target_compile_definitions(${name} PRIVATE GP_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
  if(T_GPU)
    set_tests_properties(${name} PROPERTIES LABELS gpu)
  else()
    add_dependencies(gp_cpu_tests ${name})
  endif()
endfunction()
