/* gp_rmsnorm_residual against its CPU reference, in both engine dtypes:
 * residual add (fp32, exact) and the 16-bit output within 8e-3 (bf16) or
 * 2e-3 + 6e-8 absolute (fp16) relative per element of a double reference. */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "gp_test_cuda.h"

/* bf16: one rounding (<= 2^-8 relative) plus fp32 sum error. fp16: one
 * rounding (<= 2^-11) plus the same with a 4x margin, and for outputs below
 * fp16's normal range half its subnormal spacing 2^-24 as an absolute term. */
#define OUT_REL (g_dt == GP_DTYPE_F16 ? 2e-3 : 8e-3)
#define OUT_ABS (g_dt == GP_DTYPE_F16 ? 6e-8 : 1e-30)
#define RESID_REL 1e-6 /* the add is the same single fp32 operation on both sides */

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16; /* the pass being run (main runs each of gt_dtypes) */

/* One case. misalign shifts resid/out/delta/w by one element, forcing the
 * scalar path even when H % 4 == 0. */
static void run_case(int B, int H, int with_delta, int misalign, gt_rng *rng, cudaStream_t s)
{
    const float eps = 1e-5f;
    size_t n = (size_t)B * (size_t)H, off = misalign ? 1 : 0;
    float *resid0 = gt_host_alloc(n * sizeof(float));     /* [B][H] */
    float *resid_ref = gt_host_alloc(n * sizeof(float));  /* [B][H] */
    float *resid_got = gt_host_alloc(n * sizeof(float));  /* [B][H] */
    float *out_ref = gt_host_alloc(n * sizeof(float));    /* [B][H] */
    float *out_got = gt_host_alloc(n * sizeof(float));    /* [B][H] */
    uint16_t *delta = gt_host_alloc(n * sizeof(uint16_t));  /* [B][H] */
    uint16_t *w = gt_host_alloc((size_t)H * sizeof(uint16_t));
    uint16_t *outb = gt_host_alloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        /* rows of different scales: the norm must not depend on magnitude */
        float scale = (float)(1 + (int)(i / (size_t)H) % 5);
        resid0[i] = gt_uniform(rng, -3.0f, 3.0f) * scale;
        delta[i] = gt_half(rng, -2.0f, 2.0f, g_dt);
    }
    for (int i = 0; i < H; i++)
        w[i] = gt_half(rng, -1.5f, 1.5f, g_dt);

    size_t rb = (n + off) * sizeof(float), db = (n + off) * sizeof(uint16_t);
    size_t wb = ((size_t)H + off) * sizeof(uint16_t);
    char *d_resid = gt_dev_alloc(rb), *d_delta = gt_dev_alloc(db), *d_w = gt_dev_alloc(wb);
    char *d_out = gt_dev_alloc(db);
    gt_poison(d_resid, rb), gt_poison(d_delta, db), gt_poison(d_w, wb), gt_poison(d_out, db);
    float *resid = (float *)d_resid + off;
    uint16_t *dl = (uint16_t *)d_delta + off, *wt = (uint16_t *)d_w + off, *out = (uint16_t *)d_out + off;
    gt_upload(resid, resid0, n * sizeof(float));
    gt_upload(dl, delta, n * sizeof(uint16_t));
    gt_upload(wt, w, (size_t)H * sizeof(uint16_t));

    GP_CHECK_OK(gp_rmsnorm_residual(g_dt, resid, with_delta ? dl : NULL, wt, out, B, H, eps, s));
    gt_download(resid_got, resid, n * sizeof(float));
    gt_download(outb, out, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        out_got[i] = gp_half_to_f32(outb[i], g_dt);
    memcpy(resid_ref, resid0, n * sizeof(float));
    gp_rmsnorm_residual_ref(g_dt, resid_ref, with_delta ? delta : NULL, w, out_ref, B, H, eps);

    char what[96];
    snprintf(what, sizeof what, "%s B=%d H=%d delta=%d misalign=%d", gp_dtype_flag_name(g_dt), B, H,
             with_delta, misalign);
    size_t bad = gt_check_close("resid", resid_got, resid_ref, n, H, RESID_REL, 0.0);
    bad += gt_check_close("out", out_got, out_ref, n, H, OUT_REL, OUT_ABS);
    gt_guard_check(d_resid, rb, "resid");
    gt_guard_check(d_out, db, "out");
    if (bad)
        fail_msg("rmsnorm %s: %zu mismatches (seed %llu)", what, bad, (unsigned long long)g_seed);

    gt_dev_free(d_resid), gt_dev_free(d_delta), gt_dev_free(d_w), gt_dev_free(d_out);
    free(resid0), free(resid_ref), free(resid_got), free(out_ref), free(out_got);
    free(delta), free(w), free(outb);
}

static void test_shapes(void **state)
{
    (void)state;
    gt_rng rng = { g_seed };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    static const int Hs[] = { 64, 96, 4096, 4095, 8192, 2052, 12288, 1, 3 };
    static const int Bs[] = { 1, 3, 8, 64 };
    for (size_t h = 0; h < sizeof Hs / sizeof Hs[0]; h++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++)
            for (int d = 0; d < 2; d++)
                run_case(Bs[b], Hs[h], d, 0, &rng, s);
    run_case(3, 64, 1, 1, &rng, s);
    run_case(8, 4096, 1, 1, &rng, s);
    run_case(5, 4096, 0, 1, &rng, s);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

/* B = 0 launches nothing (no pointers needed) */
static void test_empty_batch(void **state)
{
    (void)state;
    GP_CHECK_OK(gp_rmsnorm_residual(g_dt, NULL, NULL, NULL, NULL, 0, 4096, 1e-5f, NULL));
}

static void test_bad_args(void **state)
{
    (void)state;
    float *r = (float *)(uintptr_t)0x1000; /* never dereferenced: checks come first */
    uint16_t *b = (uint16_t *)(uintptr_t)0x2000, *o = (uint16_t *)(uintptr_t)0x3000;
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, b, o, -1, 64, 1e-5f, NULL), GP_ERR_INVALID_ARG, "B = -1");
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, b, o, 2, 0, 1e-5f, NULL), GP_ERR_INVALID_ARG, "H = 0");
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, b, o, 2, 64, -1.0f, NULL), GP_ERR_INVALID_ARG, "eps = -1");
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, b, o, 2, 64, NAN, NULL), GP_ERR_INVALID_ARG, "eps = nan");
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, NULL, o, 2, 64, 1e-5f, NULL), GP_ERR_INVALID_ARG, "w (nil)");
    GP_CHECK_FAIL(gp_rmsnorm_residual(g_dt, r, b, b, b, 2, 64, 1e-5f, NULL), GP_ERR_INVALID_ARG, "aliases");
    GP_CHECK_FAIL(gp_rmsnorm_residual(GP_DTYPE_F32, r, b, b, o, 2, 64, 1e-5f, NULL), GP_ERR_INVALID_ARG,
                  "dtype F32");
}

int main(void)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_empty_batch),
    };
    if (cmocka_run_group_tests_name("rmsnorm arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_rmsnorm"))
        return 77;
    g_seed = gt_seed("engine_rmsnorm");
    const struct CMUnitTest gpu[] = { cmocka_unit_test(test_shapes) };
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[64];
        snprintf(name, sizeof name, "%s on the GPU, %s", "rmsnorm", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
