/* gp_embed against its CPU reference, in both engine dtypes: exact rows (the
 * widening of bf16 or fp16 to fp32 is exact), NaN rows for token ids outside
 * the vocabulary, zero rows for the ids a table cut by vocabulary does not
 * hold, nothing written past the output. */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "gp_test_cuda.h"

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16; /* the pass being run (main runs each of gt_dtypes) */

/* bad_ids: put -1 and V among the tokens (rows must come back NaN). The
 * table holds ids [lo, lo + rows). */
static void run_part(int B, int H, int V, int lo, int rows, int misalign, int bad_ids, gt_rng *rng, cudaStream_t s)
{
    size_t n = (size_t)B * (size_t)H, tn = (size_t)rows * (size_t)H, off = misalign ? 1 : 0;
    int32_t *tok = gt_host_alloc((size_t)B * sizeof(int32_t));   /* [B] */
    uint16_t *table = gt_host_alloc(tn * sizeof(uint16_t));        /* [rows][H] */
    float *got = gt_host_alloc(n * sizeof(float)), *ref = gt_host_alloc(n * sizeof(float));
    for (size_t i = 0; i < tn; i++)
        table[i] = gt_half(rng, -1.0f, 1.0f, g_dt);
    for (int b = 0; b < B; b++)
        tok[b] = b > 0 && gt_below(rng, 4) == 0 ? tok[b - 1] : gt_below(rng, V); /* repeats too */
    if (bad_ids) {
        tok[0] = -1;
        if (B > 1)
            tok[B - 1] = V;
    }
    size_t tb = (size_t)B * sizeof(int32_t), bb = (tn + off) * sizeof(uint16_t);
    size_t rb = (n + off) * sizeof(float);
    int32_t *d_tok = gt_dev_alloc(tb);
    char *d_table = gt_dev_alloc(bb), *d_resid = gt_dev_alloc(rb);
    gt_poison(d_tok, tb), gt_poison(d_table, bb), gt_poison(d_resid, rb);
    uint16_t *table_d = (uint16_t *)d_table + off;
    float *resid = (float *)d_resid + off;
    gt_upload(d_tok, tok, tb);
    gt_upload(table_d, table, tn * sizeof(uint16_t));

    GP_CHECK_OK(gp_embed(g_dt, d_tok, table_d, resid, B, H, V, lo, rows, s));
    gt_download(got, resid, n * sizeof(float));
    gp_embed_ref(g_dt, tok, table, ref, B, H, V, lo, rows);

    size_t bad = gt_check_close("resid", got, ref, n, H, 0.0, 0.0); /* exact; NaN == NaN */
    gt_guard_check(d_resid, rb, "resid");
    if (bad)
        fail_msg("embed %s B=%d H=%d V=%d rows [%d, %d) misalign=%d bad_ids=%d: %zu mismatches (seed %llu)",
                 gp_dtype_flag_name(g_dt), B, H, V, lo, lo + rows, misalign, bad_ids, bad, (unsigned long long)g_seed);
    gt_dev_free(d_tok), gt_dev_free(d_table), gt_dev_free(d_resid);
    free(tok), free(table), free(got), free(ref);
}

static void run_case(int B, int H, int V, int misalign, int bad_ids, gt_rng *rng, cudaStream_t s)
{
    run_part(B, H, V, 0, V, misalign, bad_ids, rng, s);
}

static void test_shapes(void **state)
{
    (void)state;
    gt_rng rng = { g_seed };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    static const int Hs[] = { 64, 96, 4096, 4095, 1 };
    static const int Bs[] = { 1, 3, 8, 64 };
    for (size_t h = 0; h < sizeof Hs / sizeof Hs[0]; h++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++)
            run_case(Bs[b], Hs[h], 1000, 0, 0, &rng, s);
    run_case(8, 4096, 3, 1, 0, &rng, s);   /* misaligned: scalar path */
    run_case(64, 64, 1, 0, 0, &rng, s);    /* one-token vocabulary */
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

/* Tables cut by vocabulary as tensor parallel ranks hold them: the first,
 * a middle and the last part (its rows past the vocabulary unused), and
 * ids outside [0, V) still NaN. */
static void test_vocab_parts(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 2 };
    run_part(64, 4096, 1000, 0, 334, 0, 0, &rng, NULL);
    run_part(64, 4096, 1000, 334, 334, 0, 0, &rng, NULL);
    run_part(64, 4096, 1000, 668, 334, 0, 1, &rng, NULL);
    run_part(16, 4095, 17, 9, 9, 1, 1, &rng, NULL);
}

static void test_out_of_range_ids(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 1 };
    run_case(3, 4096, 1000, 0, 1, &rng, NULL);
    run_case(8, 4095, 17, 0, 1, &rng, NULL);
    run_case(1, 96, 5, 0, 1, &rng, NULL);
}

static void test_bad_args(void **state)
{
    (void)state;
    int32_t *t = (int32_t *)(uintptr_t)0x1000;
    uint16_t *tb = (uint16_t *)(uintptr_t)0x2000;
    float *r = (float *)(uintptr_t)0x3000;
    GP_CHECK_FAIL(gp_embed(g_dt, t, tb, r, -2, 64, 10, 0, 10, NULL), GP_ERR_INVALID_ARG, "B = -2");
    GP_CHECK_FAIL(gp_embed(g_dt, t, tb, r, 2, 0, 10, 0, 10, NULL), GP_ERR_INVALID_ARG, "H = 0");
    GP_CHECK_FAIL(gp_embed(g_dt, t, tb, r, 2, 64, 0, 0, 1, NULL), GP_ERR_INVALID_ARG, "V = 0");
    GP_CHECK_FAIL(gp_embed(g_dt, t, tb, r, 2, 64, 10, 10, 1, NULL), GP_ERR_INVALID_ARG, "rows [10, 10 + 1)");
    GP_CHECK_FAIL(gp_embed(g_dt, t, tb, r, 2, 64, 10, 0, 0, NULL), GP_ERR_INVALID_ARG, "rows [0, 0 + 0)");
    GP_CHECK_FAIL(gp_embed(g_dt, NULL, tb, r, 2, 64, 10, 0, 10, NULL), GP_ERR_INVALID_ARG, "tokens (nil)");
    GP_CHECK_OK(gp_embed(g_dt, NULL, NULL, NULL, 0, 64, 10, 0, 10, NULL));
    GP_CHECK_FAIL(gp_embed(GP_DTYPE_F32, t, tb, r, 2, 64, 10, 0, 10, NULL), GP_ERR_INVALID_ARG, "dtype F32");
}

int main(void)
{
    const struct CMUnitTest host[] = { cmocka_unit_test(test_bad_args) };
    if (cmocka_run_group_tests_name("embed arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_embed"))
        return 77;
    g_seed = gt_seed("engine_embed");
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_out_of_range_ids),
        cmocka_unit_test(test_vocab_parts),
    };
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[64];
        snprintf(name, sizeof name, "%s on the GPU, %s", "embed", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
