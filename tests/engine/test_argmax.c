/* gp_argmax_rows against gp_argmax (reference/reference.c), exactly: deliberate
 * ties (first index wins), NaNs (never win; all-NaN gives 0), infinities,
 * signed zeros, maximum at the last index. */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gp_reference.h"
#include "kernels.h"
#include "gp_test_cuda.h"

static uint64_t g_seed;

/* Fills row [V] by kind and returns the index the rules require (-1: not
 * predicted, the reference decides). */
static int fill_row(float *x, int V, int kind, gt_rng *rng)
{
    for (int i = 0; i < V; i++)
        x[i] = gt_uniform(rng, -20.0f, 20.0f);
    int p = gt_below(rng, V), q = gt_below(rng, V);
    int lo = p < q ? p : q, hi = p < q ? q : p;
    switch (kind) {
    case 0: /* the max twice at random places */
        x[lo] = x[hi] = 50.0f;
        return lo;
    case 1: /* ties inside one float4 and one vector-stride (2048) further */
        x[lo] = 50.0f;
        if (lo + 1 < V)
            x[lo + 1] = 50.0f;
        if (lo + 2048 < V)
            x[lo + 2048] = 50.0f;
        return lo;
    case 2: /* NaNs everywhere including index 0; they must not win */
        for (int i = 0; i < V; i++)
            if (gt_below(rng, 10) == 0)
                x[i] = NAN;
        x[0] = NAN;
        if (hi > 0) {
            x[hi] = 50.0f;
            return hi;
        }
        return -1;
    case 3: /* only NaNs: 0 */
        for (int i = 0; i < V; i++)
            x[i] = NAN;
        return 0;
    case 4: /* only -inf: the first */
        for (int i = 0; i < V; i++)
            x[i] = -INFINITY;
        return 0;
    case 5: /* zeros of both signs compare equal: the first */
        for (int i = 0; i < V; i++)
            x[i] = (i & 1) ? 0.0f : -0.0f;
        return 0;
    case 6: /* +inf twice after a NaN */
        x[lo] = NAN;
        if (hi > lo) {
            x[hi] = INFINITY;
            x[V - 1] = INFINITY;
            return hi;
        }
        return -1;
    case 7: /* the max at the last index */
        x[V - 1] = 50.0f;
        return V - 1;
    default: /* plain random */
        return -1;
    }
}

static void run_case(int B, int V, int misalign, gt_rng *rng, cudaStream_t s)
{
    size_t n = (size_t)B * (size_t)V, off = misalign ? 1 : 0;
    float *x = gt_host_alloc(n * sizeof(float));               /* [B][V] */
    int32_t *got = gt_host_alloc((size_t)B * sizeof(int32_t)); /* [B] */
    int32_t *ref = gt_host_alloc((size_t)B * sizeof(int32_t));
    int *want = gt_host_alloc((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++)
        want[b] = fill_row(x + (size_t)b * (size_t)V, V, b % 9, rng);
    size_t xb = (n + off) * sizeof(float), ob = (size_t)B * sizeof(int32_t);
    char *d_x = gt_dev_alloc(xb);
    int32_t *d_out = gt_dev_alloc(ob);
    gt_poison(d_x, xb), gt_poison(d_out, ob);
    float *xd = (float *)d_x + off;
    gt_upload(xd, x, n * sizeof(float));

    GP_CHECK_OK(gp_argmax_rows(xd, d_out, B, V, s));
    gt_download(got, d_out, ob);
    gp_argmax_rows_ref(x, ref, B, V);
    gt_guard_check(d_out, ob, "out");
    int bad = 0;
    for (int b = 0; b < B; b++) {
        /* the test's own expectation checks the reference too */
        int ok = got[b] == ref[b] && (want[b] < 0 || ref[b] == want[b]);
        if (!ok && bad++ < 8)
            printf("  B=%d V=%d row %d (kind %d): got %d, gp_argmax %d, constructed %d\n", B, V,
                   b, b % 9, got[b], ref[b], want[b]);
    }
    if (bad)
        fail_msg("argmax B=%d V=%d misalign=%d: %d rows differ (seed %llu)", B, V, misalign, bad,
                 (unsigned long long)g_seed);
    gt_dev_free(d_x), gt_dev_free(d_out);
    free(x), free(got), free(ref), free(want);
}

static void test_shapes(void **state)
{
    (void)state;
    gt_rng rng = { g_seed };
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    static const int Vs[] = { 128256, 1000, 4095, 5000, 5, 1 };
    static const int Bs[] = { 1, 3, 8, 64 };
    for (size_t v = 0; v < sizeof Vs / sizeof Vs[0]; v++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++)
            run_case(Bs[b], Vs[v], 0, &rng, s);
    run_case(9, 128256, 1, &rng, s); /* misaligned: scalar path, every row kind */
    run_case(18, 1000, 1, &rng, s);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

static void test_bad_args(void **state)
{
    (void)state;
    float *x = (float *)(uintptr_t)0x1000;
    int32_t *o = (int32_t *)(uintptr_t)0x2000;
    GP_CHECK_FAIL(gp_argmax_rows(x, o, -1, 10, NULL), GP_ERR_INVALID_ARG, "B = -1");
    GP_CHECK_FAIL(gp_argmax_rows(x, o, 1, 0, NULL), GP_ERR_INVALID_ARG, "V = 0");
    GP_CHECK_FAIL(gp_argmax_rows(x, NULL, 1, 10, NULL), GP_ERR_INVALID_ARG, "out (nil)");
    GP_CHECK_OK(gp_argmax_rows(NULL, NULL, 0, 10, NULL));
}

/* The reference itself on the constructed rows (host only). */
static void test_reference_rules(void **state)
{
    (void)state;
    gt_rng rng = { 12345 };
    float x[4096];
    for (int kind = 0; kind < 9; kind++) {
        int want = fill_row(x, 4096, kind, &rng);
        if (want >= 0)
            assert_int_equal(gp_argmax(x, 4096), want);
    }
}

int main(void)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_reference_rules),
    };
    if (cmocka_run_group_tests_name("argmax arguments and rules (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_argmax"))
        return 77;
    g_seed = gt_seed("engine_argmax");
    const struct CMUnitTest gpu[] = { cmocka_unit_test(test_shapes) };
    return cmocka_run_group_tests_name("argmax on the GPU", gpu, NULL, NULL) ? 1 : 0;
}
