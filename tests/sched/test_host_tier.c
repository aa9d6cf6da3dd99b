/* The prefix cache's host tier on the CPU reference (tiny preset, synthetic
 * weights): the reference's block copies round trip bitwise; blocks the
 * device cache evicts go into a gp_kvstore and later admissions load them,
 * and every request still gives bitwise its tokens alone, under both
 * policies, with failing lookups, loads and offloads, a store smaller than
 * what is evicted, and cancellation right after a load; the scheduler's
 * invariants hold and no store block stays pinned after any step. */
#include "gp_test.h"

#include "gp_kvstore.h"
#include "gp_model.h"
#include "gp_reference.h"
#include "gp_sched.h"
#include "ref_impl.h"
#include "sched_cpu.h"
#include "sched_impl.h"
#include "sched_reqs.h"

#define MAX_SEQS 4
#define MAX_CTX GP_SREQ_MAX_CTX
#define BLOCK 4
#define N_REQ 12
#define ALWAYS (1 << 30) /* fault injection: every call fails */

static gp_sreq_env g_env = {.rng = 23, .block = BLOCK, .max_gen = 10, .even_arrivals = true};

static gp_sched_config config(gp_sched_policy p, int budget, int total_blocks)
{
    return (gp_sched_config){.policy = p, .token_budget = budget, .max_seqs = MAX_SEQS, .vocab = g_env.w.cfg.vocab,
                             .max_context = MAX_CTX, .block_size = BLOCK, .total_blocks = total_blocks,
                             .prefix_cache = true};
}

/* A scheduler over the CPU reference with a host tier of tier_blocks. */
typedef struct bench {
    gp_cpu_model *m;
    gp_sched_cpu_tier *tier;
    gp_sched *s;
} bench;

static void bench_open(bench *b, gp_sched_config *cfg, int tier_blocks)
{
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, cfg->max_seqs, MAX_CTX, cfg->block_size, &b->m));
    GP_CHECK_OK(gp_sched_cpu_tier_create(b->m, tier_blocks, &b->tier));
    cfg->chain_seed = gp_sched_cpu_tier_seed(b->tier);
    gp_sched_ops ops = gp_sched_cpu_tier_ops(b->tier);
    GP_CHECK_OK(gp_sched_create(cfg, &ops, &b->s));
}

static gp_kvstore_stats store_stats(const bench *b)
{
    gp_kvstore_stats st;
    gp_kvstore_get_stats(gp_sched_cpu_tier_store(b->tier), &st, false);
    return st;
}

/* Exact accounting, and no store block left pinned; ctx: the bench, as
 * gp_sreq_serve_one calls it. */
static void bench_check(const void *ctx)
{
    const bench *b = ctx;
    gp_sreq_check_pool(b->s, b->m);
    assert_int_equal(store_stats(b).blocks_pinned, 0);
}

static void bench_close(bench *b)
{
    gp_sreq_check_emptied(b->s);
    bench_check(b);
    gp_sched_destroy(b->s);
    gp_sched_cpu_tier_destroy(b->tier);
    gp_cpu_model_destroy(b->m);
}

/* How a run goes: the tier's size, its injected failures, and whether a
 * request admitted with host hits is cancelled right after its step. */
typedef struct plan {
    int tier_blocks;
    int fail_lookup, fail_load, fail_offload;
    bool cancel_loaded;
} plan;

/* Cancels the requests this step admitted (waiting before it, in was[])
 * with cached blocks when the step loaded blocks from the tier. */
static void cancel_loaded(bench *b, gp_sreq *q, const bool *was, long long host_before)
{
    gp_sched_stats st;
    gp_sched_get_stats(b->s, &st);
    if (st.prefix_host_hit_tokens == host_before)
        return;
    for (int i = 0; i < N_REQ; i++) {
        gp_sched_result res;
        if (!was[i] || gp_sched_result_of(b->s, q[i].r.id, &res) != GP_OK || res.finish != GP_SCHED_RUNNING ||
            res.cached_tokens == 0)
            continue;
        q[i].cancelled = 1;
        GP_CHECK_OK(gp_sched_cancel(b->s, q[i].r.id));
        bench_check(b);
    }
}

/* Three groups of 6-block prefixes taking turns on 11 device blocks: a
 * group's blocks are evicted by the next ones and come back from the tier. */
static void workload(gp_sreq *q)
{
    gp_sreq_make_groups(&g_env, q, N_REQ, 3, 24, 36);
}

/* What a run gave: the scheduler's and the store's stats at its end, and
 * the results' cached tokens. */
typedef struct outcome {
    gp_sched_stats st;
    gp_kvstore_stats kst;
    long long cached;
} outcome;

static void print_run(const char *what, const gp_sched_config *cfg, const outcome *o)
{
    const gp_sched_stats *st = &o->st;
    printf("%s %s: %lld steps, %lld preemptions, hits %lld device + %lld host of %lld tokens, %lld offloaded, "
           "%lld offloads failed, store %llu evictions\n", what,
           cfg->policy == GP_SCHED_CHUNKED ? "chunked" : "prefill-first", st->steps, st->preemptions,
           st->prefix_hit_tokens, st->prefix_host_hit_tokens, st->prefix_query_tokens, st->host_offloaded_blocks,
           st->host_offload_failures, (unsigned long long)o->kst.evictions);
}

/* The workload under policy p (0 chunked, else prefill-first) on 11 device
 * blocks: submits each request at its arrival and steps until all finish,
 * checking after every step; each finished request gives its tokens alone
 * (a cancelled one a prefix of them). Printed as what. */
static outcome run(int policy, gp_sreq *q, const plan *p, const char *what)
{
    gp_sched_config cfg = config(policy ? GP_SCHED_PREFILL_FIRST : GP_SCHED_CHUNKED, 16, 11);
    outcome o = {.cached = 0};
    bench b;
    bench_open(&b, &cfg, p->tier_blocks);
    gp_sched_cpu_tier_fail(b.tier, p->fail_lookup, p->fail_load, p->fail_offload);
    int last = gp_sreq_reset(q, N_REQ);
    for (int step = 0;; step++) {
        assert_true(step < 3000);
        gp_sreq_submit_arrivals(b.s, q, N_REQ, step);
        bool was[N_REQ] = {false};
        for (const rq *r = b.s->waiting.head; r; r = r->next)
            for (int i = 0; i < N_REQ; i++)
                was[i] |= q[i].r.id == r->id && r->preemptions == 0;
        gp_sched_get_stats(b.s, &o.st);
        long long host_before = o.st.prefix_host_hit_tokens;
        int n_ev;
        GP_CHECK_OK(gp_sched_step(b.s, &n_ev));
        gp_sreq_collect(b.s, q, N_REQ, n_ev);
        bench_check(&b);
        if (p->cancel_loaded)
            cancel_loaded(&b, q, was, host_before);
        gp_sched_get_stats(b.s, &o.st);
        if (step >= last && o.st.waiting == 0 && o.st.running == 0)
            break;
    }
    for (int i = 0; i < N_REQ; i++) {
        gp_sched_result res;
        GP_CHECK_OK(gp_sched_result_of(b.s, q[i].r.id, &res));
        gp_sreq_check_result(&q[i], &res, cfg.block_size);
        o.cached += res.cached_tokens;
        GP_CHECK_OK(gp_sched_release(b.s, q[i].r.id));
    }
    o.kst = store_stats(&b);
    bench_close(&b);
    print_run(what, &cfg, &o);
    return o;
}

/* ---------------------------------------------------------------- tests */

/* The reference's copies: a block read out and appended to another
 * sequence gives it bitwise the same KV (the same logits after the same
 * continuation), in the store's layout; bad arguments are refused naming
 * the value, with nothing changed. */
static void test_ref_kv_round_trip(void **state)
{
    (void)state;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, 3, MAX_CTX, BLOCK, &m));
    const gp_config *c = &g_env.w.cfg;
    const int V = c->vocab, n = 2 * BLOCK + 1;
    const size_t elems = (size_t)BLOCK * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    const size_t floats = 2 * (size_t)c->n_layers * elems;
    int32_t prompt[2 * BLOCK + 1];
    for (int i = 0; i < n; i++)
        prompt[i] = gp_sreq_rnd(&g_env, V);
    float *lg = malloc(sizeof(float) * 2 * (size_t)V), *pay[2];
    for (int i = 0; i < 2; i++)
        pay[i] = malloc(sizeof(float) * floats);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, n, prompt, lg));
    int h[2];
    for (int i = 0; i < 2; i++) {
        GP_CHECK_OK(gp_cpu_kv_retain_block(m, 0, i, &h[i]));
        GP_CHECK_OK(gp_cpu_kv_read_block(m, h[i], pay[i]));
    }
    /* the store's layout: layer l's K then V, each the pool's block */
    gp_ref_kv kv = gp_ref_kv_of(m);
    const gp_kv_layout *L = gp_kv_tables_layout(kv.kv);
    for (int l = 0; l < c->n_layers; l++) {
        size_t at = (size_t)l * kv.layer_elems + gp_kv_offset(L, h[1], 0, 0);
        assert_memory_equal(pay[1] + (size_t)(2 * l) * elems, kv.k + at, sizeof(float) * elems);
        assert_memory_equal(pay[1] + (size_t)(2 * l + 1) * elems, kv.v + at, sizeof(float) * elems);
    }

    /* refusals change nothing: the payload, the lengths, the pool */
    int free0, total;
    gp_cpu_kv_blocks(m, &free0, &total);
    float *junk = malloc(sizeof(float) * floats);
    memset(junk, 0x5a, sizeof(float) * floats);
    float *copy = malloc(sizeof(float) * floats);
    memcpy(copy, junk, sizeof(float) * floats);
    GP_CHECK_FAIL(gp_cpu_kv_read_block(m, -1, junk), GP_ERR_INVALID_ARG, "handle -1, allowed [0, 48)");
    GP_CHECK_FAIL(gp_cpu_kv_read_block(m, total, junk), GP_ERR_INVALID_ARG, "handle 48");
    GP_CHECK_FAIL(gp_cpu_kv_read_block(m, h[0], NULL), GP_ERR_INVALID_ARG, "payload is NULL");
    GP_CHECK_FAIL(gp_cpu_kv_read_block(NULL, h[0], junk), GP_ERR_INVALID_ARG, "model is NULL");
    assert_memory_equal(junk, copy, sizeof(float) * floats);
    const void *both[2] = {pay[0], pay[1]}, *holed[2] = {pay[0], NULL};
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 3, both, 2), GP_ERR_INVALID_ARG, "seq 3, allowed [0, 3)");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, -1, both, 2), GP_ERR_INVALID_ARG, "seq -1");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, both, -1), GP_ERR_INVALID_ARG, "-1 blocks");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, NULL, 2), GP_ERR_INVALID_ARG, "payloads NULL");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, holed, 2), GP_ERR_INVALID_ARG, "payload 1 of 2 is NULL");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 0, both, 1), GP_ERR_STATE, "seq 0 holds 9 tokens");
    const void *many[MAX_CTX / BLOCK + 1];
    for (int i = 0; i <= MAX_CTX / BLOCK; i++)
        many[i] = pay[0];
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, many, MAX_CTX / BLOCK + 1), GP_ERR_INVALID_ARG,
                  "17 blocks of 4 tokens would pass max_context 64");
    /* seq 2 full twice (its first fill retained): fewer free blocks than a table */
    int32_t fill[MAX_CTX], kept[MAX_CTX / BLOCK];
    for (int i = 0; i < MAX_CTX; i++)
        fill[i] = gp_sreq_rnd(&g_env, V);
    GP_CHECK_OK(gp_cpu_prefill(m, 2, MAX_CTX, fill, NULL));
    for (int i = 0; i < MAX_CTX / BLOCK; i++)
        GP_CHECK_OK(gp_cpu_kv_retain_block(m, 2, i, &kept[i]));
    gp_cpu_reset_seq(m, 2);
    GP_CHECK_OK(gp_cpu_prefill(m, 2, MAX_CTX, fill, NULL));
    int free1;
    gp_cpu_kv_blocks(m, &free1, &total);
    assert_true(free1 < MAX_CTX / BLOCK);
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, many, free1 + 1), GP_ERR_NO_MEMORY, "the pool has");
    int free2;
    gp_cpu_kv_blocks(m, &free2, &total);
    assert_int_equal(free2, free1);
    gp_cpu_reset_seq(m, 2);
    for (int i = 0; i < MAX_CTX / BLOCK; i++)
        GP_CHECK_OK(gp_cpu_kv_drop_block(m, kept[i]));
    gp_cpu_kv_blocks(m, &free2, &total);
    assert_int_equal(free2, free0);
    /* a step in progress */
    const int one = 0;
    const int32_t tok = 3;
    GP_CHECK_OK(gp_cpu_step_begin(m, 1, &one, &tok));
    GP_CHECK_FAIL(gp_cpu_kv_read_block(m, h[0], junk), GP_ERR_STATE, "a step is in progress");
    GP_CHECK_FAIL(gp_cpu_kv_append_blocks(m, 1, both, 2), GP_ERR_STATE, "a step is in progress");
    gp_cpu_step_abort(m);
    assert_int_equal(gp_kv_len(kv.kv, 1), 0);

    /* seq 1: the two blocks appended, then the last prompt token: the logits
     * are seq 0's bitwise, after the prefill and after one more step */
    GP_CHECK_OK(gp_cpu_kv_append_blocks(m, 1, both, 0));
    GP_CHECK_OK(gp_cpu_kv_append_blocks(m, 1, both, 2));
    assert_int_equal(gp_kv_len(kv.kv, 1), 2 * BLOCK);
    GP_CHECK_OK(gp_cpu_prefill(m, 1, 1, prompt + 2 * BLOCK, lg + V));
    assert_memory_equal(lg, lg + V, sizeof(float) * (size_t)V);
    const int seqs[2] = {0, 1};
    const int32_t next[2] = {7, 7};
    GP_CHECK_OK(gp_cpu_decode_step(m, 2, seqs, next, lg));
    assert_memory_equal(lg, lg + V, sizeof(float) * (size_t)V);
    /* and seq 1's blocks read back as they went in */
    int h1;
    GP_CHECK_OK(gp_cpu_kv_retain_block(m, 1, 1, &h1));
    GP_CHECK_OK(gp_cpu_kv_read_block(m, h1, junk));
    assert_memory_equal(junk, pay[1], sizeof(float) * floats);
    GP_CHECK_OK(gp_cpu_kv_drop_block(m, h1));

    gp_cpu_reset_seq(m, 0);
    gp_cpu_reset_seq(m, 1);
    for (int i = 0; i < 2; i++) {
        GP_CHECK_OK(gp_cpu_kv_drop_block(m, h[i]));
        free(pay[i]);
    }
    gp_cpu_kv_blocks(m, &free2, &total);
    assert_int_equal(free2, total);
    free(junk);
    free(copy);
    free(lg);
    gp_cpu_model_destroy(m);
}

/* The host ops come all three together, with the prefix cache. */
static void test_tier_ops_needed(void **state)
{
    (void)state;
    gp_cpu_model *m;
    gp_sched_cpu_tier *t;
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, MAX_SEQS, MAX_CTX, BLOCK, &m));
    GP_CHECK_FAIL(gp_sched_cpu_tier_create(m, 0, &t), GP_ERR_INVALID_ARG, "capacity 0 blocks");
    GP_CHECK_OK(gp_sched_cpu_tier_create(m, 4, &t));
    gp_sched_ops ops = gp_sched_cpu_tier_ops(t);
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 8, 16);
    gp_sched *s;
    ops.host_load = NULL;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "(2 of 3 given)");
    ops = gp_sched_cpu_tier_ops(t);
    cfg.prefix_cache = false;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "prefix_cache (off)");
    gp_sched_cpu_tier_destroy(t);
    gp_cpu_model_destroy(m);
}

/* One slot, 8 device blocks, prompts A, B, C of 13 tokens (3 full blocks
 * each, one answer token): C's admission evicts A's last two blocks (the
 * LRU head) into the tier, so A again attaches its first block from the
 * device and loads the two from the tier (evicting B's last two for them
 * and its last token's block): 12 tokens cached, 8 of them from the host. */
static void test_reload_after_eviction(void **state)
{
    (void)state;
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 64, 8);
    cfg.max_seqs = 1;
    bench b;
    bench_open(&b, &cfg, 16);
    gp_sreq r[4];
    for (int i = 0; i < 3; i++) {
        gp_sreq_random(&g_env, &r[i], 10 + (uint64_t)i, 13, 1);
        gp_sreq_run_alone(&g_env, &r[i]);
    }
    gp_sreq_again(&r[3], &r[0], 13);
    const int want_cached[4] = {0, 0, 0, 12};
    const long long want_offloaded[4] = {0, 0, 2, 4}, want_host[4] = {0, 0, 0, 8};
    for (int i = 0; i < 4; i++) {
        gp_sched_result res = gp_sreq_serve_one(b.s, &r[i], bench_check, &b);
        gp_sched_stats st;
        gp_sched_get_stats(b.s, &st);
        assert_int_equal(res.cached_tokens, want_cached[i]);
        assert_int_equal(st.host_offloaded_blocks, want_offloaded[i]);
        assert_int_equal(st.prefix_host_hit_tokens, want_host[i]);
    }
    assert_int_equal(store_stats(&b).hit_blocks, 2);
    for (int i = 0; i < 4; i++)
        GP_CHECK_OK(gp_sched_release(b.s, r[i].r.id));
    bench_close(&b);
}

/* Prefill-first, two slots: P's blocks are evicted into the tier by Q, R
 * and S; then X and Y arrive together, Y continuing P's prompt. Y's load
 * fails after X took part of the budget, and Y's whole prompt no longer
 * fits beside X: Y waits, holding nothing, and runs alone next. */
static void test_failed_load_waits(void **state)
{
    (void)state;
    gp_sched_config cfg = config(GP_SCHED_PREFILL_FIRST, 16, 8);
    cfg.max_seqs = 2;
    bench b;
    bench_open(&b, &cfg, 16);
    gp_sreq r[6]; /* P, Q, R, S, X, Y */
    const int len[6] = {13, 13, 13, 13, 5, 14};
    for (int i = 0; i < 6; i++)
        gp_sreq_random(&g_env, &r[i], 30 + (uint64_t)i, len[i], 2);
    memcpy(r[5].prompt, r[0].prompt, sizeof(int32_t) * 12);
    for (int i = 0; i < 6; i++)
        gp_sreq_run_alone(&g_env, &r[i]);
    for (int i = 0; i < 4; i++)
        gp_sreq_serve_one(b.s, &r[i], bench_check, &b);
    gp_sched_cpu_tier_fail(b.tier, 0, ALWAYS, 0);
    GP_CHECK_OK(gp_sched_submit(b.s, &r[4].r));
    GP_CHECK_OK(gp_sched_submit(b.s, &r[5].r));
    gp_sched_result res;
    do {
        int n_ev;
        GP_CHECK_OK(gp_sched_step(b.s, &n_ev));
        gp_sreq_collect(b.s, &r[4], 2, n_ev);
        bench_check(&b);
        GP_CHECK_OK(gp_sched_result_of(b.s, r[5].r.id, &res));
    } while (res.finish == GP_SCHED_RUNNING);
    gp_sched_stats st;
    gp_sched_get_stats(b.s, &st);
    assert_int_equal(st.prefix_host_hit_tokens, 0);
    /* Y found P's blocks beside X and alone, and both loads failed */
    assert_int_equal(store_stats(&b).hit_blocks, 6);
    for (int i = 4; i < 6; i++) {
        GP_CHECK_OK(gp_sched_result_of(b.s, r[i].r.id, &res));
        assert_int_equal(res.n_tokens, 2);
        assert_memory_equal(res.tokens, r[i].want, sizeof(int32_t) * 2);
        assert_memory_equal(r[i].got, r[i].want, sizeof(int32_t) * 2);
    }
    for (int i = 0; i < 6; i++)
        GP_CHECK_OK(gp_sched_release(b.s, r[i].r.id));
    bench_close(&b);
}

/* Groups taking turns on few device blocks, both policies: blocks come
 * back from the tier, the tokens are those alone, and the results' cached
 * tokens count the host hits (all of the hits when no request was
 * readmitted). */
static void test_tier_shared_prefixes(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    for (int p = 0; p < 2; p++) {
        outcome o = run(p, q, &(plan){.tier_blocks = 64}, "shared prefixes");
        const gp_sched_stats *st = &o.st;
        assert_true(st->prefix_host_hit_tokens > 0 && st->host_offloaded_blocks > 0);
        assert_int_equal(st->host_offload_failures, 0);
        assert_true(o.cached <= st->prefix_hit_tokens + st->prefix_host_hit_tokens);
        if (st->preemptions == 0)
            assert_int_equal(o.cached, st->prefix_hit_tokens + st->prefix_host_hit_tokens);
    }
}

/* Lookups, loads or offloads that fail (always, or the first few): the
 * tokens are computed instead, the failed offloads counted, and no pin
 * outlives its admission. */
static void test_tier_faults(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    const plan plans[] = {
        {.tier_blocks = 64, .fail_lookup = ALWAYS},
        {.tier_blocks = 64, .fail_load = ALWAYS},
        {.tier_blocks = 64, .fail_offload = ALWAYS},
        {.tier_blocks = 64, .fail_lookup = 2, .fail_load = 2, .fail_offload = 3},
    };
    for (int p = 0; p < 2; p++)
        for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
            outcome o = run(p, q, &plans[k],
                            k == 0 ? "lookups fail" : k == 1 ? "loads fail" : k == 2 ? "offloads fail" : "a few fail");
            if (k < 3)
                assert_int_equal(o.st.prefix_host_hit_tokens, 0);
            if (k == 2) {
                assert_int_equal(o.st.host_offloaded_blocks, 0);
                assert_true(o.st.host_offload_failures > 0);
                assert_int_equal(o.kst.puts, 0);
            } else {
                assert_int_equal(o.st.host_offload_failures, k == 3 ? 3 : 0);
                assert_true(o.st.host_offloaded_blocks > 0);
            }
            if (k == 1)
                assert_true(o.kst.hit_blocks > 0); /* found, then the load failed */
        }
}

/* A tier of 3 blocks, far less than is evicted: its LRU evicts, the loads
 * take what is left. */
static void test_small_tier(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    for (int p = 0; p < 2; p++) {
        outcome o = run(p, q, &(plan){.tier_blocks = 3}, "3-block tier");
        assert_true(o.kst.evictions > 0);
        assert_true(o.kst.blocks_held <= 3);
    }
}

/* Each request admitted with blocks from the tier is cancelled right after
 * that step: its sequence and blocks go at once, the others go on. */
static void test_cancel_after_load(void **state)
{
    (void)state;
    gp_sreq q[N_REQ];
    workload(q);
    int cancelled = 0;
    for (int p = 0; p < 2; p++) {
        run(p, q, &(plan){.tier_blocks = 64, .cancel_loaded = true}, "cancel after load");
        for (int i = 0; i < N_REQ; i++)
            cancelled += q[i].cancelled;
    }
    printf("%d requests cancelled right after a load from the tier\n", cancelled);
    assert_true(cancelled > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_kv_round_trip),
        cmocka_unit_test(test_tier_ops_needed),
        cmocka_unit_test(test_reload_after_eviction),
        cmocka_unit_test(test_failed_load_waits),
        cmocka_unit_test(test_tier_shared_prefixes),
        cmocka_unit_test(test_tier_faults),
        cmocka_unit_test(test_small_tier),
        cmocka_unit_test(test_cancel_after_load),
    };
    if (gp_sreq_env_load(&g_env) != 0)
        return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    gp_sreq_env_free(&g_env);
    return failed;
}
