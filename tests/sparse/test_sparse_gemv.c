/* gp_sparse_gemv against its double CPU reference, both dtypes, fresh random
 * inputs per case, outputs poisoned first: B = 1..16, projection shapes of
 * an 8B model and odd ones, sparsity 0 to all-masked, the three outputs.
 * Tolerance: fp32 output within 1e-4 relative plus 3e-3 absolute (fp32
 * sums of up to 14336 products of magnitude <= 1; a random-walk error of
 * about 2e-4, the bound set 15x above it); a 16-bit output adds one
 * rounding (bf16 2^-8, fp16 2^-11). The active-input count is exact, and a
 * second call gives the same bits. The SwiGLU output equals the 16-bit
 * output followed by gp_swiglu bit for bit. Also the transpose. */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ffn_kernels.h"
#include "gp_sparse.h"
#include "gp_test_cuda.h"

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16;

/* The threshold that drops about a fraction s of uniform(-1, 1) inputs. */
static float threshold_for(double s) { return s <= 0.0 ? 0.0f : s >= 1.0 ? 2.0f : (float)s; }

static void run_case(int B, int N, int K, double s, int out, gt_rng *rng, cudaStream_t st)
{
    const size_t nx = (size_t)B * K, nw = (size_t)K * N, ny = (size_t)B * N;
    uint16_t *x = gt_host_alloc(nx * 2), *wt = gt_host_alloc(nw * 2), *yh = gt_host_alloc(ny * 2);
    float *ref = gt_host_alloc(ny * 4), *got = gt_host_alloc(ny * 4), *base = gt_host_alloc(ny * 4);
    for (size_t i = 0; i < nx; i++) /* some exact zeros: masked at any threshold */
        x[i] = gt_below(rng, 50) == 0 ? gp_f32_to_half(0.0f, g_dt) : gt_half(rng, -1.0f, 1.0f, g_dt);
    for (size_t i = 0; i < nw; i++)
        wt[i] = gt_half(rng, -1.0f, 1.0f, g_dt);
    for (size_t i = 0; i < ny; i++)
        base[i] = gt_uniform(rng, -4.0f, 4.0f);
    const float t = threshold_for(s);
    const size_t ws_bytes = gp_sparse_gemv_ws_bytes(B, N, K, 0);
    uint16_t *dx = gt_dev_alloc(nx * 2), *dw = gt_dev_alloc(nw * 2);
    void *dy = gt_dev_alloc(ny * 4);
    float *dws = gt_dev_alloc(ws_bytes);
    int *dact = gt_dev_alloc(sizeof(int));
    gt_upload(dx, x, nx * 2);
    gt_upload(dw, wt, nw * 2);
    gt_poison(dws, ws_bytes);
    if (out == GP_SPARSE_OUT_F32_ACC)
        gt_upload(dy, base, ny * 4);
    else
        gt_poison(dy, ny * 4);
    GP_CHECK_CUDA(cudaMemset(dact, 0, sizeof(int)));
    GP_CHECK_OK(gp_sparse_gemv(g_dt, B, N, K, dx, dw, t, dy, out, dws, ws_bytes, 0, dact, st));
    GP_CHECK_CUDA(cudaStreamSynchronize(st));
    int active = -1;
    gt_download(&active, dact, sizeof(int));
    if (out == GP_SPARSE_OUT_HALF) {
        gt_download(yh, dy, ny * 2);
        for (size_t i = 0; i < ny; i++)
            got[i] = gp_half_to_f32(yh[i], g_dt);
    } else {
        gt_download(got, dy, ny * 4);
    }
    if (out != GP_SPARSE_OUT_F32_ACC) {
        /* again on the same workspace: the same bits (fixed split order, no timing in the sum) */
        void *again = gt_host_alloc(ny * 4);
        const size_t yb = ny * (out == GP_SPARSE_OUT_HALF ? 2 : 4);
        GP_CHECK_OK(gp_sparse_gemv(g_dt, B, N, K, dx, dw, t, dy, out, dws, ws_bytes, 0, NULL, st));
        gt_download(again, dy, yb);
        if (memcmp(again, out == GP_SPARSE_OUT_HALF ? (void *)yh : (void *)got, yb))
            fail_msg("sparse gemv %s B=%d N=%d K=%d: a second call gave other bits", gp_dtype_flag_name(g_dt), B,
                     N, K);
        free(again);
    }
    const int ref_active = gp_sparse_gemv_ref(g_dt, B, N, K, x, wt, t, ref);
    if (out == GP_SPARSE_OUT_F32_ACC)
        for (size_t i = 0; i < ny; i++)
            ref[i] += base[i];
    const double rel = 1e-4 + (out == GP_SPARSE_OUT_HALF ? (g_dt == GP_DTYPE_F16 ? 1e-3 : 8e-3) : 0.0);
    size_t bad = gt_check_close("y", got, ref, ny, N, rel, 3e-3);
    if (bad || active != ref_active)
        fail_msg("sparse gemv %s B=%d N=%d K=%d s=%.2f out=%d: %zu mismatches, %d active inputs counted, %d in the "
                 "reference (seed %llu)", gp_dtype_flag_name(g_dt), B, N, K, s, out, bad, active, ref_active,
                 (unsigned long long)g_seed);
    gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dy), gt_dev_free(dws), gt_dev_free(dact);
    free(x), free(wt), free(yh), free(ref), free(got), free(base);
}

static void test_shapes(void **state)
{
    (void)state;
    gt_rng rng = {g_seed};
    cudaStream_t st;
    GP_CHECK_CUDA(cudaStreamCreate(&st));
    /* (N, K): gate/up and down of an 8B model scaled down in the long side,
     * the attention projections, and edges (N one tile, K below a chunk) */
    static const int shapes[][2] = {{6144, 4096}, {4096, 14336}, {28672, 512}, {1024, 4096}, {8, 7}, {520, 33}};
    static const int Bs[] = {1, 2, 3, 5, 8, 13, 16};
    static const double sp[] = {0.0, 0.5, 0.9, 1.0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++) {
            /* the large shapes at a few batches only: the double reference is the test's cost */
            if (shapes[i][0] * (double)shapes[i][1] > 4e6 && Bs[b] != 1 && Bs[b] != 8 && Bs[b] != 16)
                continue;
            run_case(Bs[b], shapes[i][0], shapes[i][1], sp[(i + b) % 4], (int)((i + b) % 3), &rng, st);
        }
    for (int out = 0; out < 3; out++)
        run_case(1, 4096, 4096, 0.5, out, &rng, st);
    GP_CHECK_CUDA(cudaStreamDestroy(st));
}

/* GP_SPARSE_OUT_SWIGLU against the 16-bit output then gp_swiglu: the same bits. */
static void test_swiglu_out(void **state)
{
    (void)state;
    gt_rng rng = {g_seed ^ 2};
    static const int cases[][3] = {{1, 2048, 4096}, {3, 8, 40}, {16, 520, 512}, {8, 14336, 256}}; /* B, F, K */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], F = cases[c][1], K = cases[c][2], N = 2 * F;
        const size_t nx = (size_t)B * K, nw = (size_t)K * N;
        uint16_t *x = gt_host_alloc(nx * 2), *wt = gt_host_alloc(nw * 2);
        uint16_t *a = gt_host_alloc((size_t)B * F * 2), *b = gt_host_alloc((size_t)B * F * 2);
        for (size_t i = 0; i < nx; i++)
            x[i] = gt_half(&rng, -1.0f, 1.0f, g_dt);
        for (size_t i = 0; i < nw; i++)
            wt[i] = gt_half(&rng, -1.0f, 1.0f, g_dt);
        const size_t ws_bytes = gp_sparse_gemv_ws_bytes(B, N, K, 0);
        uint16_t *dx = gt_dev_alloc(nx * 2), *dw = gt_dev_alloc(nw * 2), *dgu = gt_dev_alloc((size_t)B * N * 2);
        uint16_t *dact = gt_dev_alloc((size_t)B * F * 2), *dref = gt_dev_alloc((size_t)B * F * 2);
        float *dws = gt_dev_alloc(ws_bytes);
        gt_upload(dx, x, nx * 2);
        gt_upload(dw, wt, nw * 2);
        gt_poison(dact, (size_t)B * F * 2);
        gt_poison(dref, (size_t)B * F * 2);
        GP_CHECK_OK(gp_sparse_gemv(g_dt, B, N, K, dx, dw, 0.4f, dgu, GP_SPARSE_OUT_HALF, dws, ws_bytes, 0, NULL, NULL));
        GP_CHECK_OK(gp_swiglu(g_dt, dgu, dref, B, F, NULL));
        GP_CHECK_OK(gp_sparse_gemv(g_dt, B, N, K, dx, dw, 0.4f, dact, GP_SPARSE_OUT_SWIGLU, dws, ws_bytes, 0, NULL,
                                   NULL));
        GP_CHECK_CUDA(cudaDeviceSynchronize());
        gt_download(a, dact, (size_t)B * F * 2);
        gt_download(b, dref, (size_t)B * F * 2);
        if (memcmp(a, b, (size_t)B * F * 2))
            fail_msg("sparse gemv SwiGLU %s B=%d F=%d K=%d: not the bits of the 16-bit output then gp_swiglu (seed "
                     "%llu)", gp_dtype_flag_name(g_dt), B, F, K, (unsigned long long)g_seed);
        gt_dev_free(dx), gt_dev_free(dw), gt_dev_free(dgu), gt_dev_free(dact), gt_dev_free(dref), gt_dev_free(dws);
        free(x), free(wt), free(a), free(b);
    }
}

static void test_transpose(void **state)
{
    (void)state;
    gt_rng rng = {g_seed ^ 1};
    static const int dims[][2] = {{1, 1}, {33, 65}, {4096, 96}, {7, 1000}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int R = dims[d][0], C = dims[d][1];
        const size_t n = (size_t)R * C;
        uint16_t *a = gt_host_alloc(n * 2), *b = gt_host_alloc(n * 2);
        for (size_t i = 0; i < n; i++)
            a[i] = (uint16_t)gt_next(&rng);
        uint16_t *da = gt_dev_alloc(n * 2), *db = gt_dev_alloc(n * 2);
        gt_upload(da, a, n * 2);
        gt_poison(db, n * 2);
        GP_CHECK_OK(gp_sparse_transpose(da, db, R, C, NULL));
        gt_download(b, db, n * 2);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                if (b[(size_t)c * R + r] != a[(size_t)r * C + c])
                    fail_msg("transpose %d x %d: [%d][%d] moved wrong", R, C, r, c);
        gt_dev_free(da), gt_dev_free(db);
        free(a), free(b);
    }
}

static void test_bad_args(void **state)
{
    (void)state;
    void *p = (void *)(uintptr_t)0x1000;
    float *ws = (float *)(uintptr_t)0x2000;
    GP_CHECK_FAIL(gp_sparse_gemv(GP_DTYPE_F32, 1, 8, 8, p, p, 0.0f, p, 0, ws, 1 << 20, 0, NULL, NULL),
                  GP_ERR_INVALID_ARG, "dtype F32");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 17, 8, 8, p, p, 0.0f, p, 0, ws, 1 << 20, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "B 17");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 12, 8, p, p, 0.0f, p, 0, ws, 1 << 20, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "N 12");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, (char *)p + 2, 0.0f, p, 0, ws, 1 << 20, 0, NULL, NULL),
                  GP_ERR_INVALID_ARG, "16-byte aligned");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, p, -1.0f, p, 0, ws, 1 << 20, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "threshold -1");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, p, NAN, p, 0, ws, 1 << 20, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "threshold");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, p, 0.0f, p, 4, ws, 1 << 20, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "out 4");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, p, 0.0f, p, GP_SPARSE_OUT_SWIGLU, ws, 1 << 20, 0, NULL, NULL),
                  GP_ERR_INVALID_ARG, "SwiGLU output of N 8");
    GP_CHECK_FAIL(gp_sparse_gemv(g_dt, 1, 8, 8, p, p, 0.0f, p, 0, ws, 4, 0, NULL, NULL), GP_ERR_INVALID_ARG,
                  "workspace of 4 bytes");
    GP_CHECK_FAIL(gp_sparse_transpose(p, p, 0, 4, NULL), GP_ERR_INVALID_ARG, "0 x 4");
    assert_int_equal(gp_sparse_gemv_ws_bytes(0, 8, 8, 0), 0);
}

int main(void)
{
    const struct CMUnitTest host[] = {cmocka_unit_test(test_bad_args)};
    if (cmocka_run_group_tests_name("sparse gemv arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("sparse_gemv"))
        return 77;
    g_seed = gt_seed("sparse_gemv");
    const struct CMUnitTest gpu[] = {cmocka_unit_test(test_shapes), cmocka_unit_test(test_swiglu_out),
                                        cmocka_unit_test(test_transpose)};
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[64];
        snprintf(name, sizeof name, "sparse gemv on the GPU, %s", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
