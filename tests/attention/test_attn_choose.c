/* The decode-attention kernel choice (gp_decode_attn_choose), the kernel
 * names and the checks of the params that steer the choice: host logic
 * only, so this runs without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gp_attention.h"
#include "gp_test.h"

/* Llama-3-8B's attention (32 heads over 8 KV heads, head_dim 128) on the
 * whole H100 (132 SMs), the streaming kernel fitting 12 warps per SM. */
static gp_attn_call llama_call(int B, int n_splits)
{
    gp_attn_call c = { .B = B, .n_kv_heads = 8, .head_dim = 128, .group = 4,
                       .n_splits = n_splits, .sm_count = 132, .stream_warps_per_sm = 12,
                       .out_aligned4 = 1 };
    return c;
}

static gp_attn_kernel choose(const gp_decode_attn_params *p, const gp_attn_call *c, int *warps)
{
    gp_attn_kernel k = GP_ATTN_KERNEL_COUNT;
    int w = -1;
    if (gp_decode_attn_choose(p, c, &k, &w) != GP_OK)
        fail_msg("gp_decode_attn_choose: %s", gp_last_error());
    if (warps)
        *warps = w;
    return k;
}

static void test_defaults(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    assert_int_equal(p.kernel, GP_ATTN_KERNEL_AUTO);
    assert_int_equal(p.stream_warps_cap, 0);
    assert_int_equal(p.kv_evict_first, 1);
    assert_int_equal(p.sm_count, 0);
    assert_int_equal(p.force_splits, 0);
}

static void test_auto_rule(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    int w;
    /* 1024 x 8 items >= 2 x 132 x 12 resident warps: streaming, one wave */
    gp_attn_call c = llama_call(1024, 1);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_STREAM);
    assert_int_equal(w, 132 * 12);
    /* NULL params are the defaults */
    assert_int_equal(choose(NULL, &c, NULL), GP_ATTN_KERNEL_STREAM);
    /* 256 x 8 = 2048 items < 3168: the tensor-core split kernel */
    c = llama_call(256, 1);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_MMA);
    assert_int_equal(w, 0);
    /* exactly two items per warp is enough */
    c = llama_call(2 * 132 * 12 / 8, 1);
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_STREAM);
    c.B--;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    /* split calls, unaligned out or no occupancy known: never streaming */
    c = llama_call(1024, 2);
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    c = llama_call(1024, 1);
    c.out_aligned4 = 0;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    c = llama_call(1024, 1);
    c.stream_warps_per_sm = 0;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    /* groups above 8 do not exist; group 8 and odd groups are served */
    c = llama_call(1024, 1);
    c.group = 8;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_STREAM);
    c.group = 3;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_STREAM);
    /* other head dims: the CUDA-core kernel, pipelined when split */
    c = llama_call(1024, 1);
    c.head_dim = 64;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE);
    c.n_splits = 4;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE_PIPE);
    c.head_dim = 256;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE_PIPE);
}

static void test_warps_cap(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    int w;
    /* 256 x 8 = 2048 items: not enough for 132 x 12 warps, enough for 132 x 6 */
    gp_attn_call c = llama_call(256, 1);
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    p.stream_warps_cap = 6;
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_STREAM);
    assert_int_equal(w, 132 * 6);
    /* a cap above what the SM holds changes nothing */
    p.stream_warps_cap = 64;
    c = llama_call(1024, 1);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_STREAM);
    assert_int_equal(w, 132 * 12);
}

static void test_forced(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    int w;
    /* streaming on every unsplit call it serves, even a small batch: one
     * warp per item when they are fewer than the resident warps */
    p.kernel = GP_ATTN_KERNEL_STREAM;
    gp_attn_call c = llama_call(3, 1);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_STREAM);
    assert_int_equal(w, 3 * 8);
    p.stream_warps_cap = 2;
    c = llama_call(1024, 1);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_STREAM);
    assert_int_equal(w, 132 * 2);
    /* the calls it cannot serve take the automatic rule */
    c = llama_call(3, 4);
    assert_int_equal(choose(&p, &c, &w), GP_ATTN_KERNEL_MMA);
    assert_int_equal(w, 0);
    c.head_dim = 32;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE_PIPE);

    p = gp_decode_attn_default_params();
    p.kernel = GP_ATTN_KERNEL_MMA; /* never streaming */
    c = llama_call(1024, 1);
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_MMA);
    c.head_dim = 16;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE);

    /* the CUDA-core forms serve every shape, split or not */
    p.kernel = GP_ATTN_KERNEL_CUDACORE;
    c = llama_call(1024, 1);
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE);
    c.n_splits = 8;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE);
    p.kernel = GP_ATTN_KERNEL_CUDACORE_PIPE;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE_PIPE);
    c.n_splits = 1;
    assert_int_equal(choose(&p, &c, NULL), GP_ATTN_KERNEL_CUDACORE_PIPE);
}

static void test_names(void **state)
{
    (void)state;
    static const char *const names[GP_ATTN_KERNEL_COUNT] = { "auto", "cudacore", "cudacore_pipe",
                                                             "mma", "stream" };
    for (int k = 0; k < GP_ATTN_KERNEL_COUNT; k++) {
        assert_string_equal(gp_attn_kernel_name((gp_attn_kernel)k), names[k]);
        gp_attn_kernel got = GP_ATTN_KERNEL_COUNT;
        assert_int_equal(gp_attn_kernel_parse(names[k], &got), GP_OK);
        assert_int_equal(got, k);
    }
    assert_string_equal(gp_attn_kernel_name((gp_attn_kernel)GP_ATTN_KERNEL_COUNT), "unknown");
    assert_string_equal(gp_attn_kernel_name((gp_attn_kernel)-1), "unknown");
    gp_attn_kernel k = GP_ATTN_KERNEL_MMA;
    GP_CHECK_FAIL(gp_attn_kernel_parse("Stream", &k), GP_ERR_INVALID_ARG, "'Stream'");
    assert_int_equal(k, GP_ATTN_KERNEL_MMA); /* untouched on error */
    GP_CHECK_FAIL(gp_attn_kernel_parse("", &k), GP_ERR_INVALID_ARG, "auto, cudacore, cudacore_pipe, mma, stream");
    GP_CHECK_FAIL(gp_attn_kernel_parse(NULL, &k), GP_ERR_INVALID_ARG, "(null)");
    GP_CHECK_FAIL(gp_attn_kernel_parse("mma", NULL), GP_ERR_INVALID_ARG, "NULL");
}

/* Bad params are refused by the chooser and by every entry that takes them,
 * before any device is touched. */
static void test_param_checks(void **state)
{
    (void)state;
    gp_attn_call c = llama_call(8, 1);
    gp_attn_kernel k;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    p.kernel = (gp_attn_kernel)GP_ATTN_KERNEL_COUNT;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "kernel = 5");
    p.kernel = (gp_attn_kernel)-1;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "kernel = -1");
    p = gp_decode_attn_default_params();
    p.stream_warps_cap = 3;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "stream_warps_cap = 3");
    p.stream_warps_cap = 1;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "even number of warps per SM in 2..64");
    p.stream_warps_cap = 66;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "stream_warps_cap = 66");
    p.stream_warps_cap = -2;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "stream_warps_cap = -2");
    p = gp_decode_attn_default_params();
    p.kv_evict_first = 2;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "kv_evict_first = 2");

    /* the facts */
    p = gp_decode_attn_default_params();
    c.n_splits = 0;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "n_splits = 0");
    c = llama_call(8, 1);
    c.stream_warps_per_sm = -1;
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, &k, NULL), GP_ERR_INVALID_ARG, "stream_warps_per_sm = -1");
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, NULL, &k, NULL), GP_ERR_INVALID_ARG, "NULL");
    GP_CHECK_FAIL(gp_decode_attn_choose(&p, &c, NULL, NULL), GP_ERR_INVALID_ARG, "NULL");

    /* the entries: the split heuristic (hints given, so no device query) and
     * gp_decode_attn on fake, aligned pointers */
    int n;
    p = gp_decode_attn_default_params();
    p.sm_count = 132;
    p.ctas_per_sm_hint = 4;
    p.kernel = (gp_attn_kernel)7;
    GP_CHECK_FAIL(gp_decode_attn_splits(8, 32, 8, 128, 1024, &p, &n), GP_ERR_INVALID_ARG, "kernel = 7");
    size_t ws;
    GP_CHECK_FAIL(gp_decode_attn_workspace_max(8, 32, 8, 128, 1024, &p, &ws), GP_ERR_INVALID_ARG, "kernel = 7");
    p.kernel = GP_ATTN_KERNEL_STREAM;
    p.kv_evict_first = -1;
    GP_CHECK_FAIL(gp_decode_attn_splits(8, 32, 8, 128, 1024, &p, &n), GP_ERR_INVALID_ARG, "kv_evict_first = -1");
    uint16_t *fake = (uint16_t *)(uintptr_t)0x10000;
    int32_t *ifake = (int32_t *)(uintptr_t)0x20000;
    gp_kv_view v = { .dtype = GP_DTYPE_BF16, .k = fake, .v = fake, .block_tables = ifake, .lens = ifake,
                     .positions = ifake, .n_rows = 4, .n_blocks = 10, .block_size = 16,
                     .n_kv_heads = 2, .head_dim = 128, .max_blocks = 4 };
    p = gp_decode_attn_default_params();
    p.stream_warps_cap = 5;
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 10, fake, fake, NULL, 0, &p, NULL), GP_ERR_INVALID_ARG,
                   "stream_warps_cap = 5");
    p = gp_decode_attn_default_params();
    p.kernel = (gp_attn_kernel)9;
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 10, fake, fake, NULL, 0, &p, NULL), GP_ERR_INVALID_ARG, "kernel = 9");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_auto_rule),
        cmocka_unit_test(test_warps_cap),
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_param_checks),
    };
    return cmocka_run_group_tests_name("attention kernel choice", tests, NULL, NULL) ? 1 : 0;
}
