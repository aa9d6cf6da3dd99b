# Activation sparsity (sparse/): the sparse-input GEMV and the transpose
# against their CPU references (GPU; the argument checks run without one).
gp_add_test(sparse_gemv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sparse_gemv.c
            ${CMAKE_CURRENT_LIST_DIR}/../engine/gpu_test_util.c LIBS gp_sparse_kernels gp_model_cuda GPU)
target_include_directories(sparse_gemv PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../engine)
