# Tests of the paged KV cache's host side: layout and block tables.
gp_add_test(kv_cache SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_cache.c LIBS gp_kvcache)
