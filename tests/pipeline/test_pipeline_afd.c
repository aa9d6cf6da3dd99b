/* Attention and FFN on two GPUs (the AFD executor): pipelined decode steps
 * with the attention engine on GPU 0 and the FFN engine on GPU 1 give the
 * one-GPU engine's greedy tokens and its logits within the engine's
 * tolerance, for M = 1, 2 and 4 micro-batches, eager and from stage graphs:
 * on the tiny preset with the FFN side holding its FFN groups alone, and
 * with both sides holding only their groups (contexts filled alike on both
 * engines, as no prompt can run where the FFN is missing); on the small-gqa
 * and qwen2-tiny checkpoints uploaded whole to both GPUs. What a side
 * without the groups or the sequences refuses is named. Skips without two
 * GPUs. */
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
#include "gp_pipeline.h"
#include "gp_test.h"
#include "gp_weights.h"

/* Same weights on two GPUs: what differs is cuBLASLt's choice of kernel at
 * the micro-batches' row counts (fp32 summation order) and the bf16 rounding
 * flips that follow, as in the one-GPU pipeline's test. */
#define AFD_TOL 1e-2
#define B 4
#define CTX 64
#define STEPS 4

static gp_engine *make_engine(gp_device_weights *dw, int dev, int ctx)
{
    assert_int_equal(cudaSetDevice(dev), cudaSuccess);
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = B;
    p.max_context = ctx;
    p.use_graphs = false; /* its own steps eager: one of them fails on purpose; the AFD stages have theirs */
    gp_engine *e = NULL;
    GP_CHECK_OK(gp_engine_create(dw, &p, &e));
    return e;
}

/* seq (the whole model on GPU 0) and the AFD pair: prompts or filled
 * contexts already in place on seq and ea alike; STEPS greedy steps each
 * way, fed seq's tokens. */
static void compare(const char *what, gp_engine *seq, gp_engine *ea, gp_engine *ef, const int32_t *first, int M,
                    bool graphs)
{
    const gp_config *cfg = gp_engine_config(seq);
    const int V = cfg->vocab;
    gp_afd_exec *x = NULL;
    GP_CHECK_OK(gp_afd_exec_create(ea, 0, ef, 1, graphs, &x));
    gp_pipeline_params pp = gp_pipeline_default_params();
    pp.micro_batches = M;
    gp_pipeline *pl = NULL;
    GP_CHECK_OK(gp_pipeline_create(gp_afd_exec_get(x), cfg->n_layers, &pp, &pl));
    float *ls = malloc(sizeof(float) * B * (size_t)V), *lp = malloc(sizeof(float) * B * (size_t)V);
    int32_t tok[B], ns[B], np[B];
    int ids[B];
    memcpy(tok, first, sizeof tok);
    for (int s = 0; s < B; s++)
        ids[s] = s;
    double worst = 0;
    for (int t = 0; t < STEPS; t++) {
        memset(lp, 0xff, sizeof(float) * B * (size_t)V); /* poisoned */
        assert_int_equal(cudaSetDevice(0), cudaSuccess);
        GP_CHECK_OK(gp_engine_decode_step(seq, B, ids, tok, ns, ls));
        GP_CHECK_OK(gp_pipeline_step(pl, B, ids, tok, np, lp));
        for (int s = 0; s < B; s++) {
            const double e = gp_test_rel_err(lp + (size_t)s * V, ls + (size_t)s * V, V);
            if (!(e <= AFD_TOL))
                fail_msg("%s M=%d %s step %d seq %d: AFD logits %.3g from the one-GPU engine's (tolerance %.0e)", what,
                         M, graphs ? "graphs" : "eager", t, s, e, AFD_TOL);
            if (np[s] != ns[s])
                fail_msg("%s M=%d step %d seq %d: AFD token %d, one GPU %d", what, M, t, s, np[s], ns[s]);
            worst = fmax(worst, e);
        }
        memcpy(tok, ns, sizeof tok);
    }
    const gp_step_stats *st = gp_pipeline_last_stats(pl);
    assert_non_null(st);
    for (int i = 0; i < cfg->n_layers * M; i++)
        assert_true(st->attn_ms[i] > 0 && st->ffn_ms[i] > 0);
    printf("%s, M = %d, %s: AFD == one GPU tokens, worst logits %.3g\n", what, M, graphs ? "stage graphs" : "eager",
           worst);
    gp_pipeline_destroy(pl);
    gp_afd_exec_destroy(x);
    free(ls), free(lp);
}

/* Fresh prompts of 1..4 tokens on seq and ea; first[s] their greedy tokens. */
static void prefill_both(gp_engine *seq, gp_engine *ea, int32_t *first)
{
    const int V = gp_engine_config(seq)->vocab;
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    for (int s = 0; s < B; s++) {
        gp_engine_reset_seq(seq, s);
        gp_engine_reset_seq(ea, s);
        int32_t prompt[4] = {(int32_t)(s * 37 % V), 5, (int32_t)(s % 7), 9}, t2 = -1;
        GP_CHECK_OK(gp_engine_prefill(seq, s, 1 + s % 4, prompt, &first[s], NULL));
        GP_CHECK_OK(gp_engine_prefill(ea, s, 1 + s % 4, prompt, &t2, NULL));
        assert_int_equal(t2, first[s]);
    }
}

static bool two_gpus(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n >= 2;
}

/* The tiny preset: the FFN side holds its groups alone; then both sides. */
static void test_tiny_parts(void **state)
{
    (void)state;
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    const gp_weights_part attn_head = {.groups = (1u << GP_GROUP_ATTN) | (1u << GP_GROUP_HEAD)};
    const gp_weights_part ffn = {.groups = 1u << GP_GROUP_FFN};
    gp_device_weights *whole, *a_part, *f_part;
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    GP_CHECK_OK(gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 11, &whole));
    GP_CHECK_OK(gp_device_weights_synthetic_part(&cfg, GP_DTYPE_BF16, 11, &attn_head, &a_part));
    assert_int_equal(cudaSetDevice(1), cudaSuccess);
    GP_CHECK_OK(gp_device_weights_synthetic_part(&cfg, GP_DTYPE_BF16, 11, &ffn, &f_part));
    gp_engine *seq = make_engine(whole, 0, CTX), *ea = make_engine(whole, 0, CTX);
    gp_engine *ef = make_engine(f_part, 1, 16);
    int32_t first[B];
    for (int graphs = 0; graphs < 2; graphs++)
        for (int M = 1; M <= 4; M *= 2) {
            prefill_both(seq, ea, first);
            compare("tiny, FFN groups alone on GPU 1", seq, ea, ef, first, M, graphs);
        }
    /* both sides their groups alone: contexts filled alike on two fresh
     * engines (the same blocks for the same sequences), no prompt */
    gp_engine *ep = make_engine(a_part, 0, CTX), *seq2 = make_engine(whole, 0, CTX);
    for (int s = 0; s < B; s++)
        first[s] = (int32_t)(s * 11 + 3);
    GP_CHECK_OK(gp_engine_fill_context(seq2, B, 24, 5));
    GP_CHECK_OK(gp_engine_fill_context(ep, B, 24, 5));
    compare("tiny, each GPU its groups alone", seq2, ep, ef, first, 2, true);
    /* what the sides refuse: a whole step where the FFN groups are not, an
     * attention stage over rows opened for FFN stages alone */
    int ids[B] = {0, 1, 2, 3};
    int32_t next[B];
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    GP_CHECK_FAIL(gp_engine_decode_step(ep, B, ids, first, next, NULL), GP_ERR_STATE, "is not on this device");
    (void)cudaDeviceSynchronize();
    assert_int_equal(cudaSetDevice(1), cudaSuccess);
    GP_CHECK_OK(gp_engine_open_ffn_rows(ef, B));
    gp_stage_io io = {.layer = 0, .b0 = 0, .nb = B, .max_len = 8};
    GP_CHECK_OK(gp_engine_act_view(ef, GP_ACT_RESID, 0, B, &io.resid));
    GP_CHECK_FAIL(gp_stage_run(gp_engine_lane(ef), GP_STAGE_ATTN, &io), GP_ERR_INVALID_ARG,
                  "rows opened for FFN stages alone");
    GP_CHECK_FAIL(gp_engine_open_ffn_rows(ef, B + 1), GP_ERR_INVALID_ARG, "allowed 1..4");
    gp_engine_destroy(ef);
    gp_device_weights_destroy(f_part);
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    gp_engine_destroy(ep);
    gp_engine_destroy(seq2);
    gp_engine_destroy(ea);
    gp_engine_destroy(seq);
    gp_device_weights_destroy(a_part);
    gp_device_weights_destroy(whole);
}

/* Real checkpoints, uploaded whole to both GPUs. */
static void test_checkpoints(void **state)
{
    (void)state;
    const char *models[] = {GP_TEST_DATA_DIR "/small-gqa", GP_TEST_DATA_DIR "/qwen2-tiny"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        gp_model_source src;
        gp_host_weights w;
        GP_CHECK_OK(gp_model_source_resolve(models[i], 3, &src));
        GP_CHECK_OK(gp_model_source_load_host(&src, &w));
        gp_device_weights *d0, *d1;
        assert_int_equal(cudaSetDevice(0), cudaSuccess);
        GP_CHECK_OK(gp_device_weights_upload(&w, GP_DTYPE_BF16, &d0));
        assert_int_equal(cudaSetDevice(1), cudaSuccess);
        GP_CHECK_OK(gp_device_weights_upload(&w, GP_DTYPE_BF16, &d1));
        gp_engine *seq = make_engine(d0, 0, CTX), *ea = make_engine(d0, 0, CTX), *ef = make_engine(d1, 1, 16);
        int32_t first[B];
        prefill_both(seq, ea, first);
        compare(models[i], seq, ea, ef, first, 2, true);
        assert_int_equal(cudaSetDevice(1), cudaSuccess);
        gp_engine_destroy(ef);
        gp_device_weights_destroy(d1);
        assert_int_equal(cudaSetDevice(0), cudaSuccess);
        gp_engine_destroy(ea);
        gp_engine_destroy(seq);
        gp_device_weights_destroy(d0);
        gp_host_weights_free(&w);
    }
}

int main(void)
{
    if (!two_gpus()) {
        printf("pipeline_afd: SKIPPED: attention and FFN on two GPUs need 2\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_parts),
        cmocka_unit_test(test_checkpoints),
    };
    return cmocka_run_group_tests_name("attention and FFN on two GPUs", tests, NULL, NULL) ? 1 : 0;
}
