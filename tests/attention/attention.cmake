# Attention tests. Host parts (argument checks, split heuristic, references)
# run everywhere; the kernels are compared with the references on a GPU and
# the binaries exit 77 (skipped) without one.
set(GP_ATTN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
foreach(t kv_device rope_kv decode_attn attn_steps)
  gp_add_test(attn_${t}
              SOURCES ${GP_ATTN_TEST_DIR}/test_${t}.c ${GP_ATTN_TEST_DIR}/attn_test_util.c
              LIBS gp_attention GPU)
endforeach()
