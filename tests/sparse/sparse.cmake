# Activation sparsity (sparse/): the sparse-input GEMV and the transpose
# against their CPU references (GPU; the argument checks run without one).
gp_add_test(sparse_gemv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sparse_gemv.c
            ${CMAKE_CURRENT_LIST_DIR}/../engine/gpu_test_util.c LIBS gp_sparse_kernels gp_ffn_kernels gp_weights GPU)
target_include_directories(sparse_gemv PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../engine)
# The calibration file (round trip, every refusal of the loader, the model
# check) and the calibration on the CPU reference (no GPU).
gp_add_test(sparsity_file SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sparsity_file.c LIBS gp_sparse_ref gp_dep_jansson)
gp_add_test(sparsity_calibrate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_calibrate.c LIBS gp_sparse_ref)
target_include_directories(sparsity_calibrate PRIVATE ${PROJECT_SOURCE_DIR}/sparse) # sparse_impl.h
# The hot-set tracker (capacity, choice, decayed frequencies, reload plans)
# and the cold-neuron CPU FFN against the CPU reference (no GPU).
gp_add_test(sparse_hotset SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hotset.c LIBS gp_sparse_ref)
gp_add_test(sparse_cold_ffn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cold_ffn.c LIBS gp_sparse_ref)
# The per-step choice between the sparse kernel and the dense GEMM (no GPU).
gp_add_test(sparse_choose SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sparse_choose.c LIBS gp_sparse_ref)
