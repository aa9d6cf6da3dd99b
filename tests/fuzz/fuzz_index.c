/* libFuzzer target for gp_st_index_parse: any bytes as
 * model.safetensors.index.json. An index that parses must list safe shard
 * names, and its tables must agree with each other. */
#include <string.h>

#include "fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gp_st_index *ix = (gp_st_index *)&ix; /* poisoned: must come back NULL on failure */
    gp_clear_error();
    gp_status s = gp_st_index_parse((const char *)data, size, "fuzz/model.safetensors.index.json",
                                    &ix);
    if (s != GP_OK) {
        fuzz_check_failure(s, "gp_st_index_parse");
        FUZZ_REQUIRE(ix == NULL, "gp_st_index_parse failed but left *out set");
        return 0;
    }
    FUZZ_REQUIRE(ix != NULL, "gp_st_index_parse returned OK and no index");
    FUZZ_REQUIRE(memchr(data, '\0', size) == NULL, "accepted JSON text with a NUL byte");
    size_t n = gp_st_index_tensor_count(ix), ns = gp_st_index_shard_count(ix);
    FUZZ_REQUIRE(n > 0 && ns > 0 && ns <= n, "%zu tensors in %zu shards", n, ns);
    for (size_t i = 0; i < ns; i++) {
        const char *sh = gp_st_index_shard(ix, i);
        FUZZ_REQUIRE(sh && sh[0] && !strchr(sh, '/') && !strstr(sh, ".."), "unsafe shard '%s'",
                     sh ? sh : "(null)");
        if (i > 0)
            FUZZ_REQUIRE(strcmp(gp_st_index_shard(ix, i - 1), sh) < 0, "shards not distinct");
    }
    for (size_t i = 0; i < n; i++) {
        const char *shard = NULL, *name = gp_st_index_tensor(ix, i, &shard);
        FUZZ_REQUIRE(name && shard, "entry %zu missing", i);
        FUZZ_REQUIRE(gp_st_index_lookup(ix, name) == shard, "lookup('%s') disagrees", name);
        if (i > 0) {
            const char *prev = gp_st_index_tensor(ix, i - 1, NULL);
            FUZZ_REQUIRE(strcmp(prev, name) < 0, "tensors not sorted or not distinct");
        }
        size_t k = 0; /* inputs are small: a linear scan is fine */
        while (k < ns && strcmp(gp_st_index_shard(ix, k), shard) != 0)
            k++;
        FUZZ_REQUIRE(k < ns, "shard '%s' of '%s' is not in the shard list", shard, name);
    }
    FUZZ_REQUIRE(gp_st_index_tensor(ix, n, NULL) == NULL && gp_st_index_shard(ix, ns) == NULL,
                 "accessors past the end");
    gp_st_index_free(ix);
    return 0;
}
