/* The prefill/decode executor (GPU): on each of two pairs, a prefill batch
 * on the prefill lane while decode steps run on the decode lane,
 * concurrently, gives bit for bit the logits of the same batches run in
 * order (the prefill waited for before the decode steps), and the requests
 * it prefilled then decode beside the others; one batch at a time on the
 * prefill lane, the pair changed only while none is in flight. The
 * adaptive plan: a profile measured on the lanes fits, the planner's
 * choices land on the lanes they name (the accounts say so), and the trace
 * is written. Both engine dtypes. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "gpu_test_util.h"

#include <jansson.h>

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

static gp_engine *make_engine(fixture *f, int max_context)
{
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = NSEQ;
    ep.max_context = max_context;
    ep.block_size = 16;
    ep.prefill_chunk = PREFILL_ROWS;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &ep, &e));
    return e;
}

/* Two pairs (32 and 64 decode SMs), their executor. */
static gp_pd_exec *make_pd(gp_engine *e, gp_green_pool **pool)
{
    gp_green_pool_params gpp = gp_green_pool_default_params();
    const gp_split_req req[2] = {{.attn_sms = 32, .ffn_sms = GP_SPLIT_REST}, {.attn_sms = 64, .ffn_sms = GP_SPLIT_REST}};
    gpp.splits = req;
    gpp.n_splits = 2;
    GP_CHECK_OK(gp_green_pool_create(&gpp, pool));
    const gp_green_pair *pairs[2] = {gp_green_pool_pair(*pool, 0), gp_green_pool_pair(*pool, 1)};
    gp_pd_exec *pd;
    const gp_pd_exec_params xp = {.prefill_rows = PREFILL_ROWS};
    GP_CHECK_FAIL(gp_pd_exec_create(e, pairs, 0, &xp, &pd), GP_ERR_INVALID_ARG, "green pairs (0)");
    GP_CHECK_OK(gp_pd_exec_create(e, pairs, 2, &xp, &pd));
    return pd;
}

static void test_concurrent_bitwise(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = make_engine(f, 1024);
    gp_green_pool *pool;
    gp_pd_exec *pd = make_pd(e, &pool);
    const gp_exec x = gp_pd_exec_get(pd);
    bool done;
    GP_CHECK_FAIL(x.session->prefill_poll(x.ctx, false, &done), GP_ERR_STATE, "nothing launched");
    gp_batch_part big[3];
    for (int i = 0; i < 3; i++)
        big[i] = (gp_batch_part){.seq = i, .kind = GP_BATCH_PREFILL, .n = LONG, .tokens = f->ids + i * LONG};
    const gp_batch bb = {.n_parts = 3, .parts = big}; /* refused at launch, not on the lane's thread */
    GP_CHECK_FAIL(x.session->prefill_launch(x.ctx, &bb, NULL, NULL), GP_ERR_INVALID_ARG, "750 tokens");
    const gp_batch one = {.n_parts = 1, .parts = big};
    GP_CHECK_OK(x.session->prefill_launch(x.ctx, &one, NULL, NULL));
    GP_CHECK_FAIL(x.session->select_split(x.ctx, 1), GP_ERR_STATE, "in flight");
    GP_CHECK_OK(x.session->prefill_poll(x.ctx, true, &done));
    GP_CHECK_FAIL(x.session->select_split(x.ctx, 2), GP_ERR_INVALID_ARG, "split 2");
    assert_int_equal(x.session->n_splits(x.ctx), 2);

    run_out o[2];
    for (int i = 0; i < 2; i++)
        o[i] = (run_out){.prefill = malloc(sizeof(float) * 2 * V),
                         .decode = malloc(sizeof(float) * STEPS * NDEC * V),
                         .after = malloc(sizeof(float) * 2 * NSEQ * V)};
    for (int split = 0; split < 2; split++) {
        GP_CHECK_OK(x.session->select_split(x.ctx, split));
        o[1].pending_polls = 0;
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
    }
    gp_pd_exec_stats st;
    gp_pd_exec_get_stats(pd, &st);
    assert_int_equal(st.n_splits, 2);
    for (int i = 0; i < 2; i++) /* each pair ran its runs' prefill batches and decode steps */
        assert_true(st.split[i].prefill.batches >= 2 && st.split[i].decode.batches >= 2 * STEPS + 4 &&
                    st.split[i].decode.busy_s > 0 && st.split[i].selected_s > 0);
    assert_true(st.split_changes >= 1);
    for (int i = 0; i < 2; i++) {
        free(o[i].prefill);
        free(o[i].decode);
        free(o[i].after);
    }
    gp_pd_exec_destroy(pd);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(e);
}

/* The lane account named lane/part in the session's lane_times. */
static gp_lane_busy lane_of(const gp_exec *x, const char *lane, const char *part)
{
    gp_lane_busy l[GP_MAX_LANE_TIMES];
    int n = x->session->lane_times(x->ctx, l, GP_MAX_LANE_TIMES);
    for (int i = 0; i < n; i++)
        if (!strcmp(l[i].lane, lane) && !strcmp(l[i].partition, part))
            return l[i];
    fail_msg("no lane %s on %s", lane, part);
    return l[0];
}

static void test_adaptive(void **state)
{
    fixture *f = *state;
    gp_engine *e = make_engine(f, 2048); /* a profile point's contexts leave room for its decode steps */
    gp_green_pool *pool;
    gp_pd_exec *pd = make_pd(e, &pool);
    const gp_exec x = gp_pd_exec_get(pd);
    gp_pd_profile_params pp = gp_pd_profile_default_params(PREFILL_ROWS, NSEQ, 2048);
    assert_int_equal(pp.n_rows, 3); /* 1, the middle and max batch - 1 */
    assert_int_equal(pp.rows[1], 3);
    assert_int_equal(pp.rows[2], NSEQ - 1);
    pp.context[0] = 64;
    pp.context[1] = 512;
    pp.reps = 2;
    gp_pd_profile prof;
    pp.tokens[pp.n_tokens - 1] = PREFILL_ROWS + 1;
    GP_CHECK_FAIL(gp_pd_exec_profile(pd, &pp, &prof), GP_ERR_INVALID_ARG, "prefill lanes' rows");
    pp.tokens[pp.n_tokens - 1] = PREFILL_ROWS;
    uint64_t t0 = gp_now_ns();
    GP_CHECK_OK(gp_pd_exec_profile(pd, &pp, &prof));
    double prof_s = (gp_now_ns() - t0) / 1e9;
    assert_int_equal(prof.n_splits, 2);
    gp_pd_model *m;
    GP_CHECK_OK(gp_pd_model_fit(&prof, &m));
    print_message("  %s: profile of %d samples in %.1f s; decode on 32 SMs beside a prefill %.3f ms (fit within "
                  "%.0f%%), alone %.3f ms; on every SM %.3f ms\n", gp_dtype_name(g_dt), prof.n_samples, prof_s,
                  gp_pd_model_predict(m, GP_PD_DECODE, 0, true, NSEQ - 1, (NSEQ - 1) * 512LL, 0),
                  100 * gp_pd_model_fit_error(m, GP_PD_DECODE, 0, true),
                  gp_pd_model_predict(m, GP_PD_DECODE, 0, false, NSEQ - 1, (NSEQ - 1) * 512LL, 0),
                  gp_pd_model_predict(m, GP_PD_DECODE, GP_PD_WHOLE, false, NSEQ - 1, (NSEQ - 1) * 512LL, 0));
    gp_pd_profile_free(&prof);

    gp_pd_planner_params pl = gp_pd_planner_default_params();
    pl.lane_tokens = PREFILL_ROWS;
    GP_CHECK_OK(gp_pd_exec_set_planner(pd, m, &pl));
    char path[] = "/tmp/gp_engine_pd_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    GP_CHECK_OK(gp_pd_exec_trace_start(pd, 1024));

    /* nothing decodes: the planner sends the prompt to the prefill lane on every SM */
    gp_batch_part part = {.seq = 0, .kind = GP_BATCH_PREFILL, .n = LONG, .tokens = f->ids};
    gp_pd_plan_in in = {.decode_rows = 0, .backlog_tokens = LONG, .token_budget = PREFILL_ROWS};
    gp_pd_plan plan;
    GP_CHECK_OK(x.session->pd_plan(x.ctx, &in, &plan));
    assert_int_equal(plan.run, GP_PD_RUN_LANE);
    int32_t tok[NSEQ];
    GP_CHECK_OK(x.session->prefill_launch(x.ctx, &(gp_batch){.n_parts = 1, .parts = &part}, tok, NULL));
    bool done;
    GP_CHECK_OK(x.session->prefill_poll(x.ctx, true, &done));
    assert_int_equal(lane_of(&x, "prefill", "all").batches, 1);
    /* a mixed batch runs on every SM; decode rows while the lane is idle too */
    gp_batch_part mix[2] = {{.seq = 1, .kind = GP_BATCH_PREFILL, .n = CTX, .tokens = f->ids + LONG},
                            {.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[0]}};
    GP_CHECK_OK(x.session->run_batch(x.ctx, &(gp_batch){.n_parts = 2, .parts = mix}, tok, NULL, NULL));
    assert_int_equal(lane_of(&x, "mixed", "all").batches, 1);
    GP_CHECK_OK(x.session->run_batch(x.ctx, &(gp_batch){.n_parts = 1, .parts = &mix[1]}, tok, NULL, NULL));
    assert_int_equal(lane_of(&x, "decode", "all").batches, 1);
    /* with decode rows, a long backlog goes to a pair (or the mixed batch, by the model) */
    in = (gp_pd_plan_in){.decode_rows = 1, .decode_context = LONG + 1, .backlog_tokens = 100000,
                         .token_budget = PREFILL_ROWS};
    GP_CHECK_OK(x.session->pd_plan(x.ctx, &in, &plan));
    assert_true(plan.tokens >= 1 && plan.tokens <= PREFILL_ROWS);
    gp_split_info si;
    x.session->split_info(x.ctx, -1, &si);
    print_message("  %s: one decode row beside a long backlog: %s of %d tokens (selected %d:%d)\n",
                  gp_dtype_name(g_dt), plan.run == GP_PD_RUN_LANE ? "the lane" : "mixed", plan.tokens, si.a_got,
                  si.f_got);
    GP_CHECK_OK(gp_pd_exec_write_trace(pd, path));
    json_error_t err;
    json_t *t = json_load_file(path, 0, &err);
    assert_non_null(t);
    assert_true(json_array_size(json_object_get(t, "traceEvents")) >= 3 + 2 * (2 * 2 + 2)); /* batches, track names */
    json_decref(t);
    unlink(path);
    gp_pd_exec_destroy(pd);
    gp_pd_model_destroy(m);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_bitwise),
        cmocka_unit_test(test_adaptive),
    };
    return GT_ENGINE_MAIN("engine_pd", tests, setup, teardown, &g_dt);
}
