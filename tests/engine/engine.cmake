# Engine kernels (engine/, ffn/) against their CPU references. GPU tests: each
# first checks its argument validation on the host, then exits 77 (skipped)
# when no GPU is usable.
set(GP_ENG_TESTS ${CMAKE_CURRENT_LIST_DIR})
foreach(t gemm rmsnorm embed argmax swiglu graph_capture vocab_gather)
  gp_add_test(engine_${t}
              SOURCES ${GP_ENG_TESTS}/test_${t}.c ${GP_ENG_TESTS}/gpu_test_util.c
              LIBS gp_engine_kernels GPU)
endforeach()

# The feature table: every rule, every pair, the combinations that must
# work and the CUDA-graph decision; needs no GPU.
gp_add_test(engine_features SOURCES ${GP_ENG_TESTS}/test_features.c LIBS gp_engine_features)

# The device bytes of the sparse projections' transposed copies (what
# gp_engine_set_sparsity weighs beside resident or streamed weights); needs
# no GPU.
gp_add_test(engine_sparse_bytes SOURCES ${GP_ENG_TESTS}/test_sparse_bytes.c LIBS gp_engine)

# The whole engine against HF's logits and the CPU reference (GPU).
gp_add_test(engine_model SOURCES ${GP_ENG_TESTS}/test_engine_model.c ${GP_ENG_TESTS}/../model/hf_case.c
            LIBS gp_pipeline_cuda gp_dep_jansson GPU)
target_include_directories(engine_model PRIVATE ${GP_ENG_TESTS}/../model)

# CUDA failures -> statuses (sticky faults, out of memory) and the fault
# hooks, in forked children; needs no GPU.
gp_add_test(engine_device_errors
            SOURCES ${GP_ENG_TESTS}/test_device_errors.c ${GP_ENG_TESTS}/child_util.c
            LIBS gp_engine_kernels gp_green)

# Out of device memory at every allocation of a whole setup (fault injection,
# one child per allocation), and real exhaustion (GPU).
gp_add_test(engine_oom SOURCES ${GP_ENG_TESTS}/test_oom.c ${GP_ENG_TESTS}/child_util.c
            LIBS gp_pipeline_cuda GPU)
# A real sticky error (GP_FAULT_TRAP) in the engine, cuBLASLt and the
# pipeline: prompt GP_ERR_DEVICE_FAULT, later calls fail fast, no hang (GPU).
gp_add_test(engine_device_fault SOURCES ${GP_ENG_TESTS}/test_device_fault.c ${GP_ENG_TESTS}/child_util.c
            LIBS gp_pipeline_cuda GPU)

# Batched, chunked prefill against the CPU reference, decode-only prefill and
# itself (continued prompts, prompt logits), bad input (GPU).
gp_add_test(engine_prefill SOURCES ${GP_ENG_TESTS}/test_prefill.c ${GP_ENG_TESTS}/gpu_test_util.c
            LIBS gp_pipeline_cuda GPU)

# The host side of the device weights' dtype conversion (round to nearest
# even, fp16 range refusal) and --dtype auto; needs no GPU.
gp_add_test(model_weights_convert SOURCES ${GP_ENG_TESTS}/test_weights_convert.c LIBS gp_model)

# Weights beyond VRAM: the engine over streamed weights at budgets
# forcing evictions, bitwise against resident weights (GPU).
gp_add_test(engine_streamed SOURCES ${GP_ENG_TESTS}/test_engine_streamed.c LIBS gp_pipeline_cuda GPU)

# The one engine assembly: argument checks and the feature table's refusals
# on the host, then (GPU) the graph decision and sparse projections on
# streamed weights.
gp_add_test(engine_assemble SOURCES ${GP_ENG_TESTS}/test_assemble.c LIBS gp_pipeline_cuda GPU)

# Activation sparsity in the engine (GPU): thresholds 0 against dense,
# masking against the CPU reference, statistics, refusals.
gp_add_test(engine_sparse SOURCES ${GP_ENG_TESTS}/test_engine_sparse.c ${GP_ENG_TESTS}/engine_test_util.c
            LIBS gp_pipeline_cuda GPU)

# Stored prefixes (GPU): a reused prefix bitwise against the same
# prompt prefilled in two calls, files, eviction, refusals.
gp_add_test(engine_prefix SOURCES ${GP_ENG_TESTS}/test_engine_prefix.c ${GP_ENG_TESTS}/gpu_test_util.c
            LIBS gp_pipeline_cuda GPU)

# Offloaded KV cache (GPU): bitwise against the resident engine
# through chunked prefill and decode, the budget's split, refusals.
gp_add_test(engine_kvoff SOURCES ${GP_ENG_TESTS}/test_engine_kvoff.c ${GP_ENG_TESTS}/gpu_test_util.c
            LIBS gp_pipeline_cuda GPU)

# The host side of the CPU-assisted FFN: the mask and add the
# kernels are held to, the step activity the hot-set tracker sees (no GPU).
gp_add_test(engine_cpu_ffn_ref SOURCES ${GP_ENG_TESTS}/test_cpu_ffn_ref.c LIBS gp_engine_ref)

# The CPU-assisted FFN in the engine (GPU): its kernels against
# their references; all hot against the sparse engine, half cold at
# thresholds 0 against dense, a quarter hot (with reloads every step)
# against the sparse engine; statistics, refusals.
gp_add_test(engine_cpu_ffn SOURCES ${GP_ENG_TESTS}/test_engine_cpu_ffn.c ${GP_ENG_TESTS}/engine_test_util.c
            LIBS gp_pipeline_cuda GPU)

# The host tier behind a prefix cache (GPU): blocks offloaded and loaded
# back, reloaded with a mixed batch, bitwise against the same batch
# computed; waiting loads, resets, pins, refusals.
gp_add_test(engine_host_tier SOURCES ${GP_ENG_TESTS}/test_engine_host_tier.c ${GP_ENG_TESTS}/gpu_test_util.c
            LIBS gp_pipeline_cuda GPU)

# Prefill and decode lanes (GPU): a prefill batch on one partition beside
# decode steps on the other gives bitwise the batches run in order.
gp_add_test(engine_pd SOURCES ${GP_ENG_TESTS}/test_engine_pd.c ${GP_ENG_TESTS}/gpu_test_util.c
            LIBS gp_pipeline_cuda GPU)
# Tensor parallelism (GPU, two GPUs): shards on two ranks, their o and down
# summed through NCCL, against the whole engine; skips without NCCL or two GPUs.
gp_add_test(engine_tp SOURCES ${GP_ENG_TESTS}/test_engine_tp.c LIBS gp_pipeline_cuda gp_comm CUDA::cudart GPU)
