/* The request scheduler on the CPU reference (tiny preset, synthetic
 * weights): requests of different lengths arriving at different steps, under
 * the chunked and the prefill-first policy, with and without a block budget
 * that forces preemption, with cancellation, greedy or sampled from each
 * request's own seed, each give bitwise the tokens of running the request
 * alone (the reference's rows never mix). */
#include "gp_test.h"

#include "gp_model.h"
#include "gp_reference.h"
#include "gp_sched.h"
#include "gp_tools.h"
#include "sched_cpu.h"

#define N_REQ 10
#define MAX_SEQS 4
#define MAX_CTX 48
#define BLOCK 4
#define MAX_GEN 16
#define SLOTS_MAX 8 /* sequence slots of the random configurations */

static gp_host_weights g_w;
static uint64_t g_rng = 7;
static gp_sample_params g_sample; /* of every request made; zero: greedy */
static gp_sampler g_sampler;

typedef struct req {
    gp_sched_request r;
    int32_t prompt[MAX_CTX];
    int32_t stop;
    int arrival;             /* step at which it is submitted */
    int32_t want[MAX_GEN];   /* the tokens of running it alone */
    int n_want;
    gp_sched_finish want_finish;
    int32_t got[MAX_GEN];    /* from the step events */
    int n_got;
    int cancelled;           /* cancelled by the random schedule */
    gp_sample_params sp;
    uint64_t seed;
} req;

static int rnd(int n)
{
    return (int)(gp_test_uniform(&g_rng) * n) % n;
}

/* A request's sampler state: its parameters, its own random stream, and the
 * calls it got. */
typedef struct rq_sampling {
    gp_sample_params p;
    gp_rng rng;
    int calls;
} rq_sampling;

/* Alone: gp_cpu_prefill, then gp_cpu_decode_step per token, sampled from a
 * fresh stream of the request's seed (greedy at temperature 0). */
static void run_alone(gp_cpu_model *m, req *q)
{
    const int V = g_w.cfg.vocab, seq = 0;
    float *lg = malloc(sizeof(float) * (size_t)V);
    gp_rng rng;
    gp_rng_seed(&rng, q->seed, 0);
    gp_cpu_reset_seq(m, seq);
    GP_CHECK_OK(gp_cpu_prefill(m, seq, q->r.n_prompt, q->prompt, lg));
    q->n_want = 0;
    q->want_finish = GP_SCHED_LENGTH;
    for (;;) {
        int32_t t = gp_sample(&g_sampler, &q->sp, lg, &rng);
        q->want[q->n_want++] = t;
        if (q->r.n_stop && t == q->stop) {
            q->want_finish = GP_SCHED_STOP;
            break;
        }
        if (q->n_want == q->r.max_tokens)
            break;
        GP_CHECK_OK(gp_cpu_decode_step(m, 1, &seq, &t, lg));
    }
    free(lg);
}

static void make_requests(req *q, int n)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, 1, MAX_CTX, BLOCK, &m));
    for (int i = 0; i < n; i++) {
        memset(&q[i], 0, sizeof(q[i]));
        q[i].r.id = 1000 + (uint64_t)i;
        q[i].r.n_prompt = 1 + rnd(24);
        q[i].r.max_tokens = 1 + rnd(MAX_GEN);
        for (int k = 0; k < q[i].r.n_prompt; k++)
            q[i].prompt[k] = rnd(g_w.cfg.vocab);
        q[i].r.prompt = q[i].prompt;
        q[i].arrival = rnd(12);
        q[i].sp = g_sample;
        q[i].seed = 500 + (uint64_t)i;
        run_alone(m, &q[i]);
        if (i % 3 == 1 && q[i].n_want > 2) { /* a stop id it meets on its way */
            q[i].stop = q[i].want[q[i].n_want / 2];
            q[i].r.stop_ids = &q[i].stop;
            q[i].r.n_stop = 1;
            run_alone(m, &q[i]);
        }
    }
    gp_cpu_model_destroy(m);
}

static int setup(void **state)
{
    (void)state;
    if (gp_sched_cpu_tiny_weights(&g_w) != GP_OK || gp_sampler_init(&g_sampler, g_w.cfg.vocab) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gp_host_weights_free(&g_w);
    gp_sampler_free(&g_sampler);
    return 0;
}

static gp_sched_config config(gp_sched_policy p, int budget, int total_blocks)
{
    return (gp_sched_config){.policy = p, .token_budget = budget, .max_seqs = MAX_SEQS, .vocab = g_w.cfg.vocab,
                             .max_context = MAX_CTX, .block_size = BLOCK, .total_blocks = total_blocks};
}

/* The backend as the scheduler sees it, checked at every batch: rows within
 * the budget, at most MAX_SEQS parts, prefill-first batches never mixed, and
 * the blocks the sequences' caches really hold within the block budget. */
typedef struct checked {
    gp_sched_ops cpu;
    gp_sched_config cfg;
    int len[SLOTS_MAX];
    int mixed_batches, samples;
} checked;

static gp_status checked_run(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    checked *c = ctx;
    int rows = 0, pre = 0, dec = 0, blocks = 0;
    assert_true(b->n_parts >= 1 && b->n_parts <= c->cfg.max_seqs);
    for (int i = 0; i < b->n_parts; i++) {
        rows += b->parts[i].n;
        pre += b->parts[i].kind == GP_BATCH_PREFILL;
        dec += b->parts[i].kind == GP_BATCH_DECODE;
    }
    assert_true(rows <= c->cfg.token_budget);
    if (c->cfg.policy == GP_SCHED_PREFILL_FIRST)
        assert_true(pre == 0 || dec == 0);
    c->mixed_batches += pre && dec;
    gp_status st = c->cpu.run_batch(c->cpu.ctx, b, next, logits);
    if (st == GP_OK)
        for (int i = 0; i < b->n_parts; i++)
            c->len[b->parts[i].seq] += b->parts[i].n;
    for (int q = 0; q < c->cfg.max_seqs; q++)
        blocks += (c->len[q] + c->cfg.block_size - 1) / c->cfg.block_size;
    assert_true(blocks <= c->cfg.total_blocks);
    return st;
}

static void checked_reset(void *ctx, int seq)
{
    checked *c = ctx;
    c->len[seq] = 0;
    c->cpu.reset_seq(c->cpu.ctx, seq);
}

/* The request's own sampler (its sample_ctx), counting its calls. */
static int32_t checked_sample(void *ctx, const float *logits, int vocab, void *sample_ctx)
{
    checked *c = ctx;
    rq_sampling *rs = sample_ctx;
    assert_int_equal(vocab, g_sampler.vocab);
    c->samples++;
    rs->calls++;
    return gp_sample(&g_sampler, &rs->p, logits, &rs->rng);
}

/* Records the step's events per request and checks the block count. */
static void collect(gp_sched *s, req *q, int n, int n_ev)
{
    int m;
    const gp_sched_event *ev = gp_sched_events(s, &m);
    assert_int_equal(m, n_ev);
    for (int e = 0; e < m; e++) {
        int i = (int)(ev[e].id - 1000);
        assert_true(i >= 0 && i < n && q[i].n_got < MAX_GEN);
        q[i].got[q[i].n_got++] = ev[e].token;
    }
    gp_sched_stats st;
    gp_sched_get_stats(s, &st);
    assert_true(st.free_blocks >= 0 && st.free_blocks <= st.total_blocks);
    assert_true(st.running <= SLOTS_MAX);
}

/* Submits each request at its arrival step, cancels a random running or
 * waiting one every cancel_every steps (0: never), and steps until all
 * finish. A request that finished gives its tokens alone bitwise, a
 * cancelled one a prefix of them. */
static void run_cfg(const gp_sched_config *cfg, req *q, int n, int cancel_every, checked *c, gp_sched_stats *st)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, cfg->max_seqs, MAX_CTX, BLOCK, &m));
    *c = (checked){.cpu = gp_sched_cpu_ops(m), .cfg = *cfg};
    gp_sched_ops ops = {.run_batch = checked_run, .reset_seq = checked_reset, .sample = checked_sample, .ctx = c};
    gp_sched *s;
    GP_CHECK_OK(gp_sched_create(cfg, &ops, &s));
    rq_sampling sampled[N_REQ];
    for (int i = 0; i < n; i++) {
        q[i].n_got = q[i].cancelled = 0;
        sampled[i] = (rq_sampling){.p = q[i].sp};
        gp_rng_seed(&sampled[i].rng, q[i].seed, 0);
        q[i].r.sample_ctx = &sampled[i];
        /* half the greedy requests take the backend's greedy token, the
         * rest the argmax of their logits: the same tokens */
        q[i].r.greedy = q[i].sp.temperature == 0.0 && i % 2 == 0;
    }
    int step = 0;
    for (;; step++) {
        assert_true(step < 2000);
        for (int i = 0; i < n; i++)
            if (q[i].arrival == step)
                GP_CHECK_OK(gp_sched_submit(s, &q[i].r));
        if (cancel_every && step % cancel_every == cancel_every - 1) {
            int i = rnd(n);
            gp_sched_result res;
            if (q[i].arrival <= step && gp_sched_result_of(s, q[i].r.id, &res) == GP_OK &&
                res.finish == GP_SCHED_RUNNING) {
                GP_CHECK_OK(gp_sched_cancel(s, q[i].r.id));
                q[i].cancelled = 1;
            }
        }
        int n_ev;
        GP_CHECK_OK(gp_sched_step(s, &n_ev));
        collect(s, q, n, n_ev);
        gp_sched_get_stats(s, st);
        if (step >= 12 && st->waiting == 0 && st->running == 0)
            break;
    }
    for (int i = 0; i < n; i++) {
        gp_sched_result res;
        GP_CHECK_OK(gp_sched_result_of(s, q[i].r.id, &res));
        int want_n = q[i].cancelled ? res.n_tokens : q[i].n_want;
        assert_int_equal(res.finish, q[i].cancelled ? GP_SCHED_CANCELLED : q[i].want_finish);
        assert_true(res.n_tokens == want_n && want_n <= q[i].n_want);
        assert_memory_equal(res.tokens, q[i].want, sizeof(int32_t) * (size_t)want_n);
        assert_int_equal(q[i].n_got, want_n);
        assert_memory_equal(q[i].got, q[i].want, sizeof(int32_t) * (size_t)want_n);
        assert_int_equal(sampled[i].calls, q[i].r.greedy ? 0 : want_n);
        GP_CHECK_OK(gp_sched_release(s, q[i].r.id));
    }
    assert_int_equal(st->free_blocks, cfg->total_blocks);
    st->steps = step + 1;
    gp_sched_destroy(s);
    gp_cpu_model_destroy(m);
}

/* run_cfg with MAX_SEQS slots and blocks of BLOCK tokens, no cancellation;
 * returns the preemptions. */
static long long run_all(gp_sched_policy p, int budget, int total_blocks, req *q, int n)
{
    gp_sched_config cfg = config(p, budget, total_blocks);
    checked c;
    gp_sched_stats st;
    run_cfg(&cfg, q, n, 0, &c, &st);
    printf("%s budget %d blocks %d: %lld steps (%d mixing prefill and decode), %lld prefill and %lld decode "
           "rows, %lld preemptions\n", p == GP_SCHED_CHUNKED ? "chunked" : "prefill-first", budget, total_blocks,
           st.steps, c.mixed_batches, st.prefill_tokens, st.decode_tokens, st.preemptions);
    if (p == GP_SCHED_CHUNKED && budget > 1)
        assert_true(c.mixed_batches > 0);
    return st.preemptions;
}

/* Random slots, budgets, block sizes and block budgets (each request still
 * fits alone), random arrivals and cancellations. */
static void test_random_configurations(void **state)
{
    (void)state;
    long long preempted = 0, steps = 0;
    int cancelled = 0;
    for (int round = 0; round < 40; round++) {
        req q[N_REQ];
        make_requests(q, N_REQ);
        gp_sched_config cfg = config(rnd(2) ? GP_SCHED_CHUNKED : GP_SCHED_PREFILL_FIRST, 1 + rnd(40), 0);
        cfg.max_seqs = 1 + rnd(SLOTS_MAX);
        cfg.block_size = 1 << rnd(4);
        int most = 0;
        for (int i = 0; i < N_REQ; i++) {
            int b = (q[i].r.n_prompt + q[i].r.max_tokens - 1 + cfg.block_size - 1) / cfg.block_size;
            most = b > most ? b : most;
        }
        cfg.total_blocks = most + rnd(2 * most);
        checked c;
        gp_sched_stats st;
        run_cfg(&cfg, q, N_REQ, 3 + rnd(10), &c, &st);
        preempted += st.preemptions;
        steps += st.steps;
        for (int i = 0; i < N_REQ; i++)
            cancelled += q[i].cancelled;
    }
    printf("40 random configurations: %lld steps, %lld preemptions, %d cancellations\n", steps, preempted,
           cancelled);
    assert_true(preempted > 0 && cancelled > 0);
}

static void test_policies_match_alone(void **state)
{
    (void)state;
    req q[N_REQ];
    make_requests(q, N_REQ);
    const int ample = MAX_SEQS * MAX_CTX / BLOCK;
    assert_int_equal(run_all(GP_SCHED_CHUNKED, 8, ample, q, N_REQ), 0);
    assert_int_equal(run_all(GP_SCHED_CHUNKED, 1, ample, q, N_REQ), 0);
    assert_int_equal(run_all(GP_SCHED_CHUNKED, 64, ample, q, N_REQ), 0);
    assert_int_equal(run_all(GP_SCHED_PREFILL_FIRST, 16, ample, q, N_REQ), 0);
    assert_int_equal(run_all(GP_SCHED_PREFILL_FIRST, 5, ample, q, N_REQ), 0);
}

static void test_preemption_loses_nothing(void **state)
{
    (void)state;
    req q[N_REQ];
    make_requests(q, N_REQ);
    int most = 0; /* the blocks of the largest request: every one fits alone */
    for (int i = 0; i < N_REQ; i++) {
        int b = (q[i].r.n_prompt + q[i].r.max_tokens - 1 + BLOCK - 1) / BLOCK;
        most = b > most ? b : most;
    }
    for (int i = 0; i < N_REQ; i++) /* all at once: the most contention */
        q[i].arrival = i % 2;
    long long pc = run_all(GP_SCHED_CHUNKED, 16, most, q, N_REQ);
    long long pf = run_all(GP_SCHED_PREFILL_FIRST, 16, most, q, N_REQ);
    assert_true(pc > 0);
    assert_true(pf > 0);
}

static void test_cancel_frees_blocks(void **state)
{
    (void)state;
    req q[4];
    make_requests(q, 4);
    for (int i = 0; i < 4; i++) {
        q[i].arrival = 0;
        q[i].r.n_prompt = 6; /* long enough answers to cancel one mid-decode */
        q[i].r.max_tokens = 12;
        q[i].r.n_stop = 0;
    }
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, 1, MAX_CTX, BLOCK, &m));
    for (int i = 0; i < 4; i++)
        run_alone(m, &q[i]);
    gp_cpu_model_destroy(m);
    GP_CHECK_OK(gp_cpu_model_create(&g_w, MAX_SEQS, MAX_CTX, BLOCK, &m));
    gp_sched_ops ops = gp_sched_cpu_ops(m);
    gp_sched *s;
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 8, 64);
    GP_CHECK_OK(gp_sched_create(&cfg, &ops, &s));
    for (int i = 0; i < 4; i++)
        GP_CHECK_OK(gp_sched_submit(s, &q[i].r));
    gp_sched_result res;
    do { /* until request 1 decodes */
        GP_CHECK_OK(gp_sched_step(s, NULL));
        GP_CHECK_OK(gp_sched_result_of(s, q[1].r.id, &res));
    } while (res.n_tokens < 3);
    gp_sched_stats before, after;
    gp_sched_get_stats(s, &before);
    GP_CHECK_OK(gp_sched_cancel(s, q[1].r.id));
    gp_sched_get_stats(s, &after);
    /* prompt 6 + 2 tokens fed back: 8 tokens, 2 blocks of 4 */
    assert_int_equal(after.free_blocks, before.free_blocks + 2);
    assert_int_equal(after.running, before.running - 1);
    GP_CHECK_OK(gp_sched_result_of(s, q[1].r.id, &res));
    assert_int_equal(res.finish, GP_SCHED_CANCELLED);
    assert_int_equal(res.n_tokens, 3);
    assert_memory_equal(res.tokens, q[1].want, sizeof(int32_t) * 3);
    GP_CHECK_OK(gp_sched_cancel(s, q[1].r.id)); /* finished: left as it is */
    for (int k = 0; k < 100; k++)
        GP_CHECK_OK(gp_sched_step(s, NULL));
    gp_sched_get_stats(s, &after);
    assert_int_equal(after.free_blocks, 64);
    assert_int_equal(after.running + after.waiting, 0);
    for (int i = 0; i < 4; i++) {
        if (i == 1)
            continue;
        GP_CHECK_OK(gp_sched_result_of(s, q[i].r.id, &res));
        assert_int_equal(res.finish, GP_SCHED_LENGTH);
        assert_int_equal(res.n_tokens, q[i].n_want);
        assert_memory_equal(res.tokens, q[i].want, sizeof(int32_t) * (size_t)q[i].n_want);
    }
    /* a waiting request cancelled before it runs */
    q[0].r.id = 77;
    GP_CHECK_OK(gp_sched_submit(s, &q[0].r));
    GP_CHECK_OK(gp_sched_cancel(s, 77));
    GP_CHECK_OK(gp_sched_result_of(s, 77, &res));
    assert_int_equal(res.finish, GP_SCHED_CANCELLED);
    assert_int_equal(res.n_tokens, 0);
    gp_sched_get_stats(s, &after);
    assert_int_equal(after.waiting, 0);
    gp_sched_destroy(s);
    gp_cpu_model_destroy(m);
}

/* Per-request sampling with its own seed: each request draws from its own
 * stream once per token, so its tokens are those of running it alone with
 * that seed, whatever the batch, the preemptions and the policy. */
static void test_seeded_sampling_matches_alone(void **state)
{
    (void)state;
    g_sample = (gp_sample_params){.temperature = 0.9, .top_k = 40, .top_p = 0.95};
    req q[N_REQ];
    make_requests(q, N_REQ);
    g_sample = (gp_sample_params){0};
    int most = 0, differs = 0;
    for (int i = 0; i < N_REQ; i++) {
        int b = (q[i].r.n_prompt + q[i].r.max_tokens - 1 + BLOCK - 1) / BLOCK;
        most = b > most ? b : most;
        q[i].arrival = i % 3;
    }
    long long pc = run_all(GP_SCHED_CHUNKED, 6, most, q, N_REQ);
    long long pf = run_all(GP_SCHED_PREFILL_FIRST, 12, most + 2, q, N_REQ);
    assert_true(pc + pf > 0);
    /* the draws matter: greedy gives other tokens for some request */
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, 1, MAX_CTX, BLOCK, &m));
    for (int i = 0; i < N_REQ; i++) {
        req g = q[i];
        g.sp = (gp_sample_params){0};
        g.r.n_stop = 0;
        run_alone(m, &g);
        differs += memcmp(g.want, q[i].want, sizeof(int32_t) * (size_t)(g.n_want < q[i].n_want ? g.n_want
                                                                                             : q[i].n_want)) != 0;
    }
    gp_cpu_model_destroy(m);
    assert_true(differs > 0);
}

static gp_status fail_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    (void)ctx, (void)b, (void)next, (void)logits;
    GP_FAIL(GP_ERR_INVALID_ARG, "backend refuses");
}

static void no_reset(void *ctx, int seq)
{
    (void)ctx, (void)seq;
}

static void test_bad_inputs(void **state)
{
    (void)state;
    gp_sched_ops ops = {.run_batch = fail_batch, .reset_seq = no_reset};
    gp_sched *s;
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 0, 8);
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "token_budget 0");
    cfg = config(GP_SCHED_CHUNKED, 4, 8);
    cfg.block_size = 0;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "block_size 0");
    cfg = config((gp_sched_policy)7, 4, 8);
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "policy 7");
    cfg = config(GP_SCHED_CHUNKED, 4, 8);
    cfg.max_seqs = 0;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "max_seqs 0");
    gp_sched_ops none = {0};
    GP_CHECK_FAIL(gp_sched_create(&cfg, &none, &s), GP_ERR_INVALID_ARG, "ops.run_batch");
    cfg = config(GP_SCHED_CHUNKED, 4, 8);
    GP_CHECK_OK(gp_sched_create(&cfg, &ops, &s));

    int32_t p[4] = {1, 2, 3, 4};
    gp_sched_request r = {.id = 5, .prompt = p, .n_prompt = 0, .max_tokens = 4};
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "empty prompt");
    r.n_prompt = 4;
    r.max_tokens = 0;
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "max_tokens 0");
    r.max_tokens = MAX_CTX;
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "exceeds the context of 48");
    r.max_tokens = 40; /* 43 tokens cached: 11 blocks of 4, 8 held */
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "needs up to 11 KV blocks");
    r.max_tokens = 4;
    p[2] = g_w.cfg.vocab;
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "prompt[2] = 256");
    p[2] = 3;
    r.n_stop = 1;
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "stop_ids NULL");
    r.n_stop = 0;
    GP_CHECK_OK(gp_sched_submit(s, &r));
    GP_CHECK_FAIL(gp_sched_submit(s, &r), GP_ERR_INVALID_ARG, "id 5 is already held");
    GP_CHECK_FAIL(gp_sched_cancel(s, 6), GP_ERR_INVALID_ARG, "no request with id 6");
    GP_CHECK_FAIL(gp_sched_release(s, 5), GP_ERR_INVALID_ARG, "has not finished");

    /* a failed batch runs no token and gives its blocks back */
    GP_CHECK_FAIL(gp_sched_step(s, NULL), GP_ERR_INVALID_ARG, "backend refuses");
    gp_sched_stats st;
    gp_sched_get_stats(s, &st);
    assert_int_equal(st.free_blocks, 8);
    assert_int_equal(st.steps, 0);
    gp_sched_result res;
    GP_CHECK_OK(gp_sched_result_of(s, 5, &res));
    assert_int_equal(res.finish, GP_SCHED_RUNNING);
    assert_int_equal(res.n_tokens, 0);
    GP_CHECK_OK(gp_sched_cancel(s, 5));
    GP_CHECK_OK(gp_sched_release(s, 5));
    gp_sched_get_stats(s, &st);
    assert_int_equal(st.running + st.waiting, 0);
    gp_sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policies_match_alone),
        cmocka_unit_test(test_preemption_loses_nothing),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_random_configurations),
        cmocka_unit_test(test_seeded_sampling_matches_alone),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
