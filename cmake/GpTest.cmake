# gp_add_test(NAME SOURCES a.c b.c LIBS x y [GPU]): a cmocka test under CTest.
# GPU tests exit 77 when no GPU is usable; CTest reports them as skipped.
function(gp_add_test name)
  cmake_parse_arguments(T "GPU" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} gp_dep_cmocka)
  target_compile_definitions(${name} PRIVATE GP_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
  if(T_GPU)
    set_tests_properties(${name} PROPERTIES LABELS gpu)
  endif()
endfunction()
