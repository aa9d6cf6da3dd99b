/* The CPU-assisted FFN in the CUDA engine (gp_engine_set_cpu_ffn):
 * its two kernels bit for bit against their CPU references; then decode
 * logits, every engine fed the same prompts and the same step tokens:
 *  (a) every neuron hot, calibrated thresholds: the all-GPU sparse engine's
 *      logits within CPU_FFN_HOT_TOL (greedy tokens CPU_FFN_HOT_AGREE);
 *  (b) half the neurons cold, thresholds 0: the dense engine's within the
 *      sparse test's SPARSE_ZERO_TOL;
 *  (c) a quarter hot, calibrated thresholds: the sparse engine's within the
 *      sparse test's masked bound (SPARSE_REF_TOL, SPARSE_REF_AGREE);
 *  (d) as (c) with a reload every step from a cold start: the same bound
 *      while neurons move between the cache and the CPU, and the counts;
 *  (e) as (d) on streamed weights with FFN groups on demand (the attention
 *      projections sparse there too, from their transposed copies beside
 *      the budget): against the resident engine, the same bound, and no FFN
 *      group copied in the decode steps;
 * with use_graphs on (qualifying steps run eager), and the refusals. Models:
 * tiny (synthetic) and the small-gqa checkpoint, bf16. Skips without a GPU. */
#include "gp_test.h"
#include "engine_test_util.h"

#include <math.h>

#include <cuda_runtime_api.h>

#include "cpu_ffn_kernels.h"
#include "gp_engine.h"
#include "gp_model.h"
#include "gp_sparse.h"
#include "gp_stage.h"
#include "gp_streaming.h"
#include "gp_weights.h"

#define MAX_B 4
#define CTX 64
#define STEPS 8
/* as test_engine_sparse.c: thresholds 0 against dense (summation order) */
#define SPARSE_ZERO_TOL 2e-2
/* as test_engine_sparse.c: masks decided on values rounded along two paths */
#define SPARSE_REF_TOL 0.5
#define SPARSE_REF_AGREE 0.85
/* (a): the down sum is the sparse engine's kernel over the same rows; only
 * gate/up are summed in another order (dense GEMM over the masked input
 * against the sparse kernel), so a bf16 rounding of gate/up may flip, and
 * through it a down mask, which moves a sum by about t_down x a weight.
 * Between the thresholds-0 bound (rounding only) and the masked one (every
 * projection's masks on two paths); not yet measured on a GPU when
 * written: the test prints the figure. */
#define CPU_FFN_HOT_TOL 0.1
#define CPU_FFN_HOT_AGREE 0.9

/* Prefill MAX_B prompts, then STEPS steps of fixed tokens (not the greedy
 * ones: engines that differ in rounding stay on one path); every step's
 * logits into logits [STEPS][MAX_B][V]. With streamed weights sw, *ss
 * receives the streamer's statistics of the decode steps alone. */
static void run_ex(gp_engine *e, int V, float *logits, gp_device_weights *sw, gp_streamer_stats *ss)
{
    int32_t p[MAX_B][9], next[MAX_B], tok[MAX_B];
    gp_prefill_seq seqs[MAX_B];
    for (int s = 0; s < MAX_B; s++) {
        for (int i = 0; i < 9; i++)
            p[s][i] = (int32_t)((13 * i + 7 * s + 1) % V);
        seqs[s] = (gp_prefill_seq){s, 3 + 2 * s, p[s]};
    }
    GP_CHECK_OK(gp_engine_prefill_batch(e, MAX_B, seqs, next, NULL, NULL));
    if (sw)
        GP_CHECK_OK(gp_device_weights_stream_stats(sw, ss, 1));
    const int ids[MAX_B] = {0, 1, 2, 3};
    for (int st = 0; st < STEPS; st++) {
        for (int s = 0; s < MAX_B; s++)
            tok[s] = (int32_t)((31 * st + 17 * s + 5) % V);
        GP_CHECK_OK(gp_engine_decode_step(e, MAX_B, ids, tok, next, logits + (size_t)st * MAX_B * V));
    }
    if (sw)
        GP_CHECK_OK(gp_device_weights_stream_stats(sw, ss, 0));
}

static void run(gp_engine *e, int V, float *logits)
{
    run_ex(e, V, logits, NULL, NULL);
}

static int argmax(const float *v, int n)
{
    int k = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[k])
            k = i;
    return k;
}

/* Rows whose greedy token agrees. */
static int agree(const float *a, const float *b, int rows, int V)
{
    int same = 0;
    for (int r = 0; r < rows; r++)
        same += argmax(a + (size_t)r * V, V) == argmax(b + (size_t)r * V, V);
    return same;
}

/* Logits of an engine with sparsity sp (NULL: dense) and, when H > 0, the
 * CPU-assisted FFN with H hot neurons per layer, calib choosing them. */
static void logits_of(gp_device_weights *dw, const gp_host_weights *hw, const gp_sparsity *sp, int H,
                      const gp_sparsity *calib, const gp_cpu_ffn_params *pp, bool graphs, float *out,
                      gp_cpu_ffn_stats *st)
{
    gp_engine *e = gt_engine(dw, MAX_B, CTX, graphs);
    if (sp)
        GP_CHECK_OK(gp_engine_set_sparsity(e, sp->thresholds));
    if (H > 0) {
        gp_cpu_ffn_params p = pp ? *pp : gp_cpu_ffn_default_params();
        p.hot_per_layer = H;
        p.n_threads = 3;
        GP_CHECK_OK(gp_engine_set_cpu_ffn(e, hw, calib, &p));
        assert_true(gp_engine_cpu_ffn_on(e));
    }
    memset(out, 0xff, sizeof(float) * (size_t)STEPS * MAX_B * hw->cfg.vocab); /* poisoned */
    run(e, hw->cfg.vocab, out);
    if (st)
        GP_CHECK_OK(gp_engine_cpu_ffn_stats(e, st, 0));
    gp_engine_destroy(e);
}

static void check_model(const char *spec)
{
    gp_host_weights hw;
    gp_device_weights *dw;
    gt_load_model(spec, &hw, &dw);
    const gp_config *c = &hw.cfg;
    const int V = c->vocab, F = c->ffn, rows = STEPS * MAX_B;
    const size_t n = (size_t)rows * V;
    float *dense = malloc(sizeof(float) * n), *sparse = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    assert_true(dense && sparse && got);
    gp_sparsity sp, sp0;
    gt_calibrate(&hw, 0.5, &sp);
    GP_CHECK_OK(gp_sparsity_thresholds_zero(c, &sp0));
    logits_of(dw, &hw, NULL, 0, NULL, NULL, false, dense, NULL);
    logits_of(dw, &hw, &sp, 0, NULL, NULL, false, sparse, NULL);
    gp_cpu_ffn_stats st;

    /* (a) all hot: no CPU share, no reloads */
    logits_of(dw, &hw, &sp, F, &sp, NULL, false, got, &st);
    double d = gp_test_rel_err(got, sparse, (int)n);
    int same = agree(got, sparse, rows, V);
    printf("%s (a) H = ffn = %d, S = 0.5: against the sparse engine %.2e, %d of %d tokens\n", spec, F, d, same,
           rows);
    assert_true(d <= CPU_FFN_HOT_TOL);
    assert_true(same >= CPU_FFN_HOT_AGREE * rows);
    assert_int_equal(st.steps, STEPS);
    assert_int_equal(st.swaps, 0);
    assert_true(st.hit_rate == 1.0 || st.active == 0);
    assert_true(st.cpu_bytes == 0);

    /* (b) half cold, thresholds 0, graphs on: the dense engine's logits */
    logits_of(dw, &hw, &sp0, F / 2, &sp0, NULL, true, got, &st);
    d = gp_test_rel_err(got, dense, (int)n);
    printf("%s (b) H = %d, thresholds 0: against dense %.2e, %d of %d tokens; hit rate %.3f, CPU %.3f ms/step, "
           "%.0f bytes/step\n", spec, F / 2, d, agree(got, dense, rows, V), rows, st.hit_rate, st.cpu_ms_per_step,
           st.cpu_bytes_per_step);
    assert_true(d <= SPARSE_ZERO_TOL);
    assert_int_equal(st.steps, STEPS);
    assert_true(st.cpu_bytes > 0 && st.cpu_ms > 0.0);
    /* thresholds 0: every neuron active in every step (unless its SwiGLU output rounds to 0), half of them hot */
    const long all = (long)STEPS * c->n_layers * F;
    assert_true(st.active <= all && st.active >= all * 99 / 100);
    assert_true(fabs(st.hit_rate - 0.5) < 0.01);
    assert_int_equal(st.hot_bytes, (uint64_t)c->n_layers * gp_hotset_neuron_bytes(c, GP_DTYPE_BF16) * (F / 2));

    /* (c) a quarter hot, the calibration's most frequent */
    logits_of(dw, &hw, &sp, F / 4, &sp, NULL, false, got, &st);
    d = gp_test_rel_err(got, sparse, (int)n);
    same = agree(got, sparse, rows, V);
    printf("%s (c) H = %d, S = 0.5: against the sparse engine %.2e, %d of %d tokens; hit rate %.3f, CPU %.3f "
           "ms/step\n", spec, F / 4, d, same, rows, st.hit_rate, st.cpu_ms_per_step);
    assert_true(d <= SPARSE_REF_TOL);
    assert_true(same >= SPARSE_REF_AGREE * rows);
    assert_true(st.hit_rate > 0.0 && st.hit_rate < 1.0);

    /* (d) a reload every step from a hot set chosen without frequencies */
    gp_cpu_ffn_params p = gp_cpu_ffn_default_params();
    p.reload_window = 1;
    p.margin = 0.0;
    logits_of(dw, &hw, &sp, F / 4, NULL, &p, false, got, &st);
    d = gp_test_rel_err(got, sparse, (int)n);
    same = agree(got, sparse, rows, V);
    printf("%s (d) H = %d, reload every step: against the sparse engine %.2e, %d of %d tokens; %ld reloads, %ld "
           "swaps, hit rate %.3f\n", spec, F / 4, d, same, rows, st.reloads, st.swaps, st.hit_rate);
    assert_true(d <= SPARSE_REF_TOL);
    assert_true(same >= SPARSE_REF_AGREE * rows);
    assert_int_equal(st.reloads, STEPS);
    assert_true(st.swaps > 0);
    assert_int_equal(st.swap_bytes, (uint64_t)st.swaps * gp_hotset_neuron_bytes(c, GP_DTYPE_BF16));

    /* (e) streamed weights: against resident ones, every projection masked alike */
    logits_of(dw, &hw, &sp, F / 4, NULL, &p, false, sparse, NULL);
    gp_weights_stream_params wsp = gp_weights_stream_default_params();
    wsp.budget_bytes = (uint64_t)1 << 30;
    wsp.ffn_on_demand = 1;
    gp_device_weights *sw = NULL;
    gp_cpu_ffn_params ps = p;
    ps.hot_per_layer = F / 4;
    ps.n_threads = 3;
    wsp.ffn_on_demand = 0; /* FFN groups kept or prefetched that no served step reads: refused */
    GP_CHECK_OK(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &wsp, &sw));
    gp_engine *e = gt_engine(sw, MAX_B, CTX, false);
    GP_CHECK_OK(gp_engine_set_sparsity(e, sp.thresholds));
    GP_CHECK_FAIL(gp_engine_set_cpu_ffn(e, &hw, NULL, &ps), GP_ERR_STATE, "ffn_on_demand");
    gp_engine_destroy(e);
    gp_device_weights_destroy(sw);
    wsp.ffn_on_demand = 1;
    GP_CHECK_OK(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &wsp, &sw));
    e = gt_engine(sw, MAX_B, CTX, false);
    GP_CHECK_OK(gp_engine_set_sparsity(e, sp.thresholds));
    GP_CHECK_OK(gp_engine_set_cpu_ffn(e, &hw, NULL, &ps));
    memset(got, 0xff, sizeof(float) * n);
    /* the prefill copies the FFN groups; the decode steps must not */
    gp_streamer_stats ss;
    run_ex(e, V, got, sw, &ss);
    GP_CHECK_OK(gp_engine_cpu_ffn_stats(e, &st, 0));
    d = gp_test_rel_err(got, sparse, (int)n);
    same = agree(got, sparse, rows, V);
    printf("%s (e) streamed, FFN on demand, H = %d, reload every step: against resident weights %.2e, %d of %d "
           "tokens; decode copied %llu bytes in %llu loads, %ld reloads (%s)\n", spec, F / 4, d, same, rows,
           (unsigned long long)ss.bytes_streamed, (unsigned long long)ss.loads, st.reloads,
           st.reload_async ? "asynchronous" : "pageable, synchronous");
    assert_true(d <= SPARSE_REF_TOL);
    assert_true(same >= SPARSE_REF_AGREE * rows);
    assert_int_equal(st.reloads, STEPS);
    /* a budget that keeps every attention group: nothing at all streams in decode */
    assert_int_equal(ss.loads, 0);
    assert_int_equal(ss.bytes_streamed, 0);
    gp_engine_destroy(e);
    gp_device_weights_destroy(sw);

    gp_sparsity_free(&sp);
    gp_sparsity_free(&sp0);
    free(dense), free(sparse), free(got);
    gp_device_weights_destroy(dw);
    gp_host_weights_free(&hw);
}

static void test_tiny(void **state)
{
    (void)state;
    check_model("tiny");
}

static void test_gqa(void **state)
{
    (void)state;
    check_model(GP_TEST_DATA_DIR "/small-gqa");
}

/* The mask and add kernels against their references, bit for bit. */
static void test_kernels(void **state)
{
    (void)state;
    enum { N = 1000 };
    uint64_t rng = 9;
    const gp_dtype dts[2] = {GP_DTYPE_BF16, GP_DTYPE_F16};
    uint16_t *x = malloc(2 * N), *y = malloc(2 * N), *ref = malloc(2 * N);
    float *acc = malloc(4 * N), *add = malloc(4 * N), *acc_ref = malloc(4 * N);
    void *dx, *dy, *dacc, *dadd;
    assert_int_equal(cudaMalloc(&dx, 2 * N), cudaSuccess);
    assert_int_equal(cudaMalloc(&dy, 2 * N), cudaSuccess);
    assert_int_equal(cudaMalloc(&dacc, 4 * N), cudaSuccess);
    assert_int_equal(cudaMalloc(&dadd, 4 * N), cudaSuccess);
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < N; i++)
            x[i] = gp_f32_to_half((float)(gp_test_uniform(&rng) - 0.5), dts[d]);
        x[3] = gp_f32_to_half(-0.0f, dts[d]);
        const float t = fabsf(gp_half_to_f32(x[7], dts[d])); /* an element at the threshold */
        gp_cpu_ffn_mask_ref(dts[d], x, t, ref, N);
        assert_int_equal(cudaMemcpy(dx, x, 2 * N, cudaMemcpyHostToDevice), cudaSuccess);
        GP_CHECK_OK(gp_cpu_ffn_mask(dts[d], dx, t, dy, N, NULL));
        assert_int_equal(cudaMemcpy(y, dy, 2 * N, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_memory_equal(y, ref, 2 * N);
    }
    for (int i = 0; i < N; i++) {
        acc[i] = acc_ref[i] = (float)(gp_test_uniform(&rng) * 100.0 - 50.0);
        add[i] = (float)(gp_test_uniform(&rng) - 0.5);
    }
    gp_cpu_ffn_add_ref(acc_ref, add, N);
    assert_int_equal(cudaMemcpy(dacc, acc, 4 * N, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(dadd, add, 4 * N, cudaMemcpyHostToDevice), cudaSuccess);
    GP_CHECK_OK(gp_cpu_ffn_add(dacc, dadd, N, NULL));
    assert_int_equal(cudaMemcpy(acc, dacc, 4 * N, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(acc, acc_ref, 4 * N);
    GP_CHECK_FAIL(gp_cpu_ffn_mask(GP_DTYPE_F32, dx, 0.0f, dy, N, NULL), GP_ERR_INVALID_ARG, "gp_cpu_ffn_mask");
    GP_CHECK_FAIL(gp_cpu_ffn_mask(GP_DTYPE_BF16, dx, -1.0f, dy, N, NULL), GP_ERR_INVALID_ARG, "threshold -1");
    GP_CHECK_FAIL(gp_cpu_ffn_add(dacc, dadd, -1, NULL), GP_ERR_INVALID_ARG, "n -1");
    cudaFree(dx), cudaFree(dy), cudaFree(dacc), cudaFree(dadd);
    free(x), free(y), free(ref), free(acc), free(add), free(acc_ref);
}

static void test_refusals(void **state)
{
    (void)state;
    gp_host_weights hw;
    gp_device_weights *dw;
    gt_load_model("tiny", &hw, &dw);
    const gp_config *c = &hw.cfg;
    gp_engine *e = gt_engine(dw, MAX_B, CTX, false);
    gp_cpu_ffn_params p = gp_cpu_ffn_default_params();
    assert_int_equal(p.reload_window, 64);
    assert_true(p.decay == 0.99);
    assert_int_equal(p.hot_per_layer, 0);
    p.hot_per_layer = c->ffn / 2;
    gp_cpu_ffn_stats st;
    GP_CHECK_FAIL(gp_engine_set_cpu_ffn(e, &hw, NULL, &p), GP_ERR_STATE, "no sparsity set");
    GP_CHECK_FAIL(gp_engine_cpu_ffn_stats(e, &st, 0), GP_ERR_STATE, "off");
    gp_sparsity sp0;
    GP_CHECK_OK(gp_sparsity_thresholds_zero(c, &sp0));
    GP_CHECK_OK(gp_engine_set_sparsity(e, sp0.thresholds));
    p.hot_per_layer = 12;
    GP_CHECK_FAIL(gp_engine_set_cpu_ffn(e, &hw, NULL, &p), GP_ERR_INVALID_ARG, "hot_per_layer 12");
    p.hot_per_layer = 0;
    GP_CHECK_FAIL(gp_engine_set_cpu_ffn(e, &hw, NULL, &p), GP_ERR_INVALID_ARG, "hot_per_layer 0");
    p.hot_per_layer = 16;
    p.n_threads = 99;
    GP_CHECK_FAIL(gp_engine_set_cpu_ffn(e, &hw, NULL, &p), GP_ERR_INVALID_ARG, "n_threads 99");
    assert_false(gp_engine_cpu_ffn_on(e));
    p.n_threads = 2;
    GP_CHECK_OK(gp_engine_set_cpu_ffn(e, &hw, NULL, &p));
    assert_true(gp_engine_cpu_ffn_on(e));
    GP_CHECK_OK(gp_engine_cpu_ffn_stats(e, &st, 0));
    assert_int_equal(st.hot_per_layer, 16);
    assert_int_equal(st.host_bytes, (uint64_t)c->n_layers * c->ffn * gp_hotset_neuron_bytes(c, GP_DTYPE_BF16));
    assert_int_equal(st.hot_bytes, (uint64_t)c->n_layers * 16 * gp_hotset_neuron_bytes(c, GP_DTYPE_BF16));
    /* a new sparsity turns it off; NULL host weights too */
    GP_CHECK_OK(gp_engine_set_sparsity(e, sp0.thresholds));
    assert_false(gp_engine_cpu_ffn_on(e));
    GP_CHECK_OK(gp_engine_set_cpu_ffn(e, &hw, NULL, &p));
    GP_CHECK_OK(gp_engine_set_cpu_ffn(e, NULL, NULL, NULL));
    assert_false(gp_engine_cpu_ffn_on(e));
    gp_engine_destroy(e);
    gp_sparsity_free(&sp0);
    gp_device_weights_destroy(dw);
    gp_host_weights_free(&hw);
}

int main(void)
{
    if (gp_cuda_available() != GP_OK) {
        printf("engine_cpu_ffn: SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_gqa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
