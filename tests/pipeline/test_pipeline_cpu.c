/* The real scheduler end to end on the CPU executor: for every M and ring
 * depth, pipelined steps give the sequential step's logits and tokens bit for
 * bit, over its two-stage graph and over the three-stage graph of the relay
 * (attention -> relay -> FFN); a failing stage of either stops the step
 * cleanly and the pipeline stays usable; the statistics and their reports
 * are consistent; the executor's prefill lane reports the batch it ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_pipeline.h"
#include "relay_exec.h"
#include "gp_reference.h"
#include "gp_stage.h"
#include "gp_test.h"

enum { S = 7, CTX = 40, STEPS = 5 };
static gp_host_weights g_w;
static int32_t g_prompt[S][6];
static const int g_plen[S] = {1, 3, 4, 5, 6, 2, 3};

static int setup(void **state)
{
    gp_config cfg;
    if (gp_config_preset("tiny", &cfg) != GP_OK || gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &g_w) != GP_OK ||
        gp_synth_fill_host(&g_w, 77) != GP_OK)
        return -1;
    srand(5);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < 6; i++)
            g_prompt[s][i] = rand() % cfg.vocab;
    return 0;
}

static int teardown(void **state)
{
    gp_host_weights_free(&g_w);
    return 0;
}

/* Two models with the same prompts: one decoded by gp_cpu_decode_step, one
 * through the pipeline with params p; every step's logits and tokens equal.
 * relay: a third stage between attention and FFN hands the FFN stages
 * copies of their payloads' rows in other buffers (the originals poisoned),
 * through tests/support/relay_exec, which also checks the runner's order
 * of every stage call; no ring holds more than its capacity. */
static void run_equal_relay(const gp_pipeline_params *p, int a_threads, int f_threads, bool relay)
{
    const int V = g_w.cfg.vocab;
    gp_cpu_model *ref, *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &ref));
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
    gp_cpu_exec *x;
    GP_CHECK_OK(gp_cpu_exec_create(pm, a_threads, f_threads, &x));
    relay_exec *rx = NULL;
    if (relay)
        GP_CHECK_OK(relay_exec_create(gp_cpu_exec_get(x), S, NULL, &rx));
    gp_pipeline *pl;
    GP_CHECK_OK(gp_pipeline_create(relay ? relay_exec_get(rx) : gp_cpu_exec_get(x), g_w.cfg.n_layers, p, &pl));
    float *lr = malloc(sizeof(float) * S * V), *lp = malloc(sizeof(float) * S * V);
    int ids[S];
    int32_t tok[S], next[S];
    for (int s = 0; s < S; s++) {
        ids[s] = (s * 3) % S; /* batch rows in another order than sequence ids */
        GP_CHECK_OK(gp_cpu_prefill(ref, ids[s], g_plen[s], g_prompt[s], lr));
        GP_CHECK_OK(gp_cpu_prefill(pm, ids[s], g_plen[s], g_prompt[s], lp));
        assert_memory_equal(lr, lp, sizeof(float) * V);
        tok[s] = gp_argmax(lr, V);
    }
    for (int t = 0; t < STEPS; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(ref, S, ids, tok, lr));
        GP_CHECK_OK(gp_pipeline_step(pl, S, ids, tok, next, lp));
        if (memcmp(lr, lp, sizeof(float) * S * V) != 0)
            fail_msg("M=%d depth %u step %d: pipelined logits differ from the sequential step", p->micro_batches,
                     p->ring.depth, t);
        for (int s = 0; s < S; s++) {
            assert_int_equal(next[s], gp_argmax(lr + (size_t)s * V, V));
            tok[s] = next[s];
        }
        const gp_step_stats *st = gp_pipeline_last_stats(pl);
        assert_non_null(st);
        assert_int_equal(st->B, S);
        assert_int_equal(st->M, p->micro_batches);
        /* the FFN reads the fp32 residual rows: 4 bytes x hidden per token */
        for (int l = 0; l < st->n_layers; l++)
            assert_true(st->a2f_bytes[l] == (double)S * g_w.cfg.hidden * 4);
        assert_true(st->ring_occupancy_max <= p->ring.depth - 1);
        /* every stage of the graph has its times, the relay's too */
        const gp_step_timing *tm = gp_pipeline_last_timing(pl);
        for (int k = 0; k < st->n_layers * st->M; k++)
            for (int i = 0; i < (relay ? 3 : 2); i++)
                assert_true(tm->end[i][k] >= tm->begin[i][k]);
    }
    if (relay)
        assert_int_equal(relay_exec_relayed(rx), (long)STEPS * g_w.cfg.n_layers * p->micro_batches);
    gp_pipeline_destroy(pl);
    relay_exec_destroy(rx);
    gp_cpu_exec_destroy(x);
    gp_cpu_model_destroy(ref);
    gp_cpu_model_destroy(pm);
    free(lr), free(lp);
}

static void run_equal(const gp_pipeline_params *p, int a_threads, int f_threads)
{
    run_equal_relay(p, a_threads, f_threads, false);
}

/* The FFN stage reads exactly what its payload hands it, and the next
 * attention stage reads the residual where that FFN left it: handed copies
 * in strided buffers elsewhere, with the originals poisoned, every step's
 * logits are still the sequential step's bit for bit. */
static void test_equal_relayed_copies(void **state)
{
    const unsigned depths[] = {2, 8}; /* 2: capacity 1, every stage but the last blocks on a full ring */
    for (int M = 1; M <= GP_PIPE_MAX_MICRO; M++)
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
            gp_pipeline_params p = gp_pipeline_default_params();
            p.micro_batches = M;
            p.ring.depth = depths[d];
            p.ring.spin = d ? p.ring.spin : 0; /* and sleeps at once */
            run_equal_relay(&p, 2, 1, true);
        }
}

static void test_equal_every_m_and_depth(void **state)
{
    const unsigned depths[] = {2, 4, 8};
    for (int M = 1; M <= GP_PIPE_MAX_MICRO; M++)
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
            gp_pipeline_params p = gp_pipeline_default_params();
            p.micro_batches = M;
            p.ring.depth = depths[d];
            run_equal(&p, 2, 1);
        }
}

static void test_equal_uneven_sizes(void **state)
{
    gp_pipeline_params p = gp_pipeline_default_params();
    p.micro_batches = 3;
    p.micro_sizes[0] = 1;
    p.micro_sizes[1] = 4;
    p.micro_sizes[2] = 2;
    p.ring.spin = 0; /* every wait sleeps at once: the sleep/wake paths under the real scheduler */
    run_equal(&p, 1, 3);
}

static void test_plan(void **state)
{
    gp_pipeline_params p = gp_pipeline_default_params();
    gp_step_plan pn;
    p.micro_batches = 3;
    GP_CHECK_OK(gp_pipeline_plan(&p, 2, 8, &pn));
    assert_int_equal(pn.nb[0], 3);
    assert_int_equal(pn.nb[1], 3);
    assert_int_equal(pn.nb[2], 2);
    assert_int_equal(pn.b0[2], 6);
    assert_int_equal(gp_pipeline_plan(&p, 2, 2, &pn), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "batch 2 cannot be split into 3"));
    p.micro_sizes[0] = 4, p.micro_sizes[1] = 4, p.micro_sizes[2] = 1;
    assert_int_equal(gp_pipeline_plan(&p, 2, 8, &pn), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "sum to 9"));
    p.micro_batches = 5;
    assert_int_equal(gp_pipeline_plan(&p, 2, 8, &pn), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "micro-batches 5: allowed 1..4"));
    p.micro_batches = 2;
    p.micro_sizes[0] = 4, p.micro_sizes[1] = 4, p.micro_sizes[2] = 0;
    p.micro_sizes[3] = 1;
    assert_int_equal(gp_pipeline_plan(&p, 2, 8, &pn), GP_ERR_INVALID_ARG);
}

/* An executor that fails one stage, to check the failure path. */
typedef struct failing {
    gp_exec inner;
    int fail_layer, fail_micro;
    bool fail_ffn;
    int aborts;
} failing;
static gp_step_ops g_fail_ops;

static gp_status f_begin(void *c, const gp_step_plan *p, const int *ids, const int32_t *t)
{
    failing *f = c;
    return f->inner.step->step_begin(f->inner.ctx, p, ids, t);
}
static gp_status f_stage(void *c, int i, int l, int m, const gp_payload *in, gp_payload *out)
{
    failing *f = c;
    if ((i == 1) == f->fail_ffn && l == f->fail_layer && m == f->fail_micro)
        GP_FAIL(GP_ERR_CUDA, "injected %s failure at layer %d micro-batch %d", i ? "FFN" : "attention", l, m);
    return f->inner.step->stage(f->inner.ctx, i, l, m, in, out);
}
static gp_status f_end(void *c, int32_t *next, float *lg, gp_step_timing *t)
{
    failing *f = c;
    return f->inner.step->step_end(f->inner.ctx, next, lg, t);
}
static void f_abort(void *c)
{
    failing *f = c;
    f->aborts++;
    f->inner.step->abort_step(f->inner.ctx);
}

static void test_stage_failure(void **state)
{
    g_fail_ops = (gp_step_ops){.name = "failing", .graph = {.n_stages = 2, .names = {"attention", "FFN"}},
                               .step_begin = f_begin, .stage = f_stage, .step_end = f_end, .abort_step = f_abort};
    const int V = g_w.cfg.vocab;
    gp_cpu_model *ref, *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &ref));
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
    gp_cpu_exec *x;
    GP_CHECK_OK(gp_cpu_exec_create(pm, 1, 1, &x));
    failing f = {.inner = gp_cpu_exec_get(x)};
    gp_pipeline_params p = gp_pipeline_default_params();
    p.micro_batches = 2;
    p.ring.depth = 2; /* capacity 1: the attention stage is blocked on a full ring when the FFN stage fails */
    gp_pipeline *pl;
    GP_CHECK_OK(gp_pipeline_create((gp_exec){.step = &g_fail_ops, .ctx = &f}, g_w.cfg.n_layers, &p, &pl));
    int ids[S];
    int32_t tok[S], next[S];
    float *lr = malloc(sizeof(float) * S * V), *lp = malloc(sizeof(float) * S * V);
    for (int s = 0; s < S; s++) {
        ids[s] = s;
        tok[s] = (int32_t)(s * 11 % V);
    }
    const struct { int layer, micro; bool ffn; } cases[] = {{0, 0, false}, {1, 1, false}, {0, 1, true}, {1, 0, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f.fail_layer = cases[i].layer;
        f.fail_micro = cases[i].micro;
        f.fail_ffn = cases[i].ffn;
        gp_status st = gp_pipeline_step(pl, S, ids, tok, next, lp);
        assert_int_equal(st, GP_ERR_CUDA);
        assert_non_null(strstr(gp_last_error(), "injected"));
        assert_non_null(strstr(gp_last_error(), cases[i].ffn ? "FFN stage failed" : "attention stage failed"));
        assert_int_equal(f.aborts, (int)i + 1);
        assert_null(gp_pipeline_last_stats(pl));
    }
    /* usable afterwards, and the failed steps left the sequences unchanged */
    f.fail_layer = -1;
    GP_CHECK_OK(gp_cpu_decode_step(ref, S, ids, tok, lr));
    GP_CHECK_OK(gp_pipeline_step(pl, S, ids, tok, next, lp));
    assert_memory_equal(lr, lp, sizeof(float) * S * V);
    gp_pipeline_destroy(pl);
    gp_cpu_exec_destroy(x);
    gp_cpu_model_destroy(ref);
    gp_cpu_model_destroy(pm);
    free(lr), free(lp);
}

/* Three stages: a failure of any of them mid-step, with every ring full
 * behind it, stops the step, names the stage, aborts the executor's step
 * and leaves the sequences unchanged; the next step is the sequential
 * step's bit for bit. */
static void test_three_stage_failure(void **state)
{
    const int V = g_w.cfg.vocab;
    gp_cpu_model *ref, *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &ref));
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
    gp_cpu_exec *x;
    GP_CHECK_OK(gp_cpu_exec_create(pm, 1, 1, &x));
    relay_exec *rx;
    GP_CHECK_OK(relay_exec_create(gp_cpu_exec_get(x), S, NULL, &rx));
    gp_pipeline_params p = gp_pipeline_default_params();
    p.micro_batches = 3;
    p.ring.depth = 2;
    gp_pipeline *pl;
    GP_CHECK_OK(gp_pipeline_create(relay_exec_get(rx), g_w.cfg.n_layers, &p, &pl));
    int ids[S];
    int32_t tok[S], next[S];
    float *lr = malloc(sizeof(float) * S * V), *lp = malloc(sizeof(float) * S * V);
    for (int s = 0; s < S; s++)
        ids[s] = s, tok[s] = (int32_t)(s * 7 % V);
    const int L = g_w.cfg.n_layers;
    const struct { int stage, layer, micro; const char *name; } cases[] = {
        {0, 0, 2, "attention"}, {1, 0, 0, "relay"}, {1, L - 1, 1, "relay"}, {2, 1, 2, "FFN"}, {2, L - 1, 2, "FFN"},
        {0, L - 1, 0, "attention"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        relay_exec_fail_at(rx, cases[i].stage, cases[i].layer, cases[i].micro);
        assert_int_equal(gp_pipeline_step(pl, S, ids, tok, next, lp), GP_ERR_CUDA);
        char want[96];
        snprintf(want, sizeof want, "%s stage failed: injected %s failure at layer %d micro-batch %d", cases[i].name,
                 cases[i].name, cases[i].layer, cases[i].micro);
        if (!strstr(gp_last_error(), want))
            fail_msg("error '%s' lacks '%s'", gp_last_error(), want);
        assert_null(gp_pipeline_last_stats(pl));
    }
    relay_exec_fail_at(rx, -1, 0, 0);
    for (int t = 0; t < 2; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(ref, S, ids, tok, lr));
        GP_CHECK_OK(gp_pipeline_step(pl, S, ids, tok, next, lp));
        assert_memory_equal(lr, lp, sizeof(float) * S * V);
        memcpy(tok, next, sizeof tok);
    }
    gp_pipeline_destroy(pl);
    relay_exec_destroy(rx);
    gp_cpu_exec_destroy(x);
    gp_cpu_model_destroy(ref);
    gp_cpu_model_destroy(pm);
    free(lr), free(lp);
}

/* A graph the runner cannot run is refused when the pipeline is made. */
static void test_graph_refused(void **state)
{
    gp_step_ops o = {.name = "one", .graph = {.n_stages = 1, .names = {"all"}}, .step_begin = f_begin,
                     .stage = f_stage, .step_end = f_end, .abort_step = f_abort};
    gp_pipeline *pl;
    failing f = {0};
    GP_CHECK_FAIL(gp_pipeline_create((gp_exec){.step = &o, .ctx = &f}, 2, NULL, &pl), GP_ERR_INVALID_ARG,
                  "graph has 1 stages, allowed 2..4");
    o.graph = (gp_stage_graph){.n_stages = 3, .names = {"a", NULL, "c"}};
    GP_CHECK_FAIL(gp_pipeline_create((gp_exec){.step = &o, .ctx = &f}, 2, NULL, &pl), GP_ERR_INVALID_ARG,
                  "stage 1 of the executor's graph has no name");
    GP_CHECK_FAIL(gp_pipeline_create((gp_exec){.session = NULL, .ctx = &f}, 2, NULL, &pl), GP_ERR_INVALID_ARG,
                  "serves no pipelined steps");
}

/* The window summary and both report forms over a few real steps. */
static void test_stats_and_reports(void **state)
{
    gp_cpu_model *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
    gp_cpu_exec *x;
    GP_CHECK_OK(gp_cpu_exec_create(pm, 1, 1, &x));
    gp_pipeline_params p = gp_pipeline_default_params();
    p.micro_batches = 2;
    gp_pipeline *pl;
    const int L = g_w.cfg.n_layers;
    GP_CHECK_OK(gp_pipeline_create(gp_cpu_exec_get(x), L, &p, &pl));
    gp_stats_window *w;
    GP_CHECK_OK(gp_stats_window_create(L, &w));
    int ids[S];
    int32_t tok[S], next[S];
    for (int s = 0; s < S; s++)
        ids[s] = s, tok[s] = s;
    for (int t = 0; t < 3; t++) {
        GP_CHECK_OK(gp_pipeline_step(pl, S, ids, tok, next, NULL));
        const gp_step_stats *st = gp_pipeline_last_stats(pl);
        assert_true(st->step_ms > 0);
        for (int i = 0; i < L * st->M; i++)
            assert_true(st->attn_ms[i] >= 0 && st->ffn_ms[i] >= 0);
        assert_true(st->attn_idle_ms >= 0 && st->attn_idle_ms <= st->step_ms);
        GP_CHECK_OK(gp_stats_window_add(w, st));
        memcpy(tok, next, sizeof tok);
    }
    gp_stats_summary sum;
    GP_CHECK_OK(gp_stats_window_summary(w, &sum));
    assert_int_equal(sum.steps, 3);
    assert_int_equal(sum.M, 2);
    assert_true(sum.step_ms_min <= sum.step_ms_mean && sum.step_ms_mean <= sum.step_ms_max);
    double want_mb = (double)g_w.cfg.hidden * 4 / 1e6;
    assert_true(sum.a2f_mb_per_token > want_mb * 0.999 && sum.a2f_mb_per_token < want_mb * 1.001);
    assert_string_equal(sum.split.unit, "threads");

    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    gp_stats_report_text(mem, "cpu", &sum);
    fclose(mem);
    assert_non_null(strstr(text, "pipeline statistics - cpu: B=7, M=2"));
    assert_non_null(strstr(text, "MB per token"));
    free(text);

    json_t *j = gp_stats_report_json(&sum);
    char *dump = json_dumps(j, 0);
    json_decref(j);
    json_error_t err;
    json_t *back = json_loads(dump, 0, &err);
    assert_non_null(back);
    assert_int_equal(json_integer_value(json_object_get(back, "M")), 2);
    assert_int_equal(json_array_size(json_object_get(back, "layers")), L);
    assert_true(json_is_real(json_object_get(back, "a2f_mb_per_token")));
    json_decref(back);
    free(dump);

    gp_stats_window_reset(w);
    assert_int_equal(gp_stats_window_summary(w, &sum), GP_ERR_STATE);
    gp_stats_window_destroy(w);
    gp_pipeline_destroy(pl);
    gp_cpu_exec_destroy(x);
    gp_cpu_model_destroy(pm);
}

/* The executor's prefill op is the reference's batched prefill: all
 * prompts in one call (through the relay too), prompt logits at every
 * position, greedy tokens from the last logits whether the caller keeps them
 * or not; a refused call is the reference's refusal. */
static void test_prefill_op(void **state)
{
    const int V = g_w.cfg.vocab;
    gp_prefill_seq seqs[S];
    size_t T = 0;
    for (int s = 0; s < S; s++) {
        seqs[s] = (gp_prefill_seq){.seq = S - 1 - s, .n = g_plen[s], .tokens = g_prompt[s]};
        T += (size_t)g_plen[s];
    }
    float *ref_last = malloc((size_t)S * V * sizeof(float)), *ref_all = malloc(T * V * sizeof(float));
    float *last = malloc((size_t)S * V * sizeof(float)), *all = malloc(T * V * sizeof(float));
    assert_true(ref_last && ref_all && last && all);
    gp_cpu_model *ref, *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &ref));
    GP_CHECK_OK(gp_cpu_prefill_batch(ref, S, seqs, ref_last, ref_all));
    for (int relay = 0; relay < 2; relay++)
        for (int keep = 0; keep < 2; keep++) {
            GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
            gp_cpu_exec *x;
            GP_CHECK_OK(gp_cpu_exec_create(pm, 1, 1, &x));
            relay_exec *rx = NULL;
            if (relay)
                GP_CHECK_OK(relay_exec_create(gp_cpu_exec_get(x), S, NULL, &rx));
            gp_exec e = relay ? relay_exec_get(rx) : gp_cpu_exec_get(x);
            int32_t next[S];
            GP_CHECK_OK(e.session->prefill(e.ctx, S, seqs, next, keep ? last : NULL, keep ? all : NULL));
            for (int s = 0; s < S; s++)
                assert_int_equal(next[s], gp_argmax(ref_last + (size_t)s * V, V));
            if (keep) {
                assert_memory_equal(last, ref_last, (size_t)S * V * sizeof(float));
                assert_memory_equal(all, ref_all, T * V * sizeof(float));
            }
            seqs[1].seq = seqs[0].seq;
            GP_CHECK_FAIL(e.session->prefill(e.ctx, 2, seqs, next, NULL, NULL), GP_ERR_INVALID_ARG, "appears twice");
            seqs[1].seq = S - 2;
            relay_exec_destroy(rx);
            gp_cpu_exec_destroy(x);
            gp_cpu_model_destroy(pm);
        }
    gp_cpu_model_destroy(ref);
    free(ref_last), free(ref_all), free(last), free(all);
}

/* The executor's prefill lane runs its batch at launch, as run_batch
 * would, and the poll reports it done with its status and message; a poll
 * or a launch out of turn is refused. */
static void test_prefill_lane(void **state)
{
    const gp_batch_part parts[2] = {{.seq = 4, .kind = GP_BATCH_PREFILL, .n = 5, .tokens = g_prompt[3]},
                                    {.seq = 1, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = g_prompt[1]}};
    const gp_batch b = {.n_parts = 2, .parts = parts};
    int32_t want[2], next[2];
    gp_cpu_model *ref, *pm;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &ref));
    GP_CHECK_OK(gp_cpu_model_create(&g_w, S, CTX, 3, &pm));
    GP_CHECK_OK(gp_cpu_run_batch(ref, &b, want, NULL));
    gp_cpu_exec *x;
    GP_CHECK_OK(gp_cpu_exec_create(pm, 1, 1, &x));
    gp_exec e = gp_cpu_exec_get(x);
    bool done = false;
    GP_CHECK_FAIL(e.session->prefill_poll(e.ctx, false, &done), GP_ERR_STATE, "no batch launched");
    GP_CHECK_OK(e.session->prefill_launch(e.ctx, &b, next, NULL));
    GP_CHECK_FAIL(e.session->prefill_launch(e.ctx, &b, next, NULL), GP_ERR_STATE, "awaits its poll");
    GP_CHECK_OK(e.session->prefill_poll(e.ctx, false, &done));
    assert_true(done);
    assert_memory_equal(next, want, sizeof want);
    const gp_batch_part bad = {.seq = S, .kind = GP_BATCH_PREFILL, .n = 1, .tokens = g_prompt[0]};
    GP_CHECK_OK(e.session->prefill_launch(e.ctx, &(gp_batch){.n_parts = 1, .parts = &bad}, next, NULL));
    GP_CHECK_FAIL(e.session->prefill_poll(e.ctx, true, &done), GP_ERR_INVALID_ARG, "sequence id 7");
    assert_true(done);
    GP_CHECK_FAIL(e.session->prefill_poll(e.ctx, true, &done), GP_ERR_STATE, "no batch launched");
    gp_cpu_exec_destroy(x);
    gp_cpu_model_destroy(pm);
    gp_cpu_model_destroy(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_equal_every_m_and_depth),
        cmocka_unit_test(test_equal_uneven_sizes),
        cmocka_unit_test(test_equal_relayed_copies),
        cmocka_unit_test(test_stage_failure),
        cmocka_unit_test(test_three_stage_failure),
        cmocka_unit_test(test_graph_refused),
        cmocka_unit_test(test_stats_and_reports),
        cmocka_unit_test(test_prefill_op),
        cmocka_unit_test(test_prefill_lane),
    };
    return cmocka_run_group_tests_name("pipeline on the CPU executor", tests, setup, teardown) ? 1 : 0;
}
