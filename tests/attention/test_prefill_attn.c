/* Tests of causal prefill attention: argument checks run everywhere; on a GPU
 * the kernel is compared with the double reference on fresh random q and
 * K/V behind shuffled block tables, for every head size it serves, several
 * sequences per call (lengths around tile and block boundaries, chunks that
 * continue a cached context), and rows no sequence names must keep their
 * poison; each case runs on every kernel that serves it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn_test_util.h"
#include "gp_test.h"

/* p enters p.v rounded to bf16 (8 significant bits), so an output is about
 * 2^-9 of its row's max off the double reference, plus the bf16 rounding
 * of the store; the worst rows measured ~4e-3. In fp16, p and the store
 * round 8x finer (11 significant bits, 2^-12 half-ulp): the bounds are the
 * bf16 ones / 4, as in the decode tests. */
#define TOL_ELEM_REL (at_dtype() == GP_DTYPE_F16 ? 5e-3 : 2e-2)
#define TOL_ROW_ABS (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)
#define TOL_ROW_REL (at_dtype() == GP_DTYPE_F16 ? 3.75e-3 : 1.5e-2)

static uint64_t g_seed;

static void test_arg_checks(void **state)
{
    (void)state;
    uint16_t *fake = (uint16_t *)(uintptr_t)0x10000;
    int32_t *ifake = (int32_t *)(uintptr_t)0x20000;
    gp_prefill_seq_desc *sfake = (gp_prefill_seq_desc *)(uintptr_t)0x30000;
    gp_kv_view v = { .dtype = at_dtype(), .k = fake, .v = fake, .block_tables = ifake, .n_rows = 4, .n_blocks = 10, .block_size = 16,
                     .n_kv_heads = 2, .head_dim = 48, .max_blocks = 4 };
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "head_dim 48");
    v.head_dim = 64;
    GP_CHECK_FAIL(gp_prefill_attn(&v, 5, fake, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "multiple of n_kv_heads");
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, NULL, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "NULL");
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 0, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "n_seqs 0");
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 1, 9, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "max_q_len 9");
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake + 1, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "16-byte aligned");
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 1, 8, (gp_prefill_attn_kernel)7, NULL),
                  GP_ERR_INVALID_ARG, "kernel 7");
    /* head_dim 64: never the Hopper kernel's, whatever the device */
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_HOPPER, NULL),
                  GP_ERR_UNSUPPORTED, "head_dim 128");
    assert_false(gp_prefill_attn_kernel_serves(GP_PREFILL_ATTN_HOPPER, 64));
    v.dtype = GP_DTYPE_F32; /* the view's dtype: BF16 or F16 only */
    GP_CHECK_FAIL(gp_prefill_attn(&v, 4, fake, fake, 8, sfake, 1, 8, GP_PREFILL_ATTN_AUTO, NULL), GP_ERR_INVALID_ARG, "dtype F32");
    assert_true(gp_prefill_attn_supports(128) && gp_prefill_attn_supports(16) && !gp_prefill_attn_supports(256));
}

static void test_kernel_names(void **state)
{
    (void)state;
    for (int k = GP_PREFILL_ATTN_AUTO; k <= GP_PREFILL_ATTN_HOPPER; k++) {
        gp_prefill_attn_kernel got = GP_PREFILL_ATTN_AUTO;
        assert_int_equal(gp_prefill_attn_kernel_parse(gp_prefill_attn_kernel_name((gp_prefill_attn_kernel)k), &got),
                         GP_OK);
        assert_int_equal(got, k);
    }
    assert_string_equal(gp_prefill_attn_kernel_name((gp_prefill_attn_kernel)9), "unknown");
    gp_prefill_attn_kernel got;
    GP_CHECK_FAIL(gp_prefill_attn_kernel_parse("wgmma", &got), GP_ERR_INVALID_ARG, "'wgmma' is not one of auto, mma, hopper");

    gp_prefill_attn_kernel list[2];
    int n = 0;
    assert_int_equal(gp_prefill_attn_kernel_parse_list("mma,hopper", list, 2, &n), GP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0], GP_PREFILL_ATTN_MMA);
    assert_int_equal(list[1], GP_PREFILL_ATTN_HOPPER);
    GP_CHECK_FAIL(gp_prefill_attn_kernel_parse_list("mma,auto,hopper", list, 2, &n), GP_ERR_INVALID_ARG,
                  "'mma,auto,hopper': at most 2");
    GP_CHECK_FAIL(gp_prefill_attn_kernel_parse_list("mma,fa3", list, 2, &n), GP_ERR_INVALID_ARG,
                  "'fa3' is not one of auto, mma, hopper");
    GP_CHECK_FAIL(gp_prefill_attn_kernel_parse_list(",", list, 2, &n), GP_ERR_INVALID_ARG, "no kernel named");
    assert_int_equal(n, 2); /* untouched by a refused list */
}

#define MAX_SEQS 8

typedef struct pf_case {
    const char *name;
    int head_dim, n_heads, n_kv, block_size;
    int n_seqs;
    int pos0[MAX_SEQS], q_len[MAX_SEQS]; /* cached tokens before the chunk, chunk tokens */
} pf_case;

static const pf_case k_cases[] = {
    { "hd128 G4 bs16 boundaries", 128, 8, 2, 16, 7,
      { 0, 0, 0, 0, 0, 100, 37 }, { 1, 15, 16, 17, 300, 64, 129 } },
    { "hd128 G8 bs16 long", 128, 8, 1, 16, 2, { 0, 1500 }, { 700, 65 } },
    /* more K/V tiles of 128 keys than the Hopper kernel's ring has slots,
     * a warpgroup whose rows all lie past q_len, blocks that split tiles */
    { "hd128 G4 bs7 ring", 128, 4, 1, 7, 3, { 0, 700, 1000 }, { 513, 129, 1 } },
    { "hd128 G1 bs1", 128, 2, 2, 1, 2, { 0, 130 }, { 257, 60 } },
    { "hd64 G2 bs16", 64, 4, 2, 16, 2, { 0, 5 }, { 200, 1 } },
    { "hd32 G1 bs7", 32, 2, 2, 7, 2, { 3, 0 }, { 65, 63 } },
    { "hd16 G2 bs1", 16, 4, 2, 1, 3, { 0, 9, 64 }, { 70, 2, 64 } },
};

static void run_case(const pf_case *c, gp_prefill_attn_kernel kernel, uint64_t *rng)
{
    const int hd = c->head_dim, nh = c->n_heads, n_kv = c->n_kv, bs = c->block_size, S = c->n_seqs;
    printf("case %s [%s, %s kernel]: head_dim %d, %d heads, %d KV heads, block_size %d, %d sequences\n", c->name,
           gp_dtype_flag_name(at_dtype()), gp_prefill_attn_kernel_name(kernel), hd, nh, n_kv, bs, S);
    /* rows: each sequence's chunk tokens, one unnamed row after each */
    gp_prefill_seq_desc seqs[MAX_SEQS];
    int rows = 0, max_q = 0, max_blocks = 1, n_blocks = 0;
    for (int i = 0; i < S; i++) {
        int total = c->pos0[i] + c->q_len[i], nb = (total + bs - 1) / bs;
        seqs[i] = (gp_prefill_seq_desc){ .q_start = rows, .q_len = c->q_len[i], .pos0 = c->pos0[i], .table_row = S - 1 - i };
        rows += c->q_len[i] + 1;
        if (c->q_len[i] > max_q)
            max_q = c->q_len[i];
        if (nb > max_blocks)
            max_blocks = nb;
        n_blocks += nb;
    }
    n_blocks += 3; /* spares nobody reads */
    int32_t *perm = at_malloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    at_shuffle(perm, n_blocks, rng);
    int32_t *tables = at_malloc((size_t)S * max_blocks * sizeof *tables); /* [S][max_blocks] */
    for (int i = 0; i < S * max_blocks; i++)
        tables[i] = -1;
    int next = 0;
    for (int i = 0; i < S; i++) {
        int nb = (c->pos0[i] + c->q_len[i] + bs - 1) / bs;
        for (int j = 0; j < nb; j++)
            tables[(size_t)seqs[i].table_row * max_blocks + j] = perm[next++];
    }
    const size_t qn = (size_t)rows * nh * hd, pool = (size_t)n_blocks * bs * n_kv * hd;
    uint16_t *q = at_malloc(qn * 2), *got = at_malloc(qn * 2), *k = at_malloc(pool * 2), *v = at_malloc(pool * 2);
    float *want = at_malloc(qn * sizeof(float));
    at_fill16(q, qn, rng, 2.0f);
    at_fill16(k, pool, rng, 3.0f);
    at_fill16(v, pool, rng, 3.0f);

    uint16_t *dq = at_dev_alloc(qn * 2), *dout = at_dev_alloc(qn * 2), *dk = at_dev_alloc(pool * 2),
            *dv = at_dev_alloc(pool * 2);
    int32_t *dtab = at_dev_alloc((size_t)S * max_blocks * 4);
    gp_prefill_seq_desc *dseqs = at_dev_alloc(sizeof seqs);
    at_to_dev(dq, q, qn * 2);
    at_to_dev(dk, k, pool * 2);
    at_to_dev(dv, v, pool * 2);
    at_to_dev(dtab, tables, (size_t)S * max_blocks * 4);
    at_to_dev(dseqs, seqs, sizeof seqs);
    at_dev_poison(dout, qn * 2);
    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .n_rows = S, .n_blocks = n_blocks,
                        .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd, .max_blocks = max_blocks };
    at_check(gp_prefill_attn(&view, nh, dq, dout, rows, dseqs, S, max_q, kernel, NULL), "gp_prefill_attn");
    at_dev_sync();
    at_to_host(got, dout, qn * 2);
    gp_prefill_attn_ref(at_dtype(), q, k, v, tables, max_blocks, bs, nh, n_kv, hd, seqs, S, want);

    size_t fails = 0;
    const size_t row = (size_t)nh * hd;
    for (int i = 0; i < S; i++) {
        char what[96];
        snprintf(what, sizeof what, "sequence %d (pos0 %d, %d queries)", i, seqs[i].pos0, seqs[i].q_len);
        fails += at_compare(what, got + (size_t)seqs[i].q_start * row, want + (size_t)seqs[i].q_start * row,
                            (size_t)seqs[i].q_len * nh, (size_t)hd, TOL_ELEM_REL, TOL_ROW_ABS, TOL_ROW_REL);
        const uint16_t *gap = got + (size_t)(seqs[i].q_start + seqs[i].q_len) * row;
        for (size_t e = 0; e < row; e++)
            if (gap[e] != 0xFFFF) {
                if (fails < 10)
                    printf("  unnamed row after sequence %d, elem %zu written: 0x%04x\n", i, e, (unsigned)gap[e]);
                fails++;
            }
    }
    at_dev_free(dq);
    at_dev_free(dout);
    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dtab);
    at_dev_free(dseqs);
    free(perm);
    free(tables);
    free(q);
    free(got);
    free(k);
    free(v);
    free(want);
    if (fails)
        fail_msg("case %s: %zu mismatches", c->name, fails);
}

static void test_gpu_cases(void **state)
{
    (void)state;
    static const gp_dtype dts[] = {GP_DTYPE_BF16, GP_DTYPE_F16};
    for (int t = 0; t < 2; t++) {
        at_set_dtype(dts[t]);
        uint64_t rng = at_dtype_seed(g_seed);
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
            for (int k = GP_PREFILL_ATTN_MMA; k <= GP_PREFILL_ATTN_HOPPER; k++)
                if (gp_prefill_attn_kernel_serves((gp_prefill_attn_kernel)k, k_cases[i].head_dim))
                    run_case(&k_cases[i], (gp_prefill_attn_kernel)k, &rng);
    }
    printf("the hopper kernel %s on this device\n",
           gp_prefill_attn_kernel_serves(GP_PREFILL_ATTN_HOPPER, 128) ? "ran" : "does not run");
}

int main(void)
{
    g_seed = at_seed("attn_prefill_attn");
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_arg_checks),
        cmocka_unit_test(test_kernel_names),
    };
    if (cmocka_run_group_tests_name("prefill_attn (host)", host_tests, NULL, NULL))
        return 1;
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest gpu_tests[] = {
        AT_GPU_TEST(test_gpu_cases),
    };
    return cmocka_run_group_tests_name("prefill_attn (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
