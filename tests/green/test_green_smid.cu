/* The partition pool on the GPU, seen from inside: a kernel records %smid per
 * block through each pair's streams; A's and F's SM sets must be disjoint,
 * of exactly the sizes the pool reports, and cover the device. Also the
 * forced fallback, and the refusals. Exits 77 (skipped) without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" { /* cmocka.h declares its functions without C linkage for C++ */
#include <cmocka.h>

#include "gp_test.h"
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gp_green.h"
#include "gp_test_cuda.h"
#include "gp_weights.h" /* gp_cuda_available */

#define MAX_SMID 1024 /* %smid < %nsmid, which is far below this on any current GPU */

static __device__ unsigned smid(void)
{
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

/* Each block holds its SM for a while, so the scheduler has to spread the
 * grid over every SM the stream may use instead of reusing the first few. */
static __global__ void record_smid(unsigned *out, long long spin)
{
    long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = smid();
}

typedef struct sm_set { unsigned char has[MAX_SMID]; int count; } sm_set;

typedef struct gpu_ctx {
    int device_sms;
    int n_blocks;
    unsigned *d_ids; /* [n_blocks] device */
    unsigned *h_ids; /* [n_blocks] host */
} gpu_ctx;

static gpu_ctx g;

/* The SMs a grid launched on stream ran on. */
static void observe(void *stream, sm_set *set)
{
    cudaStream_t s = (cudaStream_t)stream;
    GP_CHECK_CUDA(cudaMemsetAsync(g.d_ids, 0xff, (size_t)g.n_blocks * sizeof(unsigned), s));
    record_smid<<<g.n_blocks, 64, 0, s>>>(g.d_ids, 20000); /* ~10 us per block */
    GP_CHECK_CUDA(cudaGetLastError());
    GP_CHECK_CUDA(cudaMemcpyAsync(g.h_ids, g.d_ids, (size_t)g.n_blocks * sizeof(unsigned),
                       cudaMemcpyDeviceToHost, s));
    GP_CHECK_CUDA(cudaStreamSynchronize(s));
    memset(set, 0, sizeof *set);
    for (int i = 0; i < g.n_blocks; i++) {
        if (g.h_ids[i] >= MAX_SMID)
            fail_msg("block %d recorded smid %u (not run, or smid beyond %d)", i, g.h_ids[i],
                     MAX_SMID);
        /* a flag, not a counter: thousands of blocks land on each SM */
        if (!set->has[g.h_ids[i]]) {
            set->has[g.h_ids[i]] = 1;
            set->count++;
        }
    }
}

static int overlap(const sm_set *a, const sm_set *b)
{
    int n = 0;
    for (int i = 0; i < MAX_SMID; i++)
        n += a->has[i] && b->has[i];
    return n;
}

static void check_pair(const gp_green_pair *p, int device_sms)
{
    sm_set a, f;
    observe(p->attn_stream, &a);
    observe(p->ffn_stream, &f);
    printf("  split %3d:%-3d partitioned %d: obtained %3d:%-3d, observed %3d:%-3d, shared %d\n",
           p->plan.attn_sms, p->plan.ffn_sms, p->partitioned, p->attn_sms, p->ffn_sms, a.count,
           f.count, overlap(&a, &f));
    if (p->partitioned) {
        assert_int_equal(p->attn_sms, p->plan.attn_sms);
        assert_int_equal(p->ffn_sms, p->plan.ffn_sms);
        assert_int_equal(a.count, p->attn_sms);
        assert_int_equal(f.count, p->ffn_sms);
        assert_int_equal(overlap(&a, &f), 0);
        assert_int_equal(a.count + f.count, device_sms); /* no SM idle */
    } else {
        assert_int_equal(p->attn_sms, device_sms);
        assert_int_equal(p->ffn_sms, device_sms);
        assert_int_equal(a.count, device_sms);
        assert_int_equal(f.count, device_sms);
    }
}

/* ---------------------------------------------------------------- host */

static void test_bad_params(void **state)
{
    (void)state;
    gp_green_pool *pool = (gp_green_pool *)&pool; /* must be reset to NULL */
    gp_green_pool_params p = gp_green_pool_default_params();
    assert_int_equal(p.device, 0);
    assert_null(p.splits);
    assert_int_equal(p.n_splits, 0);
    assert_int_equal(p.remainder_side, GP_SPLIT_SIDE_F);
    assert_int_equal(p.force_fallback, 0);

    GP_CHECK_FAIL(gp_green_pool_create(NULL, &pool), GP_ERR_INVALID_ARG, "params is NULL");
    assert_null(pool);
    GP_CHECK_FAIL(gp_green_pool_create(&p, NULL), GP_ERR_INVALID_ARG, "out is NULL");
    p.n_splits = -1;
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, "n_splits -1");
    p.n_splits = 2;
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, "splits is NULL");
    p = gp_green_pool_default_params();
    p.remainder_side = (gp_split_side)5;
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, "remainder_side 5");
    p = gp_green_pool_default_params();
    p.device = -1;
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, "device -1");
    assert_null(pool);

    gp_green_pool_destroy(NULL);
    assert_int_equal(gp_green_pool_size(NULL), 0);
    assert_null(gp_green_pool_pair(NULL, 0));
    assert_int_equal(gp_green_pool_find(NULL, 56), -1);
    assert_int_equal(gp_green_pool_partitioned(NULL), 0);
    assert_int_equal(gp_green_query(0, NULL), GP_ERR_INVALID_ARG);
}

/* Without a GPU the pool says so (the binary got here: nothing links libcuda). */
static void test_no_gpu(void **state)
{
    (void)state;
    gp_green_pool *pool = NULL;
    gp_green_pool_params p = gp_green_pool_default_params();
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_NO_DEVICE, "no CUDA GPU usable");
    assert_null(pool);
    gp_sm_info info;
    GP_CHECK_FAIL(gp_green_query(0, &info), GP_ERR_NO_DEVICE, "no CUDA GPU usable");
}

/* ---------------------------------------------------------------- GPU */

static int gpu_setup(void **state)
{
    (void)state;
    GP_CHECK_CUDA(cudaSetDevice(0));
    GP_CHECK_CUDA(cudaDeviceGetAttribute(&g.device_sms, cudaDevAttrMultiProcessorCount, 0));
    g.n_blocks = 64 * g.device_sms;
    GP_CHECK_CUDA(cudaMalloc((void **)&g.d_ids, (size_t)g.n_blocks * sizeof(unsigned)));
    g.h_ids = (unsigned *)malloc((size_t)g.n_blocks * sizeof(unsigned));
    assert_non_null(g.h_ids);
    return 0;
}

static int gpu_teardown(void **state)
{
    (void)state;
    (void)cudaFree(g.d_ids);
    free(g.h_ids);
    return 0;
}

static void test_query(void **state)
{
    (void)state;
    gp_sm_info info;
    gp_status st = gp_green_query(0, &info);
    if (st == GP_ERR_UNSUPPORTED) {
        printf("  green contexts unavailable here: %s\n", gp_last_error());
        return;
    }
    GP_CHECK_OK(st);
    printf("  device 0: %d SMs, minimum partition %d, alignment %d, %d groups of %d "
           "(runtime: %d SMs)\n", info.sm_count, info.min_partition, info.alignment, info.groups,
           gp_split_granularity(&info), g.device_sms);
    assert_int_equal(info.sm_count, g.device_sms);
    assert_true(info.min_partition >= 1 && info.alignment >= 1);
    assert_true(info.groups >= 2 && info.groups <= info.sm_count / gp_split_granularity(&info));
}

/* Every valid split with the remainder on F, then on A. */
static void test_every_split(void **state)
{
    (void)state;
    for (int side = 0; side < 2; side++) {
        gp_green_pool_params p = gp_green_pool_default_params();
        p.remainder_side = (gp_split_side)side;
        gp_green_pool *pool = NULL;
        GP_CHECK_OK(gp_green_pool_create(&p, &pool));
        gp_sm_info info = gp_green_pool_sm_info(pool);
        int n_expect = 0;
        GP_CHECK_OK(gp_split_enumerate(&info, (gp_split_side)side, NULL, 0, &n_expect));
        printf(" remainder on %s: %d pairs, %s%s\n", side ? "A" : "F", gp_green_pool_size(pool),
               gp_green_pool_partitioned(pool) ? "partitioned" : "unpartitioned: ",
               gp_green_pool_fallback_reason(pool));
        assert_int_equal(gp_green_pool_size(pool), n_expect);
        for (int i = 0; i < gp_green_pool_size(pool); i++) {
            const gp_green_pair *pair = gp_green_pool_pair(pool, i);
            assert_non_null(pair);
            assert_int_equal(pair->partitioned, gp_green_pool_partitioned(pool));
            assert_int_equal(gp_green_pool_find(pool, pair->plan.attn_sms), i);
            check_pair(pair, g.device_sms);
        }
        assert_null(gp_green_pool_pair(pool, gp_green_pool_size(pool)));
        assert_non_null(strstr(gp_last_error(), "index"));
        gp_green_pool_destroy(pool);
    }
}

/* Explicit candidates as the CLI gives them; on the H100 a split with the remainder on F. */
static void test_requested_splits(void **state)
{
    (void)state;
    gp_sm_info info;
    if (gp_green_query(0, &info) != GP_OK) {
        printf("  skipped: %s\n", gp_last_error());
        return;
    }
    int gr = gp_split_granularity(&info);
    int n_groups = info.groups; /* from the driver: 15 on the H100, not 132 / 8 */
    assert_true(n_groups >= 2 && n_groups <= info.sm_count / gr);
    int rem = info.sm_count - n_groups * gr;
    gp_split_req reqs[3] = {
        { gr, GP_SPLIT_REST },                               /* smallest A, shorthand */
        { (n_groups / 2) * gr, info.sm_count - (n_groups / 2) * gr }, /* middle */
        { (n_groups - 1) * gr, gr + rem },                   /* largest A */
    };
    int h100 = info.sm_count == 132 && gr == 8 && n_groups == 15; /* docs/ARCHITECTURE.md §6 */
    if (h100) { /* A = 7 groups, F = 8 groups + the 12 remainder SMs */
        reqs[1].attn_sms = 56;
        reqs[1].ffn_sms = 76;
    }
    gp_green_pool_params p = gp_green_pool_default_params();
    p.splits = reqs;
    p.n_splits = 3;
    gp_green_pool *pool = NULL;
    GP_CHECK_OK(gp_green_pool_create(&p, &pool));
    assert_int_equal(gp_green_pool_size(pool), 3);
    for (int i = 0; i < 3; i++) {
        const gp_green_pair *pair = gp_green_pool_pair(pool, i);
        assert_int_equal(pair->requested.attn_sms, reqs[i].attn_sms);
        assert_int_equal(pair->requested.ffn_sms, reqs[i].ffn_sms);
        assert_int_equal(pair->plan.attn_sms, reqs[i].attn_sms);
        check_pair(pair, g.device_sms);
    }
    if (h100 && gp_green_pool_partitioned(pool)) {
        const gp_green_pair *pair = gp_green_pool_pair(pool, gp_green_pool_find(pool, 56));
        assert_int_equal(pair->attn_sms, 56);
        assert_int_equal(pair->ffn_sms, 76);
        assert_int_equal(pair->plan.attn_groups, 7);
        assert_int_equal(pair->plan.ffn_groups, 8);
    }
    gp_green_pool_destroy(pool);

    /* A side holding only the remainder is refused (120:12 on the H100), and
     * so is a split that leaves SMs idle; no pool comes back. */
    gp_split_req bad[2] = { { gr, GP_SPLIT_REST }, { n_groups * gr, rem ? rem : GP_SPLIT_REST } };
    p.splits = bad;
    p.n_splits = 2;
    pool = (gp_green_pool *)&pool;
    char needle[64];
    snprintf(needle, sizeof needle, "split 2 of 2: attention SMs %d", n_groups * gr);
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, needle);
    assert_null(pool);
    bad[1].attn_sms = gr;
    bad[1].ffn_sms = info.sm_count - 2 * gr;
    GP_CHECK_FAIL(gp_green_pool_create(&p, &pool), GP_ERR_INVALID_ARG, "would sit idle");
    assert_null(pool);
}

/* Forced fallback: plain streams on the whole GPU, reported as such. */
static void test_forced_fallback(void **state)
{
    (void)state;
    gp_green_pool_params p = gp_green_pool_default_params();
    p.force_fallback = 1;
    gp_green_pool *pool = NULL;
    GP_CHECK_OK(gp_green_pool_create(&p, &pool));
    assert_int_equal(gp_green_pool_partitioned(pool), 0);
    assert_non_null(strstr(gp_green_pool_fallback_reason(pool), "force_fallback"));
    assert_true(gp_green_pool_size(pool) >= 1);
    for (int i = 0; i < gp_green_pool_size(pool); i++) {
        const gp_green_pair *pair = gp_green_pool_pair(pool, i);
        assert_int_equal(pair->partitioned, 0);
        assert_non_null(pair->attn_stream);
        assert_non_null(pair->ffn_stream);
        assert_true(pair->attn_stream != pair->ffn_stream);
        if (i < 2)
            check_pair(pair, g.device_sms);
    }
    gp_green_pool_destroy(pool);
}

/* Pools come and go without leaking contexts the driver would run out of. */
static void test_recreate(void **state)
{
    (void)state;
    for (int k = 0; k < 20; k++) {
        gp_green_pool_params p = gp_green_pool_default_params();
        gp_green_pool *pool = NULL;
        GP_CHECK_OK(gp_green_pool_create(&p, &pool));
        gp_green_pool_destroy(pool);
    }
    GP_CHECK_CUDA(cudaDeviceSynchronize());
}

int main(void)
{
    const struct CMUnitTest host[] = { cmocka_unit_test(test_bad_params) };
    if (cmocka_run_group_tests_name("green pool arguments (host)", host, NULL, NULL))
        return 1;
    if (gp_cuda_available() != GP_OK) {
        printf("green_smid: skipped: %s\n", gp_last_error());
        const struct CMUnitTest none[] = { cmocka_unit_test(test_no_gpu) };
        if (cmocka_run_group_tests_name("green pool without a GPU", none, NULL, NULL))
            return 1;
        return 77;
    }
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_requested_splits),
        cmocka_unit_test(test_forced_fallback),
        cmocka_unit_test(test_recreate),
    };
    return cmocka_run_group_tests_name("green pool on the GPU", gpu, gpu_setup, gpu_teardown)
               ? 1
               : 0;
}
