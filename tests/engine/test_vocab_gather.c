/* gp_vocab_gather against its reference, exactly, and the reference against
 * the layout it defines: logits cut into the ranks' segments as the engine's
 * head writes them (rank r's rows of the head, B x n_r each) come back in
 * vocabulary order, for vocabularies that split evenly and not, 1 to 8
 * ranks. */
#include "gpu_test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "gp_test_cuda.h"

static uint64_t g_seed;

/* logits [B][V] cut as the ranks' head GEMMs write them: [tp][B][s], rank
 * r's rows n_r wide. */
static void cut(const float *logits, float *parts, int B, int V, int tp)
{
    const int s = (V + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
        const int lo = r * s, n = V - lo < s ? V - lo : s;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < n; j++)
                parts[(size_t)r * B * s + (size_t)b * n + j] = logits[(size_t)b * V + lo + j];
    }
}

static const struct { int B, V, tp; } g_cases[] = {
    {1, 128256, 2}, {8, 128256, 2}, {3, 151936, 4}, {5, 1000, 3}, {2, 4097, 8}, {64, 5000, 2}, {1, 7, 1}, {4, 10, 3},
};

static void test_reference_layout(void **state)
{
    (void)state;
    gt_rng rng = {7};
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const int B = g_cases[i].B, V = g_cases[i].V, tp = g_cases[i].tp, s = (V + tp - 1) / tp;
        const size_t n = (size_t)B * V;
        float *x = gt_host_alloc(n * sizeof(float)), *got = gt_host_alloc(n * sizeof(float));
        float *parts = gt_host_alloc((size_t)tp * B * s * sizeof(float));
        for (size_t k = 0; k < n; k++)
            x[k] = gt_uniform(&rng, -8.0f, 8.0f);
        cut(x, parts, B, V, tp);
        memset(got, 0xff, n * sizeof(float));
        gp_vocab_gather_ref(parts, got, B, V, tp);
        assert_memory_equal(got, x, n * sizeof(float));
        free(x), free(got), free(parts);
    }
}

static void test_bad_args(void **state)
{
    (void)state;
    float *p = (float *)(uintptr_t)0x1000, *l = (float *)(uintptr_t)0x2000;
    GP_CHECK_FAIL(gp_vocab_gather(p, l, -1, 10, 2, NULL), GP_ERR_INVALID_ARG, "B = -1");
    GP_CHECK_FAIL(gp_vocab_gather(p, l, 1, 10, 9, NULL), GP_ERR_INVALID_ARG, "tp = 9");
    GP_CHECK_FAIL(gp_vocab_gather(p, l, 1, 5, 4, NULL), GP_ERR_INVALID_ARG, "every rank a row");
    GP_CHECK_FAIL(gp_vocab_gather(NULL, l, 1, 10, 2, NULL), GP_ERR_INVALID_ARG, "parts (nil)");
    GP_CHECK_OK(gp_vocab_gather(NULL, NULL, 0, 10, 2, NULL));
}

static void test_kernel(void **state)
{
    (void)state;
    gt_rng rng = {g_seed};
    cudaStream_t st;
    GP_CHECK_CUDA(cudaStreamCreate(&st));
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const int B = g_cases[i].B, V = g_cases[i].V, tp = g_cases[i].tp, s = (V + tp - 1) / tp;
        const size_t n = (size_t)B * V, pn = (size_t)tp * B * s;
        float *parts = gt_host_alloc(pn * sizeof(float)), *ref = gt_host_alloc(n * sizeof(float));
        float *got = gt_host_alloc(n * sizeof(float));
        for (size_t k = 0; k < pn; k++)
            parts[k] = gt_uniform(&rng, -8.0f, 8.0f);
        float *dp = gt_dev_alloc(pn * sizeof(float)), *dl = gt_dev_alloc(n * sizeof(float));
        gt_poison(dp, pn * sizeof(float)), gt_poison(dl, n * sizeof(float));
        gt_upload(dp, parts, pn * sizeof(float));
        GP_CHECK_OK(gp_vocab_gather(dp, dl, B, V, tp, st));
        GP_CHECK_CUDA(cudaStreamSynchronize(st));
        gt_download(got, dl, n * sizeof(float));
        gt_guard_check(dl, n * sizeof(float), "logits");
        gp_vocab_gather_ref(parts, ref, B, V, tp);
        if (memcmp(got, ref, n * sizeof(float)) != 0)
            fail_msg("vocab gather B=%d V=%d tp=%d differs from the reference (seed %llu)", B, V, tp,
                     (unsigned long long)g_seed);
        gt_dev_free(dp), gt_dev_free(dl);
        free(parts), free(ref), free(got);
    }
    GP_CHECK_CUDA(cudaStreamDestroy(st));
}

int main(void)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_reference_layout),
        cmocka_unit_test(test_bad_args),
    };
    if (cmocka_run_group_tests_name("vocab gather layout and arguments (host)", host, NULL, NULL))
        return 1;
    if (gt_no_gpu("engine_vocab_gather"))
        return 77;
    g_seed = gt_seed("engine_vocab_gather");
    const struct CMUnitTest gpu[] = {cmocka_unit_test(test_kernel)};
    return cmocka_run_group_tests_name("vocab gather on the GPU", gpu, NULL, NULL) ? 1 : 0;
}
