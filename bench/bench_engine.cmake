# Benchmarks of the engine and of co-running on partitions: programs that
# print timings, not tests (nothing is asserted).

# Decode-step benchmark of the sequential engine.
add_executable(gp_bench_decode ${CMAKE_CURRENT_LIST_DIR}/bench_decode.c ${CMAKE_CURRENT_LIST_DIR}/bench_workloads.c)
target_link_libraries(gp_bench_decode PRIVATE gp_engine gp_tools)

# Decode with the CPU-assisted FFN beside dense and all-GPU sparse.
add_executable(gp_bench_cpu_ffn ${CMAKE_CURRENT_LIST_DIR}/bench_cpu_ffn.c)
target_link_libraries(gp_bench_cpu_ffn PRIVATE gp_engine gp_tools)

# Timing of the Llama-3-8B GEMMs through gp_gemm and the skinny kernel.
add_executable(gp_bench_gemm ${CMAKE_CURRENT_LIST_DIR}/bench_gemm.c)
target_link_libraries(gp_bench_gemm PRIVATE gp_engine_kernels)

# The sparse-input GEMV (sparse/) against the dense GEMM, per batch and sparsity.
add_executable(gp_bench_sparse bench_sparse.c)
target_link_libraries(gp_bench_sparse PRIVATE gp_sparse_kernels gp_engine_kernels gp_tools)

# Co-running stand-ins: a pure HBM reader on A beside the F side's GEMMs,
# each alone and together, on green-context splits (docs/ARCHITECTURE.md §6).
add_executable(gp_bench_corun ${CMAKE_CURRENT_LIST_DIR}/bench_corun.cu)
target_link_libraries(gp_bench_corun PRIVATE gp_green gp_engine_kernels)

# Prefill benchmark: B prompts x T tokens through the batched, chunked prefill.
add_executable(gp_bench_prefill ${CMAKE_CURRENT_LIST_DIR}/bench_prefill.c ${CMAKE_CURRENT_LIST_DIR}/bench_workloads.c)
target_link_libraries(gp_bench_prefill PRIVATE gp_engine)

# Time to first token with a stored prefix: reload + suffix
# prefill against prefilling the whole prompt.
add_executable(gp_bench_prefix ${CMAKE_CURRENT_LIST_DIR}/bench_prefix.c)
target_link_libraries(gp_bench_prefix PRIVATE gp_engine gp_tools gp_dep_jansson)

# Decode with an offloaded KV cache beside the resident engine.
add_executable(gp_bench_kvoff ${CMAKE_CURRENT_LIST_DIR}/bench_kvoff.c)
target_link_libraries(gp_bench_kvoff PRIVATE gp_engine gp_tools)

# Tensor parallelism over N GPUs (one process each, NCCL) beside the one-GPU
# engine, on synthetic shards.
add_executable(gp_bench_tp ${CMAKE_CURRENT_LIST_DIR}/bench_tp.c ${CMAKE_CURRENT_LIST_DIR}/bench_workloads.c
               ${CMAKE_CURRENT_LIST_DIR}/bench_one_gpu.c)
target_link_libraries(gp_bench_tp PRIVATE gp_engine gp_comm gp_tools CUDA::cudart)

# Attention and FFN on two GPUs of one process (the AFD executor) beside the
# one-GPU engine, on synthetic weights split by group.
add_executable(gp_bench_afd ${CMAKE_CURRENT_LIST_DIR}/bench_afd.c ${CMAKE_CURRENT_LIST_DIR}/bench_workloads.c
               ${CMAKE_CURRENT_LIST_DIR}/bench_one_gpu.c)
target_link_libraries(gp_bench_afd PRIVATE gp_pipeline_cuda gp_tools CUDA::cudart)

# The streaming-read ceiling of one kernel call at each projection's weight
# bytes, the bound the decode GEMMs are set against call by call.
add_executable(gp_bench_read ${CMAKE_CURRENT_LIST_DIR}/bench_read.cu)
target_link_libraries(gp_bench_read PRIVATE gp_model gp_tools)
