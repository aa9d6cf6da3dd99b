# Tests of kvstore/: keys, the memory store (match, LRU, pins), block files and
# the reload schedule on the simulated backend (support/sim_reload.c).
gp_add_test(kvstore_keys SOURCES kvstore/test_kvstore_keys.c LIBS gp_kvstore)
gp_add_test(kvstore_store SOURCES kvstore/test_kvstore_store.c LIBS gp_kvstore)
gp_add_test(kvstore_files SOURCES kvstore/test_kvstore_files.c LIBS gp_kvstore)
gp_add_test(kvstore_reload SOURCES kvstore/test_kvstore_reload.c support/sim_reload.c LIBS gp_kvstore)
