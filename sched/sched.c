/* The scheduler's requests: creation, submission with its checks,
 * cancellation, results and the lists they live on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_impl.h"

void gp_sched_list_unlink(rq_list *l, rq *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

void gp_sched_list_push_tail(rq_list *l, rq *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

void gp_sched_list_push_head(rq_list *l, rq *r)
{
    r->prev = NULL;
    r->next = l->head;
    if (l->head)
        l->head->prev = r;
    else
        l->tail = r;
    l->head = r;
    l->n++;
}

void gp_sched_release_slot(gp_sched *s, rq *r)
{
    s->ops.reset_seq(s->ops.ctx, r->seq);
    s->slot[r->seq] = NULL;
    r->seq = -1;
    s->free_blocks += r->nblk - r->n_shared;
    if (s->pc)
        gp_sched_prefix_release(s, r);
    r->nblk = 0;
    r->computed = 0;
    gp_sched_list_unlink(&s->running, r);
}

const char *gp_sched_finish_name(gp_sched_finish f)
{
    switch (f) {
    case GP_SCHED_RUNNING: return "running";
    case GP_SCHED_LENGTH: return "length";
    case GP_SCHED_STOP: return "stop";
    case GP_SCHED_CANCELLED: return "cancelled";
    }
    return "?";
}

static bool batch_alloc(sched_batch *b, size_t ms, int vocab)
{
    b->parts = calloc(ms, sizeof(*b->parts));
    b->rq = calloc(ms, sizeof(*b->rq));
    b->blk = calloc(ms, sizeof(*b->blk));
    b->next = malloc(sizeof(int32_t) * ms);
    b->logits = malloc(sizeof(float) * ms * (size_t)vocab);
    return b->parts && b->rq && b->blk && b->next && b->logits;
}

static void batch_free(sched_batch *b)
{
    free(b->parts);
    free(b->rq);
    free(b->blk);
    free(b->next);
    free(b->logits);
}

gp_status gp_sched_create(const gp_sched_config *cfg, const gp_sched_ops *ops, gp_sched **out)
{
    if (!cfg || !ops || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: cfg, ops and out must be non-NULL");
    *out = NULL;
    if (!ops->run_batch || !ops->reset_seq)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: ops.run_batch and ops.reset_seq are required");
    if (cfg->policy != GP_SCHED_CHUNKED && cfg->policy != GP_SCHED_PREFILL_FIRST && cfg->policy != GP_SCHED_PD_MUX)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: policy %d; allowed GP_SCHED_CHUNKED, GP_SCHED_PREFILL_FIRST, "
                "GP_SCHED_PD_MUX", (int)cfg->policy);
    if (cfg->policy == GP_SCHED_PD_MUX && (!ops->prefill_launch || !ops->prefill_poll))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: GP_SCHED_PD_MUX needs ops.prefill_launch and prefill_poll "
                "(a prefill lane beside run_batch's)");
    if (ops->pd_plan && cfg->policy != GP_SCHED_PD_MUX)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: ops.pd_plan plans the prefill lane's batches; it needs "
                "GP_SCHED_PD_MUX");
    if (cfg->token_budget < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: token_budget %d, allowed >= 1", cfg->token_budget);
    if (cfg->max_seqs < 1 || cfg->vocab < 1 || cfg->max_context < 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: max_seqs %d, vocab %d, max_context %d; allowed "
                "max_seqs >= 1, vocab >= 1, max_context >= 2", cfg->max_seqs, cfg->vocab, cfg->max_context);
    if (cfg->block_size < 1 || cfg->total_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: block_size %d, total_blocks %d, allowed >= 1 each",
                cfg->block_size, cfg->total_blocks);
    if (cfg->prefix_cache) {
        const char *missing = !ops->retain_block ? "retain_block" : !ops->drop_block ? "drop_block"
                            : !ops->attach_blocks ? "attach_blocks" : NULL;
        if (missing)
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: prefix_cache needs ops.%s (NULL)", missing);
    }
    int tier = !!ops->host_offload + !!ops->host_lookup + !!ops->host_load;
    if (tier && (tier < 3 || !cfg->prefix_cache))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_create: a host tier needs ops.host_offload, host_lookup and host_load "
                "together (%d of 3 given) and prefix_cache (%s): it keeps the blocks the device cache evicts",
                tier, cfg->prefix_cache ? "on" : "off");
    gp_sched *s = calloc(1, sizeof(*s));
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_create: out of host memory");
    s->cfg = *cfg;
    s->ops = *ops;
    size_t ms = (size_t)cfg->max_seqs;
    s->slot = calloc(ms, sizeof(*s->slot));
    s->events = calloc(2 * ms, sizeof(*s->events)); /* pd-mux: a request's first token and its next */
    bool ok = s->slot && s->events && batch_alloc(&s->b, ms, cfg->vocab);
    if (ok && cfg->policy == GP_SCHED_PD_MUX)
        ok = batch_alloc(&s->pf, ms, cfg->vocab);
    if (!ok) {
        gp_sched_destroy(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_create: out of host memory for %d slots of vocab %d",
                cfg->max_seqs, cfg->vocab);
    }
    s->free_blocks = cfg->total_blocks;
    if (cfg->prefix_cache) {
        gp_status st = gp_sched_prefix_create(s);
        if (st != GP_OK) {
            gp_sched_destroy(s);
            return st;
        }
    }
    *out = s;
    return GP_OK;
}

static void rq_free(rq *r)
{
    if (r) {
        free(r->all);
        free(r->stop);
        free(r->ent);
        free(r);
    }
}

void gp_sched_destroy(gp_sched *s)
{
    if (!s)
        return;
    gp_sched_pd_wait(s); /* the lane's batch still writes the cache the blocks below name */
    gp_sched_prefix_destroy(s);
    for (int i = 0; i < s->n_reqs; i++)
        rq_free(s->reqs[i]);
    free(s->reqs);
    free(s->slot);
    batch_free(&s->b);
    batch_free(&s->pf);
    free(s->events);
    free(s);
}

static int find(const gp_sched *s, uint64_t id)
{
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i]->id == id)
            return i;
    return -1;
}

static gp_status check_tokens(const gp_sched_config *c, const int32_t *t, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= c->vocab)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s[%d] = %d, allowed [0, %d)", what, i, (int)t[i], c->vocab);
    return GP_OK;
}

gp_status gp_sched_check_request(const gp_sched_config *c, const gp_sched_request *r)
{
    if (!r->prompt || r->n_prompt < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "empty prompt (%d tokens), allowed >= 1 token", r->n_prompt);
    if (r->max_tokens < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_tokens %d, allowed >= 1", r->max_tokens);
    if ((long long)r->n_prompt + r->max_tokens > c->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "a prompt of %d tokens + max_tokens %d exceeds the context of %d tokens",
                r->n_prompt, r->max_tokens, c->max_context);
    /* The last token generated is never fed back, so the cache holds one less. */
    long long kv = (long long)r->n_prompt + r->max_tokens - 1;
    long long blocks = (kv + c->block_size - 1) / c->block_size;
    if (blocks > c->total_blocks)
        GP_FAIL(GP_ERR_INVALID_ARG, "a prompt of %d tokens + max_tokens %d needs up to %lld KV blocks of %d "
                "tokens, the backend holds %d", r->n_prompt, r->max_tokens, blocks, c->block_size,
                c->total_blocks);
    if (r->n_stop < 0 || (r->n_stop > 0 && !r->stop_ids))
        GP_FAIL(GP_ERR_INVALID_ARG, "n_stop %d with stop_ids %s; allowed n_stop >= 0 and stop_ids non-NULL "
                "when n_stop > 0", r->n_stop, r->stop_ids ? "set" : "NULL");
    GP_TRY(check_tokens(c, r->prompt, r->n_prompt, "prompt"));
    return check_tokens(c, r->stop_ids, r->n_stop, "stop_ids");
}

static gp_status check_request(const gp_sched *s, const gp_sched_request *r)
{
    unsigned long long id = (unsigned long long)r->id;
    if (gp_sched_check_request(&s->cfg, r) != GP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_submit: request %llu: %s", id, msg);
    }
    if (find(s, r->id) >= 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_submit: request id %llu is already held (release it first)", id);
    return GP_OK;
}

gp_status gp_sched_submit(gp_sched *s, const gp_sched_request *r)
{
    if (!s || !r)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_submit: scheduler and request must be non-NULL");
    GP_TRY(check_request(s, r));
    if (s->n_reqs == s->cap_reqs) {
        int cap = s->cap_reqs ? 2 * s->cap_reqs : 16;
        rq **nr = realloc(s->reqs, sizeof(*nr) * (size_t)cap);
        if (!nr)
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_submit: out of host memory for %d requests", cap);
        s->reqs = nr;
        s->cap_reqs = cap;
    }
    rq *q = calloc(1, sizeof(*q));
    if (q) {
        q->all = malloc(sizeof(int32_t) * ((size_t)r->n_prompt + (size_t)r->max_tokens));
        q->stop = malloc(sizeof(int32_t) * ((size_t)r->n_stop + 1));
        if (s->pc)
            q->ent = malloc(sizeof(int) * (size_t)((r->n_prompt + r->max_tokens) / s->cfg.block_size + 1));
    }
    if (!q || !q->all || !q->stop || (s->pc && !q->ent)) {
        rq_free(q);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_submit: out of host memory for request %llu",
                (unsigned long long)r->id);
    }
    q->id = r->id;
    memcpy(q->all, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    if (r->n_stop)
        memcpy(q->stop, r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop);
    q->n_prompt = q->n_all = q->prefill_end = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->n_stop = r->n_stop;
    q->sample_ctx = r->sample_ctx;
    q->greedy = r->greedy;
    q->state = RQ_WAITING;
    q->seq = -1;
    s->reqs[s->n_reqs++] = q;
    gp_sched_list_push_tail(&s->waiting, q);
    return GP_OK;
}

gp_status gp_sched_cancel(gp_sched *s, uint64_t id)
{
    int i = s ? find(s, id) : -1;
    if (i < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_cancel: no request with id %llu", (unsigned long long)id);
    rq *r = s->reqs[i];
    if (r->pending) { /* its prefill runs on the lane: the sequence is reset once it is done */
        gp_sched_pd_wait(s);
        gp_sched_pd_forget(s, r);
    }
    if (r->state == RQ_WAITING)
        gp_sched_list_unlink(&s->waiting, r);
    else if (r->state == RQ_RUNNING)
        gp_sched_release_slot(s, r);
    else
        return GP_OK;
    r->state = RQ_DONE;
    r->finish = GP_SCHED_CANCELLED;
    return GP_OK;
}

gp_status gp_sched_result_of(const gp_sched *s, uint64_t id, gp_sched_result *out)
{
    int i = s && out ? find(s, id) : -1;
    if (i < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_result_of: no request with id %llu", (unsigned long long)id);
    const rq *r = s->reqs[i];
    out->tokens = r->all + r->n_prompt;
    out->n_tokens = r->n_all - r->n_prompt;
    out->finish = r->finish;
    out->preemptions = r->preemptions;
    out->cached_tokens = r->cached_tokens;
    return GP_OK;
}

gp_status gp_sched_release(gp_sched *s, uint64_t id)
{
    int i = s ? find(s, id) : -1;
    if (i < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_release: no request with id %llu", (unsigned long long)id);
    if (s->reqs[i]->state != RQ_DONE)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_release: request %llu has not finished (cancel it first)",
                (unsigned long long)id);
    rq_free(s->reqs[i]);
    s->reqs[i] = s->reqs[--s->n_reqs];
    return GP_OK;
}

void gp_sched_get_stats(const gp_sched *s, gp_sched_stats *out)
{
    *out = s->stats;
    out->waiting = s->waiting.n;
    out->running = s->running.n;
    out->free_blocks = s->free_blocks;
    out->total_blocks = s->cfg.total_blocks;
    out->cached_blocks = s->pc ? s->pc->n_lru : 0;
}
