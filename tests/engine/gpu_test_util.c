/* Helpers of the engine kernel tests (see gpu_test_util.h). */
#include "gpu_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gp_model.h"
#include "gp_test_cuda.h"
#include "gp_weights.h"

uint64_t gt_next(gt_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float gt_uniform(gt_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((gt_next(r) >> 40) * (1.0 / 16777216.0));
}

gp_bf16 gt_bf16(gt_rng *r, float lo, float hi)
{
    return gp_f32_to_bf16(gt_uniform(r, lo, hi));
}

uint16_t gt_half(gt_rng *r, float lo, float hi, gp_dtype dt)
{
    return gp_f32_to_half(gt_uniform(r, lo, hi), dt);
}

const gp_dtype gt_dtypes[2] = { GP_DTYPE_BF16, GP_DTYPE_F16 };

int gt_below(gt_rng *r, int n)
{
    return (int)(gt_next(r) % (uint64_t)n);
}

uint64_t gt_seed(const char *name)
{
    const char *env = getenv("GP_TEST_SEED");
    uint64_t s = env && *env ? strtoull(env, NULL, 0)
                             : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    printf("%s: seed %llu (set GP_TEST_SEED=%llu to repeat)\n", name, (unsigned long long)s,
           (unsigned long long)s);
    fflush(stdout);
    return s;
}

int gt_no_gpu(const char *name)
{
    if (gp_cuda_available() == GP_OK)
        return 0;
    printf("%s: SKIPPED (GPU part): %s\n", name, gp_last_error());
    return 1;
}

void *gt_dev_alloc(size_t bytes)
{
    void *p = NULL;
    GP_CHECK_CUDA(cudaMalloc(&p, bytes + GT_GUARD_BYTES));
    return p;
}

void gt_dev_free(void *p)
{
    if (p)
        GP_CHECK_CUDA(cudaFree(p));
}

void gt_poison(void *p, size_t bytes)
{
    GP_CHECK_CUDA(cudaMemset(p, 0xFF, bytes + GT_GUARD_BYTES));
    GP_CHECK_CUDA(cudaDeviceSynchronize());
}

void gt_guard_check(const void *p, size_t bytes, const char *what)
{
    unsigned char g[GT_GUARD_BYTES];
    GP_CHECK_CUDA(cudaMemcpy(g, (const unsigned char *)p + bytes, sizeof g, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof g; i++)
        if (g[i] != 0xFF)
            fail_msg("%s: written past its end (guard byte %zu is 0x%02x)", what, i, g[i]);
}

void gt_upload(void *dev, const void *host, size_t bytes)
{
    GP_CHECK_CUDA(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

void gt_download(void *host, const void *dev, size_t bytes)
{
    GP_CHECK_CUDA(cudaDeviceSynchronize()); /* surfaces kernel faults here, named */
    GP_CHECK_CUDA(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

void *gt_host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        fail_msg("out of host memory (%zu bytes)", bytes);
    return p;
}

size_t gt_check_close(const char *what, const float *got, const float *ref, size_t n, int cols,
                      double rel, double abs_tol)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        int ok;
        if (isnan(r))
            ok = isnan(g);
        else
            ok = !isnan(g) && fabs(g - r) <= rel * fabs(r) + abs_tol;
        if (!ok) {
            if (bad < 8)
                printf("  %s[%zu][%zu]: got %.9g, ref %.9g (|diff| %.3g, allowed %.3g)\n", what,
                       i / (size_t)cols, i % (size_t)cols, g, r, fabs(g - r),
                       rel * fabs(r) + abs_tol);
            bad++;
        }
    }
    if (bad)
        printf("  %s: %zu of %zu elements beyond rel %.1e + abs %.1e\n", what, bad, n, rel,
               abs_tol);
    return bad;
}

void gt_config_hd128(gp_config *c)
{
    if (gp_config_preset("tiny", c) != GP_OK)
        fail_msg("gt_config_hd128: %s", gp_last_error());
    c->hidden = 256;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = 128;
    c->ffn = 384;
    c->vocab = 512;
    c->max_context = 4096;
    c->tied_embeddings = false;
}

int gt_engine_main(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                   CMFixtureFunction teardown, gp_dtype *dt)
{
    if (gp_cuda_available() != GP_OK) {
        printf("%s: SKIPPED: %s\n", name, gp_last_error());
        return 77;
    }
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        *dt = gt_dtypes[d];
        char group[96];
        snprintf(group, sizeof group, "%s, %s", name, gp_dtype_flag_name(*dt));
        failed |= _cmocka_run_group_tests(group, tests, n, setup, teardown) != 0;
    }
    return failed;
}

void gt_weights_synth(const gp_config *c, uint64_t seed, gp_dtype dt, gp_host_weights *w, gp_device_weights **dw)
{
    if (gp_host_weights_alloc(c, GP_DTYPE_BF16, w) != GP_OK || gp_synth_fill_host(w, seed) != GP_OK ||
        gp_device_weights_upload(w, dt, dw) != GP_OK)
        fail_msg("gt_weights_synth: %s", gp_last_error());
}

int32_t *gt_rand_ids(int n, int vocab)
{
    int32_t *ids = gt_host_alloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        ids[i] = rand() % vocab;
    return ids;
}
