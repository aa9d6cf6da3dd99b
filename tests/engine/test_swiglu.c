/* gp_swiglu (ffn/) against its double CPU reference, in both engine dtypes:
 * bf16 output within 8e-3 relative per element, fp16 within 2e-3 relative
 * plus 6e-8 absolute; vector and scalar paths. */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ffn_kernels.h"
#include "gp_test_cuda.h"

/* bf16: one rounding (<= 2^-8 relative) plus fp32 expf error. fp16: one
 * rounding (<= 2^-11) plus the same, with a 4x margin; and an absolute term
 * for results below fp16's normal range (6.1e-5), where the rounding step is
 * the subnormal spacing 2^-24 (error <= 3e-8). */
#define SWIGLU_REL (g_dt == GP_DTYPE_F16 ? 2e-3 : 8e-3)
#define SWIGLU_ABS (g_dt == GP_DTYPE_F16 ? 6e-8 : 1e-30)

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16; /* the pass being run (main runs each of gt_dtypes) */

static void run_case(int B, int F, int misalign, gt_rng *rng, cudaStream_t s)
{
    size_t n = (size_t)B * (size_t)F, off = misalign ? 1 : 0;
    uint16_t *gu = gt_host_alloc(2 * n * sizeof(uint16_t)); /* [B][2F] */
    uint16_t *outb = gt_host_alloc(n * sizeof(uint16_t));   /* [B][F] */
    float *got = gt_host_alloc(n * sizeof(float)), *ref = gt_host_alloc(n * sizeof(float));
    /* |g| <= 8 keeps silu(g) far from fp32 underflow, so relative error is
     * meaningful for every element */
    for (size_t i = 0; i < 2 * n; i++)
        gu[i] = gt_half(rng, -8.0f, 8.0f, g_dt);
    size_t gb = (2 * n + off) * sizeof(uint16_t), ob = (n + off) * sizeof(uint16_t);
    char *d_gu = gt_dev_alloc(gb), *d_out = gt_dev_alloc(ob);
    gt_poison(d_gu, gb), gt_poison(d_out, ob);
    uint16_t *gud = (uint16_t *)d_gu + off, *outd = (uint16_t *)d_out + off;
    gt_upload(gud, gu, 2 * n * sizeof(uint16_t));

    GP_CHECK_OK(gp_swiglu(g_dt, gud, outd, B, F, s));
    gt_download(outb, outd, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        got[i] = gp_half_to_f32(outb[i], g_dt);
    gp_swiglu_ref(g_dt, gu, ref, B, F);

    size_t bad = gt_check_close("out", got, ref, n, F, SWIGLU_REL, SWIGLU_ABS);
    gt_guard_check(d_out, ob, "out");
    if (bad)
        fail_msg("swiglu %s B=%d F=%d misalign=%d: %zu mismatches (seed %llu)", gp_dtype_flag_name(g_dt), B, F, misalign, bad,
                 (unsigned long long)g_seed);
    gt_dev_free(d_gu), gt_dev_free(d_out);
    free(gu), free(outb), free(got), free(ref);
}

static void test_shapes(void **state)
{
    (void)state;
    gt_rng rng = { g_seed };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    static const int Fs[] = { 64, 96, 14336, 4095, 12, 1 };
    static const int Bs[] = { 1, 3, 8, 64 };
    for (size_t f = 0; f < sizeof Fs / sizeof Fs[0]; f++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++)
            run_case(Bs[b], Fs[f], 0, &rng, s);
    run_case(3, 64, 1, &rng, s); /* misaligned: scalar path */
    run_case(8, 14336, 1, &rng, s);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

/* Values that stress the formula: 0, +-tiny, large |g| (silu -> g or -0). */
static void test_special_values(void **state)
{
    (void)state;
    static const float gs[] = { 0.0f, -0.0f, 1e-20f, -1e-20f, 1.0f, -1.0f, 30.0f, -30.0f, 80.0f, -80.0f };
    enum { F = 10 };
    gp_bf16 gu[2 * F], outb[F];
    float got[F], ref[F];
    for (int i = 0; i < F; i++)
        gu[i] = gp_f32_to_half(gs[i], g_dt), gu[F + i] = gp_f32_to_half(1.5f, g_dt);
    uint16_t *d_gu = gt_dev_alloc(sizeof gu), *d_out = gt_dev_alloc(sizeof outb);
    gt_poison(d_out, sizeof outb);
    gt_upload(d_gu, gu, sizeof gu);
    GP_CHECK_OK(gp_swiglu(g_dt, d_gu, d_out, 1, F, NULL));
    gt_download(outb, d_out, sizeof outb);
    for (int i = 0; i < F; i++)
        got[i] = gp_half_to_f32(outb[i], g_dt);
    gp_swiglu_ref(g_dt, gu, ref, 1, F);
    if (gt_check_close("special", got, ref, F, F, SWIGLU_REL, SWIGLU_ABS))
        fail_msg("swiglu special values differ");
    gt_dev_free(d_gu), gt_dev_free(d_out);
}

static void test_bad_args(void **state)
{
    (void)state;
    uint16_t *p = (uint16_t *)(uintptr_t)0x1000, *q = (uint16_t *)(uintptr_t)0x2000;
    GP_CHECK_FAIL(gp_swiglu(g_dt, p, q, -1, 8, NULL), GP_ERR_INVALID_ARG, "B = -1");
    GP_CHECK_FAIL(gp_swiglu(g_dt, p, q, 1, 0, NULL), GP_ERR_INVALID_ARG, "F = 0");
    GP_CHECK_FAIL(gp_swiglu(g_dt, NULL, q, 1, 8, NULL), GP_ERR_INVALID_ARG, "gu (nil)");
    GP_CHECK_OK(gp_swiglu(g_dt, NULL, NULL, 0, 8, NULL));
    GP_CHECK_FAIL(gp_swiglu(GP_DTYPE_F32, p, q, 1, 8, NULL), GP_ERR_INVALID_ARG, "dtype F32");
}

int main(void)
{
    const struct CMUnitTest host[] = { cmocka_unit_test(test_bad_args) };
    if (cmocka_run_group_tests_name("swiglu arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_swiglu"))
        return 77;
    g_seed = gt_seed("engine_swiglu");
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_special_values),
    };
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[64];
        snprintf(name, sizeof name, "%s on the GPU, %s", "swiglu", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
