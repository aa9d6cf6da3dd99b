/* Token rows between a sequence's paged blocks and dense buffers
 * (gp_kv_copy_tokens): scatter and gather against the host oracle on fresh
 * random data, shuffled block tables, runs that start and end inside blocks,
 * the scalar path (rows not a multiple of 8 elements), a bad table entry
 * moving nothing; the argument checks run without a GPU. */
#include <cuda_runtime_api.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn_test_util.h"
#include "gp_kvcache.h"
#include "gp_test.h"

static uint64_t g_seed;

static void test_host_checks(void **state)
{
    (void)state;
    gp_kv_layout l = {.n_layers = 1, .n_kv_heads = 2, .head_dim = 16, .block_size = 4, .n_blocks = 8};
    int32_t t = 0;
    void *p = &t;
    GP_CHECK_FAIL(gp_kv_copy_tokens(&l, p, p, NULL, 0, 1, p, p, GP_KV_TO_CACHE, NULL), GP_ERR_INVALID_ARG, "NULL");
    GP_CHECK_FAIL(gp_kv_copy_tokens(&l, p, p, &t, -1, 1, p, p, GP_KV_TO_CACHE, NULL), GP_ERR_INVALID_ARG,
                  "positions -1 + 1");
    GP_CHECK_FAIL(gp_kv_copy_tokens(&l, p, p, &t, 0, 1, p, p, (gp_kv_copy_dir)2, NULL), GP_ERR_INVALID_ARG,
                  "direction 2");
    l.block_size = 0;
    GP_CHECK_FAIL(gp_kv_copy_tokens(&l, p, p, &t, 0, 1, p, p, GP_KV_TO_CACHE, NULL), GP_ERR_INVALID_ARG,
                  "block_size 0");
}

/* One layout: pools of nb blocks, a sequence of max_blocks blocks in shuffled
 * order; positions [pos0, pos0 + n) both ways, device against the oracle,
 * bit for bit, with untouched pool and buffer bytes compared too. */
static void run_case(int kvh, int hd, int bs, int pos0, int n, int bad_block)
{
    uint64_t s = at_dtype_seed(g_seed ^ (uint64_t)(kvh * 131 + hd * 7 + bs * 3 + pos0 + n));
    const int max_blocks = (pos0 + n + bs - 1) / bs, nb = max_blocks + 3;
    gp_kv_layout l = {.n_layers = 1, .n_kv_heads = kvh, .head_dim = hd, .block_size = bs, .n_blocks = nb};
    const size_t row = (size_t)kvh * hd, pool_elems = (size_t)nb * bs * row, buf_elems = (size_t)n * row;
    int32_t *table = at_malloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++)
        table[i] = i;
    at_shuffle(table, nb, &s);
    if (bad_block >= 0)
        table[bad_block] = nb; /* outside the pool: its positions move nothing */
    uint16_t *hk = at_malloc(pool_elems * 2), *hv = at_malloc(pool_elems * 2);
    uint16_t *bk = at_malloc(buf_elems * 2), *bv = at_malloc(buf_elems * 2);
    uint16_t *gk = at_malloc(pool_elems * 2), *gv = at_malloc(pool_elems * 2);
    uint16_t *gbk = at_malloc(buf_elems * 2), *gbv = at_malloc(buf_elems * 2);
    at_fill16(hk, pool_elems, &s, 2.0f);
    at_fill16(hv, pool_elems, &s, 2.0f);
    at_fill16(bk, buf_elems, &s, 2.0f);
    at_fill16(bv, buf_elems, &s, 2.0f);
    void *dk = at_dev_alloc(pool_elems * 2), *dv = at_dev_alloc(pool_elems * 2);
    void *dbk = at_dev_alloc(buf_elems * 2), *dbv = at_dev_alloc(buf_elems * 2);
    int32_t *dt = at_dev_alloc(sizeof(int32_t) * (size_t)nb);
    at_to_dev(dt, table, sizeof(int32_t) * (size_t)nb);
    /* scatter: buffers into the pools */
    at_to_dev(dk, hk, pool_elems * 2);
    at_to_dev(dv, hv, pool_elems * 2);
    at_to_dev(dbk, bk, buf_elems * 2);
    at_to_dev(dbv, bv, buf_elems * 2);
    at_check(gp_kv_copy_tokens(&l, dk, dv, dt, pos0, n, dbk, dbv, GP_KV_TO_CACHE, NULL), "scatter");
    at_dev_sync();
    gp_kv_copy_tokens_ref(&l, hk, hv, table, pos0, n, bk, bv, GP_KV_TO_CACHE);
    at_to_host(gk, dk, pool_elems * 2);
    at_to_host(gv, dv, pool_elems * 2);
    assert_memory_equal(gk, hk, pool_elems * 2);
    assert_memory_equal(gv, hv, pool_elems * 2);
    /* gather: the pools into poisoned buffers (positions of a bad entry stay poison in both) */
    at_fill16(hk, pool_elems, &s, 2.0f);
    at_fill16(hv, pool_elems, &s, 2.0f);
    at_to_dev(dk, hk, pool_elems * 2);
    at_to_dev(dv, hv, pool_elems * 2);
    at_dev_poison(dbk, buf_elems * 2);
    at_dev_poison(dbv, buf_elems * 2);
    memset(bk, 0xFF, buf_elems * 2);
    memset(bv, 0xFF, buf_elems * 2);
    at_check(gp_kv_copy_tokens(&l, dk, dv, dt, pos0, n, dbk, dbv, GP_KV_FROM_CACHE, NULL), "gather");
    at_dev_sync();
    gp_kv_copy_tokens_ref(&l, hk, hv, table, pos0, n, bk, bv, GP_KV_FROM_CACHE);
    at_to_host(gbk, dbk, buf_elems * 2);
    at_to_host(gbv, dbv, buf_elems * 2);
    assert_memory_equal(gbk, bk, buf_elems * 2);
    assert_memory_equal(gbv, bv, buf_elems * 2);
    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dbk);
    at_dev_free(dbv);
    at_dev_free(dt);
    free(table);
    free(hk);
    free(hv);
    free(bk);
    free(bv);
    free(gk);
    free(gv);
    free(gbk);
    free(gbv);
}

static void test_gpu_copy(void **state)
{
    (void)state;
    run_case(8, 128, 16, 0, 256, -1);   /* whole blocks, the 16-byte path */
    run_case(2, 64, 16, 5, 70, -1);     /* starts and ends inside blocks */
    run_case(3, 6, 4, 3, 13, -1);       /* 18-element rows: the scalar path */
    run_case(2, 16, 8, 0, 40, 2);       /* a bad table entry */
}

int main(void)
{
    g_seed = at_seed("attn_kv_copy");
    const struct CMUnitTest host_tests[] = {cmocka_unit_test(test_host_checks)};
    if (cmocka_run_group_tests_name("kv_copy (host)", host_tests, NULL, NULL))
        return 1;
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest gpu_tests[] = {AT_GPU_TEST(test_gpu_copy)};
    return cmocka_run_group_tests_name("kv_copy (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
