/* gp_gemm (cuBLASLt, and the skinny kernel for small M) against a double CPU
 * reference on random data, every GPU case in both engine dtypes (bf16 and
 * fp16 inputs): relative Frobenius error <= 1e-2 (bf16 out), <= 2e-3 (fp16
 * out) and <= 2e-3 (fp32 out and fp32 accumulate into y), whole device and
 * with an SM-count target; cache reuse, determinism, every M of the skinny
 * kernel, odd N and K, split K, the SwiGLU epilogue (the same bits as the
 * gate/up GEMM then gp_swiglu), row slices, a captured graph of
 * dependent skinny GEMMs launched with programmatic dependent launch, and
 * the timed choice among cuBLASLt's candidates (gp_gemm_tune). */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "gp_test_cuda.h"

/* 16-bit output: one rounding of each element, 2^-8 (bf16) or 2^-11 (fp16)
 * relative at most, ~1/sqrt(3) of that in the Frobenius norm, plus the fp32
 * accumulation-order error; fp16 with the same 4x margin over its rounding
 * as bf16's 1e-2 has. fp32 output: accumulation order only (the products of
 * two bf16 or two fp16 values are exact in fp32). */
#define TOL_BF16 1e-2
#define TOL_F16 2e-3
#define TOL_HALF (g_dt == GP_DTYPE_F16 ? TOL_F16 : TOL_BF16)
#define TOL_F32 2e-3

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16; /* the pass being run (main runs each of gt_dtypes) */

/* Relative Frobenius error of got against ref; prints the first 8 elements
 * that are non-finite or off by more than 4 tol times the rms of ref. */
static double rel_err(const char *what, const float *got, const double *ref, int M, int N,
                      double tol, size_t *nonfinite)
{
    double num = 0, den = 0;
    size_t n = (size_t)M * (size_t)N;
    for (size_t i = 0; i < n; i++)
        den += ref[i] * ref[i];
    double rms = sqrt(den / (double)n);
    int shown = 0;
    *nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        if (!isfinite(got[i]))
            (*nonfinite)++;
        else
            num += d * d;
        if ((!isfinite(got[i]) || fabs(d) > 4 * tol * rms) && shown++ < 8)
            printf("  %s: y[%zu][%zu] = %.7g, ref %.7g (rms of ref %.4g)\n", what, i / (size_t)N,
                   i % (size_t)N, got[i], ref[i], rms);
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct shape { int M, N, K; } shape;

/* Runs one (ctx, out type) on device buffers and checks against ref. */
static void check_one(gp_gemm_ctx *ctx, const char *ctx_name, shape sh, const uint16_t *dx,
                      const uint16_t *dw, void *dy, gp_gemm_out ot, const double *ref)
{
    size_t n = (size_t)sh.M * (size_t)sh.N;
    size_t yb = n * (ot == GP_GEMM_OUT_F32 ? sizeof(float) : sizeof(uint16_t));
    float *got = gt_host_alloc(n * sizeof(float)), *again = gt_host_alloc(n * sizeof(float));
    void *raw = gt_host_alloc(yb);
    char what[128];
    snprintf(what, sizeof what, "%s M=%d N=%d K=%d out=%s ctx=%s", gp_dtype_flag_name(g_dt), sh.M,
             sh.N, sh.K, ot == GP_GEMM_OUT_F32 ? "f32" : "half", ctx_name);

    for (int pass = 0; pass < 2; pass++) { /* pass 0 picks the algo, pass 1 reuses it */
        gt_poison(dy, yb);
        int cached = gp_gemm_cached_shapes(ctx);
        GP_CHECK_OK(gp_gemm(ctx, g_dt, sh.M, sh.N, sh.K, dx, dw, dy, ot));
        if (pass == 1 && gp_gemm_cached_shapes(ctx) != cached)
            fail_msg("%s: second call of the shape was not served from the cache", what);
        gt_download(raw, dy, yb);
        gt_guard_check(dy, yb, what);
        float *dst = pass == 0 ? got : again;
        for (size_t i = 0; i < n; i++)
            dst[i] = ot == GP_GEMM_OUT_F32 ? ((float *)raw)[i] : gp_half_to_f32(((uint16_t *)raw)[i], g_dt);
    }
    size_t nonfinite;
    double tol = ot == GP_GEMM_OUT_F32 ? TOL_F32 : TOL_HALF;
    double e = rel_err(what, got, ref, sh.M, sh.N, tol, &nonfinite);
    printf("  %s: rel err %.3e (tol %.0e)\n", what, e, tol);
    if (nonfinite || !(e <= tol))
        fail_msg("%s: rel err %.3e > %.0e or %zu non-finite outputs (seed %llu)", what, e, tol,
                 nonfinite, (unsigned long long)g_seed);
    if (memcmp(got, again, n * sizeof(float)) != 0)
        fail_msg("%s: the cached algorithm gave different bits on the second call", what);
    free(got), free(again), free(raw);
}

/* GP_GEMM_OUT_F32_ACC: y = y0 + x . w^T with y0 random (it must be read). */
static void check_acc(gp_gemm_ctx *ctx, const char *ctx_name, shape sh, const uint16_t *dx,
                      const uint16_t *dw, float *dy, const double *ref, gt_rng *rng)
{
    size_t n = (size_t)sh.M * (size_t)sh.N;
    float *y0 = gt_host_alloc(n * sizeof(float)), *got = gt_host_alloc(n * sizeof(float));
    float *again = gt_host_alloc(n * sizeof(float));
    double *want = gt_host_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        y0[i] = gt_uniform(rng, -8.0f, 8.0f);
        want[i] = (double)y0[i] + ref[i];
    }
    char what[128];
    snprintf(what, sizeof what, "%s M=%d N=%d K=%d out=f32_acc ctx=%s", gp_dtype_flag_name(g_dt), sh.M,
             sh.N, sh.K, ctx_name);
    for (int pass = 0; pass < 2; pass++) {
        gt_poison(dy, n * sizeof(float)); /* the guard; then the start value */
        gt_upload(dy, y0, n * sizeof(float));
        GP_CHECK_OK(gp_gemm(ctx, g_dt, sh.M, sh.N, sh.K, dx, dw, dy, GP_GEMM_OUT_F32_ACC));
        gt_download(pass ? again : got, dy, n * sizeof(float));
        gt_guard_check(dy, n * sizeof(float), what);
    }
    size_t nonfinite;
    double e = rel_err(what, got, want, sh.M, sh.N, TOL_F32, &nonfinite);
    printf("  %s: rel err %.3e (tol %.0e)\n", what, e, TOL_F32);
    if (nonfinite || !(e <= TOL_F32))
        fail_msg("%s: rel err %.3e > %.0e or %zu non-finite outputs (seed %llu)", what, e, TOL_F32,
                 nonfinite, (unsigned long long)g_seed);
    if (memcmp(got, again, n * sizeof(float)) != 0)
        fail_msg("%s: the cached algorithm gave different bits on the second call", what);
    free(y0), free(got), free(again), free(want);
}

static void test_shapes(void **state)
{
    (void)state;
    static const shape shapes[] = {
        { 1, 64, 64 }, { 3, 96, 160 }, { 8, 4096, 4096 }, { 64, 6144, 4096 }, { 257, 1000, 512 },
    };
    gt_rng rng = { g_seed };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    int dev = 0, sms = 0;
    GP_CHECK_CUDA(cudaGetDevice(&dev));
    GP_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int target = sms < 56 ? sms : 56;
    gp_gemm_ctx *all = NULL, *part = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(s, 0, &all));
    GP_CHECK_OK(gp_gemm_ctx_create(s, target, &part));
    assert_int_equal(gp_gemm_sm_count_target(part), target);
    char part_name[32];
    snprintf(part_name, sizeof part_name, "sm_target_%d", target);

    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        shape sh = shapes[i];
        size_t nx = (size_t)sh.M * sh.K, nw = (size_t)sh.N * sh.K, ny = (size_t)sh.M * sh.N;
        uint16_t *x = gt_host_alloc(nx * sizeof(uint16_t)), *w = gt_host_alloc(nw * sizeof(uint16_t));
        double *ref = gt_host_alloc(ny * sizeof(double));
        for (size_t j = 0; j < nx; j++)
            x[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
        for (size_t j = 0; j < nw; j++)
            w[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
        gp_gemm_ref(g_dt, sh.M, sh.N, sh.K, x, w, ref);
        uint16_t *dx = gt_dev_alloc(nx * sizeof(uint16_t)), *dw = gt_dev_alloc(nw * sizeof(uint16_t));
        void *dy = gt_dev_alloc(ny * sizeof(float));
        gt_upload(dx, x, nx * sizeof(uint16_t));
        gt_upload(dw, w, nw * sizeof(uint16_t));
        for (int o = 0; o < 2; o++) {
            gp_gemm_out ot = o ? GP_GEMM_OUT_F32 : GP_GEMM_OUT_HALF;
            check_one(all, "all_sms", sh, dx, dw, dy, ot, ref);
            check_one(part, part_name, sh, dx, dw, dy, ot, ref);
        }
        check_acc(all, "all_sms", sh, dx, dw, dy, ref, &rng);
        check_acc(part, part_name, sh, dx, dw, dy, ref, &rng);
        gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dy);
        free(x), free(w), free(ref);
    }
    assert_int_equal(gp_gemm_cached_shapes(all), 15); /* 5 shapes x 3 output kinds */
    /* a new SM budget empties the cache (the heuristic's choice depends on it) */
    GP_CHECK_OK(gp_gemm_set_sm_count_target(part, target / 2 > 0 ? target / 2 : 1));
    assert_int_equal(gp_gemm_cached_shapes(part), 0);
    gp_gemm_ctx_destroy(all);
    gp_gemm_ctx_destroy(part);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

/* Slices starting one row into a buffer (alignment below 256 bytes) get an
 * algorithm of their own and correct results. */
static void test_row_offset_slices(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 7 };
    const shape sh = { 3, 96, 160 };
    size_t nx = (size_t)(sh.M + 1) * sh.K, nw = (size_t)sh.N * sh.K, ny = (size_t)(sh.M + 1) * sh.N;
    uint16_t *x = gt_host_alloc(nx * sizeof(uint16_t)), *w = gt_host_alloc(nw * sizeof(uint16_t));
    double *ref = gt_host_alloc((size_t)sh.M * sh.N * sizeof(double));
    for (size_t j = 0; j < nx; j++)
        x[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
    for (size_t j = 0; j < nw; j++)
        w[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
    gp_gemm_ref(g_dt, sh.M, sh.N, sh.K, x + sh.K, w, ref); /* rows 1..M of x */
    uint16_t *dx = gt_dev_alloc(nx * sizeof(uint16_t)), *dw = gt_dev_alloc(nw * sizeof(uint16_t));
    char *dy = gt_dev_alloc(ny * sizeof(float));
    gt_upload(dx, x, nx * sizeof(uint16_t));
    gt_upload(dw, w, nw * sizeof(uint16_t));
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx));
    /* x + K: 320 bytes in (64-byte aligned); y one row in: 192 (bf16) / 384 (f32) bytes */
    check_one(ctx, "x_row1_y_row1", sh, dx + sh.K, dw, dy + (size_t)sh.N * sizeof(uint16_t),
              GP_GEMM_OUT_HALF, ref);
    check_one(ctx, "x_row1_y_row1", sh, dx + sh.K, dw, dy + (size_t)sh.N * sizeof(float),
              GP_GEMM_OUT_F32, ref);
    check_one(ctx, "x_row1_y_base", sh, dx + sh.K, dw, dy, GP_GEMM_OUT_F32, ref);
    assert_int_equal(gp_gemm_cached_shapes(ctx), 3);
    gp_gemm_ctx_destroy(ctx);
    gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dy);
    free(x), free(w), free(ref);
}

/* More shapes than cache slots: eviction keeps results right. */
static void test_cache_eviction(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 11 };
    const int K = 64, N = 64, maxM = GP_GEMM_CACHE_SLOTS + 8;
    uint16_t *x = gt_host_alloc((size_t)maxM * K * sizeof(uint16_t));
    uint16_t *w = gt_host_alloc((size_t)N * K * sizeof(uint16_t));
    double *ref = gt_host_alloc((size_t)maxM * N * sizeof(double));
    float *got = gt_host_alloc((size_t)maxM * N * sizeof(float));
    for (int j = 0; j < maxM * K; j++)
        x[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
    for (int j = 0; j < N * K; j++)
        w[j] = gt_half(&rng, -1.0f, 1.0f, g_dt);
    gp_gemm_ref(g_dt, maxM, N, K, x, w, ref); /* row m of a smaller product is row m of this */
    uint16_t *dx = gt_dev_alloc((size_t)maxM * K * sizeof(uint16_t));
    uint16_t *dw = gt_dev_alloc((size_t)N * K * sizeof(uint16_t));
    float *dy = gt_dev_alloc((size_t)maxM * N * sizeof(float));
    gt_upload(dx, x, (size_t)maxM * K * sizeof(uint16_t));
    gt_upload(dw, w, (size_t)N * K * sizeof(uint16_t));
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx));
    for (int round = 0; round < 2; round++)
        for (int M = 1; M <= maxM; M++) {
            gt_poison(dy, (size_t)M * N * sizeof(float));
            GP_CHECK_OK(gp_gemm(ctx, g_dt, M, N, K, dx, dw, dy, GP_GEMM_OUT_F32));
            gt_download(got, dy, (size_t)M * N * sizeof(float));
            size_t nonfinite;
            double e = rel_err("eviction", got, ref, M, N, TOL_F32, &nonfinite);
            if (nonfinite || !(e <= TOL_F32))
                fail_msg("eviction round %d M=%d: rel err %.3e, %zu non-finite", round, M, e,
                         nonfinite);
        }
    assert_int_equal(gp_gemm_cached_shapes(ctx), GP_GEMM_CACHE_SLOTS);
    gp_gemm_ctx_destroy(ctx);
    gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dy);
    free(x), free(w), free(ref), free(got);
}

/* Random x [M][K] and w [N][K] (host), their reference, device copies. */
typedef struct problem {
    shape sh;
    uint16_t *x, *w;   /* host */
    double *ref;      /* [M][N] */
    uint16_t *dx, *dw; /* device */
    void *dy;         /* [M][N] fp32-sized device */
} problem;

static void problem_make(problem *p, shape sh, gt_rng *rng)
{
    p->sh = sh;
    size_t nx = (size_t)sh.M * sh.K, nw = (size_t)sh.N * sh.K, ny = (size_t)sh.M * sh.N;
    p->x = gt_host_alloc(nx * sizeof(uint16_t));
    p->w = gt_host_alloc(nw * sizeof(uint16_t));
    p->ref = gt_host_alloc(ny * sizeof(double));
    for (size_t j = 0; j < nx; j++)
        p->x[j] = gt_half(rng, -1.0f, 1.0f, g_dt);
    for (size_t j = 0; j < nw; j++)
        p->w[j] = gt_half(rng, -1.0f, 1.0f, g_dt);
    gp_gemm_ref(g_dt, sh.M, sh.N, sh.K, p->x, p->w, p->ref);
    p->dx = gt_dev_alloc(nx * sizeof(uint16_t));
    p->dw = gt_dev_alloc(nw * sizeof(uint16_t));
    p->dy = gt_dev_alloc(ny * sizeof(float));
    gt_upload(p->dx, p->x, nx * sizeof(uint16_t));
    gt_upload(p->dw, p->w, nw * sizeof(uint16_t));
}

static void problem_free(problem *p)
{
    gt_dev_free(p->dx), gt_dev_free(p->dw), gt_dev_free(p->dy);
    free(p->x), free(p->w), free(p->ref);
}

/* All three output kinds of one problem through ctx, which must route it to
 * the skinny kernel. */
static void check_skinny(gp_gemm_ctx *ctx, const char *name, problem *p, gt_rng *rng)
{
    shape sh = p->sh;
    if (!gp_gemm_is_skinny(ctx, sh.M, sh.N, sh.K, p->dx, p->dw))
        fail_msg("M=%d N=%d K=%d (%s): expected the skinny path", sh.M, sh.N, sh.K, name);
    check_one(ctx, name, sh, p->dx, p->dw, p->dy, GP_GEMM_OUT_HALF, p->ref);
    check_one(ctx, name, sh, p->dx, p->dw, p->dy, GP_GEMM_OUT_F32, p->ref);
    check_acc(ctx, name, sh, p->dx, p->dw, p->dy, p->ref, rng);
}

/* The skinny kernel: every M of its 8-token tiles, odd N (partial 16- and
 * 32-row blocks), K a multiple of 8 but not of 32 (partial chunks; fewer
 * chunks than warps), row blocks beyond one wave (the persistent loop), and
 * a small SM budget (a smaller persistent grid). */
static void test_skinny_shapes(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 23 };
    int dev = 0, sms = 0;
    GP_CHECK_CUDA(cudaGetDevice(&dev));
    GP_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    gp_gemm_ctx *all = NULL, *part = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &all));
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, sms < 8 ? sms : 8, &part));
    GP_CHECK_OK(gp_gemm_set_skinny_max_m(all, GP_GEMM_SKINNY_MAX_M));
    GP_CHECK_OK(gp_gemm_set_skinny_max_m(part, GP_GEMM_SKINNY_MAX_M));
    /* every M 1..16 on one problem: rows of a larger product are its rows */
    {
        problem p;
        problem_make(&p, (shape){ 16, 97, 264 }, &rng);
        for (int M = 1; M <= 16; M++) {
            problem q = p;
            q.sh.M = M; /* x rows 0..M-1, ref rows 0..M-1: prefixes of the M = 16 arrays */
            check_skinny(all, "skinny_all", &q, &rng);
            check_skinny(part, "skinny_sm8", &q, &rng);
        }
        problem_free(&p);
    }
    static const shape shapes[] = {
        { 3, 1, 8 }, { 13, 129, 40 }, { 16, 300, 1000 }, { 5, 1000, 4096 }, { 8, 6144, 4096 },
        { 16, 4096, 14336 }, { 11, 333, 520 }, { 1, 4104, 2056 }, { 9, 257, 2056 },
        { 16, 40, 14344 },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        problem p;
        problem_make(&p, shapes[i], &rng);
        check_skinny(all, "skinny_all", &p, &rng);
        check_skinny(part, "skinny_sm8", &p, &rng);
        problem_free(&p);
    }
    /* M beyond the kernel's 16 goes to cuBLASLt */
    {
        uint16_t *d = gt_dev_alloc(64 * 64 * sizeof(uint16_t));
        assert_false(gp_gemm_is_skinny(all, 17, 64, 64, d, d));
        assert_true(gp_gemm_is_skinny(all, 16, 64, 64, d, d));
        gt_dev_free(d);
    }
    gp_gemm_ctx_destroy(all);
    gp_gemm_ctx_destroy(part);
}

/* GP_GEMM_OUT_SWIGLU against the two calls it replaces, bit for bit: every
 * M of both token tiles, F not a multiple of 8 (a partial tile of gate and
 * up rows), K not a multiple of 32, the Llama-3-8B shape, an 8-SM budget
 * (the persistent loop); and refused where the skinny kernel does not
 * serve (cuBLASLt has no such epilogue) or N is odd. */
static void test_skinny_swiglu(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 37 };
    int dev = 0, sms = 0;
    GP_CHECK_CUDA(cudaGetDevice(&dev));
    GP_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    gp_gemm_ctx *ctx[2] = { NULL, NULL };
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx[0]));
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, sms < 8 ? sms : 8, &ctx[1]));
    static const shape shapes[] = { { 16, 2 * 37, 264 }, { 16, 2 * 1000, 520 }, { 16, 2 * 14336, 4096 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        problem p;
        problem_make(&p, shapes[i], &rng);
        const int F = p.sh.N / 2;
        uint16_t *gu = gt_dev_alloc((size_t)16 * p.sh.N * sizeof(uint16_t));
        uint16_t *act = gt_dev_alloc((size_t)16 * F * sizeof(uint16_t));
        uint16_t *want = gt_host_alloc((size_t)16 * F * sizeof(uint16_t));
        uint16_t *got = gt_host_alloc((size_t)16 * F * sizeof(uint16_t));
        for (int c = 0; c < 2; c++)
            for (int M = 1; M <= 16; M += (i == 2 ? 7 : 1)) {
                const size_t ab = (size_t)M * F * sizeof(uint16_t);
                gt_poison(act, ab);
                GP_CHECK_OK(gp_gemm(ctx[c], g_dt, M, p.sh.N, p.sh.K, p.dx, p.dw, gu, GP_GEMM_OUT_HALF));
                GP_CHECK_OK(gp_swiglu(g_dt, gu, act, M, F, NULL));
                gt_download(want, act, ab);
                gt_poison(act, ab);
                GP_CHECK_OK(gp_gemm(ctx[c], g_dt, M, p.sh.N, p.sh.K, p.dx, p.dw, act, GP_GEMM_OUT_SWIGLU));
                gt_download(got, act, ab);
                gt_guard_check(act, ab, "swiglu out");
                if (memcmp(got, want, ab)) {
                    size_t k = 0;
                    while (got[k] == want[k])
                        k++;
                    fail_msg("%s M=%d F=%d K=%d ctx %d: the fused SwiGLU's [%zu][%zu] is 0x%04x, gate/up then "
                             "gp_swiglu gave 0x%04x", gp_dtype_flag_name(g_dt), M, F, p.sh.K, c, k / (size_t)F,
                             k % (size_t)F, got[k], want[k]);
                }
            }
        printf("  %s N=%d K=%d: the fused SwiGLU equals gate/up then gp_swiglu, bit for bit\n",
               gp_dtype_flag_name(g_dt), p.sh.N, p.sh.K);
        gt_dev_free(gu), gt_dev_free(act);
        free(want), free(got);
        problem_free(&p);
    }
    {
        uint16_t *d = gt_dev_alloc(64 * 64 * sizeof(uint16_t));
        GP_CHECK_FAIL(gp_gemm(ctx[0], g_dt, 17, 64, 64, d, d, d, GP_GEMM_OUT_SWIGLU), GP_ERR_UNSUPPORTED,
                      "only the skinny kernel has it");
        GP_CHECK_FAIL(gp_gemm(ctx[0], g_dt, 4, 63, 64, d, d, d, GP_GEMM_OUT_SWIGLU), GP_ERR_INVALID_ARG,
                      "N = 63 with GP_GEMM_OUT_SWIGLU");
        gt_dev_free(d);
    }
    gp_gemm_ctx_destroy(ctx[0]);
    gp_gemm_ctx_destroy(ctx[1]);
}

/* Row slices as the engine's micro-batches take them (x + b0 K, y + b0 N):
 * K % 8 == 0 keeps them 16-byte aligned and skinny; K % 8 != 0 falls back to
 * cuBLASLt, results right either way. */
static void test_skinny_slices(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 29 };
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx));
    static const shape shapes[] = { { 5, 200, 136 }, { 5, 200, 140 } };
    for (int i = 0; i < 2; i++) {
        shape big = shapes[i];
        big.M += 3;
        problem p;
        problem_make(&p, big, &rng);
        problem q = p;
        q.sh = shapes[i];
        q.dx = p.dx + 3 * (size_t)big.K;
        q.ref = p.ref + 3 * (size_t)big.N;
        int skinny = gp_gemm_is_skinny(ctx, q.sh.M, q.sh.N, q.sh.K, q.dx, q.dw);
        assert_int_equal(skinny, shapes[i].K % 8 == 0);
        char *y = (char *)p.dy;
        check_one(ctx, "slice", q.sh, q.dx, q.dw, y + 3 * (size_t)big.N * sizeof(uint16_t),
                  GP_GEMM_OUT_HALF, q.ref);
        check_one(ctx, "slice", q.sh, q.dx, q.dw, y + 3 * (size_t)big.N * sizeof(float),
                  GP_GEMM_OUT_F32, q.ref);
        check_acc(ctx, "slice", q.sh, q.dx, q.dw, (float *)(y + 3 * (size_t)big.N * sizeof(float)),
                  q.ref, &rng);
        problem_free(&p);
    }
    gp_gemm_ctx_destroy(ctx);
}

/* Two dependent skinny GEMMs (h = bf16(x . w1^T); y += h . w2^T, the second
 * split over K) captured into a graph: the second must read h only after the
 * first wrote it. Replays must match an eager run bit for bit and the
 * reference within tolerance. */
static void test_skinny_chain_graph(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 31 };
    const int M = 8, K1 = 512, N1 = 1024, N2 = 300;
    problem a, b;
    problem_make(&a, (shape){ M, N1, K1 }, &rng);
    problem_make(&b, (shape){ M, N2, N1 }, &rng);
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(s, 0, &ctx));
    assert_true(gp_gemm_is_skinny(ctx, M, N1, K1, a.dx, a.dw));
    assert_true(gp_gemm_is_skinny(ctx, M, N2, N1, b.dx, b.dw));
    uint16_t *h = gt_dev_alloc((size_t)M * N1 * sizeof(uint16_t));
    float *y = gt_dev_alloc((size_t)M * N2 * sizeof(float));
    float *y0 = gt_host_alloc((size_t)M * N2 * sizeof(float));
    float *eager = gt_host_alloc((size_t)M * N2 * sizeof(float));
    float *got = gt_host_alloc((size_t)M * N2 * sizeof(float));
    for (int i = 0; i < M * N2; i++)
        y0[i] = gt_uniform(&rng, -4.0f, 4.0f);

    /* eager (also picks both plans) */
    gt_poison(h, (size_t)M * N1 * sizeof(uint16_t));
    gt_upload(y, y0, (size_t)M * N2 * sizeof(float));
    GP_CHECK_OK(gp_gemm(ctx, g_dt, M, N1, K1, a.dx, a.dw, h, GP_GEMM_OUT_HALF));
    GP_CHECK_OK(gp_gemm(ctx, g_dt, M, N2, N1, h, b.dw, y, GP_GEMM_OUT_F32_ACC));
    GP_CHECK_CUDA(cudaStreamSynchronize(s));
    gt_download(eager, y, (size_t)M * N2 * sizeof(float));

    /* reference of the chain from the device's bf16 h */
    uint16_t *hh = gt_host_alloc((size_t)M * N1 * sizeof(uint16_t));
    double *ref = gt_host_alloc((size_t)M * N2 * sizeof(double));
    gt_download(hh, h, (size_t)M * N1 * sizeof(uint16_t));
    for (int i = 0; i < M * N1; i++) {
        double d = gp_half_to_f32(hh[i], g_dt) - a.ref[i];
        if (!(fabs(d) <= TOL_HALF * fabs(a.ref[i]) + 1e-2))
            fail_msg("skinny chain: h[%d] = %g, ref %g", i, gp_half_to_f32(hh[i], g_dt), a.ref[i]);
    }
    gp_gemm_ref(g_dt, M, N2, N1, hh, b.w, ref);
    for (int i = 0; i < M * N2; i++)
        ref[i] += y0[i];
    size_t nonfinite;
    double e = rel_err("chain eager", eager, ref, M, N2, TOL_F32, &nonfinite);
    if (nonfinite || !(e <= TOL_F32))
        fail_msg("skinny chain eager: rel err %.3e, %zu non-finite", e, nonfinite);

    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    GP_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    GP_CHECK_OK(gp_gemm(ctx, g_dt, M, N1, K1, a.dx, a.dw, h, GP_GEMM_OUT_HALF));
    GP_CHECK_OK(gp_gemm(ctx, g_dt, M, N2, N1, h, b.dw, y, GP_GEMM_OUT_F32_ACC));
    GP_CHECK_CUDA(cudaStreamEndCapture(s, &g));
    GP_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 5; rep++) {
        gt_poison(h, (size_t)M * N1 * sizeof(uint16_t)); /* stale h must never be read */
        gt_upload(y, y0, (size_t)M * N2 * sizeof(float));
        GP_CHECK_CUDA(cudaGraphLaunch(ge, s));
        GP_CHECK_CUDA(cudaStreamSynchronize(s));
        gt_download(got, y, (size_t)M * N2 * sizeof(float));
        if (memcmp(got, eager, (size_t)M * N2 * sizeof(float)) != 0)
            fail_msg("skinny chain: graph replay %d differs from the eager run", rep);
    }
    GP_CHECK_CUDA(cudaGraphExecDestroy(ge));
    GP_CHECK_CUDA(cudaGraphDestroy(g));
    gp_gemm_ctx_destroy(ctx);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
    gt_dev_free(h), gt_dev_free(y);
    free(y0), free(eager), free(got), free(hh), free(ref);
    problem_free(&a), problem_free(&b);
}

/* gp_gemm_tune keeps a candidate that computes the right product, later
 * calls of the shape take it from the cache, a tuned shape is not timed
 * again, skinny shapes are left alone and a capturing stream is refused. */
static void test_tuned(void **state)
{
    (void)state;
    static const shape shapes[] = { { 64, 6144, 4096 }, { 257, 1000, 512 }, { 300, 2048, 1024 } };
    gt_rng rng = { g_seed ^ 0x7475u };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    int dev = 0, sms = 0;
    GP_CHECK_CUDA(cudaGetDevice(&dev));
    GP_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(s, sms < 40 ? sms : 40, &ctx));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        problem pr;
        problem_make(&pr, shapes[i], &rng);
        shape sh = pr.sh;
        void *scratch = gt_dev_alloc((size_t)sh.M * sh.N * sizeof(float));
        for (int o = 0; o < 3; o++) {
            gp_gemm_out ot = o == 0 ? GP_GEMM_OUT_HALF : o == 1 ? GP_GEMM_OUT_F32 : GP_GEMM_OUT_F32_ACC;
            gp_gemm_tune_report rep;
            GP_CHECK_OK(gp_gemm_tune(ctx, g_dt, sh.M, sh.N, sh.K, pr.dx, pr.dw, scratch, ot, 8, 3, &rep));
            printf("  tune M=%d N=%d K=%d out=%d: %d candidates, heuristic %.4f ms, kept #%d %.4f ms\n",
                   sh.M, sh.N, sh.K, o, rep.candidates, rep.first_ms, rep.chosen, rep.best_ms);
            assert_true(rep.candidates >= 1 && rep.candidates <= 8);
            assert_true(rep.chosen >= 0 && rep.chosen < 8);
            assert_true(rep.best_ms > 0.0f && rep.best_ms <= rep.first_ms);
            GP_CHECK_OK(gp_gemm_tune(ctx, g_dt, sh.M, sh.N, sh.K, pr.dx, pr.dw, scratch, ot, 8, 3, &rep));
            assert_int_equal(rep.candidates, 0); /* kept, not timed again */
            int cached = gp_gemm_cached_shapes(ctx);
            if (ot == GP_GEMM_OUT_F32_ACC)
                check_acc(ctx, "tuned", sh, pr.dx, pr.dw, pr.dy, pr.ref, &rng);
            else
                check_one(ctx, "tuned", sh, pr.dx, pr.dw, pr.dy, ot, pr.ref);
            assert_int_equal(gp_gemm_cached_shapes(ctx), cached); /* served by the tuned entry */
        }
        gt_dev_free(scratch);
        problem_free(&pr);
    }
    /* skinny shapes: nothing to time */
    uint16_t *dx = gt_dev_alloc(8 * 256 * sizeof(uint16_t)), *dw = gt_dev_alloc(256 * 256 * sizeof(uint16_t));
    float *dy = gt_dev_alloc(8 * 256 * sizeof(float));
    gp_gemm_tune_report rep;
    GP_CHECK_OK(gp_gemm_tune(ctx, g_dt, 8, 256, 256, dx, dw, dy, GP_GEMM_OUT_F32, 8, 3, &rep));
    assert_int_equal(rep.candidates, 0);
    /* inside a capture: refused, and the capture survives */
    cudaGraph_t g = NULL;
    GP_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    gp_status st = gp_gemm_tune(ctx, g_dt, 128, 256, 256, dx, dw, dy, GP_GEMM_OUT_F32, 8, 3, &rep);
    GP_CHECK_CUDA(cudaStreamEndCapture(s, &g));
    assert_int_equal(st, GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "capturing"));
    GP_CHECK_CUDA(cudaGraphDestroy(g));
    gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dy);
    gp_gemm_ctx_destroy(ctx);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

static void test_bad_args(void **state)
{
    (void)state;
    uint16_t *p = (uint16_t *)(uintptr_t)0x1000;
    gp_gemm_ctx *ctx = (gp_gemm_ctx *)(uintptr_t)0x4000; /* never dereferenced on these paths */
    GP_CHECK_FAIL(gp_gemm(NULL, g_dt, 1, 1, 1, p, p, p, GP_GEMM_OUT_HALF), GP_ERR_INVALID_ARG,
                   "ctx is NULL");
    GP_CHECK_FAIL(gp_gemm(ctx, g_dt, -1, 64, 64, p, p, p, GP_GEMM_OUT_HALF), GP_ERR_INVALID_ARG,
                   "M = -1");
    GP_CHECK_FAIL(gp_gemm(ctx, g_dt, 1, 0, 64, p, p, p, GP_GEMM_OUT_HALF), GP_ERR_INVALID_ARG,
                   "N = 0");
    GP_CHECK_FAIL(gp_gemm(ctx, g_dt, 1, 64, 0, p, p, p, GP_GEMM_OUT_HALF), GP_ERR_INVALID_ARG,
                   "K = 0");
    GP_CHECK_FAIL(gp_gemm(ctx, g_dt, 1, 64, 64, p, p, p, (gp_gemm_out)7), GP_ERR_INVALID_ARG,
                   "out_type = 7");
    GP_CHECK_FAIL(gp_gemm(ctx, g_dt, 1, 64, 64, NULL, p, p, GP_GEMM_OUT_F32), GP_ERR_INVALID_ARG,
                   "x (nil)");
    GP_CHECK_OK(gp_gemm(ctx, g_dt, 0, 64, 64, NULL, NULL, NULL, GP_GEMM_OUT_F32));
    GP_CHECK_FAIL(gp_gemm_tune(NULL, g_dt, 8, 64, 64, p, p, p, GP_GEMM_OUT_F32, 8, 3, NULL),
                   GP_ERR_INVALID_ARG, "ctx (nil)");
    GP_CHECK_FAIL(gp_gemm_tune(ctx, g_dt, 0, 64, 64, p, p, p, GP_GEMM_OUT_F32, 8, 3, NULL),
                   GP_ERR_INVALID_ARG, "M = 0");
    GP_CHECK_FAIL(gp_gemm_tune(ctx, g_dt, 8, 64, 64, p, p, p, GP_GEMM_OUT_F32, 33, 3, NULL),
                   GP_ERR_INVALID_ARG, "max_candidates = 33");
    GP_CHECK_FAIL(gp_gemm_tune(ctx, g_dt, 8, 64, 64, p, p, p, GP_GEMM_OUT_F32, 8, 0, NULL),
                   GP_ERR_INVALID_ARG, "reps = 0");
    GP_CHECK_FAIL(gp_gemm_tune(ctx, g_dt, 8, 64, 64, p, p, p, (gp_gemm_out)9, 8, 3, NULL),
                   GP_ERR_INVALID_ARG, "out_type = 9");
    GP_CHECK_FAIL(gp_gemm(ctx, GP_DTYPE_F32, 1, 64, 64, p, p, p, GP_GEMM_OUT_F32), GP_ERR_INVALID_ARG,
                   "dtype F32");
    GP_CHECK_FAIL(gp_gemm_tune(ctx, GP_DTYPE_I8, 8, 64, 64, p, p, p, GP_GEMM_OUT_F32, 8, 3, NULL),
                   GP_ERR_INVALID_ARG, "dtype I8");
    gp_gemm_ctx *out = ctx;
    GP_CHECK_FAIL(gp_gemm_ctx_create(NULL, -3, &out), GP_ERR_INVALID_ARG, "sm_count_target = -3");
    assert_null(out);
    GP_CHECK_FAIL(gp_gemm_ctx_create(NULL, 0, NULL), GP_ERR_INVALID_ARG, "out is NULL");
    GP_CHECK_FAIL(gp_gemm_set_stream(NULL, NULL), GP_ERR_INVALID_ARG, "ctx is NULL");
    GP_CHECK_FAIL(gp_gemm_set_sm_count_target(NULL, 8), GP_ERR_INVALID_ARG, "ctx is NULL");
    GP_CHECK_FAIL(gp_gemm_set_skinny_max_m(NULL, 8), GP_ERR_INVALID_ARG, "ctx is NULL");
    GP_CHECK_FAIL(gp_gemm_set_skinny_max_m(ctx, GP_GEMM_SKINNY_MAX_M + 1), GP_ERR_INVALID_ARG,
                   "max_m");
    GP_CHECK_FAIL(gp_gemm_set_skinny_max_m(ctx, -1), GP_ERR_INVALID_ARG, "max_m = -1");
    assert_int_equal(gp_gemm_is_skinny(NULL, 8, 64, 64, p, p), 0);
    gp_gemm_ctx_destroy(NULL);
    assert_int_equal(gp_gemm_cached_shapes(NULL), 0);
}

/* One context serving the same shape in bf16 and in fp16: two cache entries
 * (the dtype is part of the key), each computing its own dtype's product. */
static void test_dtype_keyed_cache(void **state)
{
    (void)state;
    gt_rng rng = { g_seed + 41 };
    const shape sh = { 24, 256, 512 };
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx));
    const gp_dtype keep = g_dt;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        problem p;
        problem_make(&p, sh, &rng);
        check_one(ctx, "shared_ctx", sh, p.dx, p.dw, p.dy, GP_GEMM_OUT_F32, p.ref);
        assert_int_equal(gp_gemm_cached_shapes(ctx), d + 1);
        problem_free(&p);
    }
    g_dt = keep;
    gp_gemm_ctx_destroy(ctx);
}

/* Needs a device: bounds checked against its SM count. */
static void test_bad_sm_target(void **state)
{
    (void)state;
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_FAIL(gp_gemm_ctx_create(NULL, 100000, &ctx), GP_ERR_INVALID_ARG,
                   "sm_count_target = 100000");
    GP_CHECK_OK(gp_gemm_ctx_create(NULL, 0, &ctx));
    GP_CHECK_FAIL(gp_gemm_set_sm_count_target(ctx, 100000), GP_ERR_INVALID_ARG, "100000");
    gp_gemm_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest host[] = { cmocka_unit_test(test_bad_args) };
    if (cmocka_run_group_tests_name("gemm arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_gemm"))
        return 77;
    g_seed = gt_seed("engine_gemm");
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_bad_sm_target),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_row_offset_slices),
        cmocka_unit_test(test_cache_eviction),
        cmocka_unit_test(test_skinny_shapes),
        cmocka_unit_test(test_skinny_swiglu),
        cmocka_unit_test(test_skinny_slices),
        cmocka_unit_test(test_skinny_chain_graph),
        cmocka_unit_test(test_tuned),
        cmocka_unit_test(test_dtype_keyed_cache),
    };
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[64];
        snprintf(name, sizeof name, "gemm on the GPU, %s", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
