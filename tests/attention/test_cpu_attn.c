/* The CPU partial decode attention (gp_cpu_attn_partial) and the
 * log-sum-exp merge (gp_attn_merge_lse): two partials over a split of each
 * row's blocks, merged, against the double reference over the whole row;
 * results independent of the thread count and of the AVX2 path; argument
 * refusals. Host only: runs without a GPU. */
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
#include "gp_attention.h"
#include "gp_kvcache.h"

/* Float32 sums over at most a few hundred positions against double: the
 * worst element error relative to its row's largest |reference| value. */
#define O_TOL 2e-5
#define LSE_TOL 2e-5 /* absolute, on values of a few units */

typedef struct shape {
    int n_heads, n_kv_heads, head_dim, block_size, chunk;
    int B;
    int lens[4];
} shape;

/* Host cache and tables of one test case: the pool's blocks handed out in a
 * shuffled order so that no row's table is contiguous. */
typedef struct fixture {
    gp_kv_layout l;
    int max_blocks;
    uint16_t *k, *v, *q16;
    float *q;
    int32_t *tables;
} fixture;

static void fixture_make(fixture *f, const shape *s, uint64_t *rng)
{
    int max_len = 1;
    int n_blocks = 0;
    for (int b = 0; b < s->B; b++) {
        max_len = s->lens[b] > max_len ? s->lens[b] : max_len;
        n_blocks += (s->lens[b] + s->block_size - 1) / s->block_size;
    }
    n_blocks += 3; /* blocks no row uses */
    f->max_blocks = (max_len + s->block_size - 1) / s->block_size + 1;
    f->l = (gp_kv_layout){.n_layers = 1, .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim,
                          .block_size = s->block_size, .n_blocks = n_blocks};
    const size_t pool = (size_t)n_blocks * s->block_size * s->n_kv_heads * s->head_dim;
    f->k = at_malloc(pool * 2), f->v = at_malloc(pool * 2);
    at_fill16(f->k, pool, rng, 1.0f);
    at_fill16(f->v, pool, rng, 1.0f);
    const size_t nq = (size_t)s->B * s->n_heads * s->head_dim;
    f->q16 = at_malloc(nq * 2), f->q = at_malloc(nq * sizeof(float));
    at_fill16(f->q16, nq, rng, 1.0f);
    for (size_t i = 0; i < nq; i++)
        f->q[i] = at_f32(f->q16[i]);
    int32_t *ids = at_malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++)
        ids[i] = i;
    at_shuffle(ids, n_blocks, rng);
    f->tables = at_malloc(sizeof(int32_t) * s->B * f->max_blocks);
    int next = 0;
    for (int b = 0; b < s->B; b++)
        for (int j = 0; j < f->max_blocks; j++)
            f->tables[b * f->max_blocks + j] =
                j < (s->lens[b] + s->block_size - 1) / s->block_size ? ids[next++] : -1;
    free(ids);
}

static void fixture_free(fixture *f)
{
    free(f->k), free(f->v), free(f->q16), free(f->q), free(f->tables);
}

/* lse of the whole row in double: what the merged partials must give. */
static double ref_lse(const fixture *f, const shape *s, int b, int h)
{
    const int G = s->n_heads / s->n_kv_heads, hd = s->head_dim, len = s->lens[b];
    const float *q = f->q + ((size_t)b * s->n_heads + h) * hd;
    double *sc = malloc(sizeof(double) * (len > 0 ? len : 1)), m = -INFINITY, sum = 0.0;
    for (int t = 0; t < len; t++) {
        const size_t off = gp_kv_offset(&f->l, f->tables[b * f->max_blocks + t / s->block_size],
                                        t % s->block_size, h / G);
        double d = 0.0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * at_f32(f->k[off + i]);
        sc[t] = d / sqrt((double)hd);
        m = sc[t] > m ? sc[t] : m;
    }
    for (int t = 0; t < len; t++)
        sum += exp(sc[t] - m);
    free(sc);
    return len > 0 ? m + log(sum) : -INFINITY;
}

static gp_cpu_attn *make(int threads, int chunk, int simd)
{
    gp_cpu_attn_params p = gp_cpu_attn_default_params();
    p.n_threads = threads, p.chunk_positions = chunk, p.simd = simd;
    gp_cpu_attn *a = NULL;
    at_check(gp_cpu_attn_create(&p, &a), "gp_cpu_attn_create");
    return a;
}

/* Row b's blocks split at a random block boundary: partial A over the
 * first ones, partial B over the rest (its table starts at the split). */
static void check_split_merge(const shape *s, uint64_t *rng)
{
    fixture f;
    fixture_make(&f, s, rng);
    const int B = s->B, nh = s->n_heads, hd = s->head_dim, bs = s->block_size, mb = f.max_blocks;
    int32_t *ta = at_malloc(sizeof(int32_t) * B * mb), *tb = at_malloc(sizeof(int32_t) * B * mb);
    int32_t la[4], lb[4];
    for (int b = 0; b < B; b++) {
        const int nb = (s->lens[b] + bs - 1) / bs, split = at_int(rng, nb + 1);
        la[b] = split * bs < s->lens[b] ? split * bs : s->lens[b];
        lb[b] = s->lens[b] - la[b];
        for (int j = 0; j < mb; j++) {
            ta[b * mb + j] = f.tables[b * mb + j];
            tb[b * mb + j] = split + j < mb ? f.tables[b * mb + split + j] : -1;
        }
    }
    const size_t no = (size_t)B * nh * hd, nl = (size_t)B * nh;
    float *oa = at_malloc(no * 4), *ob = at_malloc(no * 4), *lsa = at_malloc(nl * 4), *lsb = at_malloc(nl * 4);
    float *ref = at_malloc(no * 4);
    gp_cpu_attn *a = make(3, s->chunk, 1);
    at_check(gp_cpu_attn_partial(a, &f.l, at_dtype(), f.k, f.v, ta, mb, la, B, nh, f.q, oa, lsa), "partial A");
    at_check(gp_cpu_attn_partial(a, &f.l, at_dtype(), f.k, f.v, tb, mb, lb, B, nh, f.q, ob, lsb), "partial B");
    at_check(gp_attn_merge_lse(B * nh, hd, oa, lsa, ob, lsb, oa, lsa), "merge"); /* in place */
    int32_t lens[4];
    memcpy(lens, s->lens, sizeof lens);
    gp_decode_attn_ref(at_dtype(), f.q16, f.k, f.v, f.tables, mb, lens, B, nh, s->n_kv_heads, hd, bs, ref);
    double worst = 0.0, worst_lse = 0.0;
    for (int r = 0; r < B * nh; r++) {
        const int b = r / nh;
        double mx = 0.0, err = 0.0;
        for (int d = 0; d < hd; d++) {
            mx = fmax(mx, fabs(ref[(size_t)r * hd + d]));
            err = fmax(err, fabs((double)oa[(size_t)r * hd + d] - ref[(size_t)r * hd + d]));
        }
        if (s->lens[b] == 0) {
            assert_true(err == 0.0);
            assert_true(isinf(lsa[r]) && lsa[r] < 0);
            continue;
        }
        worst = fmax(worst, err / mx);
        worst_lse = fmax(worst_lse, fabs(lsa[r] - ref_lse(&f, s, b, r % nh)));
    }
    printf("  %s heads %d/%d hd %d bs %d chunk %d lens %d,%d,%d (split %d,%d,%d): o err %.2e, lse err %.2e\n",
           gp_dtype_flag_name(at_dtype()), nh, s->n_kv_heads, hd, bs, s->chunk, s->lens[0], s->lens[1],
           s->lens[2], la[0], la[1], la[2], worst, worst_lse);
    assert_true(worst <= O_TOL);
    assert_true(worst_lse <= LSE_TOL);
    gp_cpu_attn_destroy(a);
    free(ta), free(tb), free(oa), free(ob), free(lsa), free(lsb), free(ref);
    fixture_free(&f);
}

static void test_split_merge(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(at_seed("cpu_attn split merge"));
    const shape shapes[] = {
        {.n_heads = 2, .n_kv_heads = 2, .head_dim = 64, .block_size = 16, .chunk = 32, .B = 3, .lens = {37, 1, 300}},
        {.n_heads = 8, .n_kv_heads = 2, .head_dim = 128, .block_size = 16, .chunk = 256, .B = 3,
         .lens = {300, 17, 0}},
        {.n_heads = 16, .n_kv_heads = 2, .head_dim = 128, .block_size = 16, .chunk = 16, .B = 3,
         .lens = {95, 200, 33}},
        {.n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .block_size = 16, .chunk = 64, .B = 3,
         .lens = {129, 250, 7}},
        {.n_heads = 18, .n_kv_heads = 3, .head_dim = 48, .block_size = 7, .chunk = 20, .B = 3, .lens = {50, 6, 71}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int rep = 0; rep < 3; rep++) /* new data and splits each time */
            check_split_merge(&shapes[i], &rng);
}

/* The same call on 1 and 4 threads, plain and AVX2 loops: the same bits. */
static void check_bitwise(const shape *s, uint64_t *rng)
{
    fixture f;
    fixture_make(&f, s, rng);
    const size_t no = (size_t)s->B * s->n_heads * s->head_dim, nl = (size_t)s->B * s->n_heads;
    float *o[3], *lse[3];
    const int threads[3] = {1, 4, 4}, simd[3] = {1, 1, 0};
    int32_t lens[4];
    memcpy(lens, s->lens, sizeof lens);
    for (int i = 0; i < 3; i++) {
        o[i] = at_malloc(no * 4), lse[i] = at_malloc(nl * 4);
        gp_cpu_attn *a = make(threads[i], s->chunk, simd[i]);
        assert_int_equal(gp_cpu_attn_threads(a), threads[i]);
        if (i == 0)
            printf("  AVX2 loops on this CPU: %s\n", gp_cpu_attn_uses_simd(a) ? "yes" : "no");
        at_check(gp_cpu_attn_partial(a, &f.l, at_dtype(), f.k, f.v, f.tables, f.max_blocks, lens, s->B,
                                     s->n_heads, f.q, o[i], lse[i]), "partial");
        gp_cpu_attn_destroy(a);
    }
    for (int i = 1; i < 3; i++) {
        assert_memory_equal(o[0], o[i], no * 4);
        assert_memory_equal(lse[0], lse[i], nl * 4);
    }
    for (int i = 0; i < 3; i++)
        free(o[i]), free(lse[i]);
    fixture_free(&f);
}

static void test_bitwise(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(at_seed("cpu_attn bitwise"));
    const shape shapes[] = {
        {.n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .block_size = 16, .chunk = 64, .B = 4,
         .lens = {700, 3, 129, 0}},
        {.n_heads = 18, .n_kv_heads = 3, .head_dim = 48, .block_size = 7, .chunk = 16, .B = 3, .lens = {90, 1, 33}},
        {.n_heads = 16, .n_kv_heads = 1, .head_dim = 64, .block_size = 32, .chunk = 128, .B = 2, .lens = {300, 64}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_bitwise(&shapes[i], &rng);
}

static void test_merge_empty(void **state)
{
    (void)state;
    const float oa[4] = {1, 2, 3, 4}, la[2] = {0.5f, -INFINITY};
    const float ob[4] = {0, 0, 0, 0}, lb[2] = {-INFINITY, -INFINITY};
    float o[4], l[2];
    at_check(gp_attn_merge_lse(2, 2, oa, la, ob, lb, o, l), "merge");
    assert_memory_equal(o, oa, 2 * sizeof(float)); /* an empty side changes nothing */
    assert_true(l[0] == 0.5f);
    assert_true(o[2] == 0.0f && o[3] == 0.0f && isinf(l[1]) && l[1] < 0); /* both empty */
}

static void expect_refusal(gp_status st, const char *needle)
{
    assert_int_equal(st, GP_ERR_INVALID_ARG);
    if (!strstr(gp_last_error(), needle))
        fail_msg("message '%s' does not name '%s'", gp_last_error(), needle);
}

static void test_refusals(void **state)
{
    (void)state;
    gp_cpu_attn_params p = gp_cpu_attn_default_params();
    assert_int_equal(p.n_threads, 0);
    assert_int_equal(p.chunk_positions, 256);
    assert_int_equal(p.simd, 1);
    gp_cpu_attn *a = NULL;
    p.n_threads = 17;
    expect_refusal(gp_cpu_attn_create(&p, &a), "n_threads 17");
    p.n_threads = -1;
    expect_refusal(gp_cpu_attn_create(&p, &a), "n_threads -1");
    p = gp_cpu_attn_default_params();
    p.chunk_positions = 8;
    expect_refusal(gp_cpu_attn_create(&p, &a), "chunk_positions 8");
    p = gp_cpu_attn_default_params();
    p.simd = 2;
    expect_refusal(gp_cpu_attn_create(&p, &a), "simd 2");
    expect_refusal(gp_cpu_attn_create(NULL, &a), "NULL");
    assert_null(a);

    a = make(2, 16, 1);
    gp_kv_layout l = {.n_layers = 1, .n_kv_heads = 2, .head_dim = 16, .block_size = 4, .n_blocks = 4};
    uint16_t k[4 * 4 * 2 * 16] = {0}, v[4 * 4 * 2 * 16] = {0};
    int32_t tables[2 * 2] = {0, 1, 2, 3}, lens[2] = {5, 8};
    float q[2 * 4 * 16] = {0}, o[2 * 4 * 16], lse[2 * 4];
#define CALL(dt, lay, tb, mb, ln, n_heads, qq) gp_cpu_attn_partial(a, lay, dt, k, v, tb, mb, ln, 2, n_heads, qq, o, lse)
    at_check(CALL(GP_DTYPE_BF16, &l, tables, 2, lens, 4, q), "a valid call");
    expect_refusal(CALL(GP_DTYPE_F32, &l, tables, 2, lens, 4, q), "F32");
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 2, lens, 5, q), "n_heads 5");
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 2, lens, 34, q), "n_heads 34"); /* group 17 */
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 0, lens, 4, q), "max_blocks 0");
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 2, lens, 4, NULL), "q (nil)");
    gp_kv_layout bad = l;
    bad.head_dim = 12;
    expect_refusal(CALL(GP_DTYPE_BF16, &bad, tables, 2, lens, 4, q), "head_dim 12");
    bad.head_dim = 40;
    expect_refusal(CALL(GP_DTYPE_BF16, &bad, tables, 2, lens, 4, q), "head_dim 40");
    bad = l;
    bad.block_size = 0;
    expect_refusal(CALL(GP_DTYPE_BF16, &bad, tables, 2, lens, 4, q), "block_size 0");
    int32_t bad_lens[2] = {5, 9};
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 2, bad_lens, 4, q), "lens[1] = 9");
    bad_lens[1] = -1;
    expect_refusal(CALL(GP_DTYPE_BF16, &l, tables, 2, bad_lens, 4, q), "lens[1] = -1");
    int32_t bad_tables[4] = {0, 1, 2, 4};
    expect_refusal(CALL(GP_DTYPE_BF16, &l, bad_tables, 2, lens, 4, q), "block_tables[1][1] = 4");
    bad_tables[3] = -1;
    expect_refusal(CALL(GP_DTYPE_BF16, &l, bad_tables, 2, lens, 4, q), "block_tables[1][1] = -1");
    /* a table entry past the row's length is never read: -1 there is fine */
    bad_tables[1] = -1;
    lens[0] = 4;
    bad_tables[3] = 3;
    at_check(CALL(GP_DTYPE_BF16, &l, bad_tables, 2, lens, 4, q), "unused entries");
#undef CALL
    expect_refusal(gp_cpu_attn_partial(NULL, &l, GP_DTYPE_BF16, k, v, tables, 2, lens, 2, 4, q, o, lse), "NULL");
    expect_refusal(gp_cpu_attn_partial(a, &l, GP_DTYPE_BF16, k, v, tables, 2, lens, -1, 4, q, o, lse), "B -1");
    gp_cpu_attn_destroy(a);

    expect_refusal(gp_attn_merge_lse(0, 16, o, lse, o, lse, o, lse), "n_rows 0");
    expect_refusal(gp_attn_merge_lse(1, 16, o, lse, NULL, lse, o, lse), "o_b (nil)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        AT_GPU_TEST(test_split_merge),
        AT_GPU_TEST(test_bitwise),
        cmocka_unit_test(test_merge_empty),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests_name("CPU partial decode attention", tests, NULL, NULL);
}
