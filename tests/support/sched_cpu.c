/* The scheduler's backend ops over the CPU reference (gp_cpu_run_batch and
 * gp_cpu_reset_seq), its shared KV blocks for prefix caching, a host tier of
 * blocks copied out of and back into its cache, and a prefill lane that
 * completes late. */
#include "sched_cpu.h"

#include "gp_test.h"

#include "gp_kvstore.h"
#include "ref_impl.h"

static gp_status cpu_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    return gp_cpu_run_batch(ctx, b, next, logits);
}

static void cpu_reset_seq(void *ctx, int seq)
{
    gp_cpu_reset_seq(ctx, seq);
}

gp_status gp_sched_cpu_tiny_weights(gp_host_weights *w)
{
    gp_config cfg;
    GP_TRY(gp_config_preset("tiny", &cfg));
    GP_TRY(gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, w));
    gp_status st = gp_synth_fill_host(w, 1234);
    if (st != GP_OK)
        gp_host_weights_free(w);
    return st;
}

gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m)
{
    return (gp_sched_ops){.run_batch = cpu_run_batch, .reset_seq = cpu_reset_seq, .sample = NULL, .ctx = m};
}

static gp_status cpu_retain(void *ctx, int seq, int index, int *handle)
{
    return gp_cpu_kv_retain_block(ctx, seq, index, handle);
}

static void cpu_drop(void *ctx, int handle)
{
    (void)gp_cpu_kv_drop_block(ctx, handle); /* the scheduler drops only what it retained */
}

static gp_status cpu_attach(void *ctx, int seq, const int *handles, int n)
{
    return gp_cpu_kv_attach(ctx, seq, handles, n);
}

gp_sched_ops gp_sched_cpu_share_ops(gp_cpu_model *m)
{
    gp_sched_ops o = gp_sched_cpu_ops(m);
    o.retain_block = cpu_retain;
    o.drop_block = cpu_drop;
    o.attach_blocks = cpu_attach;
    return o;
}

struct gp_sched_cpu_tier {
    gp_cpu_model *m; /* first: model_of */
    gp_kvstore *store;
    uint64_t seed;           /* the store's chain seed */
    float *payload;          /* one block: an offload's copy on its way into the store */
    uint64_t *held;          /* [blocks of a sequence]: the keys the last lookup pinned */
    int n_held, most;        /* most: blocks of a sequence, what one load can take */
    const void **payloads;   /* [most]: a load's */
    int fail_lookup, fail_load, fail_offload;
};

gp_status gp_sched_cpu_tier_create(gp_cpu_model *m, int capacity_blocks, gp_sched_cpu_tier **out)
{
    if (!m || !out || capacity_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_cpu_tier_create: model %s, out %s, capacity %d blocks: allowed a "
                "model, out and at least 1 block", m ? "set" : "NULL", out ? "set" : "NULL", capacity_blocks);
    const gp_config *cfg = gp_cpu_model_config(m);
    gp_kv_tables *kv = gp_ref_kv_of(m).kv;
    gp_kvstore_params p = gp_kvstore_default_params();
    p.id = (gp_kvstore_identity){.model = "sched_cpu tier", .n_layers = cfg->n_layers,
                                 .n_kv_heads = cfg->n_kv_heads, .head_dim = cfg->head_dim, .dtype_bytes = 4,
                                 .block_size = gp_kv_tables_layout(kv)->block_size};
    uint64_t bytes;
    GP_TRY(gp_kvstore_block_bytes(&p.id, &bytes));
    p.capacity_bytes = bytes * (uint64_t)capacity_blocks;
    gp_sched_cpu_tier *t = calloc(1, sizeof(*t));
    if (!t)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_cpu_tier_create: out of host memory");
    t->m = m;
    t->seed = gp_kvstore_seed(&p.id);
    t->most = gp_kv_max_blocks_per_seq(kv);
    t->payload = malloc((size_t)bytes);
    t->held = malloc(sizeof(uint64_t) * (size_t)t->most);
    t->payloads = malloc(sizeof(void *) * (size_t)t->most);
    if (!t->payload || !t->held || !t->payloads) {
        gp_sched_cpu_tier_destroy(t);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_cpu_tier_create: out of host memory for a block of %llu bytes",
                (unsigned long long)bytes);
    }
    gp_status st = gp_kvstore_create(&p, &t->store);
    if (st != GP_OK) {
        gp_sched_cpu_tier_destroy(t);
        return st;
    }
    *out = t;
    return GP_OK;
}

void gp_sched_cpu_tier_destroy(gp_sched_cpu_tier *t)
{
    if (!t)
        return;
    gp_kvstore_destroy(t->store);
    free(t->payload);
    free(t->held);
    free(t->payloads);
    free(t);
}

uint64_t gp_sched_cpu_tier_seed(const gp_sched_cpu_tier *t)
{
    return t->seed;
}

struct gp_kvstore *gp_sched_cpu_tier_store(gp_sched_cpu_tier *t)
{
    return t->store;
}

void gp_sched_cpu_tier_fail(gp_sched_cpu_tier *t, int fail_lookup, int fail_load, int fail_offload)
{
    t->fail_lookup = fail_lookup;
    t->fail_load = fail_load;
    t->fail_offload = fail_offload;
}

/* An injected failure: the next *left calls of this op fail. */
static gp_status injected(int *left, const char *op)
{
    if (*left <= 0)
        return GP_OK;
    --*left;
    GP_FAIL(GP_ERR_IO, "sched_cpu tier: %s fails (injected, %d more to come)", op, *left);
}

/* A block already held is only touched (the match and release); another
 * is copied out of the reference and put. */
static gp_status tier_offload(void *ctx, int handle, uint64_t key, const int32_t *tokens)
{
    gp_sched_cpu_tier *t = ctx;
    int held;
    GP_TRY(injected(&t->fail_offload, "host_offload"));
    GP_TRY(gp_kvstore_match(t->store, &key, tokens, 1, &held));
    if (held)
        return gp_kvstore_release(t->store, &key, 1);
    GP_TRY(gp_cpu_kv_read_block(t->m, handle, t->payload));
    return gp_kvstore_put(t->store, key, tokens, t->payload);
}

static gp_status tier_lookup(void *ctx, const uint64_t *keys, const int32_t *tokens, int n, int *held)
{
    gp_sched_cpu_tier *t = ctx;
    GP_TRY(injected(&t->fail_lookup, "host_lookup"));
    int matched;
    GP_TRY(gp_kvstore_match(t->store, keys, tokens, n < t->most ? n : t->most, &matched));
    memcpy(t->held, keys, sizeof(uint64_t) * (size_t)matched);
    *held = t->n_held = matched;
    return GP_OK;
}

/* The first n pinned blocks appended at once. Every pin goes whatever the
 * outcome: after a failed load the scheduler calls no other to let them go. */
static gp_status tier_load(void *ctx, int seq, int n)
{
    gp_sched_cpu_tier *t = ctx;
    gp_status st = GP_OK;
    if (n < 0 || n > t->n_held) {
        gp_set_error("sched_cpu tier: host_load of %d blocks into seq %d, allowed 0..%d (the lookup's)", n, seq,
                     t->n_held);
        st = GP_ERR_INVALID_ARG;
    } else if (n > 0) {
        st = injected(&t->fail_load, "host_load");
        for (int i = 0; i < n && st == GP_OK; i++)
            st = gp_kvstore_get(t->store, t->held[i], &t->payloads[i]);
        if (st == GP_OK)
            st = gp_cpu_kv_append_blocks(t->m, seq, t->payloads, n);
    }
    if (t->n_held)
        (void)gp_kvstore_release(t->store, t->held, t->n_held); /* pinned by the lookup: cannot fail */
    t->n_held = 0;
    return st;
}

/* The decode ops of a double whose first member is its model (the tier's
 * and the two lanes'). */
static gp_cpu_model *model_of(void *ctx)
{
    return *(gp_cpu_model **)ctx;
}

static gp_status via_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    return cpu_run_batch(model_of(ctx), b, next, logits);
}

static void via_reset_seq(void *ctx, int seq)
{
    cpu_reset_seq(model_of(ctx), seq);
}

static gp_status via_retain(void *ctx, int seq, int index, int *handle)
{
    return cpu_retain(model_of(ctx), seq, index, handle);
}

static void via_drop(void *ctx, int handle)
{
    cpu_drop(model_of(ctx), handle);
}

static gp_status via_attach(void *ctx, int seq, const int *handles, int n)
{
    return cpu_attach(model_of(ctx), seq, handles, n);
}

gp_sched_ops gp_sched_cpu_tier_ops(gp_sched_cpu_tier *t)
{
    return (gp_sched_ops){.run_batch = via_run_batch, .reset_seq = via_reset_seq, .retain_block = via_retain,
                          .drop_block = via_drop, .attach_blocks = via_attach, .host_offload = tier_offload,
                          .host_lookup = tier_lookup, .host_load = tier_load, .ctx = t};
}

struct gp_sched_cpu_pd {
    gp_cpu_model *m; /* first: model_of */
    bool share;
    uint64_t rng;           /* the lags' stream */
    int max_lag;
    gp_batch_part *parts;   /* [max_seqs]: the launched batch's; their tokens stay the caller's */
    gp_batch b;
    int32_t *next;          /* the caller's, filled on completion */
    float *logits;
    bool in_flight;
    int lag;                /* polls without wait before it completes */
    int fail;               /* injected: the next that many batches fail */
    const char *broken;     /* a use of a sequence in flight: every later call fails with it */
    int seq_broken;
    int launched, pending_polls;
    bool planner;           /* answer pd_plan: lane or mixed at random, 1..budget tokens */
    int fail_plans;         /* injected: the next that many plans fail */
    int plans, mixed_plans;
};

gp_status gp_sched_cpu_pd_create(gp_cpu_model *m, bool share, uint64_t seed, int max_lag, gp_sched_cpu_pd **out)
{
    if (!m || !out || max_lag < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_cpu_pd_create: model %s, out %s, max_lag %d: allowed a model, out "
                "and a lag >= 0", m ? "set" : "NULL", out ? "set" : "NULL", max_lag);
    gp_sched_cpu_pd *p = calloc(1, sizeof(*p));
    if (p)
        p->parts = malloc(sizeof(gp_batch_part) * (size_t)gp_cpu_model_max_seqs(m));
    if (!p || !p->parts) {
        gp_sched_cpu_pd_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_cpu_pd_create: out of host memory");
    }
    *p = (gp_sched_cpu_pd){.m = m, .share = share, .rng = seed, .max_lag = max_lag, .parts = p->parts};
    *out = p;
    return GP_OK;
}

void gp_sched_cpu_pd_destroy(gp_sched_cpu_pd *p)
{
    if (!p)
        return;
    free(p->parts);
    free(p);
}

void gp_sched_cpu_pd_counts(const gp_sched_cpu_pd *p, int *launched, int *pending_polls)
{
    *launched = p->launched;
    *pending_polls = p->pending_polls;
}

void gp_sched_cpu_pd_fail(gp_sched_cpu_pd *p, int n)
{
    p->fail = n;
}

int gp_sched_cpu_pd_in_flight(const gp_sched_cpu_pd *p, int *seqs)
{
    if (!p->in_flight)
        return 0;
    for (int i = 0; seqs && i < p->b.n_parts; i++)
        seqs[i] = p->parts[i].seq;
    return p->b.n_parts;
}

static bool pd_holds(const gp_sched_cpu_pd *p, int seq)
{
    for (int i = 0; p->in_flight && i < p->b.n_parts; i++)
        if (p->parts[i].seq == seq)
            return true;
    return false;
}

/* The lane's contract broken earlier (reset_seq cannot answer): fail now. */
static gp_status pd_unbroken(const gp_sched_cpu_pd *p)
{
    if (p->broken)
        GP_FAIL(GP_ERR_STATE, "sched_cpu pd: %s seq %d while its prefill batch was in flight", p->broken,
                p->seq_broken);
    return GP_OK;
}

static gp_status pd_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_sched_cpu_pd *p = ctx;
    GP_TRY(pd_unbroken(p));
    for (int i = 0; i < b->n_parts; i++)
        if (pd_holds(p, b->parts[i].seq))
            GP_FAIL(GP_ERR_STATE, "sched_cpu pd: run_batch part %d on seq %d, which the prefill batch in flight "
                    "holds", i, b->parts[i].seq);
    return cpu_run_batch(p->m, b, next, logits);
}

static void pd_reset_seq(void *ctx, int seq)
{
    gp_sched_cpu_pd *p = ctx;
    if (pd_holds(p, seq) && !p->broken) {
        p->broken = "reset_seq of";
        p->seq_broken = seq;
    }
    cpu_reset_seq(p->m, seq);
}

/* Nothing runs yet: the batch waits for the poll that completes it. */
static gp_status pd_launch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_sched_cpu_pd *p = ctx;
    GP_TRY(pd_unbroken(p));
    if (p->in_flight)
        GP_FAIL(GP_ERR_STATE, "sched_cpu pd: prefill_launch while batch %d is in flight (poll it done first)",
                p->launched);
    int most = gp_cpu_model_max_seqs(p->m);
    if (b->n_parts < 1 || b->n_parts > most)
        GP_FAIL(GP_ERR_INVALID_ARG, "sched_cpu pd: prefill_launch of %d parts, allowed 1..%d", b->n_parts, most);
    for (int i = 0; i < b->n_parts; i++)
        if (b->parts[i].kind != GP_BATCH_PREFILL)
            GP_FAIL(GP_ERR_INVALID_ARG, "sched_cpu pd: prefill_launch part %d is a decode part, allowed prefill "
                    "parts only", i);
    memcpy(p->parts, b->parts, sizeof(gp_batch_part) * (size_t)b->n_parts);
    p->b = (gp_batch){.n_parts = b->n_parts, .parts = p->parts};
    p->next = next;
    p->logits = logits;
    p->lag = (int)(gp_test_uniform(&p->rng) * (p->max_lag + 1));
    p->in_flight = true;
    p->launched++;
    return GP_OK;
}

static gp_status pd_poll(void *ctx, bool wait, bool *done)
{
    gp_sched_cpu_pd *p = ctx;
    GP_TRY(pd_unbroken(p));
    if (!p->in_flight)
        GP_FAIL(GP_ERR_STATE, "sched_cpu pd: prefill_poll with no batch launched");
    *done = wait || p->lag == 0;
    if (!*done) {
        p->lag--;
        p->pending_polls++;
        return GP_OK;
    }
    p->in_flight = false;
    if (p->fail > 0) {
        p->fail--;
        GP_FAIL(GP_ERR_IO, "sched_cpu pd: prefill batch %d fails (injected, %d more to come)", p->launched, p->fail);
    }
    return cpu_run_batch(p->m, &p->b, p->next, p->logits);
}

/* The planner's contract: asked only while the lane is free, with prompt
 * tokens waiting. */
static gp_status pd_plan(void *ctx, const gp_pd_plan_in *in, gp_pd_plan *out)
{
    gp_sched_cpu_pd *p = ctx;
    GP_TRY(pd_unbroken(p));
    if (p->in_flight || in->backlog_tokens < 1 || in->decode_rows < 0 || in->token_budget < 1 ||
        in->prefill_position < 0 ||
        (in->decode_rows == 0) != (in->decode_context == 0))
        GP_FAIL(GP_ERR_STATE, "sched_cpu pd: pd_plan asked with %s, %d decode rows of %lld context, a backlog of "
                "%lld, a budget of %d", p->in_flight ? "a batch in flight" : "the lane free", in->decode_rows,
                in->decode_context, in->backlog_tokens, in->token_budget);
    p->plans++;
    if (p->fail_plans > 0) {
        p->fail_plans--;
        GP_FAIL(GP_ERR_IO, "sched_cpu pd: injected plan failure");
    }
    bool mixed = gp_test_uniform(&p->rng) < 0.5;
    p->mixed_plans += mixed;
    *out = (gp_pd_plan){.run = mixed ? GP_PD_RUN_MIXED : GP_PD_RUN_LANE,
                        .tokens = 1 + (int)(gp_test_uniform(&p->rng) * in->token_budget)};
    return GP_OK;
}

void gp_sched_cpu_pd_planner(gp_sched_cpu_pd *p, bool on, int fail_plans)
{
    p->planner = on;
    p->fail_plans = fail_plans;
}

void gp_sched_cpu_pd_plans(const gp_sched_cpu_pd *p, int *plans, int *mixed)
{
    *plans = p->plans;
    *mixed = p->mixed_plans;
}

gp_sched_ops gp_sched_cpu_pd_ops(gp_sched_cpu_pd *p)
{
    gp_sched_ops o = {.run_batch = pd_run_batch, .reset_seq = pd_reset_seq, .prefill_launch = pd_launch,
                      .prefill_poll = pd_poll, .pd_plan = p->planner ? pd_plan : NULL, .ctx = p};
    if (p->share) {
        o.retain_block = via_retain;
        o.drop_block = via_drop;
        o.attach_blocks = via_attach;
    }
    return o;
}
