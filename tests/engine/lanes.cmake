# Lanes over one model state and mixed batches (GPU): a prefill on a second
# lane beside decode steps on the default one, from two host threads, bitwise
# one lane in order; a mixed batch against separate prefill and decode calls;
# refusals of bad lanes and batches.
gp_add_test(engine_lanes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_lanes.c
            ${CMAKE_CURRENT_LIST_DIR}/gpu_test_util.c LIBS gp_pipeline_cuda GPU)
