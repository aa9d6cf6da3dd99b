# Tests of the common library that need no GPU.
gp_add_test(common_env SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_env.c LIBS gp_common)
gp_add_test(common_half SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_half.c LIBS gp_common m)
gp_add_test(common_read_file SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_read_file.c LIBS gp_common)
# GP_PDL's refusal (common/device_pdl.c reads it once per process).
gp_add_test(common_pdl_env SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pdl_env.c LIBS gp_common_cuda)
gp_add_test(common_progress SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_progress.c LIBS gp_common)
