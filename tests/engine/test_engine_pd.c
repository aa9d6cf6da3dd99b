/* The prefill/decode executor (GPU): a prefill batch on the prefill lane
 * while decode steps run on the decode lane, concurrently, gives bit for
 * bit the logits of the same batches run in order (the prefill waited for
 * before the decode steps), and the requests it prefilled then decode
 * beside the others; one batch at a time on the prefill lane. Both engine
 * dtypes. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "gpu_test_util.h"

enum { NSEQ = 6, NDEC = 4, CTX = 40, LONG = 250, STEPS = 5, PREFILL_ROWS = 512 };
static gp_dtype g_dt = GP_DTYPE_BF16;

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t *ids; /* [NSEQ][LONG] */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg); /* head_dim 128: the tensor-core prefill attention runs */
    f->cfg.n_layers = 4;
    gt_weights_synth(&f->cfg, 5, g_dt, &f->w, &f->dw);
    srand((unsigned)gt_seed("engine_pd"));
    f->ids = gt_rand_ids(NSEQ * LONG, f->cfg.vocab);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f->ids);
    free(f);
    return 0;
}

/* What one run gives: the prefill's logits [2][V], the decode steps'
 * [STEPS][NDEC][V] and those of two steps with all six [2][NSEQ][V]. */
typedef struct run_out {
    float *prefill, *decode, *after;
    int pending_polls; /* polls without wait that found the prefill running */
} run_out;

static void decode_step(const gp_exec *x, int n, int32_t *tok, float *logits)
{
    gp_batch_part parts[NSEQ];
    for (int i = 0; i < n; i++)
        parts[i] = (gp_batch_part){.seq = i, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[i]};
    const gp_batch b = {.n_parts = n, .parts = parts};
    GP_CHECK_OK(x->session->run_batch(x->ctx, &b, tok, logits, NULL));
}

static void run(fixture *f, gp_engine *e, const gp_exec *x, bool concurrent, run_out *o)
{
    const int V = f->cfg.vocab;
    for (int s = 0; s < NSEQ; s++)
        x->session->reset_seq(x->ctx, s);
    gp_batch_part parts[NSEQ];
    for (int s = 0; s < NDEC; s++)
        parts[s] = (gp_batch_part){.seq = s, .kind = GP_BATCH_PREFILL, .n = CTX, .tokens = f->ids + s * LONG};
    int32_t tok[NSEQ];
    float *scratch = malloc(sizeof(float) * NSEQ * V);
    const gp_batch ctx = {.n_parts = NDEC, .parts = parts}; /* the decode lane holds decode rows only */
    GP_CHECK_OK(gp_lane_run_batch(gp_engine_lane(e), &ctx, tok, scratch));

    gp_batch_part pp[2];
    for (int i = 0; i < 2; i++)
        pp[i] = (gp_batch_part){.seq = NDEC + i, .kind = GP_BATCH_PREFILL, .n = LONG,
                                .tokens = f->ids + (NDEC + i) * LONG};
    const gp_batch pb = {.n_parts = 2, .parts = pp};
    memset(o->prefill, 0xff, sizeof(float) * 2 * V);
    GP_CHECK_OK(x->session->prefill_launch(x->ctx, &pb, tok + NDEC, o->prefill));
    GP_CHECK_FAIL(x->session->prefill_launch(x->ctx, &pb, tok + NDEC, o->prefill), GP_ERR_STATE, "one at a time");
    bool done = false;
    if (!concurrent)
        GP_CHECK_OK(x->session->prefill_poll(x->ctx, true, &done));
    for (int k = 0; k < STEPS; k++) {
        decode_step(x, NDEC, tok, o->decode + (size_t)k * NDEC * V);
        if (concurrent && !done) {
            GP_CHECK_OK(x->session->prefill_poll(x->ctx, false, &done));
            o->pending_polls += !done;
        }
    }
    if (!done)
        GP_CHECK_OK(x->session->prefill_poll(x->ctx, true, &done));
    assert_true(done);
    for (int k = 0; k < 2; k++)
        decode_step(x, NSEQ, tok, o->after + (size_t)k * NSEQ * V);
    free(scratch);
}

static void test_concurrent_bitwise(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = NSEQ;
    ep.max_context = 1024;
    ep.block_size = 16;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &ep, &e));
    gp_green_pool_params gpp = gp_green_pool_default_params();
    const gp_split_req req = {.attn_sms = 32, .ffn_sms = GP_SPLIT_REST};
    gpp.splits = &req;
    gpp.n_splits = 1;
    gp_green_pool *pool;
    GP_CHECK_OK(gp_green_pool_create(&gpp, &pool));
    gp_pd_exec *pd;
    GP_CHECK_OK(gp_pd_exec_create(e, gp_green_pool_pair(pool, 0), PREFILL_ROWS, &pd));
    const gp_exec x = gp_pd_exec_get(pd);
    bool done;
    GP_CHECK_FAIL(x.session->prefill_poll(x.ctx, false, &done), GP_ERR_STATE, "nothing launched");
    gp_batch_part big[3];
    for (int i = 0; i < 3; i++)
        big[i] = (gp_batch_part){.seq = i, .kind = GP_BATCH_PREFILL, .n = LONG, .tokens = f->ids + i * LONG};
    const gp_batch bb = {.n_parts = 3, .parts = big}; /* refused at launch, not on the lane's thread */
    GP_CHECK_FAIL(x.session->prefill_launch(x.ctx, &bb, NULL, NULL), GP_ERR_INVALID_ARG, "750 tokens");

    run_out o[2];
    for (int i = 0; i < 2; i++)
        o[i] = (run_out){.prefill = malloc(sizeof(float) * 2 * V),
                         .decode = malloc(sizeof(float) * STEPS * NDEC * V),
                         .after = malloc(sizeof(float) * 2 * NSEQ * V)};
    run(f, e, &x, false, &o[0]);
    run(f, e, &x, true, &o[1]);
    assert_memory_equal(o[1].prefill, o[0].prefill, sizeof(float) * 2 * V);
    assert_memory_equal(o[1].decode, o[0].decode, sizeof(float) * STEPS * NDEC * V);
    assert_memory_equal(o[1].after, o[0].after, sizeof(float) * 2 * NSEQ * V);
    gp_split_info si;
    x.session->split_info(x.ctx, -1, &si);
    print_message("  %s: decode lane %d SMs, prefill lane %d SMs%s; %d of %d polls found the prefill running; "
                  "bitwise equal to the batches in order\n", gp_dtype_name(g_dt), si.a_got, si.f_got,
                  si.partitioned ? "" : " (no green contexts)", o[1].pending_polls, STEPS);
    for (int i = 0; i < 2; i++) {
        free(o[i].prefill);
        free(o[i].decode);
        free(o[i].after);
    }
    gp_pd_exec_destroy(pd);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_bitwise),
    };
    return GT_ENGINE_MAIN("engine_pd", tests, setup, teardown, &g_dt);
}
