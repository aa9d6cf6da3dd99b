/* Shared helpers of the attention tests (see attn_test_util.h). */
#include "attn_test_util.h"
#include "gp_test_cuda.h"
#include "gp_weights.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

uint64_t at_seed(const char *test)
{
    const char *env = getenv("GP_TEST_SEED");
    uint64_t seed;
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec
               ^ ((uint64_t)getpid() << 32);
    }
    printf("[%s] seed = %llu (GP_TEST_SEED=%llu repeats this run)\n", test,
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

static gp_decode_attn_params g_attn_params;
static int g_attn_params_set;

void at_attn_args(const char *test, int argc, char **argv)
{
    gp_decode_attn_params p = gp_decode_attn_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-kv-evict")) {
            p.kv_evict_first = 0;
            continue;
        }
        if ((strcmp(a, "--kernel") && strcmp(a, "--warps-cap")) || i + 1 >= argc) {
            fprintf(stderr, "[%s] usage: [--kernel NAME] [--warps-cap N] [--no-kv-evict]; "
                    "bad '%s'\n", test, a);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--kernel")) {
            if (gp_attn_kernel_parse(v, &p.kernel) != GP_OK) {
                fprintf(stderr, "[%s] --kernel: %s\n", test, gp_last_error());
                exit(2);
            }
        } else {
            char *end;
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 0 || n > 1 << 20) {
                fprintf(stderr, "[%s] --warps-cap '%s' is not a non-negative integer\n", test, v);
                exit(2);
            }
            p.stream_warps_cap = (int)n;
        }
    }
    if (gp_decode_attn_params_check(&p) != GP_OK) {
        fprintf(stderr, "[%s] %s\n", test, gp_last_error());
        exit(2);
    }
    printf("[%s] attention params: kernel %s, stream_warps_cap %d, kv_evict_first %d\n", test,
           gp_attn_kernel_name(p.kernel), p.stream_warps_cap, p.kv_evict_first);
    g_attn_params = p;
    g_attn_params_set = 1;
}

gp_decode_attn_params at_attn_params(void)
{
    return g_attn_params_set ? g_attn_params : gp_decode_attn_default_params();
}

uint64_t at_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int at_int(uint64_t *s, int n)
{
    return (int)(at_next(s) % (uint64_t)n);
}

float at_uniform(uint64_t *s, float lo, float hi)
{
    double u = (double)(at_next(s) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

static gp_dtype g_dtype = GP_DTYPE_BF16;

gp_dtype at_dtype(void)
{
    return g_dtype;
}

void at_set_dtype(gp_dtype dt)
{
    g_dtype = dt;
    printf("[dtype %s]\n", gp_dtype_flag_name(dt));
    fflush(stdout);
}

int at_setup_bf16(void **state)
{
    (void)state;
    at_set_dtype(GP_DTYPE_BF16);
    return 0;
}

int at_setup_f16(void **state)
{
    (void)state;
    at_set_dtype(GP_DTYPE_F16);
    return 0;
}

uint64_t at_dtype_seed(uint64_t seed)
{
    return g_dtype == GP_DTYPE_F16 ? seed ^ 0xf16f16f16ull : seed;
}

float at_f32(uint16_t x)
{
    return gp_half_to_f32(x, g_dtype);
}

uint16_t at_half(float f)
{
    return gp_f32_to_half(f, g_dtype);
}

void at_fill16(uint16_t *x, size_t n, uint64_t *s, float range)
{
    for (size_t i = 0; i < n; i++)
        x[i] = gp_f32_to_half(at_uniform(s, -range, range), g_dtype);
}

void at_shuffle(int32_t *x, int n, uint64_t *s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = at_int(s, i + 1);
        int32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

void *at_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        fail_msg("out of host memory (%zu bytes)", bytes);
    return p;
}

int at_gpu_usable(void)
{
    gp_status st = gp_cuda_available();
    if (st != GP_OK) {
        printf("skipping GPU tests: %s\n", gp_last_error());
        return 0;
    }
    return 1;
}

void *at_dev_alloc(size_t bytes)
{
    void *p = NULL;
    GP_CHECK_CUDA(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

void at_dev_free(void *p)
{
    if (p)
        GP_CHECK_CUDA(cudaFree(p));
}

void at_to_dev(void *dst, const void *src, size_t bytes)
{
    GP_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void at_to_host(void *dst, const void *src, size_t bytes)
{
    GP_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void at_dev_poison(void *p, size_t bytes)
{
    GP_CHECK_CUDA(cudaMemset(p, 0xff, bytes));
}

void at_dev_sync(void)
{
    GP_CHECK_CUDA(cudaDeviceSynchronize());
    GP_CHECK_CUDA(cudaGetLastError());
}

void at_check(gp_status st, const char *what)
{
    if (st != GP_OK)
        fail_msg("%s: %s: %s", what, gp_status_str(st), gp_last_error());
}

size_t at_compare(const char *what, const uint16_t *got, const float *want, size_t rows,
                  size_t row_len, double elem_rel, double row_abs, double row_rel)
{
    size_t fails = 0;
    double worst = 0.0;
    size_t worst_row = 0;
    for (size_t r = 0; r < rows; r++) {
        const uint16_t *g = got + r * row_len;
        const float *w = want + r * row_len;
        double mx = 0.0, err_mx = 0.0;
        for (size_t i = 0; i < row_len; i++)
            if (fabs((double)w[i]) > mx)
                mx = fabs((double)w[i]);
        for (size_t i = 0; i < row_len; i++) {
            double gv = (double)at_f32(g[i]), wv = (double)w[i];
            double err = fabs(gv - wv);
            int bad = isnan(gv) || isnan(wv) || err > elem_rel * fabs(wv) + row_abs * mx;
            if (!isnan(err) && err > err_mx)
                err_mx = err;
            if (bad) {
                if (fails < 10)
                    printf("  %s: MISMATCH row %zu elem %zu: got %.7g (0x%04x)%s, want %.7g "
                           "(row max|want| %.4g)\n", what, r, i, gv, (unsigned)g[i],
                           g[i] == 0xffffu ? " = poison, never written" : "", wv, mx);
                fails++;
            }
        }
        double rel = mx > 0.0 ? err_mx / mx : (err_mx > 0.0 ? INFINITY : 0.0);
        if (rel > row_rel) {
            if (fails < 10)
                printf("  %s: row %zu: max|got-want|/max|want| = %.3e > %.1e\n", what, r, rel,
                       row_rel);
            fails++;
        }
        if (rel > worst) {
            worst = rel;
            worst_row = r;
        }
    }
    printf("  %s [%s]: worst row max|got-want|/max|want| = %.3e (row %zu of %zu)%s\n", what,
           gp_dtype_flag_name(g_dtype), worst, worst_row, rows,
           fails ? "" : ", all elements written and within tolerance");
    if (fails)
        printf("  %s: %zu failures\n", what, fails);
    fflush(stdout);
    return fails;
}
