/* The weight-streaming manager on the CUDA backend: groups of distinct byte
 * patterns streamed through a budget that forces evictions, every stage's
 * read (a D2H copy of its slot, delayed on the compute stream so a copy
 * that did not wait for it would overwrite it first) checked against the
 * group's pattern, the budget and the statistics. Skips (77) without a GPU. */
#include "gp_test.h"
#include "gp_test_cuda.h"

#include <math.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gp_device.h"
#include "gp_streaming.h"

#define N_GROUPS 12
#define MIB (1ull << 20)
#define POISON 0xA5

static uint64_t group_bytes(int i)
{
    /* the last four share one size, so a slot also passes on as is */
    if (i >= 8)
        return 3 * MIB;
    return (uint64_t)(i % 3 + 1) * MIB + 4096u * (uint64_t)i + 17u * (uint64_t)i + 1u;
}

/* Offset-dependent, so a chunk landing at the wrong offset shows too. */
static uint8_t pattern(int group, uint64_t off)
{
    return (uint8_t)(group * 31 + (int)(off % 251) * 7 + 1);
}

static void host_sleep(void *us)
{
    usleep(*(useconds_t *)us);
}

static useconds_t g_delay_us = 1000;

typedef struct fixture {
    gp_stream_group groups[N_GROUPS];
    int order[N_GROUPS];
    uint8_t *host[N_GROUPS]; /* pinned, the patterns */
    uint8_t *dst[N_GROUPS];  /* pinned, one read-back per order position */
} fixture;

static void fixture_make(fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < N_GROUPS; i++) {
        uint64_t n = group_bytes(i);
        GP_CHECK_OK(gp_pinned_alloc((void **)&f->host[i], n, "test group"));
        GP_CHECK_OK(gp_pinned_alloc((void **)&f->dst[i], n, "test read-back"));
        for (uint64_t o = 0; o < n; o++)
            f->host[i][o] = pattern(i, o);
        f->groups[i] = (gp_stream_group){i % 2 ? GP_STREAM_FFN : GP_STREAM_ATTN, i / 2, n, f->host[i], 0, 0};
        f->order[i] = i;
    }
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < N_GROUPS; i++) {
        gp_pinned_free(f->host[i]);
        gp_pinned_free(f->dst[i]);
    }
}

/* Steps of the order on n_streams compute streams (stage p on p % n),
 * prefetch depth D, chunk bytes; budget = the minimum plus extra. */
static void run_case(int n_streams, int depth, uint64_t chunk, uint64_t extra, int steps)
{
    fixture f;
    fixture_make(&f);
    gp_stream_backend be = {0};
    GP_CHECK_OK(gp_stream_cuda_backend_create(0, &be));
    gp_streamer_params p = gp_streamer_default_params();
    p.groups = f.groups;
    p.n_groups = N_GROUPS;
    p.order = f.order;
    p.n_order = N_GROUPS;
    p.prefetch_depth = depth;
    p.chunk_bytes = chunk;
    p.backend = be;
    uint64_t min_b = 0, total = 0;
    GP_CHECK_OK(gp_streamer_min_budget(&p, &min_b));
    for (int i = 0; i < N_GROUPS; i++)
        total += group_bytes(i);
    p.budget_bytes = min_b + extra;
    assert_true(p.budget_bytes < total / 2); /* most groups must be evicted every step */
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    cudaStream_t st[2];
    for (int k = 0; k < n_streams; k++)
        GP_CHECK_CUDA(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
    uint64_t loads_total = 0;
    double waited_total = 0.0;
    cudaEvent_t ref;
    GP_CHECK_CUDA(cudaEventCreate(&ref));
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < N_GROUPS; i++)
            memset(f.dst[i], POISON, group_bytes(i));
        /* the step's start, before any copy of it is issued: the copy log's origin */
        GP_CHECK_CUDA(cudaEventRecord(ref, st[0]));
        for (int pos = 0; pos < N_GROUPS; pos++) {
            int g = f.order[pos];
            cudaStream_t cs = st[pos % n_streams];
            gp_status a = gp_streamer_advance(s, pos);
            if (a != GP_OK && a != GP_SOFT_FULL)
                fail_msg("advance(%d): %s: %s", pos, gp_status_str(a), gp_last_error());
            GP_CHECK_OK(gp_streamer_acquire(s, g, cs));
            void *slot = gp_streamer_slot(s, g);
            assert_non_null(slot);
            /* the read starts late: a copy into this slot that did not wait
             * for the release marker would land first */
            GP_CHECK_CUDA(cudaLaunchHostFunc(cs, host_sleep, &g_delay_us));
            GP_CHECK_CUDA(cudaMemcpyAsync(f.dst[pos], slot, group_bytes(g), cudaMemcpyDeviceToHost, cs));
            GP_CHECK_OK(gp_streamer_release(s, g, cs));
            GP_CHECK_OK(gp_streamer_check(s));
            assert_true(gp_streamer_device_bytes(s) <= p.budget_bytes);
        }
        for (int k = 0; k < n_streams; k++)
            GP_CHECK_CUDA(cudaStreamSynchronize(st[k]));
        for (int pos = 0; pos < N_GROUPS; pos++) {
            int g = f.order[pos];
            for (uint64_t o = 0; o < group_bytes(g); o++)
                if (f.dst[pos][o] != pattern(g, o))
                    fail_msg("step %d, group %d: byte %llu of %llu is 0x%02x, expected 0x%02x%s", step, g,
                             (unsigned long long)o, (unsigned long long)group_bytes(g), f.dst[pos][o],
                             pattern(g, o), f.dst[pos][o] == POISON ? " (never read)" : "");
        }
        /* the copy log: one entry per load of the step, each its group's bytes,
         * after the step's start, busy time summing to the statistics' */
        gp_stream_copy log[4 * N_GROUPS];
        int n_log = 0;
        GP_CHECK_OK(gp_streamer_copy_log(s, ref, log, 4 * N_GROUPS, &n_log));
        gp_streamer_stats ss;
        GP_CHECK_OK(gp_streamer_stats_get(s, &ss, 1));
        assert_int_equal((uint64_t)n_log, ss.loads);
        double busy_ms = 0.0;
        for (int i = 0; i < n_log; i++) {
            const gp_stream_copy *c = &log[i];
            int g = 2 * c->layer + (c->kind == GP_STREAM_FFN);
            if (c->layer < 0 || g >= N_GROUPS || f.groups[g].kind != c->kind || c->bytes != group_bytes(g))
                fail_msg("copy %d: %s %d of %llu bytes is no group of the fixture", i, gp_stream_kind_name(c->kind),
                         c->layer, (unsigned long long)c->bytes);
            if (!(c->start_ms > -0.01 && c->end_ms >= c->start_ms) || (i > 0 && c->start_ms < log[i - 1].end_ms - 0.01))
                fail_msg("copy %d (%s %d): %.4f to %.4f ms after the step's start, the one before ended at %.4f",
                         i, gp_stream_kind_name(c->kind), c->layer, c->start_ms, c->end_ms,
                         i > 0 ? log[i - 1].end_ms : 0.0);
            busy_ms += c->end_ms - c->start_ms;
        }
        assert_true(fabs(busy_ms - ss.copy_s * 1e3) <= 0.01 + 0.01 * busy_ms);
        for (int k = 0; k < GP_STREAM_KIND_COUNT; k++)
            assert_true(ss.waited_s[k] >= 0.0 && ss.waited_s[k] < 10.0);
        assert_true(ss.waited_s[GP_STREAM_HEAD] == 0.0 && ss.waited_s[GP_STREAM_OTHER] == 0.0);
        waited_total += ss.waited_s[GP_STREAM_ATTN] + ss.waited_s[GP_STREAM_FFN];
        printf("streams %d depth %d chunk %llu step %d: loads %llu (misses %llu, prefetches %llu, "
               "skipped %llu), hits %llu, evictions %llu, %.1f MiB in %.3f ms = %.1f GB/s, peak %llu of %llu\n",
               n_streams, depth, (unsigned long long)chunk, step, (unsigned long long)ss.loads,
               (unsigned long long)ss.misses, (unsigned long long)ss.prefetches,
               (unsigned long long)ss.prefetch_skipped, (unsigned long long)ss.hits,
               (unsigned long long)ss.evictions, (double)ss.bytes_streamed / (double)MIB, ss.copy_s * 1e3,
               ss.gbps, (unsigned long long)ss.peak_device_bytes, (unsigned long long)p.budget_bytes);
        assert_true(ss.loads == ss.misses + ss.prefetches);
        assert_true(ss.peak_device_bytes <= p.budget_bytes);
        assert_true(ss.hits + ss.misses == N_GROUPS);
        if (step > 0) { /* the budget holds under half the groups: most are copied again */
            assert_true(ss.loads >= N_GROUPS / 2);
            assert_true(ss.evictions > 0);
        }
        if (depth == 0)
            assert_true(ss.prefetches == 0);
        if (ss.loads > 0) {
            assert_true(ss.bytes_streamed > 0);
            assert_true(ss.copy_s > 0.0);
            assert_true(ss.gbps > 0.1 && ss.gbps < 1000.0); /* PCIe / C2C, not a broken clock */
        }
        loads_total += ss.loads;
    }
    assert_true(loads_total > 0);
    /* without prefetch every miss's copy is waited for on the compute stream */
    if (depth == 0)
        assert_true(waited_total > 0.0);
    printf("stalls on copies: %.3f ms over %d steps\n", waited_total * 1e3, steps);
    GP_CHECK_CUDA(cudaEventDestroy(ref));
    uint64_t used_high = 0, reserved_high = 0;
    GP_CHECK_OK(gp_stream_cuda_backend_mem(&be, &used_high, &reserved_high));
    printf("pool: used high %llu, reserved high %llu, budget %llu\n", (unsigned long long)used_high,
           (unsigned long long)reserved_high, (unsigned long long)p.budget_bytes);
    /* slots are rounded up by the pool: one granule of slack per slot */
    assert_true(used_high <= p.budget_bytes + (uint64_t)N_GROUPS * 2 * MIB);
    gp_streamer_destroy(s);
    gp_stream_cuda_backend_destroy(&be);
    assert_null(be.be);
    for (int k = 0; k < n_streams; k++)
        GP_CHECK_CUDA(cudaStreamDestroy(st[k]));
    fixture_free(&f);
}

static void test_host_checks(void **state)
{
    (void)state;
    GP_CHECK_FAIL(gp_stream_cuda_backend_create(0, NULL), GP_ERR_INVALID_ARG, "out is NULL");
    gp_stream_backend zero = {0};
    gp_stream_cuda_backend_destroy(&zero); /* a no-op */
    gp_stream_cuda_backend_destroy(NULL);
    uint64_t u, r;
    GP_CHECK_FAIL(gp_stream_cuda_backend_mem(&zero, &u, &r), GP_ERR_INVALID_ARG, "not a CUDA");
}

static void test_gpu_bad_device(void **state)
{
    (void)state;
    int n = 0;
    GP_CHECK_CUDA(cudaGetDeviceCount(&n));
    gp_stream_backend b;
    GP_CHECK_FAIL(gp_stream_cuda_backend_create(n, &b), GP_ERR_INVALID_ARG, "are present");
    assert_null(b.ops);
}

static void test_gpu_one_stream_no_prefetch(void **state)
{
    (void)state;
    run_case(1, 0, 32 * MIB, 0, 4);
}

static void test_gpu_two_streams_prefetch(void **state)
{
    (void)state;
    /* small chunks: several copies per group, offsets checked */
    run_case(2, 2, 1 * MIB + 4096, 4 * MIB, 5);
}

static void test_gpu_prefetch_tight(void **state)
{
    (void)state;
    run_case(2, 2, 32 * MIB, 0, 4); /* prefetches skipped for room */
}

int main(void)
{
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_host_checks),
    };
    if (cmocka_run_group_tests_name("stream_cuda (host)", host_tests, NULL, NULL))
        return 1;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        printf("stream_cuda: SKIPPED (GPU part): %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
        return 77;
    }
    const struct CMUnitTest gpu_tests[] = {
        cmocka_unit_test(test_gpu_bad_device),
        cmocka_unit_test(test_gpu_one_stream_no_prefetch),
        cmocka_unit_test(test_gpu_two_streams_prefetch),
        cmocka_unit_test(test_gpu_prefetch_tight),
    };
    return cmocka_run_group_tests_name("stream_cuda (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
