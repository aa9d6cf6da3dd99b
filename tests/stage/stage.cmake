# Tests of the stage vocabulary that need no GPU: the one input check of a batch.
gp_add_test(stage_batch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_batch.c LIBS gp_stage)
