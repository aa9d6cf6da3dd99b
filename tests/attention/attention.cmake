# Attention tests. Host parts (argument checks, split heuristic, references)
# run everywhere; the kernels are compared with the references on a GPU and
# the binaries exit 77 (skipped) without one.
set(GP_ATTN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
foreach(t kv_device rope_kv decode_attn attn_steps)
  gp_add_test(attn_${t}
              SOURCES ${GP_ATTN_TEST_DIR}/test_${t}.c ${GP_ATTN_TEST_DIR}/attn_test_util.c
              LIBS gp_attention GPU)
endforeach()
# The same kernel checks with every shape on the CUDA-core kernel: head_dim
# 128 with groups <= 8 otherwise runs on the tensor-core kernel
# (attention/decode_attn_mma.cu), so both are compared with the reference.
foreach(t decode_attn attn_steps)
  add_test(NAME attn_${t}_cudacore COMMAND attn_${t})
  set_tests_properties(attn_${t}_cudacore PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu
                       ENVIRONMENT GP_ATTN_MMA=0)
endforeach()
# And the tensor-core kernel with deeper per-warp rings ($GP_ATTN_MMA_STAGES;
# the plain tests run the default).
foreach(t decode_attn attn_steps)
  foreach(s 3 4)
    add_test(NAME attn_${t}_stages${s} COMMAND attn_${t})
    set_tests_properties(attn_${t}_stages${s} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu
                         ENVIRONMENT GP_ATTN_MMA_STAGES=${s})
  endforeach()
endforeach()
# And the streaming kernel (attention/decode_attn_stream.cu), which the
# automatic choice takes only for batches that fill the SMs many times over:
# here on every unsplit call it serves, at each ring depth.
foreach(t decode_attn attn_steps)
  foreach(s 2 3 4)
    add_test(NAME attn_${t}_stream${s} COMMAND attn_${t})
    set_tests_properties(attn_${t}_stream${s} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu
                         ENVIRONMENT "GP_ATTN_STREAM=1;GP_ATTN_STREAM_STAGES=${s}")
  endforeach()
endforeach()
# And the streaming kernel's K/V copies without the default evict_first
# L2 policy ($GP_ATTN_KV_EVICT=0), and with its warps capped at 2 per SM
# ($GP_ATTN_STREAM_WARPS: a smaller grid, more items per warp).
foreach(t decode_attn attn_steps)
  add_test(NAME attn_${t}_stream_evict0 COMMAND attn_${t})
  set_tests_properties(attn_${t}_stream_evict0 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu
                       ENVIRONMENT "GP_ATTN_STREAM=1;GP_ATTN_KV_EVICT=0")
  add_test(NAME attn_${t}_stream_warps2 COMMAND attn_${t})
  set_tests_properties(attn_${t}_stream_warps2 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS gpu
                       ENVIRONMENT "GP_ATTN_STREAM=1;GP_ATTN_STREAM_WARPS=2")
endforeach()
