/* The pipeline on the GPU: for M = 1..4, ring depths 2 and 4, the smallest,
 * a middle and the largest split and the unpartitioned fallback, with and
 * without stage graphs, with the fill and drain on the whole GPU or on the
 * partitions, and with a relay stage between attention and FFN that hands
 * every FFN stage a copy of its payload's rows in other buffers
 * (tests/support/relay_exec: a three-stage graph), pipelined decode steps give
 * the sequential engine's greedy tokens and its logits within the engine's
 * tolerance. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "relay_exec.h"
#include "gp_reference.h"
#include "gp_test.h"
#include "gp_weights.h"

/* Same weights and inputs on the same GPU: what differs is cuBLASLt's choice
 * of kernel under another SM target and row count (fp32 summation order) and
 * the bf16 rounding flips that follow; measured well under this. */
#define PIPE_TOL 1e-2

/* Device memory for the relay: the copy waits for the attention stage's
 * event, then the source rows are poisoned (all bytes 0xff: NaN). */
static void *dev_alloc(size_t n)
{
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}
static void dev_free(void *p) { cudaFree(p); }
static gp_status dev_copy_poison(void *dst, size_t dpitch, void *src, size_t spitch, size_t width, int rows,
                                 void *event)
{
    if ((event && cudaEventSynchronize((cudaEvent_t)event) != cudaSuccess) ||
        cudaMemcpy2D(dst, dpitch, src, spitch, width, (size_t)rows, cudaMemcpyDeviceToDevice) != cudaSuccess ||
        cudaMemset2D(src, spitch, 0xff, width, (size_t)rows) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "relay copy: %s", cudaGetErrorString(cudaGetLastError()));
    return GP_OK;
}

typedef struct fixture {
    const char *preset;
    int B, ctx, steps;
    gp_dtype dt; /* the engine dtype (BF16 or F16) */
} fixture;

/* Two engines over one set of device weights: one decodes sequentially,
 * the other through the pipeline on every (pair, M, depth); both are fed the
 * sequential engine's tokens. */
static void run_model_relay(const fixture *fx, bool force_fallback, bool graphs, gp_placement place,
                            gp_fill_drain fd, bool relay)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset(fx->preset, &cfg));
    gp_device_weights *dw;
    GP_CHECK_OK(gp_device_weights_synthetic(&cfg, fx->dt, 11, &dw));
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = fx->B;
    ep.max_context = fx->ctx;
    ep.block_size = 16;
    gp_engine *seq, *pipe;
    GP_CHECK_OK(gp_engine_create(dw, &ep, &seq));
    GP_CHECK_OK(gp_engine_create(dw, &ep, &pipe));
    /* the tiny model also against the CPU reference with the engine's
     * rounding (same synthetic weights on the host): says which side is off */
    gp_host_weights hw;
    gp_cpu_model *cpu = NULL;
    bool with_cpu = cfg.n_layers <= 4;
    if (with_cpu) {
        GP_CHECK_OK(gp_host_weights_alloc(&cfg, fx->dt, &hw)); /* the device's values */
        GP_CHECK_OK(gp_synth_fill_host(&hw, 11));
        GP_CHECK_OK(gp_cpu_model_create(&hw, fx->B, fx->ctx, 16, &cpu));
        gp_cpu_model_set_act_dtype(cpu, fx->dt);
    }

    gp_sm_info info;
    gp_green_pool_params pp = gp_green_pool_default_params();
    pp.force_fallback = force_fallback;
    gp_split_req reqs[3];
    int n_req = 0;
    if (!force_fallback && gp_green_query(0, &info) == GP_OK) {
        int n = 0;
        GP_CHECK_OK(gp_split_enumerate(&info, GP_SPLIT_SIDE_F, NULL, 0, &n));
        gp_split_plan *all = calloc((size_t)n, sizeof *all);
        GP_CHECK_OK(gp_split_enumerate(&info, GP_SPLIT_SIDE_F, all, n, &n));
        int pick[3] = {0, n / 2, n - 1};
        for (int i = 0; i < 3 && i < n; i++)
            if (i == 0 || pick[i] != pick[i - 1])
                reqs[n_req++] = (gp_split_req){all[pick[i]].attn_sms, all[pick[i]].ffn_sms};
        free(all);
        pp.splits = reqs;
        pp.n_splits = n_req;
    } else {
        reqs[0] = (gp_split_req){8, GP_SPLIT_REST};
        pp.splits = reqs;
        pp.n_splits = 1;
    }
    gp_green_pool *pool;
    GP_CHECK_OK(gp_green_pool_create(&pp, &pool));
    gp_cuda_exec *x;
    GP_CHECK_OK(gp_cuda_exec_create(pipe, pool, graphs, &x));
    GP_CHECK_OK(gp_cuda_exec_set_placement(x, place));
    GP_CHECK_OK(gp_cuda_exec_set_fill_drain(x, fd));
    gp_exec ex = gp_cuda_exec_get(x);
    relay_exec *rx = NULL;
    if (relay) {
        int dev = 0;
        assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
        relay_mem mem = {.device = dev, .row_pad = 0, .alloc = dev_alloc, .free = dev_free,
                         .copy_poison = dev_copy_poison}; /* GPU stages take contiguous rows */
        GP_CHECK_OK(relay_exec_create(ex, fx->B, &mem, &rx));
        ex = relay_exec_get(rx);
    }
    gp_pipeline *pl;
    GP_CHECK_OK(gp_pipeline_create(ex, cfg.n_layers, NULL, &pl));

    const int V = cfg.vocab, B = fx->B;
    float *ls = malloc(sizeof(float) * (size_t)B * V), *lp = malloc(sizeof(float) * (size_t)B * V);
    float *lc = malloc(sizeof(float) * (size_t)B * V);
    int32_t *tok = malloc(sizeof(int32_t) * B), *next_s = malloc(sizeof(int32_t) * B);
    int32_t *next_p = malloc(sizeof(int32_t) * B);
    int *ids = malloc(sizeof(int) * B);
    double worst = 0;
    int configs = 0;
    const unsigned depths[2] = {2, 4};
    for (int pair = 0; pair < ex.session->n_splits(ex.ctx); pair++) {
        GP_CHECK_OK(ex.session->select_split(ex.ctx, pair));
        gp_split_info si;
        ex.session->split_info(ex.ctx, pair, &si);
        for (int M = 1; M <= GP_PIPE_MAX_MICRO; M++)
            for (int d = 0; d < 2; d++) {
                gp_pipeline_params p = gp_pipeline_default_params();
                p.micro_batches = M;
                p.ring.depth = depths[d];
                GP_CHECK_OK(gp_pipeline_set_params(pl, &p));
                /* fresh sequences with prompts of different lengths (1..4) */
                for (int s = 0; s < B; s++) {
                    gp_engine_reset_seq(seq, s);
                    gp_engine_reset_seq(pipe, s);
                    if (cpu)
                        gp_cpu_reset_seq(cpu, s);
                    int32_t prompt[4] = {(int32_t)(s * 37 % V), 5, (int32_t)(s % 7), 9};
                    int n = 1 + s % 4;
                    GP_CHECK_OK(gp_engine_prefill(seq, s, n, prompt, &tok[s], NULL));
                    int32_t t2;
                    GP_CHECK_OK(gp_engine_prefill(pipe, s, n, prompt, &t2, NULL));
                    if (cpu)
                        GP_CHECK_OK(gp_cpu_prefill(cpu, s, n, prompt, lc));
                    assert_int_equal(t2, tok[s]);
                    ids[s] = s;
                }
                for (int t = 0; t < fx->steps; t++) {
                    GP_CHECK_OK(gp_engine_decode_step(seq, B, ids, tok, next_s, ls));
                    GP_CHECK_OK(gp_pipeline_step(pl, B, ids, tok, next_p, lp));
                    if (cpu)
                        GP_CHECK_OK(gp_cpu_decode_step(cpu, B, ids, tok, lc));
                    for (int s = 0; s < B && cpu; s++) {
                        double es = gp_test_rel_err(ls + (size_t)s * V, lc + (size_t)s * V, V);
                        double ep_ = gp_test_rel_err(lp + (size_t)s * V, lc + (size_t)s * V, V);
                        if (!(es <= PIPE_TOL) || !(ep_ <= PIPE_TOL))
                            fail_msg("%s %s %d:%d M=%d step %d seq %d: against the CPU reference (%s mode): sequential "
                                     "%.3g, pipelined %.3g (tolerance %.0e)", fx->preset, gp_dtype_flag_name(fx->dt), si.a_got, si.f_got, M, t, s,
                                     gp_dtype_flag_name(fx->dt), es, ep_, PIPE_TOL);
                    }
                    for (int s = 0; s < B; s++) {
                        double e = gp_test_rel_err(lp + (size_t)s * V, ls + (size_t)s * V, V);
                        if (!(e <= PIPE_TOL))
                            fail_msg("%s %d:%d%s M=%d depth %u step %d seq %d: pipelined vs sequential logits %.3g > "
                                     "%.0e", fx->preset, si.a_got, si.f_got, si.partitioned ? "" : " (unpartitioned)",
                                     M, depths[d], t, s, e, PIPE_TOL);
                        worst = fmax(worst, e);
                        if (next_p[s] != next_s[s])
                            fail_msg("%s %d:%d M=%d step %d seq %d: pipelined token %d, sequential %d", fx->preset,
                                     si.a_got, si.f_got, M, t, s, next_p[s], next_s[s]);
                    }
                    memcpy(tok, next_s, sizeof(int32_t) * B);
                }
                const gp_step_stats *st = gp_pipeline_last_stats(pl);
                assert_non_null(st);
                assert_true(st->step_ms > 0);
                assert_int_equal(st->split.a_got, si.a_got);
                for (int i = 0; i < cfg.n_layers * M; i++)
                    assert_true(st->attn_ms[i] > 0 && st->ffn_ms[i] > 0);
                configs++;
            }
        printf("%s: split %d:%d (requested %d:%d)%s, %s, fill-drain %s, M=1..4, depth 2/4, %s%s: pipelined == "
               "sequential tokens, worst logits %.3g\n", fx->preset, si.a_got, si.f_got, si.a_req, si.f_req,
               si.partitioned ? "" : " unpartitioned", gp_placement_name(place), gp_fill_drain_name(fd),
               graphs ? "stage graphs" : "eager", relay ? ", FFN stages handed relayed copies" : "", worst);
    }
    assert_true(configs > 0);
    if (rx)
        assert_true(relay_exec_relayed(rx) > 0);
    gp_pipeline_destroy(pl);
    relay_exec_destroy(rx);
    gp_cuda_exec_destroy(x);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(pipe);
    gp_engine_destroy(seq);
    gp_device_weights_destroy(dw);
    if (cpu) {
        gp_cpu_model_destroy(cpu);
        gp_host_weights_free(&hw);
    }
    free(ls), free(lp), free(lc), free(tok), free(next_s), free(next_p), free(ids);
}

static void run_model(const fixture *fx, bool force_fallback, bool graphs, gp_placement place, gp_fill_drain fd)
{
    run_model_relay(fx, force_fallback, graphs, place, fd, false);
}

static const fixture tiny = {"tiny", 9, 32, 3, GP_DTYPE_BF16};
static const fixture small = {"llama3.2-1b", 12, 64, 2, GP_DTYPE_BF16};
static const fixture tiny16 = {"tiny", 9, 32, 3, GP_DTYPE_F16};
static const fixture small16 = {"llama3.2-1b", 12, 64, 2, GP_DTYPE_F16};

#define WHOLE GP_FILL_DRAIN_WHOLE
#define PART GP_FILL_DRAIN_PARTITION
static void test_tiny_graphs(void **s) { run_model(&tiny, false, true, GP_PLACE_QKVO_A, WHOLE); }
static void test_tiny_eager(void **s) { run_model(&tiny, false, false, GP_PLACE_QKVO_A, WHOLE); }
static void test_tiny_fallback(void **s) { run_model(&tiny, true, true, GP_PLACE_QKVO_A, WHOLE); }
static void test_1b_graphs(void **s) { run_model(&small, false, true, GP_PLACE_QKVO_A, WHOLE); }
/* QKV and O projections beside the FFN: the same logits, another schedule */
static void test_tiny_graphs_qkvo_f(void **s) { run_model(&tiny, false, true, GP_PLACE_QKVO_F, WHOLE); }
static void test_tiny_eager_qkvo_f(void **s) { run_model(&tiny, false, false, GP_PLACE_QKVO_F, WHOLE); }
static void test_1b_graphs_qkvo_f(void **s) { run_model(&small, false, true, GP_PLACE_QKVO_F, WHOLE); }
/* fill and drain on the partitions, for comparison */
static void test_tiny_graphs_part(void **s) { run_model(&tiny, false, true, GP_PLACE_QKVO_A, PART); }
static void test_tiny_eager_part(void **s) { run_model(&tiny, false, false, GP_PLACE_QKVO_A, PART); }
static void test_tiny_graphs_qkvo_f_part(void **s) { run_model(&tiny, false, true, GP_PLACE_QKVO_F, PART); }
/* the FFN stages read what their payloads hand them, wherever it lives */
static void test_tiny_relay(void **s) { run_model_relay(&tiny, false, true, GP_PLACE_QKVO_A, WHOLE, true); }
static void test_tiny_relay_qkvo_f(void **s) { run_model_relay(&tiny, false, true, GP_PLACE_QKVO_F, WHOLE, true); }
/* the fp16 engine: the same schedules, payload views of fp16 */
static void test_tiny16_graphs(void **s) { run_model(&tiny16, false, true, GP_PLACE_QKVO_A, WHOLE); }
static void test_tiny16_eager_qkvo_f(void **s) { run_model(&tiny16, false, false, GP_PLACE_QKVO_F, WHOLE); }
static void test_1b16_graphs_qkvo_f(void **s) { run_model(&small16, false, true, GP_PLACE_QKVO_F, WHOLE); }
static void test_tiny16_relay_qkvo_f(void **s) { run_model_relay(&tiny16, false, true, GP_PLACE_QKVO_F, WHOLE, true); }

int main(void)
{
    if (gp_cuda_available() != GP_OK) {
        printf("pipeline_cuda: SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_graphs),
        cmocka_unit_test(test_tiny_eager),
        cmocka_unit_test(test_tiny_fallback),
        cmocka_unit_test(test_1b_graphs),
        cmocka_unit_test(test_tiny_graphs_qkvo_f),
        cmocka_unit_test(test_tiny_eager_qkvo_f),
        cmocka_unit_test(test_1b_graphs_qkvo_f),
        cmocka_unit_test(test_tiny_graphs_part),
        cmocka_unit_test(test_tiny_eager_part),
        cmocka_unit_test(test_tiny_graphs_qkvo_f_part),
        cmocka_unit_test(test_tiny_relay),
        cmocka_unit_test(test_tiny_relay_qkvo_f),
        cmocka_unit_test(test_tiny16_graphs),
        cmocka_unit_test(test_tiny16_eager_qkvo_f),
        cmocka_unit_test(test_1b16_graphs_qkvo_f),
        cmocka_unit_test(test_tiny16_relay_qkvo_f),
    };
    /* GP_TEST_FILTER=test_tiny* keeps compute-sanitizer runs short */
    if (getenv("GP_TEST_FILTER"))
        cmocka_set_test_filter(getenv("GP_TEST_FILTER"));
    return cmocka_run_group_tests_name("pipeline on the GPU", tests, NULL, NULL) ? 1 : 0;
}
