/* One scheduler step: the policy builds a mixed batch under the token
 * budget, the sequence slots and the free KV blocks (preempting the newest
 * request when a decode row finds none), the backend runs it, and the parts
 * that reached their last pending token are sampled; the planning and
 * commits the two-lane policy (sched_pd.c) shares. */
#include <stdlib.h>

#include "sched_impl.h"

static int blocks_for(const gp_sched *s, int len)
{
    return (len + s->cfg.block_size - 1) / s->cfg.block_size;
}

/* Recompute: r's cache is dropped and it goes back to the head of the queue
 * with every token it holds (prompt and generated) as its prompt, so its
 * greedy output is what it would have been. */
static void preempt(gp_sched *s, rq *r)
{
    gp_sched_release_slot(s, r);
    r->state = RQ_WAITING;
    r->prefill_end = r->n_all;
    r->preemptions++;
    s->stats.preemptions++;
    gp_sched_list_push_head(&s->waiting, r);
}

static void add_part(gp_sched *s, sched_batch *b, rq *r, gp_batch_kind kind, int n, int blk)
{
    int i = b->n++;
    b->parts[i] = (gp_batch_part){.seq = r->seq, .kind = kind, .n = n, .tokens = r->all + r->computed};
    b->rq[i] = r;
    b->blk[i] = blk;
    r->nblk += blk;
    gp_sched_take_blocks(s, blk);
    s->budget_left -= n;
}

void gp_sched_preempt_newest(gp_sched *s)
{
    rq *r = s->running.tail;
    while (r && r->pending) /* its prefill runs on the lane */
        r = r->prev;
    if (r)
        preempt(s, r);
}

/* A decode row for every running request past its prefill, oldest first,
 * while budget and slots last. A row whose next token needs a block when
 * none is free preempts the newest running request until one is (itself,
 * last: every request after it is gone by then, but for those whose prefill
 * runs on the lane). */
void gp_sched_plan_decodes(gp_sched *s, sched_batch *b)
{
    rq *r = s->running.head;
    while (r && s->budget_left > 0 && b->n < s->cfg.max_seqs) {
        if (gp_sched_prefilling(r)) {
            r = r->next;
            continue;
        }
        int need = blocks_for(s, r->computed + 1) - r->nblk;
        while (need > gp_sched_blocks_avail(s) && r->state == RQ_RUNNING)
            gp_sched_preempt_newest(s);
        if (r->state != RQ_RUNNING)
            return;
        add_part(s, b, r, GP_BATCH_DECODE, 1, need);
        r = r->next;
    }
}

/* Tokens of r's next prefill chunk when it starts at position start,
 * holding nblk blocks, with avail more to take; whole_only takes the whole
 * rest or nothing, except as the step's first part (a prompt longer than the
 * budget goes in chunks). */
static int chunk_len(const gp_sched *s, const sched_batch *b, const rq *r, int start, int nblk, int avail,
                     int whole_only)
{
    int rest = r->prefill_end - start;
    int n = rest < s->budget_left ? rest : s->budget_left;
    long long room = ((long long)nblk + avail) * s->cfg.block_size - start;
    if (n > room)
        n = (int)room;
    if (n <= 0 || (whole_only && n < rest && b->n > 0))
        return 0;
    return n;
}

/* Waiting r into a free sequence slot: its cached leading blocks attached
 * (hit of them, or none when the backend refuses), then those the host
 * tier holds after them (host, leaving a block for the chunk), and the
 * prefill chunk that follows; 0 (nothing changed) when none fits. */
static int admit(gp_sched *s, const sched_batch *b, rq *r, int whole_only)
{
    int seq = 0, hit = 0, lru_hits = 0, host = 0, bs = s->cfg.block_size;
    while (s->slot[seq])
        seq++;
    if (s->pc)
        hit = gp_sched_prefix_match(s, r, &lru_hits);
    int avail = gp_sched_blocks_avail(s);
    bool looked = s->ops.host_lookup && avail - lru_hits > 1;
    if (looked)
        host = gp_sched_prefix_host_lookup(s, r, hit, avail - lru_hits - 1);
    int n = chunk_len(s, b, r, (hit + host) * bs, hit + host, avail - lru_hits - host, whole_only);
    if (n > 0 && hit > 0 && gp_sched_prefix_attach(s, r, seq, hit) != GP_OK) {
        hit = host = 0; /* the backend kept none: compute them (the tier's blocks follow them) */
        n = chunk_len(s, b, r, 0, 0, avail, whole_only);
    }
    if (n > 0 && host > 0) {
        gp_sched_take_blocks(s, host);
        r->seq = seq;
        looked = false;
        if (gp_sched_prefix_host_load(s, r, hit, host) != GP_OK) {
            s->free_blocks += host;
            host = 0;
            n = chunk_len(s, b, r, hit * bs, hit, gp_sched_blocks_avail(s), whole_only);
        }
    }
    if (looked) /* the lookup's pins go */
        (void)s->ops.host_load(s->ops.ctx, seq, 0);
    if (n <= 0) { /* none fits, or the tier's load failed and the longer rest fits no more */
        if (hit > 0) { /* attached: let them go */
            s->ops.reset_seq(s->ops.ctx, seq);
            gp_sched_prefix_release(s, r);
            r->nblk = r->computed = 0;
        }
        r->seq = -1; /* the failed load's slot is not its */
        return 0;
    }
    if (s->pc) {
        s->stats.prefix_query_tokens += r->prefill_end;
        s->stats.prefix_hit_tokens += hit * bs;
        s->stats.prefix_host_hit_tokens += host * bs;
        if (r->preemptions == 0)
            r->cached_tokens = (hit + host) * bs;
    }
    gp_sched_list_unlink(&s->waiting, r);
    gp_sched_list_push_tail(&s->running, r);
    s->slot[seq] = r;
    r->seq = seq;
    r->state = RQ_RUNNING;
    return n;
}

/* A prefill chunk of r: as many of its pending tokens as the budget and the
 * blocks allow (a waiting r is admitted first). */
static int plan_chunk(gp_sched *s, sched_batch *b, rq *r, int whole_only)
{
    int n = r->state == RQ_WAITING ? admit(s, b, r, whole_only)
                                   : chunk_len(s, b, r, r->computed, r->nblk, gp_sched_blocks_avail(s), whole_only);
    if (n <= 0)
        return 0;
    int need = blocks_for(s, r->computed + n) - r->nblk;
    if (need < 0)
        need = 0;
    add_part(s, b, r, GP_BATCH_PREFILL, n, need);
    return 1;
}

/* Partly prefilled running requests first (but those whose prefill runs on
 * the lane), then the queue in FIFO order (the first that does not fit stops
 * it, so none overtakes another). */
void gp_sched_plan_prefills(gp_sched *s, sched_batch *b, int whole_only)
{
    for (rq *r = s->running.head; r && s->budget_left > 0 && b->n < s->cfg.max_seqs; r = r->next)
        if (gp_sched_prefilling(r) && !r->pending)
            plan_chunk(s, b, r, whole_only);
    while (s->waiting.head && s->budget_left > 0 && b->n < s->cfg.max_seqs && s->running.n < s->cfg.max_seqs)
        if (!plan_chunk(s, b, s->waiting.head, whole_only))
            break;
}

static void plan(gp_sched *s)
{
    s->b.n = 0;
    s->budget_left = s->cfg.token_budget;
    if (s->cfg.policy == GP_SCHED_CHUNKED) {
        gp_sched_plan_decodes(s, &s->b);
        gp_sched_plan_prefills(s, &s->b, 0);
    } else {
        gp_sched_plan_prefills(s, &s->b, 1);
        if (s->b.n == 0)
            gp_sched_plan_decodes(s, &s->b);
    }
}

void gp_sched_unplan(gp_sched *s, sched_batch *b)
{
    for (int i = 0; i < b->n; i++)
        if (b->rq[i]) {
            b->rq[i]->nblk -= b->blk[i];
            b->rq[i]->pending = 0;
            s->free_blocks += b->blk[i];
        }
    b->n = 0;
}

static int32_t greedy(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void finish(gp_sched *s, rq *r, gp_sched_finish why)
{
    gp_sched_release_slot(s, r);
    r->state = RQ_DONE;
    r->finish = why;
}

/* Part i ran: its tokens are in the cache; at its request's last pending
 * token the next one is sampled and the request may finish. */
static void commit_part(gp_sched *s, sched_batch *b, int i)
{
    rq *r = b->rq[i];
    r->computed += b->parts[i].n;
    r->pending = 0;
    if (s->pc)
        gp_sched_prefix_register(s, r);
    if (b->parts[i].kind == GP_BATCH_PREFILL)
        s->stats.prefill_tokens += b->parts[i].n;
    else
        s->stats.decode_tokens++;
    if (r->computed < r->n_all)
        return;
    const float *lg = b->logits + (size_t)i * (size_t)s->cfg.vocab;
    int32_t t = r->greedy       ? b->next[i]
                : s->ops.sample ? s->ops.sample(s->ops.ctx, lg, s->cfg.vocab, r->sample_ctx)
                                : greedy(lg, s->cfg.vocab);
    r->all[r->n_all++] = t;
    gp_sched_finish why = GP_SCHED_RUNNING;
    for (int k = 0; k < r->n_stop; k++)
        if (r->stop[k] == t)
            why = GP_SCHED_STOP;
    if (why == GP_SCHED_RUNNING && r->n_all - r->n_prompt >= r->max_tokens)
        why = GP_SCHED_LENGTH;
    s->events[s->n_events++] = (gp_sched_event){.id = r->id, .token = t, .finish = why};
    if (why != GP_SCHED_RUNNING)
        finish(s, r, why);
}

static void swap_parts(sched_batch *b, int i, int j)
{
    gp_batch_part p = b->parts[i];
    b->parts[i] = b->parts[j], b->parts[j] = p;
    rq *r = b->rq[i];
    b->rq[i] = b->rq[j], b->rq[j] = r;
    int k = b->blk[i];
    b->blk[i] = b->blk[j], b->blk[j] = k;
}

void gp_sched_commit(gp_sched *s, sched_batch *b)
{
    for (int i = 0; i < b->n; i++)
        if (b->rq[i])
            commit_part(s, b, i);
    b->n = 0;
}

bool gp_sched_wants_logits(const sched_batch *b)
{
    for (int i = 0; i < b->n; i++) {
        const rq *r = b->rq[i];
        if (r && !r->greedy && r->computed + b->parts[i].n >= r->n_all)
            return true;
    }
    return false;
}

/* The batch is the prefill parts, then the decode parts, each kind in the
 * order planned. */
static void order_parts(sched_batch *b)
{
    for (int i = 0, n_pre = 0; i < b->n; i++)
        if (b->parts[i].kind == GP_BATCH_PREFILL) {
            for (int j = i; j > n_pre; j--)
                swap_parts(b, j, j - 1);
            n_pre++;
        }
}

gp_status gp_sched_run(gp_sched *s, sched_batch *b)
{
    order_parts(b);
    const gp_batch g = {.n_parts = b->n, .parts = b->parts};
    gp_status st = s->ops.run_batch(s->ops.ctx, &g, b->next, gp_sched_wants_logits(b) ? b->logits : NULL);
    if (st != GP_OK) {
        gp_sched_unplan(s, b);
        return st;
    }
    s->stats.steps++;
    gp_sched_commit(s, b);
    return GP_OK;
}

gp_status gp_sched_step(gp_sched *s, int *n_events)
{
    if (!s)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_step: scheduler must be non-NULL");
    s->n_events = 0;
    if (n_events)
        *n_events = 0;
    gp_status st;
    if (s->cfg.policy == GP_SCHED_PD_MUX) {
        st = gp_sched_step_pd(s);
    } else {
        plan(s);
        /* Every request alone fits the blocks (gp_sched_submit), so a step
         * that found room for none gives the oldest room by preempting the
         * newest. */
        while (s->b.n == 0 && s->running.n > 0) {
            gp_sched_preempt_newest(s);
            plan(s);
        }
        st = s->b.n ? gp_sched_run(s, &s->b) : GP_OK;
    }
    if (n_events)
        *n_events = s->n_events;
    return st;
}

const gp_sched_event *gp_sched_events(const gp_sched *s, int *n)
{
    *n = s->n_events;
    return s->events;
}
