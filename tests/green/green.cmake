# Tests of green/ (split planning on the CPU; partitions on the GPU).
set(GP_GREEN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})

# The planner with the H100's numbers and other device shapes (no GPU).
gp_add_test(green_plan SOURCES ${GP_GREEN_TEST_DIR}/test_split_plan.c LIBS gp_green_plan)

# Partitions observed through %smid: disjoint, of the sizes reported; the
# forced fallback. Exits 77 (skipped) without a GPU.
gp_add_test(green_smid SOURCES ${GP_GREEN_TEST_DIR}/test_green_smid.cu
            LIBS gp_green gp_weights GPU)
