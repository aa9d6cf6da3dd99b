/* Prefill and decode on two lanes (GP_SCHED_PD_MUX) on the CPU reference
 * (tiny preset, synthetic weights) through a prefill lane that completes
 * late: every request gives bitwise its tokens alone, and those of chunked
 * prefill, over random arrivals, token budgets, lane lags, tight block
 * budgets, the prefix cache, cancellations (of requests in flight too) and
 * failing prefill batches; the scheduler's invariants hold after every step
 * (white-box) and the reference's pool is the scheduler's count whenever the
 * lane is idle. */
#include "gp_test.h"

#include "gp_model.h"
#include "gp_reference.h"
#include "gp_sched.h"
#include "sched_cpu.h"
#include "sched_impl.h"
#include "sched_reqs.h"

#define N_REQ 12
#define MAX_SEQS 4
#define MAX_CTX GP_SREQ_MAX_CTX
#define BLOCK 4

static gp_sreq_env g_env = {.rng = 29, .block = BLOCK, .max_gen = 12};

/* How a run goes. */
typedef struct plan {
    gp_sched_policy policy;
    int budget, blocks;
    bool cache;
    int lag;          /* the lane's most polls before a batch completes */
    int cancel_every; /* a random unfinished request every that many steps (0: none) */
    int cancel_lane;  /* one whose prefill batch is in flight every that many steps (0: none) */
    int fail;         /* the first that many prefill batches fail */
    bool planner;     /* the double's planner: lane or mixed at random (ops.pd_plan) */
    int fail_plans;   /* the first that many plans fail */
} plan;

/* What a run gave. */
typedef struct outcome {
    gp_sched_stats st;
    int launched, pending_polls;
    int lane_cancels;  /* requests cancelled while their prefill batch was in flight */
    int failed_steps;  /* steps that returned a failed prefill batch's status */
} outcome;

typedef struct bench {
    gp_cpu_model *m;
    gp_sched_cpu_pd *pd; /* NULL: the plain ops (a policy of one lane) */
    gp_sched *s;
} bench;

static void bench_open(bench *b, const plan *p, uint64_t seed)
{
    gp_sched_config cfg = {.policy = p->policy, .token_budget = p->budget, .max_seqs = MAX_SEQS,
                           .vocab = g_env.w.cfg.vocab, .max_context = MAX_CTX, .block_size = BLOCK,
                           .total_blocks = p->blocks, .prefix_cache = p->cache};
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, MAX_SEQS, MAX_CTX, BLOCK, &b->m));
    b->pd = NULL;
    gp_sched_ops ops = p->cache ? gp_sched_cpu_share_ops(b->m) : gp_sched_cpu_ops(b->m);
    if (p->policy == GP_SCHED_PD_MUX) {
        GP_CHECK_OK(gp_sched_cpu_pd_create(b->m, p->cache, seed, p->lag, &b->pd));
        gp_sched_cpu_pd_fail(b->pd, p->fail);
        gp_sched_cpu_pd_planner(b->pd, p->planner, p->fail_plans);
        ops = gp_sched_cpu_pd_ops(b->pd);
    }
    GP_CHECK_OK(gp_sched_create(&cfg, &ops, &b->s));
}

/* The invariants; the pool is the scheduler's count but for the blocks of
 * a batch in flight, which the reference takes when it completes. */
static void bench_check(const bench *b)
{
    if (!b->pd || gp_sched_cpu_pd_in_flight(b->pd, NULL) == 0) {
        gp_sreq_check_pool(b->s, b->m);
        return;
    }
    GP_CHECK_OK(gp_sched_check(b->s));
    gp_sched_stats st;
    gp_sched_get_stats(b->s, &st);
    int pool_free, pool_total;
    gp_cpu_kv_blocks(b->m, &pool_free, &pool_total);
    assert_true(pool_total - pool_free <= st.total_blocks - st.free_blocks);
}

static void bench_close(bench *b)
{
    gp_sreq_check_emptied(b->s);
    bench_check(b);
    gp_sched_destroy(b->s);
    gp_sched_cpu_pd_destroy(b->pd);
    gp_cpu_model_destroy(b->m);
}

/* Cancels q[i] if it has not finished. */
static bool cancel(bench *b, gp_sreq *q)
{
    gp_sched_result res;
    if (gp_sched_result_of(b->s, q->r.id, &res) != GP_OK || res.finish != GP_SCHED_RUNNING)
        return false;
    q->cancelled = 1;
    GP_CHECK_OK(gp_sched_cancel(b->s, q->r.id));
    bench_check(b);
    return true;
}

/* Cancels a request of the prefill batch in flight: the cancel waits for
 * the batch, so the lane is idle after it. */
static int cancel_in_lane(bench *b, gp_sreq *q, uint64_t *rng)
{
    int seqs[MAX_SEQS];
    int n = gp_sched_cpu_pd_in_flight(b->pd, seqs);
    if (n == 0)
        return 0;
    const rq *r = b->s->slot[seqs[(int)(gp_test_uniform(rng) * n)]];
    assert_non_null(r);
    for (int i = 0; i < N_REQ; i++)
        if (q[i].r.id == r->id && cancel(b, &q[i])) {
            assert_int_equal(gp_sched_cpu_pd_in_flight(b->pd, NULL), 0);
            return 1;
        }
    return 0;
}

/* Submits each request at its arrival, steps until all finish with the
 * checks after every step, and checks each result against the request
 * alone (a cancelled one a prefix of it). A step may return a failed
 * prefill batch's status; the next goes on. */
static outcome run(gp_sreq *q, const plan *p, uint64_t seed)
{
    outcome o = {.lane_cancels = 0};
    uint64_t rng = seed;
    bench b;
    bench_open(&b, p, seed);
    int last = gp_sreq_reset(q, N_REQ);
    for (int step = 0;; step++) {
        assert_true(step < 3000);
        gp_sreq_submit_arrivals(b.s, q, N_REQ, step);
        int n_ev;
        gp_status st = gp_sched_step(b.s, &n_ev);
        if (st != GP_OK) {
            if (st != GP_ERR_IO || !strstr(gp_last_error(), "injected"))
                fail_msg("step %d -> %s: %s", step, gp_status_str(st), gp_last_error());
            o.failed_steps++;
            gp_sched_events(b.s, &n_ev);
        }
        gp_sreq_collect(b.s, q, N_REQ, n_ev);
        bench_check(&b);
        if (p->cancel_every && step % p->cancel_every == p->cancel_every - 1)
            cancel(&b, &q[(int)(gp_test_uniform(&rng) * N_REQ)]);
        if (p->cancel_lane && step % p->cancel_lane == 0)
            o.lane_cancels += cancel_in_lane(&b, q, &rng);
        gp_sched_get_stats(b.s, &o.st);
        if (step >= last && o.st.waiting == 0 && o.st.running == 0)
            break;
    }
    for (int i = 0; i < N_REQ; i++) {
        gp_sched_result res;
        GP_CHECK_OK(gp_sched_result_of(b.s, q[i].r.id, &res));
        gp_sreq_check_result(&q[i], &res, BLOCK);
        GP_CHECK_OK(gp_sched_release(b.s, q[i].r.id));
    }
    if (b.pd) {
        gp_sched_cpu_pd_counts(b.pd, &o.launched, &o.pending_polls);
        assert_int_equal(o.launched, o.st.prefill_batches);
        assert_true(o.failed_steps <= p->fail + p->fail_plans);
    } else {
        assert_int_equal(o.st.prefill_batches, 0);
        assert_int_equal(o.st.overlapped_steps, 0);
    }
    bench_close(&b);
    printf("%s budget %2d, %3d blocks, cache %d, lag %d: %4lld steps, %3lld preemptions, %3lld prefill batches, "
           "%3lld overlapped, %3d pending polls, %d cancelled in flight, %d failed\n",
           p->policy == GP_SCHED_PD_MUX ? "pd-mux " : "chunked", p->budget, p->blocks, p->cache, p->lag,
           o.st.steps, o.st.preemptions, o.st.prefill_batches, o.st.overlapped_steps, o.pending_polls,
           o.lane_cancels, o.failed_steps);
    return o;
}

/* The blocks of the largest request: every one fits alone. */
static int most_blocks(const gp_sreq *q)
{
    int most = 0;
    for (int i = 0; i < N_REQ; i++) {
        int b = (q[i].r.n_prompt + q[i].r.max_tokens - 1 + BLOCK - 1) / BLOCK;
        most = b > most ? b : most;
    }
    return most;
}

/* Four groups of 12-token prefixes arriving at random over 30 steps, every
 * other request greedy (no logits). */
static void workload(gp_sreq *q)
{
    gp_sreq_make_groups(&g_env, q, N_REQ, 4, 12, 30);
    for (int i = 0; i < N_REQ; i++)
        q[i].r.greedy = i % 2 == 0;
}

/* ---------------------------------------------------------------- tests */

/* The double keeps the lane's contract: one batch at a time, completed by
 * a waiting poll or after its lag, giving run_batch's tokens; the ops
 * GP_SCHED_PD_MUX needs come both or the policy is refused. */
static void test_lane_double(void **state)
{
    (void)state;
    gp_cpu_model *m, *ref;
    gp_sched_cpu_pd *pd;
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, MAX_SEQS, MAX_CTX, BLOCK, &m));
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, MAX_SEQS, MAX_CTX, BLOCK, &ref));
    GP_CHECK_FAIL(gp_sched_cpu_pd_create(m, false, 1, -1, &pd), GP_ERR_INVALID_ARG, "max_lag -1");
    GP_CHECK_OK(gp_sched_cpu_pd_create(m, false, 1, 3, &pd));
    gp_sched_ops ops = gp_sched_cpu_pd_ops(pd);
    int32_t toks[2][5] = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}}, next[2], want[2];
    const gp_batch_part parts[2] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 5, .tokens = toks[0]},
                                    {.seq = 2, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = toks[1]}};
    const gp_batch b = {.n_parts = 2, .parts = parts};
    GP_CHECK_OK(gp_cpu_run_batch(ref, &b, want, NULL));
    bool done;
    GP_CHECK_FAIL(ops.prefill_poll(ops.ctx, false, &done), GP_ERR_STATE, "no batch launched");
    int polls = 0;
    for (int k = 0; k < 8; k++) {
        GP_CHECK_OK(ops.prefill_launch(ops.ctx, &b, next, NULL));
        GP_CHECK_FAIL(ops.prefill_launch(ops.ctx, &b, next, NULL), GP_ERR_STATE, "in flight");
        const gp_batch_part dec = {.seq = 2, .kind = GP_BATCH_DECODE, .n = 1, .tokens = toks[0]};
        GP_CHECK_FAIL(ops.run_batch(ops.ctx, &(gp_batch){.n_parts = 1, .parts = &dec}, next, NULL), GP_ERR_STATE,
                      "seq 2, which the prefill batch in flight holds");
        int n = 0;
        do {
            GP_CHECK_OK(ops.prefill_poll(ops.ctx, k % 2 == 1, &done));
            n += !done;
        } while (!done);
        assert_true(n <= 3 && (k % 2 == 0 || n == 0));
        polls += n;
        assert_memory_equal(next, want, sizeof want);
        ops.reset_seq(ops.ctx, 0);
        ops.reset_seq(ops.ctx, 2);
    }
    int launched, pending;
    gp_sched_cpu_pd_counts(pd, &launched, &pending);
    assert_int_equal(launched, 8);
    assert_int_equal(pending, polls);
    assert_true(polls > 0);

    /* an injected failure leaves the sequences as they were */
    gp_sched_cpu_pd_fail(pd, 1);
    GP_CHECK_OK(ops.prefill_launch(ops.ctx, &b, next, NULL));
    GP_CHECK_FAIL(ops.prefill_poll(ops.ctx, true, &done), GP_ERR_IO, "injected");
    assert_true(done);
    assert_int_equal(gp_sched_cpu_pd_in_flight(pd, NULL), 0);
    GP_CHECK_OK(ops.prefill_launch(ops.ctx, &b, next, NULL));
    GP_CHECK_OK(ops.prefill_poll(ops.ctx, true, &done));
    assert_memory_equal(next, want, sizeof want);

    /* a reset of a sequence in flight breaks the contract: later calls say so */
    ops.reset_seq(ops.ctx, 0);
    ops.reset_seq(ops.ctx, 2);
    GP_CHECK_OK(ops.prefill_launch(ops.ctx, &b, next, NULL));
    ops.reset_seq(ops.ctx, 2);
    GP_CHECK_FAIL(ops.prefill_poll(ops.ctx, true, &done), GP_ERR_STATE, "reset_seq of seq 2 while");

    gp_sched_config cfg = {.policy = GP_SCHED_PD_MUX, .token_budget = 8, .max_seqs = MAX_SEQS,
                           .vocab = g_env.w.cfg.vocab, .max_context = MAX_CTX, .block_size = BLOCK,
                           .total_blocks = 16};
    gp_sched *s;
    gp_sched_ops one = gp_sched_cpu_ops(m);
    GP_CHECK_FAIL(gp_sched_create(&cfg, &one, &s), GP_ERR_INVALID_ARG, "prefill");
    one.prefill_launch = ops.prefill_launch;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &one, &s), GP_ERR_INVALID_ARG, "prefill");
    gp_sched_cpu_pd_planner(pd, true, 0);
    gp_sched_ops planned = gp_sched_cpu_pd_ops(pd);
    cfg.policy = GP_SCHED_CHUNKED; /* a planner plans the lane's batches: the one-lane policies refuse it */
    GP_CHECK_FAIL(gp_sched_create(&cfg, &planned, &s), GP_ERR_INVALID_ARG, "pd_plan");
    gp_sched_cpu_pd_destroy(pd);
    gp_cpu_model_destroy(ref);
    gp_cpu_model_destroy(m);
}

/* Ample blocks, every budget and lag: the tokens alone, the lanes overlap
 * when the prefill lags, and the outputs are chunked prefill's. */
static void test_pd_alone(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    const int budgets[] = {4, 8, 16, 64};
    for (int cache = 0; cache < 2; cache++)
        for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
            plan p = {.policy = GP_SCHED_CHUNKED, .budget = budgets[k], .blocks = 96, .cache = cache};
            run(q, &p, 1);
            int32_t chunked[N_REQ][GP_SREQ_MAX_GEN];
            for (int i = 0; i < N_REQ; i++)
                memcpy(chunked[i], q[i].got, sizeof(int32_t) * (size_t)q[i].n_got);
            p.policy = GP_SCHED_PD_MUX;
            for (p.lag = 0; p.lag <= 3; p.lag++) {
                outcome o = run(q, &p, 100 + (uint64_t)p.lag);
                assert_true(o.st.prefill_batches > 0);
                if (p.lag > 0)
                    assert_true(o.st.overlapped_steps > 0 && o.pending_polls > 0);
                if (cache)
                    assert_true(o.st.prefix_hit_tokens > 0);
                for (int i = 0; i < N_REQ; i++)
                    assert_memory_equal(q[i].got, chunked[i], sizeof(int32_t) * (size_t)q[i].n_want);
            }
        }
}

/* A planner that sends the prefill to the lane or into the decode rows'
 * batch at random, with any token cap: the outputs are still chunked
 * prefill's, under tight and ample blocks, with cancellations and failed
 * plans (the step fails before anything runs; the next goes on). */
static void test_pd_planned(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    for (int cache = 0; cache < 2; cache++) {
        plan p = {.policy = GP_SCHED_CHUNKED, .budget = 16, .blocks = 96, .cache = cache};
        run(q, &p, 1);
        int32_t chunked[N_REQ][GP_SREQ_MAX_GEN];
        for (int i = 0; i < N_REQ; i++)
            memcpy(chunked[i], q[i].got, sizeof(int32_t) * (size_t)q[i].n_got);
        p.policy = GP_SCHED_PD_MUX;
        p.planner = true;
        for (int k = 0; k < 4; k++) {
            p.lag = k;
            p.blocks = k % 2 ? most_blocks(q) + 2 : 96;
            p.fail_plans = k == 2 ? 3 : 0;
            outcome o = run(q, &p, 300 + (uint64_t)k);
            assert_true(o.st.prefill_batches > 0 && o.st.mixed_steps > 0);
            if (k == 2)
                assert_true(o.failed_steps == 3);
            for (int i = 0; i < N_REQ; i++)
                assert_memory_equal(q[i].got, chunked[i], sizeof(int32_t) * (size_t)q[i].n_want);
        }
        p.lag = 2;
        p.blocks = 96;
        p.fail_plans = 0;
        p.cancel_every = 7;
        run(q, &p, 400);
    }
}

/* Blocks for little more than the largest request: preemption by
 * recompute, with and without the cache. */
static void test_pd_tight_blocks(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    long long preemptions = 0;
    for (int cache = 0; cache < 2; cache++)
        for (int lag = 0; lag <= 3; lag++)
            for (int budget = 4; budget <= 16; budget *= 2) {
                plan p = {.policy = GP_SCHED_PD_MUX, .budget = budget, .blocks = most_blocks(q) + 2,
                          .cache = cache, .lag = lag};
                preemptions += run(q, &p, 7 + (uint64_t)lag).st.preemptions;
            }
    assert_true(preemptions > 0);
}

/* Random cancellations, and of requests whose prefill batch is in flight:
 * the cancel waits for the batch, the others go on with their tokens. */
static void test_pd_cancel(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    int lane_cancels = 0;
    for (int cache = 0; cache < 2; cache++)
        for (int lag = 0; lag <= 3; lag++) {
            plan p = {.policy = GP_SCHED_PD_MUX, .budget = 8, .blocks = lag % 2 ? most_blocks(q) + 2 : 96,
                      .cache = cache, .lag = lag, .cancel_every = 5, .cancel_lane = lag > 1 ? 4 : 0};
            lane_cancels += run(q, &p, 40 + (uint64_t)lag).lane_cancels;
        }
    assert_true(lane_cancels > 0);
}

/* Prefill batches that fail (the first few, or every one for a while, with
 * cancellations waiting for failing batches) leave their requests to be
 * tried again: the tokens are still alone's. */
static void test_pd_failed_prefill(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    const int fails[] = {1, 3, 12};
    int failed = 0;
    for (int cache = 0; cache < 2; cache++)
        for (size_t k = 0; k < sizeof fails / sizeof fails[0]; k++) {
            plan p = {.policy = GP_SCHED_PD_MUX, .budget = 8, .blocks = k == 1 ? most_blocks(q) + 2 : 96,
                      .cache = cache, .lag = (int)k + 1, .fail = fails[k], .cancel_every = k == 2 ? 7 : 0,
                      .cancel_lane = k == 2 ? 5 : 0};
            outcome o = run(q, &p, 60 + k);
            failed += o.failed_steps;
            assert_true(o.launched > fails[k]);
        }
    assert_true(failed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lane_double),
        cmocka_unit_test(test_pd_alone),
        cmocka_unit_test(test_pd_planned),
        cmocka_unit_test(test_pd_tight_blocks),
        cmocka_unit_test(test_pd_cancel),
        cmocka_unit_test(test_pd_failed_prefill),
    };
    if (gp_sreq_env_load(&g_env) != 0)
        return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    gp_sreq_env_free(&g_env);
    return failed;
}
