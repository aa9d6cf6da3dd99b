/* The key chain covers the prefix and the identity, and the payload layout
 * is layer-major with contiguous per-layer K and V pieces. */
#include "kvs_test_util.h"

static void test_chain_prefix(void **state)
{
    gp_kvstore_identity id = kvs_test_id();
    int32_t a[14], b[14];
    for (int i = 0; i < 14; i++)
        a[i] = b[i] = 1000 + i;
    uint64_t ka[3], kb[3];
    int n = -1;
    GP_CHECK_OK(gp_kvstore_chain(&id, a, 14, ka, &n));
    assert_int_equal(n, 3); /* 14 tokens: 3 whole blocks, the last 2 have no key */
    GP_CHECK_OK(gp_kvstore_chain(&id, b, 12, kb, &n));
    assert_int_equal(n, 3);
    assert_memory_equal(ka, kb, sizeof ka);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < i; j++)
            assert_true(ka[i] != ka[j]);

    /* A change in block 1 changes keys 1 and 2, not 0. */
    b[5] = 7;
    GP_CHECK_OK(gp_kvstore_chain(&id, b, 12, kb, &n));
    assert_true(kb[0] == ka[0]);
    assert_true(kb[1] != ka[1]);
    assert_true(kb[2] != ka[2]);

    /* Fewer tokens than a block: no keys, keys may be NULL. */
    GP_CHECK_OK(gp_kvstore_chain(&id, a, 3, NULL, &n));
    assert_int_equal(n, 0);
}

static void test_chain_identity(void **state)
{
    int32_t t[16];
    for (int i = 0; i < 16; i++)
        t[i] = i;
    gp_kvstore_identity id = kvs_test_id();
    uint64_t k0[4], k1[4];
    GP_CHECK_OK(gp_kvstore_chain(&id, t, 16, k0, NULL));

    gp_kvstore_identity other = id;
    other.model = "tiny-test2";
    GP_CHECK_OK(gp_kvstore_chain(&other, t, 16, k1, NULL));
    assert_true(k1[0] != k0[0]);

    other = id;
    other.block_size = 8;
    GP_CHECK_OK(gp_kvstore_chain(&other, t, 16, k1, NULL));
    assert_true(k1[0] != k0[0] && k1[0] != k0[1] && k1[1] != k0[3]);

    other = id;
    other.dtype_bytes = 4;
    GP_CHECK_OK(gp_kvstore_chain(&other, t, 16, k1, NULL));
    assert_true(k1[0] != k0[0]);
    assert_true(gp_kvstore_seed(&other) != gp_kvstore_seed(&id));
}

static void test_chain_refused(void **state)
{
    gp_kvstore_identity id = kvs_test_id();
    int32_t t[4] = {0};
    uint64_t k[1];
    GP_CHECK_FAIL(gp_kvstore_chain(&id, t, -1, k, NULL), GP_ERR_INVALID_ARG, "n_tokens = -1");
    GP_CHECK_FAIL(gp_kvstore_chain(&id, t, 4, NULL, NULL), GP_ERR_INVALID_ARG, "keys is NULL");
    id.block_size = 0;
    GP_CHECK_FAIL(gp_kvstore_chain(&id, t, 4, k, NULL), GP_ERR_INVALID_ARG, "identity.block_size = 0");
    id = kvs_test_id();
    id.model = "";
    GP_CHECK_FAIL(gp_kvstore_chain(&id, t, 4, k, NULL), GP_ERR_INVALID_ARG, "identity.model is empty");
    id = kvs_test_id();
    id.dtype_bytes = 3;
    GP_CHECK_FAIL(gp_kvstore_chain(&id, t, 4, k, NULL), GP_ERR_INVALID_ARG, "dtype_bytes = 3; allowed: 1, 2 or 4");
}

static void test_layout(void **state)
{
    gp_kvstore_identity id = kvs_test_id();
    uint64_t bytes, off, n;
    GP_CHECK_OK(gp_kvstore_block_bytes(&id, &bytes));
    assert_int_equal(bytes, KVS_BLOCK); /* 2 * 2 layers * 4 tokens * 2 heads * 4 dims * 2 bytes */
    uint64_t next = 0;
    for (int l = 0; l < id.n_layers; l++)
        for (int p = GP_KVSTORE_K; p <= GP_KVSTORE_V; p++) {
            GP_CHECK_OK(gp_kvstore_part_range(&id, l, (gp_kvstore_part)p, &off, &n));
            assert_int_equal(off, next); /* layer 0 K, layer 0 V, layer 1 K, ... */
            assert_int_equal(n, 4 * 2 * 4 * 2);
            next = off + n;
        }
    assert_int_equal(next, bytes);
    GP_CHECK_FAIL(gp_kvstore_part_range(&id, 2, GP_KVSTORE_K, &off, &n), GP_ERR_INVALID_ARG, "layer 2; allowed: 0..1");
    GP_CHECK_FAIL(gp_kvstore_part_range(&id, 0, (gp_kvstore_part)2, &off, &n), GP_ERR_INVALID_ARG, "part 2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_prefix),
        cmocka_unit_test(test_chain_identity),
        cmocka_unit_test(test_chain_refused),
        cmocka_unit_test(test_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
