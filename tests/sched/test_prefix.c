/* Automatic prefix caching on the CPU reference (tiny preset, synthetic
 * weights): requests sharing long prefixes, arriving over many steps, give
 * bitwise the tokens of running each alone, with the cache on as off, under
 * both policies, tight block budgets (eviction, preemption), cancellation
 * and forced hash collisions; the blocks reused are those expected, in LRU
 * order, and the block accounting is exact after every step (gp_sched_check
 * white-box, the adapter's copies one per cache entry, and over the KV block
 * tables with shared blocks the scheduler's free count is the pool's). */
#include "gp_test.h"

#include "gp_kvcache.h"
#include "gp_model.h"
#include "gp_reference.h"
#include "gp_sched.h"
#include "sched_cpu.h"
#include "sched_impl.h"
#include "sched_reqs.h"

#define MAX_REQ 16
#define MAX_SEQS 4
#define MAX_CTX GP_SREQ_MAX_CTX
#define BLOCK 4

static gp_sreq_env g_env = {.rng = 11, .block = BLOCK, .max_gen = 12};

static gp_sched_config config(gp_sched_policy p, int budget, int total_blocks, bool cache)
{
    return (gp_sched_config){.policy = p, .token_budget = budget, .max_seqs = MAX_SEQS, .vocab = g_env.w.cfg.vocab,
                             .max_context = MAX_CTX, .block_size = BLOCK, .total_blocks = total_blocks,
                             .prefix_cache = cache};
}

/* The blocks of the largest request: every one fits alone. */
static int most_blocks(const gp_sreq *q, int n, int block_size)
{
    int most = 0;
    for (int i = 0; i < n; i++) {
        int b = (q[i].r.n_prompt + q[i].r.max_tokens - 1 + block_size - 1) / block_size;
        most = b > most ? b : most;
    }
    return most;
}

/* A scheduler over the CPU reference, sharing its KV blocks when the
 * config caches prefixes. */
typedef struct bench {
    gp_cpu_model *m;
    gp_sched *s;
} bench;

static void bench_open(bench *b, const gp_sched_config *cfg)
{
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, cfg->max_seqs, MAX_CTX, cfg->block_size, &b->m));
    gp_sched_ops ops = cfg->prefix_cache ? gp_sched_cpu_share_ops(b->m) : gp_sched_cpu_ops(b->m);
    GP_CHECK_OK(gp_sched_create(cfg, &ops, &b->s));
}

/* Exact accounting; ctx: the bench, as gp_sreq_serve_one calls it. */
static void bench_check(const void *ctx)
{
    const bench *b = ctx;
    gp_sreq_check_pool(b->s, b->m);
}

/* Dropping the cache gives every block back, in the scheduler and in the
 * reference's pool. */
static void bench_close(bench *b)
{
    gp_sreq_check_emptied(b->s);
    bench_check(b);
    gp_sched_destroy(b->s);
    gp_cpu_model_destroy(b->m);
}

/* A running request that shares a cache entry with another one, or NULL. */
static rq *sharing(const gp_sched *s)
{
    for (rq *r = s->running.head; r; r = r->next)
        for (int b = 0; b < r->n_hashed; b++)
            if (r->ent[b] >= 0 && s->pc->e[r->ent[b]].ref > 1)
                return r;
    return NULL;
}

/* Submits each request at its arrival, cancels a request sharing blocks
 * every cancel_every steps (0: never), steps until all finish, checking the
 * accounting at every step; each finished request gives its tokens alone,
 * a cancelled one a prefix of them. */
static void run(const gp_sched_config *cfg, gp_sreq *q, int n, int cancel_every, gp_sched_stats *st)
{
    bench b;
    bench_open(&b, cfg);
    int last = gp_sreq_reset(q, n);
    for (int step = 0;; step++) {
        assert_true(step < 3000);
        gp_sreq_submit_arrivals(b.s, q, n, step);
        rq *victim = cancel_every && step % cancel_every == cancel_every - 1 ? sharing(b.s) : NULL;
        if (victim) {
            for (int i = 0; i < n; i++)
                q[i].cancelled |= q[i].r.id == victim->id;
            GP_CHECK_OK(gp_sched_cancel(b.s, victim->id));
            bench_check(&b);
        }
        int n_ev;
        GP_CHECK_OK(gp_sched_step(b.s, &n_ev));
        gp_sreq_collect(b.s, q, n, n_ev);
        bench_check(&b);
        gp_sched_get_stats(b.s, st);
        if (step >= last && st->waiting == 0 && st->running == 0)
            break;
    }
    for (int i = 0; i < n; i++) {
        gp_sched_result res;
        GP_CHECK_OK(gp_sched_result_of(b.s, q[i].r.id, &res));
        gp_sreq_check_result(&q[i], &res, cfg->block_size);
        assert_true(cfg->prefix_cache || res.cached_tokens == 0);
        GP_CHECK_OK(gp_sched_release(b.s, q[i].r.id));
    }
    bench_close(&b);
}

static void print_run(const char *what, const gp_sched_config *cfg, const gp_sched_stats *st)
{
    printf("%s %s budget %d blocks %d cache %d: %lld steps, %lld prefill rows, %lld preemptions, hits %lld of "
           "%lld tokens\n", what, cfg->policy == GP_SCHED_CHUNKED ? "chunked" : "prefill-first", cfg->token_budget,
           cfg->total_blocks, cfg->prefix_cache, st->steps, st->prefill_tokens, st->preemptions,
           st->prefix_hit_tokens, st->prefix_query_tokens);
}

/* Groups sharing long prefixes, arrivals spread over steps: the same tokens
 * with the cache as without (both bitwise those alone), fewer rows
 * prefilled, under both policies and several budgets. */
static void test_shared_prefixes(void **state)
{
    (void)state;
    gp_sreq q[12];
    gp_sreq_make_groups(&g_env, q, 12, 3, 22, 24);
    const int ample = MAX_SEQS * MAX_CTX / BLOCK;
    const struct { gp_sched_policy p; int budget; } runs[] = {
        {GP_SCHED_CHUNKED, 6}, {GP_SCHED_CHUNKED, 16}, {GP_SCHED_CHUNKED, 64},
        {GP_SCHED_PREFILL_FIRST, 12}, {GP_SCHED_PREFILL_FIRST, 64},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        gp_sched_stats off, on;
        gp_sched_config cfg = config(runs[k].p, runs[k].budget, ample, false);
        run(&cfg, q, 12, 0, &off);
        print_run("shared prefixes", &cfg, &off);
        cfg.prefix_cache = true;
        run(&cfg, q, 12, 0, &on);
        print_run("shared prefixes", &cfg, &on);
        assert_int_equal(off.prefix_query_tokens + off.prefix_hit_tokens + off.cached_blocks, 0);
        assert_true(on.prefix_hit_tokens > 0 && on.prefix_hit_tokens < on.prefix_query_tokens);
        assert_int_equal(on.prefill_tokens, off.prefill_tokens - on.prefix_hit_tokens);
    }
}

/* A second identical prompt reuses all but its last block's worth (at least
 * one token is computed); a prompt that continues a finished request's
 * prompt and answer reuses the blocks its answer filled. */
static void test_identical_prompt(void **state)
{
    (void)state;
    for (int n_prompt = 22; n_prompt <= 24; n_prompt += 2) {
        bench b;
        gp_sched_config cfg = config(GP_SCHED_CHUNKED, 8, 64, true);
        bench_open(&b, &cfg);
        gp_sreq a, a2, c;
        gp_sreq_random(&g_env, &a, 1, n_prompt, 10);
        gp_sreq_run_alone(&g_env, &a);
        gp_sreq_again(&a2, &a, 2);
        gp_sched_result ra = gp_sreq_serve_one(b.s, &a, bench_check, &b);
        gp_sched_result ra2 = gp_sreq_serve_one(b.s, &a2, bench_check, &b);
        assert_int_equal(ra.cached_tokens, 0);
        assert_int_equal(ra2.cached_tokens, (n_prompt - 1) / BLOCK * BLOCK); /* 20 of 22, 20 of 24 */
        gp_sched_stats st;
        gp_sched_get_stats(b.s, &st);
        assert_int_equal(st.prefix_query_tokens, 2 * n_prompt);
        assert_int_equal(st.prefix_hit_tokens, ra2.cached_tokens);
        /* the cache holds a's prompt and the fed-back answer: n_prompt + 9 tokens */
        assert_int_equal(st.cached_blocks, (n_prompt + 9) / BLOCK);
        /* the next turn: a's prompt, its answer and a new question */
        memset(&c, 0, sizeof c);
        memcpy(c.prompt, a.prompt, sizeof(int32_t) * (size_t)n_prompt);
        memcpy(c.prompt + n_prompt, a.want, sizeof(int32_t) * 10);
        for (int k = 0; k < 5; k++)
            c.prompt[n_prompt + 10 + k] = gp_sreq_rnd(&g_env, g_env.w.cfg.vocab);
        gp_sreq_set(&c, 3, n_prompt + 15, 4);
        gp_sreq_run_alone(&g_env, &c);
        gp_sched_result rc = gp_sreq_serve_one(b.s, &c, bench_check, &b);
        assert_int_equal(rc.cached_tokens, (n_prompt + 9) / BLOCK * BLOCK);
        printf("prompt %d: the same again reuses %d tokens, the next turn %d of %d\n", n_prompt, ra2.cached_tokens,
               rc.cached_tokens, c.r.n_prompt);
        for (uint64_t id = 1; id <= 3; id++)
            GP_CHECK_OK(gp_sched_release(b.s, id));
        bench_close(&b);
    }
}

/* Eight blocks, one request at a time: entries no request uses are evicted
 * least recently used first, a chain's tail before its head, only when no
 * free block is left; the reuse that follows is exactly what survived. */
static void test_lru_eviction(void **state)
{
    (void)state;
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 64, 8, true);
    cfg.max_seqs = 1;
    bench b;
    bench_open(&b, &cfg);
    gp_sreq r[6];
    const int len[3] = {12, 12, 16}; /* A, B, C: 3, 3 and 4 full blocks, one answer token each */
    for (int i = 0; i < 3; i++) {
        gp_sreq_random(&g_env, &r[i], 10 + (uint64_t)i, len[i], 1);
        gp_sreq_run_alone(&g_env, &r[i]);
    }
    for (int i = 3; i < 6; i++) /* D, E, F: A, B and C again */
        gp_sreq_again(&r[i], &r[i - 3], 10 + (uint64_t)i);
    /* The LRU list, head first, and the free blocks after each:
     * A: A2 A1 A0, 5 free.  B: A2 A1 A0 B2 B1 B0, 2 free.
     * C takes 2 free and evicts A2, A1: A0 B2 B1 B0 C3 C2 C1 C0.
     * D hits A0, evicts B2 B1 for its 2 blocks: B0 C3 C2 C1 C0 D2 D1 A0.
     * E hits B0, evicts C3 C2: C1 C0 D2 D1 A0 E2 E1 B0.
     * F hits C0 C1 (8 tokens), evicts D2 D1 for its last 2 blocks. */
    const int want_cached[6] = {0, 0, 0, 4, 4, 8}, want_free[6] = {5, 2, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        gp_sched_result res = gp_sreq_serve_one(b.s, &r[i], bench_check, &b);
        gp_sched_stats st;
        gp_sched_get_stats(b.s, &st);
        assert_int_equal(res.cached_tokens, want_cached[i]);
        assert_int_equal(st.free_blocks, want_free[i]);
        assert_int_equal(st.cached_blocks, 8 - want_free[i]);
    }
    for (int i = 0; i < 6; i++)
        GP_CHECK_OK(gp_sched_release(b.s, r[i].r.id));
    bench_close(&b);
}

/* All at once on the blocks of the largest request: preemption releases
 * shared blocks, readmission reattaches what is still cached, nothing is
 * lost and no block leaks. */
static void test_preemption_with_shared_blocks(void **state)
{
    (void)state;
    gp_sreq q[12];
    gp_sreq_make_groups(&g_env, q, 12, 2, 17, 2);
    int most = most_blocks(q, 12, BLOCK);
    for (int p = 0; p < 2; p++) {
        gp_sched_config cfg = config(p ? GP_SCHED_PREFILL_FIRST : GP_SCHED_CHUNKED, 16, most + 2, true);
        gp_sched_stats st;
        run(&cfg, q, 12, 0, &st);
        print_run("preemption", &cfg, &st);
        assert_true(st.preemptions > 0);
        assert_true(st.prefix_hit_tokens > 0);
    }
}

/* Requests cancelled while they share blocks with others: the others go on
 * with those blocks, the cancelled one's references are gone at once. */
static void test_cancel_shared(void **state)
{
    (void)state;
    gp_sreq q[12];
    gp_sreq_make_groups(&g_env, q, 12, 2, 20, 6);
    int cancelled = 0;
    for (int p = 0; p < 2; p++) {
        gp_sched_config cfg = config(p ? GP_SCHED_PREFILL_FIRST : GP_SCHED_CHUNKED, 12, MAX_SEQS * MAX_CTX / BLOCK,
                                     true);
        gp_sched_stats st;
        run(&cfg, q, 12, 3, &st);
        for (int i = 0; i < 12; i++)
            cancelled += q[i].cancelled;
    }
    printf("%d requests cancelled while sharing blocks\n", cancelled);
    assert_true(cancelled > 0);
}

/* Every key forced equal (the key mask a test hook): a lookup that finds
 * another block's key compares the tokens and the chain, so a different
 * prompt misses, and the same prompt still hits. */
static void test_collision_is_miss(void **state)
{
    (void)state;
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 8, 64, true);
    bench b;
    bench_open(&b, &cfg);
    b.s->pc->key_mask = 0;
    gp_sreq r[4];
    for (int i = 0; i < 4; i++)
        gp_sreq_random(&g_env, &r[i], 20 + (uint64_t)i, 13, 3);
    /* r1's first block is r0's, its second differs, its third is r0's again:
     * a chain that differs once never matches after */
    memcpy(r[1].prompt, r[0].prompt, sizeof(int32_t) * 4);
    memcpy(r[1].prompt + 8, r[0].prompt + 8, sizeof(int32_t) * 4);
    memcpy(r[3].prompt, r[0].prompt, sizeof(int32_t) * 13);
    const int want_cached[4] = {0, 4, 0, 12};
    for (int i = 0; i < 4; i++) {
        gp_sreq_run_alone(&g_env, &r[i]);
        gp_sched_result res = gp_sreq_serve_one(b.s, &r[i], bench_check, &b);
        assert_int_equal(res.cached_tokens, want_cached[i]);
    }
    for (int i = 0; i < 4; i++)
        GP_CHECK_OK(gp_sched_release(b.s, r[i].r.id));
    bench_close(&b);
}

/* Random slots, budgets, block sizes and block budgets, groups of shared
 * prefixes, random cancellations. */
static void test_random_configurations(void **state)
{
    (void)state;
    long long hits = 0, preempted = 0;
    for (int round = 0; round < 16; round++) {
        gp_sreq q[MAX_REQ];
        int groups = 1 + gp_sreq_rnd(&g_env, 4), prefix_len = 4 + gp_sreq_rnd(&g_env, 30);
        gp_sreq_make_groups(&g_env, q, MAX_REQ, groups, prefix_len, 1 + gp_sreq_rnd(&g_env, 30));
        gp_sched_policy policy = gp_sreq_rnd(&g_env, 2) ? GP_SCHED_CHUNKED : GP_SCHED_PREFILL_FIRST;
        gp_sched_config cfg = config(policy, 1 + gp_sreq_rnd(&g_env, 40), 0, true);
        cfg.max_seqs = 1 + gp_sreq_rnd(&g_env, MAX_SEQS);
        cfg.block_size = 1 << gp_sreq_rnd(&g_env, 4);
        int most = most_blocks(q, MAX_REQ, cfg.block_size);
        cfg.total_blocks = most + gp_sreq_rnd(&g_env, 2 * most);
        int pool = cfg.max_seqs * ((MAX_CTX + cfg.block_size - 1) / cfg.block_size); /* the reference's */
        if (cfg.total_blocks > pool)
            cfg.total_blocks = pool;
        gp_sched_stats st;
        run(&cfg, q, MAX_REQ, gp_sreq_rnd(&g_env, 2) ? 0 : 2 + gp_sreq_rnd(&g_env, 8), &st);
        hits += st.prefix_hit_tokens;
        preempted += st.preemptions;
    }
    printf("16 random configurations: %lld tokens from the cache, %lld preemptions\n", hits, preempted);
    assert_true(hits > 0 && preempted > 0);
}

/* A backend of block tables alone, as the CUDA engine keeps them: a batch
 * reserves and advances its sequences (its next token a function of the
 * part's last one), retained blocks are shared pool blocks. */
static gp_status tables_run(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_kv_tables *t = ctx;
    const int V = g_env.w.cfg.vocab;
    for (int i = 0; i < b->n_parts; i++) {
        const gp_batch_part *p = &b->parts[i];
        GP_TRY(gp_kv_reserve(t, p->seq, p->n));
        GP_TRY(gp_kv_advance(t, p->seq, p->n));
        next[i] = (p->tokens[p->n - 1] * 7 + 3) % V;
        for (int v = 0; logits && v < V; v++)
            logits[(size_t)i * (size_t)V + (size_t)v] = v == next[i];
    }
    return GP_OK;
}

static void tables_reset(void *ctx, int seq)
{
    gp_kv_release(ctx, seq);
}

static gp_status tables_retain(void *ctx, int seq, int index, int *handle)
{
    return gp_kv_block_retain(ctx, seq, index, handle);
}

static void tables_drop(void *ctx, int handle)
{
    assert_int_equal(gp_kv_block_drop(ctx, handle), GP_OK);
}

static gp_status tables_attach(void *ctx, int seq, const int *handles, int n)
{
    return gp_kv_attach(ctx, seq, handles, n);
}

/* Over the KV block tables with reference counts, under preemption and
 * eviction: after every step the pool's free blocks are the scheduler's. */
static void test_kv_tables_backend(void **state)
{
    (void)state;
    gp_sreq q[MAX_REQ];
    gp_sreq_make_groups(&g_env, q, MAX_REQ, 3, 19, 8);
    long long hits = 0, preempted = 0;
    for (int p = 0; p < 2; p++) {
        gp_sched_config cfg = config(p ? GP_SCHED_PREFILL_FIRST : GP_SCHED_CHUNKED, 16, 0, true);
        cfg.total_blocks = most_blocks(q, MAX_REQ, BLOCK) + 4;
        gp_kv_layout l = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 1, .block_size = BLOCK,
                          .n_blocks = cfg.total_blocks};
        gp_kv_tables *t;
        GP_CHECK_OK(gp_kv_tables_create(&l, MAX_SEQS, MAX_CTX / BLOCK, &t));
        gp_sched_ops ops = {.run_batch = tables_run, .reset_seq = tables_reset, .retain_block = tables_retain,
                            .drop_block = tables_drop, .attach_blocks = tables_attach, .ctx = t};
        gp_sched *s;
        GP_CHECK_OK(gp_sched_create(&cfg, &ops, &s));
        gp_sched_stats st;
        for (int step = 0;; step++) {
            assert_true(step < 3000);
            for (int i = 0; i < MAX_REQ; i++)
                if (q[i].arrival == step)
                    GP_CHECK_OK(gp_sched_submit(s, &q[i].r));
            GP_CHECK_OK(gp_sched_step(s, NULL));
            GP_CHECK_OK(gp_sched_check(s));
            gp_sched_get_stats(s, &st);
            assert_int_equal(gp_kv_free_blocks(t), st.free_blocks);
            if (step >= 8 && st.waiting == 0 && st.running == 0)
                break;
        }
        hits += st.prefix_hit_tokens;
        preempted += st.preemptions;
        for (int i = 0; i < MAX_REQ; i++)
            GP_CHECK_OK(gp_sched_release(s, q[i].r.id));
        gp_sched_evict_cached(s);
        assert_int_equal(gp_kv_free_blocks(t), cfg.total_blocks);
        gp_sched_destroy(s);
        gp_kv_tables_destroy(t);
    }
    printf("over block tables: %lld tokens from the cache, %lld preemptions\n", hits, preempted);
    assert_true(hits > 0 && preempted > 0);
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

static gp_status no_retain(void *ctx, int seq, int index, int *handle)
{
    (void)ctx, (void)seq, (void)index, (void)handle;
    return GP_OK;
}

/* The cache needs its three ops; the reference's copy calls check their
 * arguments, and a copy carries K/V bitwise. */
static void test_bad_inputs_and_copies(void **state)
{
    (void)state;
    gp_sched_ops ops = {.run_batch = fail_batch, .reset_seq = no_reset, .retain_block = no_retain};
    gp_sched_config cfg = config(GP_SCHED_CHUNKED, 4, 8, true);
    gp_sched *s;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "prefix_cache needs ops.drop_block");
    ops.retain_block = NULL;
    GP_CHECK_FAIL(gp_sched_create(&cfg, &ops, &s), GP_ERR_INVALID_ARG, "ops.retain_block");
    cfg.prefix_cache = false;
    GP_CHECK_OK(gp_sched_create(&cfg, &ops, &s));
    gp_sched_destroy(s);

    /* blocks 0 and 1 of seq 0 shared with seq 1, its last token prefilled
     * there: the next token's logits are bitwise those of seq 0 */
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_env.w, 2, MAX_CTX, BLOCK, &m));
    int32_t prompt[2 * BLOCK + 1];
    for (int i = 0; i < 2 * BLOCK + 1; i++)
        prompt[i] = gp_sreq_rnd(&g_env, g_env.w.cfg.vocab);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, 2 * BLOCK + 1, prompt, NULL));
    int h[2], pool_free, pool_total;
    GP_CHECK_FAIL(gp_cpu_kv_retain_block(m, 0, 2, &h[0]), GP_ERR_INVALID_ARG, "");
    GP_CHECK_FAIL(gp_cpu_kv_retain_block(m, 2, 0, &h[0]), GP_ERR_INVALID_ARG, "seq 2");
    GP_CHECK_OK(gp_cpu_kv_retain_block(m, 0, 0, &h[0]));
    GP_CHECK_OK(gp_cpu_kv_retain_block(m, 0, 1, &h[1]));
    GP_CHECK_OK(gp_cpu_kv_attach(m, 1, h, 2));
    GP_CHECK_FAIL(gp_cpu_kv_attach(m, 1, h, 2), GP_ERR_STATE, "");
    GP_CHECK_OK(gp_cpu_prefill(m, 1, 1, prompt + 2 * BLOCK, NULL));
    const int V = g_env.w.cfg.vocab, seqs[2] = {0, 1};
    const int32_t next[2] = {7, 7};
    float *lg = malloc(sizeof(float) * 2 * (size_t)V);
    GP_CHECK_OK(gp_cpu_decode_step(m, 2, seqs, next, lg));
    assert_memory_equal(lg, lg + V, sizeof(float) * (size_t)V);
    free(lg);
    /* every holder gone: the pool is whole again */
    gp_cpu_reset_seq(m, 0);
    gp_cpu_reset_seq(m, 1);
    GP_CHECK_OK(gp_cpu_kv_drop_block(m, h[0]));
    GP_CHECK_OK(gp_cpu_kv_drop_block(m, h[1]));
    gp_cpu_kv_blocks(m, &pool_free, &pool_total);
    assert_int_equal(pool_free, pool_total);
    gp_cpu_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_prefixes),
        cmocka_unit_test(test_identical_prompt),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_preemption_with_shared_blocks),
        cmocka_unit_test(test_cancel_shared),
        cmocka_unit_test(test_collision_is_miss),
        cmocka_unit_test(test_random_configurations),
        cmocka_unit_test(test_kv_tables_backend),
        cmocka_unit_test(test_bad_inputs_and_copies),
    };
    if (gp_sreq_env_load(&g_env) != 0)
        return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    gp_sreq_env_free(&g_env);
    return failed;
}
