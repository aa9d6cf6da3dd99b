# The KV memory's hook list: a resident memory runs none, providers run before
# the memory's own hook in attach order (no GPU).
gp_add_test(engine_kv_memory SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_memory.c LIBS gp_engine)
target_include_directories(engine_kv_memory PRIVATE ${PROJECT_SOURCE_DIR}/engine)
