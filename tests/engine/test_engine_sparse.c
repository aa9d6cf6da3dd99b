/* Activation sparsity in the CUDA engine: all-zero thresholds give the dense
 * engine's greedy tokens (logits within SPARSE_ZERO_TOL: the sparse kernel
 * sums in another order, so a bf16 rounding of an activation may differ);
 * thresholds mask exactly as the CPU reference does (decode logits within
 * SPARSE_REF_TOL of the reference rounding where the engine does, with the
 * same masks, every projection sparse on every step), prefill stays dense,
 * the active-input counts add up, graphs and eager steps agree, streamed
 * weights run sparse as resident ones, the per-step choice between the
 * sparse kernel and the dense GEMM, and the refusals. Models: tiny (synthetic),
 * small-gqa and qwen2-tiny checkpoints. Skips without a GPU. */
#include "gp_test.h"
#include "engine_test_util.h"

#include <math.h>

#include "gp_engine.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_sparse.h"
#include "gp_stage.h"
#include "gp_weights.h"

#define MAX_B 4
#define CTX 64
#define STEPS 6
/* max |sparse - dense| / max |dense| over the logits at thresholds 0 */
#define SPARSE_ZERO_TOL 2e-2

/* An engine whose steps run every calibrated projection sparse (always),
 * as the masks of the CPU reference do, or choose per step (probe: every
 * how many dense steps the sparse kernel measures again). */
static gp_engine *sparse_engine(gp_device_weights *dw, bool graphs, bool always, int probe)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = MAX_B;
    p.max_context = CTX;
    p.use_graphs = graphs;
    p.sparse_always = always;
    p.sparse_probe = probe;
    gp_engine *e = NULL;
    GP_CHECK_OK(gp_engine_create(dw, &p, &e));
    return e;
}

/* Prefill MAX_B prompts, then STEPS greedy steps; every step's logits and
 * tokens into logits [STEPS][MAX_B][V] and toks [STEPS][MAX_B]; the prefill's
 * last logits into pf [MAX_B][V]. */
static void run(gp_engine *e, int V, float *pf, float *logits, int32_t *toks)
{
    int32_t p[MAX_B][9];
    gp_prefill_seq seqs[MAX_B];
    for (int s = 0; s < MAX_B; s++) {
        for (int i = 0; i < 9; i++)
            p[s][i] = (int32_t)((13 * i + 7 * s + 1) % V);
        seqs[s] = (gp_prefill_seq){s, 3 + 2 * s, p[s]};
    }
    int32_t next[MAX_B];
    GP_CHECK_OK(gp_engine_prefill_batch(e, MAX_B, seqs, next, pf, NULL));
    const int ids[MAX_B] = {0, 1, 2, 3};
    for (int st = 0; st < STEPS; st++) {
        GP_CHECK_OK(gp_engine_decode_step(e, MAX_B, ids, next, next, logits + (size_t)st * MAX_B * V));
        memcpy(toks + st * MAX_B, next, sizeof next);
    }
}

static void check_zero(const char *spec)
{
    gp_host_weights hw;
    gp_device_weights *dw;
    gt_load_model(spec, &hw, &dw);
    const gp_config *c = &hw.cfg;
    const int V = c->vocab, L = c->n_layers;
    const size_t n = (size_t)STEPS * MAX_B * V;
    float *pf0 = malloc(sizeof(float) * MAX_B * V), *pf1 = malloc(sizeof(float) * MAX_B * V);
    float *l0 = malloc(sizeof(float) * n), *l1 = malloc(sizeof(float) * n), *l2 = malloc(sizeof(float) * n);
    int32_t t0[STEPS * MAX_B], t1[STEPS * MAX_B], t2[STEPS * MAX_B];
    float *zero = calloc((size_t)L * GP_SPARSE_PROJ_COUNT, sizeof(float));
    long *active = calloc((size_t)L * GP_SPARSE_PROJ_COUNT, sizeof(long));
    assert_true(pf0 && pf1 && l0 && l1 && l2 && zero && active);

    gp_engine *dense = gt_engine(dw, MAX_B, CTX, true);
    run(dense, V, pf0, l0, t0);
    gp_engine_destroy(dense);

    for (int graphs = 0; graphs < 2; graphs++) {
        gp_engine *e = gt_engine(dw, MAX_B, CTX, graphs);
        GP_CHECK_OK(gp_engine_set_sparsity(e, zero));
        assert_true(gp_engine_sparse_on(e));
        memset(graphs ? l2 : l1, 0xff, sizeof(float) * n); /* poisoned */
        run(e, V, pf1, graphs ? l2 : l1, graphs ? t2 : t1);
        /* prefill is dense: the same bits */
        if (memcmp(pf0, pf1, sizeof(float) * MAX_B * V) != 0)
            fail_msg("%s: prefill logits changed with sparsity on", spec);
        GP_CHECK_OK(gp_engine_sparsity_stats(e, active, 1));
        /* every input takes part unless it is exactly 0: at most the widths, over STEPS calls */
        const int widths[4] = {c->hidden, c->n_heads * c->head_dim, c->hidden, c->ffn};
        for (int l = 0; l < L; l++)
            for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
                long a = active[l * GP_SPARSE_PROJ_COUNT + p];
                if (a > (long)STEPS * widths[p] || a < (long)STEPS * widths[p] * 9 / 10)
                    fail_msg("%s: layer %d %s: %ld active inputs over %d steps of width %d", spec, l,
                             gp_sparse_proj_name((gp_sparse_proj)p), a, STEPS, widths[p]);
            }
        gp_engine_destroy(e);
    }
    double d = gp_test_rel_err(l1, l0, (int)(n));
    printf("%s: thresholds 0 against dense: logits %.2e (max abs / max), tokens %s; graphs against eager: %s\n",
           spec, d, memcmp(t0, t1, sizeof t0) ? "DIFFER" : "same", memcmp(l1, l2, sizeof(float) * n) ? "differ" :
           "same bits");
    assert_true(d <= SPARSE_ZERO_TOL);
    assert_memory_equal(t0, t1, sizeof t0);
    assert_memory_equal(l1, l2, sizeof(float) * n); /* the same kernels, replayed */

    /* everything masked: the projections add nothing, and no input is counted */
    float *big = malloc(sizeof(float) * (size_t)L * GP_SPARSE_PROJ_COUNT);
    for (int i = 0; i < L * GP_SPARSE_PROJ_COUNT; i++)
        big[i] = 1e30f;
    gp_engine *e = sparse_engine(dw, false, true, 16);
    GP_CHECK_OK(gp_engine_set_sparsity(e, big));
    run(e, V, pf1, l1, t1);
    GP_CHECK_OK(gp_engine_sparsity_stats(e, active, 0));
    for (int i = 0; i < L * GP_SPARSE_PROJ_COUNT; i++)
        assert_int_equal(active[i], 0);
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(l1[i]));
    /* off again: dense bits */
    GP_CHECK_OK(gp_engine_set_sparsity(e, NULL));
    assert_false(gp_engine_sparse_on(e));
    GP_CHECK_FAIL(gp_engine_sparsity_stats(e, active, 0), GP_ERR_STATE, "no sparsity set");
    gp_engine_destroy(e);

    /* refusals */
    e = gt_engine(dw, MAX_B, CTX, false);
    big[1] = -1.0f;
    GP_CHECK_FAIL(gp_engine_set_sparsity(e, big), GP_ERR_INVALID_ARG, "layer 0 o threshold -1");
    big[1] = NAN;
    GP_CHECK_FAIL(gp_engine_set_sparsity(e, big), GP_ERR_INVALID_ARG, "allowed a finite value >= 0");
    assert_false(gp_engine_sparse_on(e));
    gp_engine_destroy(e);

    free(pf0), free(pf1), free(l0), free(l1), free(l2), free(zero), free(active), free(big);
    gp_device_weights_destroy(dw);
    gp_host_weights_free(&hw);
}

static void test_zero_tiny(void **state)
{
    (void)state;
    check_zero("tiny");
}

static void test_zero_gqa(void **state)
{
    (void)state;
    check_zero(GP_TEST_DATA_DIR "/small-gqa");
}

static void test_zero_qwen2(void **state)
{
    (void)state;
    check_zero(GP_TEST_DATA_DIR "/qwen2-tiny");
}

/* Thresholds calibrated at S = 0.5: the engine against the CPU reference
 * with the same thresholds, rounding where the engine does (bf16
 * activations), both through the backend, the engine fed the reference's
 * tokens. Each side masks its own activations, and an input within rounding
 * of its threshold may be kept on one side and dropped on the other; such a
 * flip moves a sum by about threshold x weight, far more than rounding does,
 * so the bound is SPARSE_REF_TOL on the logits (max abs / max; measured
 * 4.2e-2 on tiny, 0.24 on small-gqa with 23 of 24 tokens equal) and
 * SPARSE_REF_AGREE of the greedy tokens: this catches a wrong projection or
 * layer, not rounding. The kernel's own arithmetic is held to the same masks
 * exactly in sparse_gemv, the reference's in ref_sparsity. */
#define SPARSE_REF_TOL 0.5
#define SPARSE_REF_AGREE 0.85
static void check_masked(const char *spec)
{
    gp_host_weights hw;
    gp_device_weights *dw;
    gt_load_model(spec, &hw, &dw);
    gp_device_weights_destroy(dw);
    const gp_config *c = &hw.cfg;
    const int V = c->vocab;
    gp_sparsity sp;
    gt_calibrate(&hw, 0.5, &sp);
    float *lg[2];
    int32_t tk[2][STEPS * MAX_B], in[STEPS * MAX_B];
    for (int k = 0; k < 2; k++) {
        gp_backend_params bp = gp_backend_default_params(k ? GP_BACKEND_CUDA : GP_BACKEND_CPU);
        bp.n_seqs = MAX_B;
        bp.max_context = CTX;
        bp.dtype = GP_DTYPE_BF16;
        bp.sparse_thresholds = sp.thresholds;
        bp.sparse_always = k == 1; /* the engine masks every step, as the reference does */
        gp_backend *b = NULL;
        GP_CHECK_OK(gp_backend_open_weights(&hw, &bp, &b));
        gp_exec x = gp_backend_exec(b);
        int32_t p[MAX_B][9], next[MAX_B];
        gp_prefill_seq seqs[MAX_B];
        for (int s = 0; s < MAX_B; s++) {
            for (int i = 0; i < 9; i++)
                p[s][i] = (int32_t)((13 * i + 7 * s + 1) % V);
            seqs[s] = (gp_prefill_seq){s, 3 + 2 * s, p[s]};
        }
        GP_CHECK_OK(x.session->prefill(x.ctx, MAX_B, seqs, next, NULL, NULL));
        lg[k] = malloc(sizeof(float) * (size_t)STEPS * MAX_B * V);
        const int sid[MAX_B] = {0, 1, 2, 3};
        for (int st = 0; st < STEPS; st++) {
            /* the engine is fed the reference's inputs: the comparison stays on one path */
            if (!k)
                memcpy(in + st * MAX_B, st ? tk[0] + (st - 1) * MAX_B : next, sizeof next);
            GP_CHECK_OK(x.session->sequential_step(x.ctx, MAX_B, sid, in + st * MAX_B, tk[k] + st * MAX_B,
                                               lg[k] + (size_t)st * MAX_B * V, NULL));
        }
        gp_backend_close(b);
    }
    double d = gp_test_rel_err(lg[1], lg[0], (int)((size_t)STEPS * MAX_B * V));
    int same = 0;
    for (int i = 0; i < STEPS * MAX_B; i++)
        same += tk[0][i] == tk[1][i];
    printf("%s: S = 0.5 masks, engine against the CPU reference: logits %.2e, %d of %d greedy tokens equal\n",
           spec, d, same, STEPS * MAX_B);
    assert_true(d <= SPARSE_REF_TOL);
    assert_true(same >= SPARSE_REF_AGREE * STEPS * MAX_B);
    free(lg[0]), free(lg[1]);
    gp_sparsity_free(&sp);
    gp_host_weights_free(&hw);
}

static void test_masked_tiny(void **state)
{
    (void)state;
    check_masked("tiny");
}

static void test_masked_gqa(void **state)
{
    (void)state;
    check_masked(GP_TEST_DATA_DIR "/small-gqa");
}

/* Streamed weights get the transposed copies too (beside the budget): the
 * sparse engine on them gives the resident sparse engine's logits bit for
 * bit (the same copies, the same kernels), and the same counts, which are
 * not zero. */
static void test_streamed_sparse(void **state)
{
    (void)state;
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 0, &src));
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    sp.budget_bytes = 64u << 20;
    sp.min_window = 1;
    gp_device_weights *dw = NULL, *res = NULL;
    GP_CHECK_OK(gp_device_weights_streamed_load(&src, GP_DTYPE_BF16, &sp, &dw));
    GP_CHECK_OK(gp_device_weights_load(&src, GP_DTYPE_BF16, &res));
    const int V = src.cfg.vocab, L = src.cfg.n_layers;
    const size_t n = (size_t)STEPS * MAX_B * V;
    float *pf = malloc(sizeof(float) * MAX_B * V), *want = malloc(sizeof(float) * n);
    float *got = malloc(sizeof(float) * n);
    int32_t toks[STEPS * MAX_B], toks2[STEPS * MAX_B];
    float *t = malloc(sizeof(float) * (size_t)L * GP_SPARSE_PROJ_COUNT);
    assert_true(pf && want && got && t);
    for (int i = 0; i < L * GP_SPARSE_PROJ_COUNT; i++)
        t[i] = 0.5f; /* masks most inputs of a sparse projection */
    long a_res[64 * GP_SPARSE_PROJ_COUNT], a_str[64 * GP_SPARSE_PROJ_COUNT];
    assert_true(L <= 64);
    gp_engine *e = sparse_engine(res, false, true, 16);
    GP_CHECK_OK(gp_engine_set_sparsity(e, t));
    run(e, V, pf, want, toks);
    GP_CHECK_OK(gp_engine_sparsity_stats(e, a_res, 1));
    gp_engine_destroy(e);
    e = sparse_engine(dw, false, true, 16);
    GP_CHECK_OK(gp_engine_set_sparsity(e, t));
    assert_true(gp_engine_sparse_on(e));
    run(e, V, pf, got, toks2);
    assert_memory_equal(got, want, sizeof(float) * n);
    assert_memory_equal(toks2, toks, sizeof toks);
    GP_CHECK_OK(gp_engine_sparsity_stats(e, a_str, 1));
    long sum = 0;
    for (int i = 0; i < L * GP_SPARSE_PROJ_COUNT; i++) {
        assert_int_equal(a_str[i], a_res[i]);
        sum += a_str[i];
    }
    assert_true(sum > 0);
    printf("tiny, streamed weights, thresholds 0.5: the resident sparse engine's logits bit for bit, %ld active "
           "inputs counted\n", sum);
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    gp_device_weights_destroy(res);
    free(t), free(pf), free(want), free(got);
}

/* The per-step choice, on tiny with thresholds that mask nothing but exact
 * zeros (every projection's union density 1, so the sparse kernel reads all
 * of its weights): where the crossover timed on the GPU is below 1 the
 * first step runs sparse and measures the density, the dense GEMM runs
 * next, and every probe-th dense step runs sparse again (sparse at steps 1
 * and 4 of 6 with probe 2); where it is 1 every step runs sparse. Either
 * way: the counts add up, every input counts as read, and the logits of the
 * mixed sparse and dense steps (eager, and replayed from the graph of each
 * step's mask) are the dense engine's within SPARSE_ZERO_TOL, with its
 * tokens; sparse_always runs every step sparse. */
static void test_choice(void **state)
{
    (void)state;
    gp_host_weights hw;
    gp_device_weights *dw;
    gt_load_model("tiny", &hw, &dw);
    const gp_config *c = &hw.cfg;
    const int V = c->vocab, L = c->n_layers, PC = GP_SPARSE_PROJ_COUNT;
    const size_t n = (size_t)STEPS * MAX_B * V;
    float *pf = malloc(sizeof(float) * MAX_B * V), *want = malloc(sizeof(float) * n);
    float *got = malloc(sizeof(float) * n), *t = malloc(sizeof(float) * (size_t)L * PC);
    long *active = calloc((size_t)L * PC, sizeof(long));
    int32_t toks[STEPS * MAX_B], toks2[STEPS * MAX_B];
    assert_true(pf && want && got && t && active);
    for (int i = 0; i < L * PC; i++)
        t[i] = 1e-30f;
    gp_engine *e = gt_engine(dw, MAX_B, CTX, true);
    run(e, V, pf, want, toks);
    gp_engine_destroy(e);
    const int widths[4] = {c->hidden, c->n_heads * c->head_dim, c->hidden, c->ffn};
    for (int graphs = 0; graphs < 2; graphs++) {
        e = sparse_engine(dw, graphs, false, 2);
        GP_CHECK_OK(gp_engine_set_sparsity(e, t));
        memset(got, 0xff, sizeof(float) * n); /* poisoned */
        run(e, V, pf, got, toks2);
        long ns[4], nd[4];
        GP_CHECK_OK(gp_engine_sparse_steps(e, ns, nd));
        GP_CHECK_OK(gp_engine_sparsity_stats(e, active, 1));
        for (int p = 0; p < PC; p++) {
            printf("tiny, %s: %s ran sparse in %ld and dense in %ld of %d steps\n", graphs ? "graphs" : "eager",
                   gp_sparse_proj_name((gp_sparse_proj)p), ns[p], nd[p], STEPS);
            assert_int_equal(ns[p] + nd[p], STEPS);
            assert_true((ns[p] == 2 && nd[p] == 4) || (ns[p] == STEPS && nd[p] == 0));
            for (int l = 0; l < L; l++) {
                long a = active[l * PC + p];
                if (a > (long)STEPS * widths[p] || a < (long)STEPS * widths[p] * 9 / 10)
                    fail_msg("layer %d %s: %ld inputs read over %d steps of width %d", l,
                             gp_sparse_proj_name((gp_sparse_proj)p), a, STEPS, widths[p]);
            }
        }
        GP_CHECK_OK(gp_engine_sparse_steps(e, ns, nd)); /* the reset cleared them */
        for (int p = 0; p < PC; p++)
            assert_true(ns[p] == 0 && nd[p] == 0);
        double d = gp_test_rel_err(got, want, (int)n);
        printf("tiny, %s: per-step choice against dense: logits %.2e, tokens %s\n", graphs ? "graphs" : "eager", d,
               memcmp(toks, toks2, sizeof toks) ? "DIFFER" : "same");
        assert_true(d <= SPARSE_ZERO_TOL);
        assert_memory_equal(toks2, toks, sizeof toks);
        gp_engine_destroy(e);
    }
    e = sparse_engine(dw, true, true, 2);
    GP_CHECK_OK(gp_engine_set_sparsity(e, t));
    run(e, V, pf, got, toks2);
    long ns[4], nd[4];
    GP_CHECK_OK(gp_engine_sparse_steps(e, ns, nd));
    for (int p = 0; p < PC; p++)
        assert_true(ns[p] == STEPS && nd[p] == 0);
    gp_engine_destroy(e);
    /* the probe's range */
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = MAX_B;
    p.max_context = CTX;
    p.sparse_probe = 0;
    GP_CHECK_FAIL(gp_engine_create(dw, &p, &e), GP_ERR_INVALID_ARG, "sparse_probe 0");
    free(pf), free(want), free(got), free(t), free(active);
    gp_device_weights_destroy(dw);
    gp_host_weights_free(&hw);
}

int main(void)
{
    if (gp_cuda_available() != GP_OK) {
        printf("engine_sparse: SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_tiny),
        cmocka_unit_test(test_zero_gqa),
        cmocka_unit_test(test_zero_qwen2),
        cmocka_unit_test(test_masked_tiny),
        cmocka_unit_test(test_masked_gqa),
        cmocka_unit_test(test_streamed_sparse),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
