/* Tests of decode attention: the split heuristic, argument checks and the
 * reference run everywhere; on a GPU the kernel is compared with the
 * reference over random paged caches, several split counts per case. */
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

/* Tolerances (bf16 outputs from fp32 math vs a float64 reference): the output
 * rounding alone is <= 2^-9 of each element, so expect a worst row error of
 * about 2e-3..4e-3; the bound is 1e-2 of the row's max|ref|, and each element
 * must be within 1e-2 of itself plus 1e-3 of its row's max.
 * fp16 has 3 more mantissa bits (rounding <= 2^-11 relative, 8x finer), the
 * inputs the reference reads are the same rounded values, and the math is
 * fp32 either way (p enters the tensor-core p.v as two fp16 parts, 22 bits):
 * the bounds are the bf16 ones / 4, keeping half of bf16's margin over the
 * rounding, so a kernel that lost precision in fp16 (e.g. p rounded once, or
 * an fp16 intermediate) would still fail them. */
#define TOL_ELEM_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)
#define TOL_ROW_ABS (at_dtype() == GP_DTYPE_F16 ? 2.5e-4 : 1e-3)
#define TOL_ROW_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)

static uint64_t g_seed;

/* ------------------------------------------------------------ host only */

static void test_splits_heuristic(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    p.sm_count = 132;
    p.ctas_per_sm_hint = 4; /* a wave of 528 CTAs; with sm_count given, no device is queried */
    int n = 0;
    /* B * n_kv = 8192 CTAs fill two waves of 528: one split, no combine */
    assert_int_equal(gp_decode_attn_splits(1024, 32, 8, 128, 384, &p, &n), GP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(gp_decode_attn_splits(256, 32, 8, 128, 1024, &p, &n), GP_OK);
    assert_int_equal(n, 1);
    /* 512 CTAs already fill the wave of 132 x 4 */
    assert_int_equal(gp_decode_attn_splits(64, 32, 8, 128, 2048, &p, &n), GP_OK);
    assert_int_equal(n, 1);
    /* 64 CTAs: 528 / 64 = 8 splits, but 1024 tokens allow 4 of >= 256 tokens */
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 1024, &p, &n), GP_OK);
    assert_int_equal(n, 4);
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 4096, &p, &n), GP_OK);
    assert_int_equal(n, 8);
    /* however many SMs */
    p.sm_count = 10000;
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 1024, &p, &n), GP_OK);
    assert_int_equal(n, 4);
    p.sm_count = 132;
    /* no hint: one CTA per SM (132 / 32 = 4 at B = 4, 132 / 128 = 1 at B = 16) */
    p.ctas_per_sm_hint = 0;
    assert_int_equal(gp_decode_attn_splits(4, 32, 8, 128, 1024, &p, &n), GP_OK);
    assert_int_equal(n, 4);
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 4096, &p, &n), GP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(gp_decode_attn_splits(16, 32, 8, 128, 4096, &p, &n), GP_OK);
    assert_int_equal(n, 1);
    p.ctas_per_sm_hint = 4;
    /* short contexts never split */
    assert_int_equal(gp_decode_attn_splits(1, 32, 8, 128, 511, &p, &n), GP_OK);
    assert_int_equal(n, 1);
    /* a partition of 48 SMs wants fewer */
    p.sm_count = 48;
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 1 << 17, &p, &n), GP_OK);
    assert_int_equal(n, 3);
    p.max_splits = 2;
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 1 << 17, &p, &n), GP_OK);
    assert_int_equal(n, 2);
    p.force_splits = 7;
    assert_int_equal(gp_decode_attn_splits(8, 32, 8, 128, 10, &p, &n), GP_OK);
    assert_int_equal(n, 7);
    /* B = 1, 131072 tokens: the automatic cap */
    p = gp_decode_attn_default_params();
    p.sm_count = 132;
    p.ctas_per_sm_hint = 1;
    assert_int_equal(gp_decode_attn_splits(1, 8, 1, 128, 1 << 17, &p, &n), GP_OK);
    assert_int_equal(n, 132);
    p.ctas_per_sm_hint = 8;
    assert_int_equal(gp_decode_attn_splits(1, 8, 1, 128, 1 << 17, &p, &n), GP_OK);
    assert_int_equal(n, 256);

    assert_int_equal(gp_decode_attn_workspace_bytes(8, 32, 128, 1), 0);
    assert_int_equal(gp_decode_attn_workspace_bytes(8, 32, 128, 16), 8 * 32 * 16 * 130 * 4);
    size_t ws = 0;
    p.ctas_per_sm_hint = 4;
    assert_int_equal(gp_decode_attn_workspace_max(1024, 32, 8, 128, 2048, &p, &ws), GP_OK);
    /* the largest over B: B * splits(B) peaks near a wave */
    size_t want = 0;
    for (int B = 1; B <= 1024; B++) {
        assert_int_equal(gp_decode_attn_splits(B, 32, 8, 128, 2048, &p, &n), GP_OK);
        size_t w = gp_decode_attn_workspace_bytes(B, 32, 128, n);
        if (w > want)
            want = w;
    }
    assert_true(ws == want && ws > 0);
}

static void test_arg_checks(void **state)
{
    (void)state;
    gp_decode_attn_params p = gp_decode_attn_default_params();
    int n;
    GP_CHECK_FAIL(gp_decode_attn_splits(0, 32, 8, 128, 10, &p, &n), GP_ERR_INVALID_ARG, "B = 0");
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 32, 8, 96, 10, &p, &n), GP_ERR_INVALID_ARG, "head_dim = 96");
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 36, 8, 128, 10, &p, &n), GP_ERR_INVALID_ARG, "n_heads = 36");
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 72, 8, 128, 10, &p, &n), GP_ERR_INVALID_ARG, "n_heads = 72");
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 32, 8, 128, 0, &p, &n), GP_ERR_INVALID_ARG, "max_len = 0");
    p.force_splits = -1;
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 32, 8, 128, 10, &p, &n), GP_ERR_INVALID_ARG, "force_splits = -1");
    p.force_splits = GP_DECODE_ATTN_MAX_SPLITS + 1;
    GP_CHECK_FAIL(gp_decode_attn_splits(1, 32, 8, 128, 10, &p, &n), GP_ERR_INVALID_ARG, "exceed");

    /* The entry checks before touching the device (fake, aligned pointers). */
    uint16_t *fake = (uint16_t *)(uintptr_t)0x10000;
    int32_t *ifake = (int32_t *)(uintptr_t)0x20000;
    gp_kv_view v = { .dtype = at_dtype(), .k = fake, .v = fake, .block_tables = ifake, .lens = ifake,
                     .positions = ifake, .n_rows = 4, .n_blocks = 10, .block_size = 16,
                     .n_kv_heads = 2, .head_dim = 64, .max_blocks = 4 };
    GP_CHECK_FAIL(gp_decode_attn(&v, 5, 4, 10, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "B = 5");
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 65, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "max_len = 65");
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 3, 10, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "n_heads = 3");
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 10, fake + 1, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "aligned");
    GP_CHECK_FAIL(gp_decode_attn(NULL, 4, 4, 10, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "NULL");
    v.dtype = GP_DTYPE_F32; /* the view's dtype: BF16 or F16 only */
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 10, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "dtype F32");
    v.dtype = GP_DTYPE_F16;
    p = gp_decode_attn_default_params();
    p.force_splits = 4;
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 64, fake, fake, NULL, 0, &p, NULL), GP_ERR_INVALID_ARG, "workspace");
    v.head_dim = 48;
    GP_CHECK_FAIL(gp_decode_attn(&v, 4, 4, 10, fake, fake, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG, "head_dim = 48");
}

/* The reference itself on cases with known answers, in both dtypes. */
static void test_reference_dt(gp_dtype dt)
{
    at_set_dtype(dt);
    enum { HD = 16, BS = 4 };
    uint16_t q[2 * HD], k[3 * BS * HD], v[3 * BS * HD]; /* 1 KV head, 3 blocks */
    for (int i = 0; i < 3 * BS * HD; i++) {
        k[i] = at_half(0.25f);
        v[i] = at_half((float)(i / HD)); /* row r of the pool holds r */
    }
    for (int i = 0; i < 2 * HD; i++)
        q[i] = at_half(1.0f);
    int32_t tables[2 * 3] = { 2, 0, 1, 1, -1, -1 };
    int32_t lens[2] = { 9, 1 };
    float out[2 * HD];
    gp_decode_attn_ref(at_dtype(), q, k, v, tables, 3, lens, 2, 1, 1, HD, BS, out);
    /* equal keys: the mean of the rows visited: blocks 2, 0 and slot 0 of 1 */
    double mean = 0.0;
    for (int t = 0; t < 9; t++)
        mean += (double)(tables[t / BS] * BS + t % BS);
    mean /= 9.0;
    for (int d = 0; d < HD; d++) {
        assert_true(fabs(out[d] - mean) < 1e-5);
        assert_true(fabs(out[HD + d] - (float)(1 * BS)) < 1e-6); /* one token: block 1 slot 0 */
    }
    lens[1] = 0;
    gp_decode_attn_ref(at_dtype(), q, k, v, tables, 3, lens, 2, 1, 1, HD, BS, out);
    for (int d = 0; d < HD; d++)
        assert_true(out[HD + d] == 0.0f);
}

static void test_reference(void **state)
{
    (void)state;
    test_reference_dt(GP_DTYPE_BF16);
    test_reference_dt(GP_DTYPE_F16);
    at_set_dtype(GP_DTYPE_BF16);
}

/* ------------------------------------------------------------ GPU cases */

typedef struct attn_case {
    const char *name;
    int head_dim, n_kv, group, B, block_size;
    int n_lens;
    int lens[8];  /* lens of the first rows */
    int rand_max; /* further rows: uniform in [1, rand_max] */
} attn_case;

static const attn_case k_cases[] = {
    { "hd16 g1 B1 bs16", 16, 2, 1, 1, 16, 1, { 1 }, 0 },
    { "hd16 g4 B3 bs1", 16, 2, 4, 3, 1, 3, { 1, 2, 1000 }, 0 },
    { "hd64 g8 B8 bs16", 64, 2, 8, 8, 16, 8, { 1, 15, 16, 17, 1000, 4097, 33, 250 }, 0 },
    { "hd128 g4 B8 bs16", 128, 8, 4, 8, 16, 8, { 4097, 1, 15, 16, 17, 1000, 129, 2048 }, 0 },
    { "hd128 g8 B3 bs1", 128, 1, 8, 3, 1, 3, { 1000, 1, 4097 }, 0 },
    { "hd128 g1 B64 bs16", 128, 4, 1, 64, 16, 5, { 1, 15, 16, 17, 1000 }, 600 },
    { "hd64 g4 B64 bs16", 64, 8, 4, 64, 16, 5, { 1, 15, 16, 17, 4097 }, 400 },
    { "hd16 g8 B64 bs1", 16, 4, 8, 64, 1, 3, { 1, 2, 1000 }, 300 },
    { "hd32 g3 B3 bs16", 32, 2, 3, 3, 16, 3, { 17, 1, 500 }, 0 },
    { "hd256 g2 B3 bs16", 256, 2, 2, 3, 16, 3, { 300, 1, 1025 }, 0 },
    { "hd128 g6 B3 bs7", 128, 2, 6, 3, 7, 3, { 8, 700, 1 }, 0 },
    { "hd64 g5 B3 bs16 with a len-0 row", 64, 1, 5, 3, 16, 3, { 0, 5, 100 }, 0 },
    { "hd128 g4 B6 bs16 with a len-0 row", 128, 2, 4, 6, 16, 6, { 17, 0, 384, 1, 16, 33 }, 0 },
    { "hd128 g8 B40 bs32", 128, 2, 8, 40, 32, 0, { 0 }, 700 },
};

/* What one run varies: the split policy and the workspace given. */
typedef struct attn_run {
    const char *name;
    gp_decode_attn_params p;
    int no_workspace;
} attn_run;

static void run_case(const attn_case *c, uint64_t *rng)
{
    const int hd = c->head_dim, n_kv = c->n_kv, nh = c->n_kv * c->group, B = c->B;
    const int bs = c->block_size;
    printf("case %s [%s]: head_dim %d, %d KV heads x group %d, B %d, block_size %d\n", c->name,
           gp_dtype_flag_name(at_dtype()), hd, n_kv, c->group, B, bs);
    int32_t *lens = at_malloc((size_t)B * sizeof *lens); /* [B] */
    int max_len = 1, max_cols = 1, total_cols = 0;
    for (int b = 0; b < B; b++) {
        lens[b] = b < c->n_lens ? c->lens[b] : 1 + at_int(rng, c->rand_max);
        int cols = (lens[b] + bs - 1) / bs;
        total_cols += cols;
        if (lens[b] > max_len)
            max_len = lens[b];
        if (cols > max_cols)
            max_cols = cols;
    }
    /* One column more than needed (left -1) and spare blocks that no row
     * owns: a read past a row's blocks faults or gives wrong values. */
    const int max_blocks = max_cols + 1;
    const int n_blocks = total_cols + 7;
    int32_t *perm = at_malloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    at_shuffle(perm, n_blocks, rng);
    int32_t *tables = at_malloc((size_t)B * max_blocks * sizeof *tables); /* [B][max_blocks] */
    int next = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < max_blocks; j++)
            tables[(size_t)b * max_blocks + j] = j < (lens[b] + bs - 1) / bs ? perm[next++] : -1;

    const size_t pool = (size_t)n_blocks * bs * n_kv * hd; /* [n_blocks][bs][n_kv][hd] */
    const size_t qn = (size_t)B * nh * hd;                 /* [B][nh][hd] */
    uint16_t *k = at_malloc(pool * sizeof *k), *v = at_malloc(pool * sizeof *v);
    uint16_t *q = at_malloc(qn * sizeof *q), *got = at_malloc(qn * sizeof *got);
    float *want = at_malloc(qn * sizeof *want);
    at_fill16(k, pool, rng, 1.0f);
    at_fill16(v, pool, rng, 1.0f);
    /* |q| up to 4: scores with a spread of ~1.3 nats, so softmax is neither
     * flat nor one-hot */
    at_fill16(q, qn, rng, 4.0f);
    gp_decode_attn_ref(at_dtype(), q, k, v, tables, max_blocks, lens, B, nh, n_kv, hd, bs, want);

    uint16_t *dk = at_dev_alloc(pool * 2), *dv = at_dev_alloc(pool * 2);
    uint16_t *dq = at_dev_alloc(qn * 2), *dout = at_dev_alloc(qn * 2);
    int32_t *dtab = at_dev_alloc((size_t)B * max_blocks * 4), *dlens = at_dev_alloc((size_t)B * 4);
    at_to_dev(dk, k, pool * 2);
    at_to_dev(dv, v, pool * 2);
    at_to_dev(dq, q, qn * 2);
    at_to_dev(dtab, tables, (size_t)B * max_blocks * 4);
    at_to_dev(dlens, lens, (size_t)B * 4);
    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .lens = dlens, .positions = NULL,
                        .n_rows = B, .n_blocks = n_blocks, .block_size = bs, .n_kv_heads = n_kv,
                        .head_dim = hd, .max_blocks = max_blocks };

    attn_run runs[7];
    int n_runs = 0;
    gp_decode_attn_params d = at_attn_params();
    runs[n_runs++] = (attn_run){ "auto", d, 0 };
    d.force_splits = 1;
    runs[n_runs++] = (attn_run){ "1 split", d, 0 };
    d.force_splits = 7; /* odd, and more splits than short rows have tokens */
    runs[n_runs++] = (attn_run){ "7 splits", d, 0 };
    d.force_splits = 64;
    runs[n_runs++] = (attn_run){ "64 splits", d, 0 };
    d = at_attn_params();
    d.sm_count = 8; /* a small partition: fewer splits */
    d.ctas_per_sm_hint = 1;
    runs[n_runs++] = (attn_run){ "partition of 8 SMs", d, 0 };
    d = at_attn_params();
    d.sm_count = 1; /* one SM: the streaming kernel's warps take many items each */
    runs[n_runs++] = (attn_run){ "partition of 1 SM", d, 0 };
    d = at_attn_params();
    d.sm_count = 1000; /* wants many splits, but no workspace: falls back to 1 */
    runs[n_runs++] = (attn_run){ "no workspace", d, 1 };

    size_t ws_bytes = gp_decode_attn_workspace_bytes(B, nh, hd, 64);
    for (int r = 0; r < n_runs; r++) {
        int n;
        at_check(gp_decode_attn_splits(B, nh, n_kv, hd, max_len, &runs[r].p, &n), "splits");
        size_t w = gp_decode_attn_workspace_bytes(B, nh, hd, n);
        if (w > ws_bytes)
            ws_bytes = w;
    }
    void *ws = at_dev_alloc(ws_bytes);

    size_t fails = 0;
    for (int r = 0; r < n_runs; r++) {
        int n;
        at_check(gp_decode_attn_splits(B, nh, n_kv, hd, max_len, &runs[r].p, &n), "splits");
        if (runs[r].no_workspace)
            printf(" run %s (the heuristic wants %d split%s; without workspace 1 runs)\n",
                   runs[r].name, n, n == 1 ? "" : "s");
        else
            printf(" run %s (%d split%s)\n", runs[r].name, n, n == 1 ? "" : "s");
        at_dev_poison(ws, ws_bytes);
        at_dev_poison(dout, qn * 2);
        at_check(gp_decode_attn(&view, B, nh, max_len, dq, dout, runs[r].no_workspace ? NULL : ws,
                                runs[r].no_workspace ? 0 : ws_bytes, &runs[r].p, NULL),
                 "gp_decode_attn");
        at_dev_sync();
        at_to_host(got, dout, qn * 2);
        char what[160];
        snprintf(what, sizeof what, "%s / %s", c->name, runs[r].name);
        fails += at_compare(what, got, want, (size_t)B * nh, (size_t)hd, TOL_ELEM_REL, TOL_ROW_ABS,
                            TOL_ROW_REL);
    }

    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dq);
    at_dev_free(dout);
    at_dev_free(dtab);
    at_dev_free(dlens);
    at_dev_free(ws);
    free(lens);
    free(perm);
    free(tables);
    free(k);
    free(v);
    free(q);
    free(got);
    free(want);
    if (fails)
        fail_msg("case %s: %zu mismatches (seed %llu)", c->name, fails,
                 (unsigned long long)g_seed);
}

static void test_gpu_cases(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        run_case(&k_cases[i], &rng);
}

/* Results must not depend on max_len: it only steers the split count. */
static void test_gpu_max_len_is_a_hint(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed) ^ 0x5bd1e995u;
    const int hd = 64, nh = 8, B = 2, bs = 16, max_blocks = 200, n_blocks = 200;
    int32_t lens[2] = { 3000, 40 };
    int32_t *tables = at_malloc((size_t)B * max_blocks * sizeof *tables);
    int32_t *perm = at_malloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    at_shuffle(perm, n_blocks, &rng);
    for (int i = 0; i < B * max_blocks; i++)
        tables[i] = perm[i % n_blocks];
    const size_t pool = (size_t)n_blocks * bs * 2 * hd, qn = (size_t)B * nh * hd;
    uint16_t *k = at_malloc(pool * 2), *v = at_malloc(pool * 2), *q = at_malloc(qn * 2);
    uint16_t *got = at_malloc(qn * 2);
    float *want = at_malloc(qn * sizeof *want);
    at_fill16(k, pool, &rng, 1.0f);
    at_fill16(v, pool, &rng, 1.0f);
    at_fill16(q, qn, &rng, 4.0f);
    gp_decode_attn_ref(at_dtype(), q, k, v, tables, max_blocks, lens, B, nh, 2, hd, bs, want);
    uint16_t *dk = at_dev_alloc(pool * 2), *dv = at_dev_alloc(pool * 2), *dq = at_dev_alloc(qn * 2);
    uint16_t *dout = at_dev_alloc(qn * 2);
    int32_t *dtab = at_dev_alloc((size_t)B * max_blocks * 4), *dlens = at_dev_alloc(8);
    at_to_dev(dk, k, pool * 2);
    at_to_dev(dv, v, pool * 2);
    at_to_dev(dq, q, qn * 2);
    at_to_dev(dtab, tables, (size_t)B * max_blocks * 4);
    at_to_dev(dlens, lens, 8);
    gp_kv_view view = { .dtype = at_dtype(), .k = dk, .v = dv, .block_tables = dtab, .lens = dlens, .n_rows = B,
                        .n_blocks = n_blocks, .block_size = bs, .n_kv_heads = 2, .head_dim = hd,
                        .max_blocks = max_blocks };
    gp_decode_attn_params p = at_attn_params();
    p.sm_count = 1000;
    size_t ws_bytes = gp_decode_attn_workspace_bytes(B, nh, hd, GP_DECODE_ATTN_MAX_SPLITS);
    void *ws = at_dev_alloc(ws_bytes);
    size_t fails = 0;
    const int hints[3] = { 64, 640, 3200 }; /* under, under, over the true 3000 */
    for (int i = 0; i < 3; i++) {
        at_dev_poison(dout, qn * 2);
        at_check(gp_decode_attn(&view, B, nh, hints[i], dq, dout, ws, ws_bytes, &p, NULL),
                 "gp_decode_attn");
        at_dev_sync();
        at_to_host(got, dout, qn * 2);
        fails += at_compare("max_len hint", got, want, (size_t)B * nh, (size_t)hd, TOL_ELEM_REL,
                            TOL_ROW_ABS, TOL_ROW_REL);
    }
    at_dev_free(dk);
    at_dev_free(dv);
    at_dev_free(dq);
    at_dev_free(dout);
    at_dev_free(dtab);
    at_dev_free(dlens);
    at_dev_free(ws);
    free(tables);
    free(perm);
    free(k);
    free(v);
    free(q);
    free(got);
    free(want);
    if (fails)
        fail_msg("max_len hint: %zu mismatches (seed %llu)", fails, (unsigned long long)g_seed);
}

int main(int argc, char **argv)
{
    g_seed = at_seed("attn_decode");
    at_attn_args("attn_decode", argc, argv);
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_splits_heuristic),
        cmocka_unit_test(test_arg_checks),
        cmocka_unit_test(test_reference),
    };
    int failed = cmocka_run_group_tests_name("decode attention (host)", host_tests, NULL, NULL);
    if (failed)
        return 1;
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest gpu_tests[] = {
        AT_GPU_TEST(test_gpu_cases),
        AT_GPU_TEST(test_gpu_max_len_is_a_hint),
    };
    return cmocka_run_group_tests_name("decode attention (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
