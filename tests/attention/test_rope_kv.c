/* Tests of RoPE + KV append: argument checks run everywhere; on a GPU q_out
 * and the written cache slots are compared with the reference, and every
 * other slot of the (pattern-filled) pools must be untouched. */
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
#include "gp_model.h"
#include "gp_test.h"

/* bf16 stores of fp32 math vs the float reference: the rounding is <= 2^-8
 * of each element (expect a worst row error ~2e-3..4e-3); device and host
 * cosf/sinf differ by an ulp or two. Same bounds as decode attention.
 * fp16 stores round 8x finer (<= 2^-11; a K value whose float result lies
 * at a rounding boundary may differ by one fp16 ulp, 2^-10 relative): the
 * bounds are the bf16 ones / 4, as in decode attention. V (the unrotated
 * copy, with its bias added in float when there is one: one add, one round
 * to nearest even on both sides) must match the reference bit for bit. */
#define TOL_ELEM_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)
#define TOL_ROW_ABS (at_dtype() == GP_DTYPE_F16 ? 2.5e-4 : 1e-3)
#define TOL_ROW_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)

static uint64_t g_seed;

static void test_arg_checks(void **state)
{
    (void)state;
    uint16_t *fake = (uint16_t *)(uintptr_t)0x10000;
    int32_t *ifake = (int32_t *)(uintptr_t)0x20000;
    float *ffake = (float *)(uintptr_t)0x30000;
    gp_kv_view v = { .dtype = at_dtype(), .k = fake, .v = fake, .block_tables = ifake, .lens = ifake,
                     .positions = ifake, .n_rows = 4, .n_blocks = 10, .block_size = 16,
                     .n_kv_heads = 2, .head_dim = 64, .max_blocks = 4 };
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 5, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "B = 5");
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 0, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "B = 0");
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 0, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "n_heads = 0");
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 4, NULL, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "NULL");
    v.dtype = GP_DTYPE_F32; /* the view's dtype: BF16 or F16 only */
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "dtype F32");
    v.dtype = GP_DTYPE_F16;
    v.head_dim = 63;
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "head_dim = 63");
    v.head_dim = 64;
    v.block_size = 0;
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "block_size = 0");
    v.block_size = 16;
    v.positions = NULL;
    GP_CHECK_FAIL(gp_rope_kv_append(&v, 4, 4, fake, NULL, ffake, fake, NULL), GP_ERR_INVALID_ARG, "positions");
}

/* The reference's bias order, on the host in both dtypes: at position 0
 * RoPE is the identity (cos 0 = 1, sin 0 = 0), so q_out is float(qkv) +
 * float(bias) unrounded, and K and V are that sum rounded once to the dtype;
 * without a bias K and V are qkv's values unchanged. */
static void test_ref_bias(void **state)
{
    (void)state;
    enum { HD = 8, NH = 2, NKV = 1, ROWS = (NH + 2 * NKV) * HD, BS = 2 };
    const gp_dtype dts[2] = { GP_DTYPE_BF16, GP_DTYPE_F16 };
    uint64_t rng = g_seed ^ 0xb1a5u;
    for (int di = 0; di < 2; di++) {
        at_set_dtype(dts[di]);
        uint16_t qkv[ROWS], bias[ROWS], k[BS * NKV * HD], v[BS * NKV * HD];
        float q[NH * HD], inv_freq[HD / 2];
        for (int i = 0; i < HD / 2; i++)
            inv_freq[i] = powf(10000.0f, -2.0f * i / HD);
        at_fill16(qkv, ROWS, &rng, 2.0f);
        at_fill16(bias, ROWS, &rng, 1.0f);
        int32_t pos = 0, table = 0;
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            memset(k, 0xff, sizeof k);
            memset(v, 0xff, sizeof v);
            gp_rope_kv_append_ref(at_dtype(), qkv, with_bias ? bias : NULL, 1, NH, NKV, HD, &pos, inv_freq,
                                  &table, 1, BS, k, v, q);
            for (int i = 0; i < ROWS; i++) {
                float x = at_f32(qkv[i]) + (with_bias ? at_f32(bias[i]) : 0.0f);
                if (i < NH * HD)
                    assert_true(q[i] == x);
                else if (i < (NH + NKV) * HD)
                    assert_int_equal(k[i - NH * HD], at_half(x));
                else
                    assert_int_equal(v[i - (NH + NKV) * HD], at_half(x));
            }
            for (int i = NKV * HD; i < BS * NKV * HD; i++) /* slot 1: untouched */
                assert_true(k[i] == 0xffff && v[i] == 0xffff);
        }
    }
    at_set_dtype(GP_DTYPE_BF16);
}

typedef struct rope_case {
    const char *name;
    const char *preset; /* whose rope_theta / scaling give inv_freq */
    int head_dim, n_heads, n_kv, B, block_size, max_pos;
    int n_pos;
    int pos[6];         /* positions of the first rows; others uniform in [0, max_pos] */
} rope_case;

static const rope_case k_cases[] = {
    { "hd16 B1 bs16", "tiny", 16, 4, 2, 1, 16, 0, 1, { 0 } },
    { "hd64 B3 bs1 llama3 scaling", "llama3.2-1b", 64, 8, 2, 3, 1, 4096, 3, { 0, 1, 4096 } },
    { "hd128 B64 bs16", "llama3-8b", 128, 32, 8, 64, 16, 131071, 6, { 0, 15, 16, 17, 131071, 1000 } },
    { "hd128 G1 B8 bs16", "llama3-8b", 128, 8, 8, 8, 16, 5000, 2, { 4097, 1 } },
    { "hd256 B3 bs7", "llama3-8b", 256, 4, 1, 3, 7, 300, 3, { 6, 7, 300 } },
};

/* with_bias: a q/k/v bias (uniform [-1, 1]) added before RoPE; else NULL. */
static void run_case(const rope_case *c, int with_bias, uint64_t *rng)
{
    const int hd = c->head_dim, nh = c->n_heads, n_kv = c->n_kv, B = c->B, bs = c->block_size;
    printf("case %s [%s, bias %s]: head_dim %d, %d heads, %d KV heads, B %d, block_size %d (%s "
           "inv_freq)\n", c->name, gp_dtype_flag_name(at_dtype()), with_bias ? "yes" : "NULL", hd, nh,
           n_kv, B, bs, c->preset);
    gp_config cfg;
    at_check(gp_config_preset(c->preset, &cfg), "preset");
    cfg.head_dim = hd;
    float *inv_freq = at_malloc((size_t)hd / 2 * sizeof(float)); /* [hd/2] */
    gp_rope_inv_freq(&cfg, inv_freq);

    int32_t *pos = at_malloc((size_t)B * sizeof *pos); /* [B] */
    int max_cols = 1;
    for (int b = 0; b < B; b++) {
        pos[b] = b < c->n_pos ? c->pos[b] : at_int(rng, c->max_pos + 1);
        if (pos[b] / bs + 1 > max_cols)
            max_cols = pos[b] / bs + 1;
    }
    /* Each row owns one block (at its position's column), drawn from a
     * shuffled pool with spares; other entries -1. */
    const int max_blocks = max_cols, n_blocks = 2 * B + 5;
    int32_t *perm = at_malloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    at_shuffle(perm, n_blocks, rng);
    int32_t *tables = at_malloc((size_t)B * max_blocks * sizeof *tables); /* [B][max_blocks] */
    for (int i = 0; i < B * max_blocks; i++)
        tables[i] = -1;
    for (int b = 0; b < B; b++)
        tables[(size_t)b * max_blocks + pos[b] / bs] = perm[b];

    const int rows = (nh + 2 * n_kv) * hd;
    const size_t qkv_n = (size_t)B * rows, qn = (size_t)B * nh * hd;
    const size_t pool = (size_t)n_blocks * bs * n_kv * hd; /* [n_blocks][bs][n_kv][hd] */
    uint16_t *qkv = at_malloc(qkv_n * 2), *got_q = at_malloc(qn * 2);
    uint16_t *k = at_malloc(pool * 2), *v = at_malloc(pool * 2);
    uint16_t *got_k = at_malloc(pool * 2), *got_v = at_malloc(pool * 2);
    float *want_q = at_malloc(qn * sizeof(float));
    at_fill16(qkv, qkv_n, rng, 2.0f);
    at_fill16(k, pool, rng, 3.0f); /* the known pattern every untouched slot keeps */
    at_fill16(v, pool, rng, 3.0f);
    uint16_t *bias = NULL, *dbias = NULL; /* [rows] */
    if (with_bias) {
        bias = at_malloc((size_t)rows * 2);
        at_fill16(bias, (size_t)rows, rng, 1.0f);
        dbias = at_dev_alloc((size_t)rows * 2);
        at_to_dev(dbias, bias, (size_t)rows * 2);
    }

    uint16_t *dqkv = at_dev_alloc(qkv_n * 2), *dq = at_dev_alloc(qn * 2);
    uint16_t *dk = at_dev_alloc(pool * 2), *dv = at_dev_alloc(pool * 2);
    int32_t *dpos = at_dev_alloc((size_t)B * 4), *dtab = at_dev_alloc((size_t)B * max_blocks * 4);
    float *dfreq = at_dev_alloc((size_t)hd / 2 * sizeof(float));
    at_to_dev(dqkv, qkv, qkv_n * 2);
    at_to_dev(dk, k, pool * 2);
    at_to_dev(dv, v, pool * 2);
    at_to_dev(dpos, pos, (size_t)B * 4);
    at_to_dev(dtab, tables, (size_t)B * max_blocks * 4);
    at_to_dev(dfreq, inv_freq, (size_t)hd / 2 * sizeof(float));
    at_dev_poison(dq, qn * 2);

    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .lens = NULL, .positions = dpos,
                        .n_rows = B, .n_blocks = n_blocks, .block_size = bs, .n_kv_heads = n_kv,
                        .head_dim = hd, .max_blocks = max_blocks };
    at_check(gp_rope_kv_append(&view, B, nh, dqkv, dbias, dfreq, dq, NULL), "gp_rope_kv_append");
    at_dev_sync();
    at_to_host(got_q, dq, qn * 2);
    at_to_host(got_k, dk, pool * 2);
    at_to_host(got_v, dv, pool * 2);

    /* reference on the host copies of the pools */
    gp_rope_kv_append_ref(at_dtype(), qkv, bias, B, nh, n_kv, hd, pos, inv_freq, tables, max_blocks, bs, k,
                          v, want_q);
    size_t fails = at_compare("q_out", got_q, want_q, (size_t)B * nh, (size_t)hd, TOL_ELEM_REL,
                              TOL_ROW_ABS, TOL_ROW_REL);

    /* K slots written: tolerance (1 bf16 ulp apart at most); everything else
     * in both pools bit-exact (V is a copy, the rest must be untouched). */
    const size_t slot_elems = (size_t)n_kv * hd;
    unsigned char *written = at_malloc((size_t)n_blocks * bs); /* [n_blocks*bs] */
    memset(written, 0, (size_t)n_blocks * bs);
    for (int b = 0; b < B; b++)
        written[(size_t)perm[b] * bs + pos[b] % bs] = 1;
    size_t n_written = 0;
    for (size_t s = 0; s < (size_t)n_blocks * bs; s++) {
        if (written[s]) {
            n_written++;
            float *wk = at_malloc(slot_elems * sizeof(float));
            for (size_t i = 0; i < slot_elems; i++)
                wk[i] = at_f32(k[s * slot_elems + i]);
            char what[64];
            snprintf(what, sizeof what, "K slot %zu", s);
            fails += at_compare(what, got_k + s * slot_elems, wk, (size_t)n_kv, (size_t)hd,
                                TOL_ELEM_REL, TOL_ROW_ABS, TOL_ROW_REL);
            free(wk);
        } else {
            for (size_t i = 0; i < slot_elems; i++)
                if (got_k[s * slot_elems + i] != k[s * slot_elems + i]) {
                    if (fails < 10)
                        printf("  K slot %zu (not written) elem %zu changed: 0x%04x, was 0x%04x\n",
                               s, i, (unsigned)got_k[s * slot_elems + i],
                               (unsigned)k[s * slot_elems + i]);
                    fails++;
                }
        }
        for (size_t i = 0; i < slot_elems; i++)
            if (got_v[s * slot_elems + i] != v[s * slot_elems + i]) {
                if (fails < 10)
                    printf("  V slot %zu%s elem %zu: got 0x%04x, want 0x%04x\n", s,
                           written[s] ? " (written)" : " (not written)", i,
                           (unsigned)got_v[s * slot_elems + i], (unsigned)v[s * slot_elems + i]);
                fails++;
            }
    }
    assert_int_equal(n_written, (size_t)B);

    at_dev_free(dqkv);
    at_dev_free(dq);
    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dpos);
    at_dev_free(dtab);
    at_dev_free(dfreq);
    at_dev_free(dbias);
    free(bias);
    free(inv_freq);
    free(pos);
    free(perm);
    free(tables);
    free(qkv);
    free(got_q);
    free(k);
    free(v);
    free(got_k);
    free(got_v);
    free(want_q);
    free(written);
    if (fails)
        fail_msg("case %s: %zu mismatches (seed %llu)", c->name, fails, (unsigned long long)g_seed);
}

static void test_gpu_cases(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed);
    for (int with_bias = 0; with_bias < 2; with_bias++)
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
            run_case(&k_cases[i], with_bias, &rng);
}

/* Prefill rows: several token rows of one sequence share its block-table
 * row through row_table (3 sequences of 5, 17 and 9 tokens continuing 0, 11
 * and 30 cached tokens, block size 4); against the reference on the
 * expanded per-row tables: q_out and every K slot written within tolerance,
 * V copied exactly, nothing else in the pools touched. */
static void test_gpu_row_table(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed) ^ 0x5bd1e995u;
    enum { HD = 64, NH = 4, NKV = 2, S = 3, BS = 4, MB = 12, NB = 3 * MB };
    const int n[S] = { 5, 17, 9 }, pos0[S] = { 0, 11, 30 };
    const int rows = (NH + 2 * NKV) * HD;
    int B = 0;
    for (int q = 0; q < S; q++)
        B += n[q];
    int32_t tables[S * MB], *pos = at_malloc(sizeof(int32_t) * B), *trow = at_malloc(sizeof(int32_t) * B);
    int32_t *expanded = at_malloc(sizeof(int32_t) * B * MB); /* [B][MB]: row b's table */
    int32_t perm[NB];
    for (int i = 0; i < NB; i++)
        perm[i] = i;
    at_shuffle(perm, NB, &rng);
    for (int i = 0; i < S * MB; i++)
        tables[i] = perm[i];
    for (int q = 0, b = 0; q < S; q++)
        for (int t = 0; t < n[q]; t++, b++) {
            pos[b] = pos0[q] + t;
            trow[b] = q;
            memcpy(expanded + (size_t)b * MB, tables + (size_t)q * MB, sizeof(int32_t) * MB);
        }
    const size_t pool = (size_t)NB * BS * NKV * HD, qn = (size_t)B * NH * HD;
    uint16_t *qkv = at_malloc((size_t)B * rows * 2), *got_q = at_malloc(qn * 2), *k = at_malloc(pool * 2),
            *v = at_malloc(pool * 2), *got_k = at_malloc(pool * 2), *got_v = at_malloc(pool * 2);
    float *want_q = at_malloc(qn * sizeof(float)), inv_freq[HD / 2];
    uint16_t bias[(NH + 2 * NKV) * HD]; /* prefill rows of a model with q/k/v biases */
    at_fill16(qkv, (size_t)B * rows, &rng, 2.0f);
    at_fill16(k, pool, &rng, 3.0f);
    at_fill16(v, pool, &rng, 3.0f);
    at_fill16(bias, (size_t)rows, &rng, 1.0f);
    for (int i = 0; i < HD / 2; i++)
        inv_freq[i] = powf(500000.0f, -2.0f * i / HD);
    uint16_t *dqkv = at_dev_alloc((size_t)B * rows * 2), *dq = at_dev_alloc(qn * 2), *dk = at_dev_alloc(pool * 2),
            *dv = at_dev_alloc(pool * 2);
    int32_t *dpos = at_dev_alloc(sizeof(int32_t) * B), *dtrow = at_dev_alloc(sizeof(int32_t) * B),
            *dtab = at_dev_alloc(sizeof tables);
    float *dfreq = at_dev_alloc(sizeof inv_freq);
    uint16_t *dbias = at_dev_alloc(sizeof bias);
    at_to_dev(dbias, bias, sizeof bias);
    at_to_dev(dqkv, qkv, (size_t)B * rows * 2);
    at_to_dev(dk, k, pool * 2);
    at_to_dev(dv, v, pool * 2);
    at_to_dev(dpos, pos, sizeof(int32_t) * B);
    at_to_dev(dtrow, trow, sizeof(int32_t) * B);
    at_to_dev(dtab, tables, sizeof tables);
    at_to_dev(dfreq, inv_freq, sizeof inv_freq);
    at_dev_poison(dq, qn * 2);
    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .positions = dpos, .row_table = dtrow, .n_rows = B,
                        .n_blocks = NB, .block_size = BS, .n_kv_heads = NKV, .head_dim = HD, .max_blocks = MB };
    at_check(gp_rope_kv_append(&view, B, NH, dqkv, dbias, dfreq, dq, NULL), "gp_rope_kv_append");
    at_dev_sync();
    at_to_host(got_q, dq, qn * 2);
    at_to_host(got_k, dk, pool * 2);
    at_to_host(got_v, dv, pool * 2);
    uint16_t *want_k = at_malloc(pool * 2), *want_v = at_malloc(pool * 2);
    memcpy(want_k, k, pool * 2);
    memcpy(want_v, v, pool * 2);
    gp_rope_kv_append_ref(at_dtype(), qkv, bias, B, NH, NKV, HD, pos, inv_freq, expanded, MB, BS, want_k, want_v,
                          want_q);
    size_t fails = at_compare("q_out", got_q, want_q, (size_t)B * NH, HD, TOL_ELEM_REL, TOL_ROW_ABS, TOL_ROW_REL);
    const size_t slot_elems = (size_t)NKV * HD;
    for (size_t sl = 0; sl < (size_t)NB * BS; sl++) {
        const uint16_t *gk = got_k + sl * slot_elems, *wk = want_k + sl * slot_elems, *ok = k + sl * slot_elems;
        if (memcmp(wk, ok, slot_elems * 2)) { /* written by the reference: within tolerance */
            float *wf = at_malloc(slot_elems * sizeof(float));
            for (size_t e = 0; e < slot_elems; e++)
                wf[e] = at_f32(wk[e]);
            fails += at_compare("K slot", gk, wf, NKV, HD, TOL_ELEM_REL, TOL_ROW_ABS, TOL_ROW_REL);
            free(wf);
        } else if (memcmp(gk, ok, slot_elems * 2)) {
            printf("  K slot %zu (not written) changed\n", sl);
            fails++;
        }
    }
    if (memcmp(got_v, want_v, pool * 2)) {
        printf("  V pools differ from the reference\n");
        fails++;
    }
    void *dev[] = { dqkv, dq, dk, dv, dpos, dtrow, dtab, dfreq, dbias };
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        at_dev_free(dev[i]);
    void *host[] = { pos, trow, expanded, qkv, got_q, k, v, got_k, got_v, want_q, want_k, want_v };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    if (fails)
        fail_msg("row_table case: %zu mismatches", fails);
}

/* Rows whose position or block is out of range write nothing at all. */
static void test_gpu_bad_rows_skipped(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed) ^ 0x9e3779b9u;
    enum { HD = 16, NH = 2, NKV = 1, B = 4, BS = 4, MB = 2, NB = 3 };
    const int rows = (NH + 2 * NKV) * HD;
    /* row 0 fine; row 1 position past the table; row 2 negative position;
     * row 3 block id out of the pool */
    int32_t pos[B] = { 5, MB * BS, -1, 2 };
    int32_t tables[B * MB] = { 0, 1, 2, 2, 2, 2, NB, NB };
    uint16_t qkv[B * rows], got_q[B * NH * HD], k[NB * BS * NKV * HD], v[NB * BS * NKV * HD];
    uint16_t got_k[NB * BS * NKV * HD], got_v[NB * BS * NKV * HD];
    at_fill16(qkv, (size_t)B * rows, &rng, 1.0f);
    at_fill16(k, sizeof k / 2, &rng, 1.0f);
    at_fill16(v, sizeof v / 2, &rng, 1.0f);
    float inv_freq[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * i / HD);
    uint16_t *dqkv = at_dev_alloc(sizeof qkv), *dq = at_dev_alloc(sizeof got_q);
    uint16_t *dk = at_dev_alloc(sizeof k), *dv = at_dev_alloc(sizeof v);
    int32_t *dpos = at_dev_alloc(sizeof pos), *dtab = at_dev_alloc(sizeof tables);
    float *dfreq = at_dev_alloc(sizeof inv_freq);
    at_to_dev(dqkv, qkv, sizeof qkv);
    at_to_dev(dk, k, sizeof k);
    at_to_dev(dv, v, sizeof v);
    at_to_dev(dpos, pos, sizeof pos);
    at_to_dev(dtab, tables, sizeof tables);
    at_to_dev(dfreq, inv_freq, sizeof inv_freq);
    at_dev_poison(dq, sizeof got_q);
    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .positions = dpos, .n_rows = B,
                        .n_blocks = NB, .block_size = BS, .n_kv_heads = NKV, .head_dim = HD,
                        .max_blocks = MB };
    at_check(gp_rope_kv_append(&view, B, NH, dqkv, NULL, dfreq, dq, NULL), "gp_rope_kv_append");
    at_dev_sync();
    at_to_host(got_q, dq, sizeof got_q);
    at_to_host(got_k, dk, sizeof k);
    at_to_host(got_v, dv, sizeof v);
    /* host: only row 0 applies (block tables[0][1] = 1, slot 1) */
    float want_q[NH * HD];
    gp_rope_kv_append_ref(at_dtype(), qkv, NULL, 1, NH, NKV, HD, pos, inv_freq, tables, MB, BS, k, v, want_q);
    assert_int_equal(at_compare("row 0 q_out", got_q, want_q, NH, HD, TOL_ELEM_REL, TOL_ROW_ABS, TOL_ROW_REL), 0);
    for (int i = NH * HD; i < B * NH * HD; i++)
        if (got_q[i] != 0xffffu)
            fail_msg("q_out element %d of a skipped row was written (0x%04x)", i, (unsigned)got_q[i]);
    const size_t slot0 = ((size_t)1 * BS + 1) * NKV * HD; /* row 0's slot */
    for (size_t i = 0; i < sizeof k / 2; i++) {
        int in_slot = i >= slot0 && i < slot0 + NKV * HD;
        if (!in_slot && got_k[i] != k[i])
            fail_msg("K element %zu changed by a skipped row", i);
        if (got_v[i] != v[i])
            fail_msg("V element %zu: got 0x%04x, want 0x%04x", i, (unsigned)got_v[i], (unsigned)v[i]);
    }
    at_dev_free(dqkv);
    at_dev_free(dq);
    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dpos);
    at_dev_free(dtab);
    at_dev_free(dfreq);
}

int main(void)
{
    g_seed = at_seed("attn_rope_kv");
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_arg_checks),
        cmocka_unit_test(test_ref_bias),
    };
    if (cmocka_run_group_tests_name("rope_kv (host)", host_tests, NULL, NULL))
        return 1;
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest gpu_tests[] = {
        AT_GPU_TEST(test_gpu_cases),
        AT_GPU_TEST(test_gpu_bad_rows_skipped),
        AT_GPU_TEST(test_gpu_row_table),
    };
    return cmocka_run_group_tests_name("rope_kv (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
