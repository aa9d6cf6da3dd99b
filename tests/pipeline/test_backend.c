/* gp_backend's parameters: what each backend kind accepts, refused with a
 * message before anything is loaded (no GPU needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "gp_engine.h"
#include "gp_kvstore.h"
#include "gp_pipeline.h"
#include "gp_stage.h"
#include "gp_test.h"

static gp_model_source g_src;

static int setup(void **state)
{
    return gp_model_source_resolve("tiny", 3, &g_src) == GP_OK ? 0 : -1;
}

/* prefill_chunk is the CUDA engine's: the CPU backend takes only 0, and a
 * value outside 0..GP_ENGINE_MAX_PREFILL_CHUNK is refused for either kind
 * before any device is looked for. */
static void test_prefill_chunk(void **state)
{
    gp_backend *b = (gp_backend *)&g_src; /* not NULL: a refusal must clear it */
    gp_backend_params p = gp_backend_default_params(GP_BACKEND_CPU);
    assert_int_equal(p.prefill_chunk, 0);
    p.prefill_chunk = 64;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_UNSUPPORTED,
                  "the cpu backend (--backend cpu) with a prefill chunk (prefill_chunk, --prefill-chunk)");
    assert_null(b);
    printf("cpu backend, prefill_chunk 64: %s\n", gp_last_error());
    p.prefill_chunk = -1;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_INVALID_ARG,
                  "prefill_chunk -1: allowed 0 (the engine's default) or 1..");
    gp_backend_params c = gp_backend_default_params(GP_BACKEND_CUDA);
    assert_int_equal(c.prefill_chunk, 0);
    c.prefill_chunk = GP_ENGINE_MAX_PREFILL_CHUNK + 1;
    char want[96];
    snprintf(want, sizeof want, "prefill_chunk %d: allowed 0 (the engine's default) or 1..%d",
             GP_ENGINE_MAX_PREFILL_CHUNK + 1, GP_ENGINE_MAX_PREFILL_CHUNK);
    GP_CHECK_FAIL(gp_backend_open(&g_src, &c, &b), GP_ERR_INVALID_ARG, want);

    /* 0 opens the CPU backend, whose prefill op then serves a batch */
    p.prefill_chunk = 0;
    p.n_seqs = 2;
    p.max_context = 16;
    GP_CHECK_OK(gp_backend_open(&g_src, &p, &b));
    gp_exec x = gp_backend_exec(b);
    const int32_t a[3] = {1, 2, 3}, z[1] = {9};
    gp_prefill_seq seqs[2] = {{.seq = 1, .n = 3, .tokens = a}, {.seq = 0, .n = 1, .tokens = z}};
    int32_t next[2];
    GP_CHECK_OK(x.session->prefill(x.ctx, 2, seqs, next, NULL, NULL));
    gp_backend_close(b);
}

/* Stored prefixes are the cuda engine's: the cpu backend refuses a store
 * (the feature table), a dir or block size without a pool is refused for
 * either kind, all before any device is looked for. */
static void test_kv_store_flags(void **state)
{
    gp_backend *b = (gp_backend *)&g_src;
    gp_backend_params p = gp_backend_default_params(GP_BACKEND_CPU);
    assert_int_equal(p.kv_store_bytes, 0);
    assert_null(p.kv_store_dir);
    assert_int_equal(p.kv_store_block, 0);
    p.kv_store_bytes = 1 << 20;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_UNSUPPORTED,
                  "the cpu backend (--backend cpu) with stored prefixes (kv_store_bytes, --kv-store-size): stored "
                  "prefixes are reloaded into the CUDA engine's paged device cache");
    assert_null(b);
    printf("cpu backend, kv_store_bytes: %s\n", gp_last_error());
    p.kv_store_bytes = 0;
    p.kv_store_dir = "/tmp/blocks";
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_INVALID_ARG, "--kv-store without a store");
    p.kv_store_dir = NULL;
    p.kv_store_block = 16;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_INVALID_ARG, "--kv-store-block without a store");

    gp_backend_params c = gp_backend_default_params(GP_BACKEND_CUDA);
    c.kv_store_dir = "/tmp/blocks";
    GP_CHECK_FAIL(gp_backend_open(&g_src, &c, &b), GP_ERR_INVALID_ARG,
                  "--kv-store without a store: give kv_store_bytes (--kv-store-size)");
    c.kv_store_dir = NULL;
    c.kv_store_block = 32;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &c, &b), GP_ERR_INVALID_ARG, "--kv-store-block without a store");
    c.kv_store_bytes = 1 << 20;
    c.kv_store_block = -1;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &c, &b), GP_ERR_INVALID_ARG, "kv_store_block (--kv-store-block) -1");
    assert_null(b);
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, &g_src.cfg), GP_ERR_INVALID_ARG, "--kv-store-block) -1");

    /* host weights do not name their origin, which the store's identity needs */
    gp_host_weights w;
    GP_CHECK_OK(gp_model_source_load_host(&g_src, &w));
    c.kv_store_block = 0;
    GP_CHECK_FAIL(gp_backend_open_weights(&w, &c, &b), GP_ERR_UNSUPPORTED, "backend over host weights");
    assert_null(b);

    /* the cpu backend has no store to reuse or fill */
    p = gp_backend_default_params(GP_BACKEND_CPU);
    p.max_context = 8;
    GP_CHECK_OK(gp_backend_open_weights(&w, &p, &b));
    const int32_t toks[2] = {1, 2};
    GP_CHECK_FAIL(gp_backend_prefill_prefix(b, 0, 2, toks, NULL, NULL, NULL), GP_ERR_STATE,
                  "stored prefixes are the cuda backend's; this is the cpu backend");
    GP_CHECK_FAIL(gp_backend_prefix_store_seq(b, 0, 2, toks, NULL), GP_ERR_STATE, "the cpu backend");
    gp_kvstore_stats ks;
    GP_CHECK_FAIL(gp_backend_kvstore_stats(b, &ks, false), GP_ERR_STATE, "the cpu backend");
    gp_backend_close(b);
    gp_host_weights_free(&w);
}

/* gp_backend_check_kv_store: the pool against one block of the config's
 * KV (16-bit), the block against the context, before anything loads. */
static void test_kv_store_check(void **state)
{
    const gp_config *cfg = &g_src.cfg;
    gp_backend_params c = gp_backend_default_params(GP_BACKEND_CUDA);
    GP_CHECK_OK(gp_backend_check_kv_store(&c, cfg)); /* off */
    c.max_context = 100;
    c.kv_store_block = 16;
    const uint64_t block = 2ull * (uint64_t)cfg->n_layers * 16u * (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim * 2u;
    c.kv_store_bytes = block;
    GP_CHECK_OK(gp_backend_check_kv_store(&c, cfg));
    c.kv_store_bytes = block - 1;
    char want[160];
    snprintf(want, sizeof want, "--kv-store-size %llu bytes: less than one stored block of 16 tokens of tiny (%llu "
             "bytes", (unsigned long long)(block - 1), (unsigned long long)block);
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, cfg), GP_ERR_INVALID_ARG, want);
    snprintf(want, sizeof want, "allowed: at least %llu bytes", (unsigned long long)block);
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, cfg), GP_ERR_INVALID_ARG, want);
    /* the default block (256 tokens) with a context of 100: nothing could be reused */
    c.kv_store_bytes = 1ull << 30;
    c.kv_store_block = 0;
    snprintf(want, sizeof want, "--kv-store-block %d: no prompt can reuse a whole block: sequences hold at most 100 "
             "tokens", GP_PREFIX_DEFAULT_BLOCK_TOKENS);
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, cfg), GP_ERR_INVALID_ARG, want);
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, cfg), GP_ERR_INVALID_ARG, "allowed: at most 99");
    c.kv_store_block = 99;
    GP_CHECK_OK(gp_backend_check_kv_store(&c, cfg));
    /* beyond the store's block range: its own message */
    c.max_context = 1 << 20;
    c.kv_store_block = 70000;
    GP_CHECK_FAIL(gp_backend_check_kv_store(&c, cfg), GP_ERR_INVALID_ARG, "--kv-store-block 70000: kv store: "
                  "identity.block_size = 70000; allowed: 1..65536");
    GP_CHECK_FAIL(gp_backend_check_kv_store(NULL, cfg), GP_ERR_INVALID_ARG, "must not be NULL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_chunk),
        cmocka_unit_test(test_kv_store_flags),
        cmocka_unit_test(test_kv_store_check),
    };
    return cmocka_run_group_tests_name("backend params", tests, setup, NULL) ? 1 : 0;
}
