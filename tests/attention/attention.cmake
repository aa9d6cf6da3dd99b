# Attention tests. Host parts (argument checks, split heuristic, references)
# run everywhere; the kernels are compared with the references on a GPU and
# the binaries exit 77 (skipped) without one.
set(GP_ATTN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
foreach(t kv_device kv_copy rope_kv decode_attn attn_steps prefill_attn)
  gp_add_test(attn_${t}
              SOURCES ${GP_ATTN_TEST_DIR}/test_${t}.c ${GP_ATTN_TEST_DIR}/attn_test_util.c
              LIBS gp_attention gp_weights GPU)
endforeach()
# The kernel choice, its names and the checks of the params that steer it:
# host logic only, no GPU needed.
gp_add_test(attn_choose SOURCES ${GP_ATTN_TEST_DIR}/test_attn_choose.c LIBS gp_attention)

# The same kernel checks with the choice forced (gp_decode_attn_params
# kernel, set by --kernel): the automatic rule runs every head_dim 128 shape
# with groups <= 8 on the tensor-core kernels and the others on the
# CUDA-core kernel, pipelined only when split, so each kernel is compared
# with the reference here on every call it serves. The streaming kernel,
# which the automatic rule takes only for batches that fill the SMs many
# times over, also runs without its L2 evict_first policy and with its warps
# capped at 2 per SM (a smaller grid, more items per warp).
# Each entry: the test-name suffix, then the arguments, comma-separated.
set(GP_ATTN_VARIANTS
    "cudacore,--kernel,cudacore"
    "cudacore_pipe,--kernel,cudacore_pipe"
    "mma,--kernel,mma"
    "stream,--kernel,stream"
    "stream_no_evict,--kernel,stream,--no-kv-evict"
    "stream_warps2,--kernel,stream,--warps-cap,2")
foreach(t decode_attn attn_steps)
  foreach(v ${GP_ATTN_VARIANTS})
    string(REPLACE "," ";" parts "${v}")
    list(POP_FRONT parts name)
    add_test(NAME attn_${t}_${name} COMMAND attn_${t} ${parts})
    set_tests_properties(attn_${t}_${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu)
  endforeach()
endforeach()
