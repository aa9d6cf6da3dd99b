/* The serving core's public side: creation and shutdown, submissions and
 * cancellations from any thread, prompts from text or chat messages, and
 * the statistics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_chat.h"
#include "serve_impl.h"

gp_serve_params gp_serve_default_params(void)
{
    return (gp_serve_params){.policy = GP_SCHED_CHUNKED, .token_budget = 2048, .max_waiting = 1024,
                             .kv_blocks = 0, .prefix_cache = true, .model_name = "greenpipe"};
}

long long gp_serve_kv_blocks(int max_seqs, int max_context, int block_size)
{
    return (long long)max_seqs * ((max_context + block_size - 1) / block_size);
}

const char *gp_serve_finish_name(gp_serve_finish f)
{
    switch (f) {
    case GP_SERVE_STOP: return "stop";
    case GP_SERVE_LENGTH: return "length";
    case GP_SERVE_CANCELLED: return "cancelled";
    case GP_SERVE_ERROR: return "error";
    default: return NULL;
    }
}

/* vLLM's bucket bounds for the three latency histograms (seconds). */
static const double TTFT_LE[GP_SERVE_HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                      0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};
static const double TPOT_LE[GP_SERVE_HIST_BUCKETS] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                                      0.4,  0.5,   0.75, 1.0,   2.5, 5.0,  7.5, 10.0};
static const double E2E_LE[GP_SERVE_HIST_BUCKETS] = {0.3, 0.5, 0.8, 1.0,  1.5,  2.0,  2.5,  5.0,
                                                     10,  15,  20,  30,   40,   50,   60,   120};

static unsigned slot_of(uint64_t id)
{
    return (unsigned)((id * 0x9E3779B97F4A7C15ull) >> (64 - SERVE_TABLE_BITS));
}

sreq *gp_serve_find(gp_serve *s, uint64_t id)
{
    for (sreq *r = s->table[slot_of(id)]; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static void table_add(gp_serve *s, sreq *r)
{
    unsigned k = slot_of(r->id);
    r->next = s->table[k];
    s->table[k] = r;
}

void gp_serve_unlink(gp_serve *s, sreq *r)
{
    for (sreq **p = &s->table[slot_of(r->id)]; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

void gp_serve_req_free(sreq *r)
{
    if (!r)
        return;
    free(r->prompt);
    free(r->stop_ids);
    gp_detok_free(r->detok);
    gp_stop_text_free(r->stop);
    free(r);
}

void gp_serve_hist_add(gp_serve_hist *h, double v)
{
    for (int i = 0; i < GP_SERVE_HIST_BUCKETS; i++)
        if (v <= h->le[i])
            h->bucket[i]++;
    h->count++;
    h->sum += v;
}

void gp_serve_deliver(gp_serve *s, sreq *r, const char *text, size_t len, const int32_t *tokens, int n,
                      gp_serve_finish f, const char *error)
{
    if (f != GP_SERVE_RUNNING) {
        double now = gp_now_ns() / 1e9, sub = r->t_submit / 1e9;
        s->st.requests_finished[f]++;
        s->st.generation_tokens += r->generated;
        if (r->generated > 0) {
            gp_serve_hist_add(&s->st.e2e, now - sub);
            if (r->generated > 1)
                gp_serve_hist_add(&s->st.tpot, (r->t_last - r->t_first) / 1e9 / (r->generated - 1));
        }
    }
    if (!r->cb)
        return;
    gp_serve_event ev = {.id = r->id, .text = text ? text : "", .len = len, .tokens = tokens, .n_tokens = n,
                         .finish = f, .error = error,
                         .usage = {.prompt_tokens = r->n_prompt, .completion_tokens = r->generated,
                                   .cached_tokens = r->cached_tokens}};
    r->cb(r->user, &ev);
    if (f != GP_SERVE_RUNNING)
        r->cb = NULL;
}

gp_status gp_serve_create(const gp_serve_env *env, const gp_serve_params *p, gp_serve **out)
{
    *out = NULL;
    if (!env || !p || !env->cfg || !env->exec.session || !env->exec.session->run_batch ||
        !env->exec.session->reset_seq)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_serve_create: the executor must run mixed batches (run_batch, reset_seq)");
    if (p->token_budget < 1 || (env->max_rows > 0 && p->token_budget > env->max_rows))
        GP_FAIL(GP_ERR_INVALID_ARG, "token budget %d: allowed 1..%d (the tokens one batch of the backend holds)",
                p->token_budget, env->max_rows > 0 ? env->max_rows : 1 << 30);
    if (p->max_waiting < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "max waiting requests %d: allowed >= 1", p->max_waiting);
    if (p->policy != GP_SCHED_CHUNKED && p->policy != GP_SCHED_PREFILL_FIRST && p->policy != GP_SCHED_PD_MUX)
        GP_FAIL(GP_ERR_INVALID_ARG, "schedule policy %d: allowed chunked, prefill-first or pd-mux", (int)p->policy);
    if (p->policy == GP_SCHED_PD_MUX && (!env->exec.session->prefill_launch || !env->exec.session->prefill_poll))
        GP_FAIL(GP_ERR_UNSUPPORTED, "schedule pd-mux: the executor (%s) has no prefill lane beside its decode lane",
                env->exec.session->name ? env->exec.session->name : "?");
    long long all = gp_serve_kv_blocks(env->max_seqs, env->max_context, env->block_size);
    if (p->kv_blocks < 0 || p->kv_blocks > all)
        GP_FAIL(GP_ERR_INVALID_ARG, "KV blocks %d: allowed 0 (all: %lld) up to %lld, what %d sequences of %d "
                "tokens in blocks of %d hold", p->kv_blocks, all, all, env->max_seqs, env->max_context,
                env->block_size);
    const gp_session_ops *so = env->exec.session;
    bool share = so->retain_block && so->drop_block && so->attach_blocks;
    if (p->host_tier && (!p->prefix_cache || !share || !so->host_seed || !so->host_offload || !so->host_lookup ||
                         !so->host_load))
        GP_FAIL(GP_ERR_UNSUPPORTED, "a host store behind the prefix cache: %s", !p->prefix_cache
                ? "the prefix cache is off, and the store keeps only the blocks it evicts"
                : "the executor has no shared KV blocks or no host store ops");
    gp_serve *s = calloc(1, sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for the serving core");
    s->env = *env;
    s->p = *p;
    s->model_name = strdup(p->model_name ? p->model_name : "greenpipe");
    s->p.model_name = s->model_name;
    s->p.prefix_cache = p->prefix_cache && share;
    s->scfg = (gp_sched_config){.policy = p->policy, .token_budget = p->token_budget, .max_seqs = env->max_seqs,
                                .vocab = env->cfg->vocab, .max_context = env->max_context,
                                .block_size = env->block_size,
                                .total_blocks = p->kv_blocks ? p->kv_blocks : (int)all,
                                .prefix_cache = s->p.prefix_cache,
                                .chain_seed = p->host_tier ? so->host_seed(env->exec.ctx) : 0};
    memcpy(s->st.ttft.le, TTFT_LE, sizeof TTFT_LE);
    memcpy(s->st.tpot.le, TPOT_LE, sizeof TPOT_LE);
    memcpy(s->st.e2e.le, E2E_LE, sizeof E2E_LE);
    s->st.kv_blocks_total = s->scfg.total_blocks;
    s->t_start = gp_now_ns();
    s->next_id = 1;
    gp_sched_ops ops = gp_serve_sched_ops(s);
    gp_status st = GP_OK;
    if (!s->model_name || !(s->seq_len = calloc((size_t)env->max_seqs, sizeof *s->seq_len))) {
        gp_set_error("out of memory for the serving core of %d sequences", env->max_seqs);
        st = GP_ERR_NO_MEMORY;
    }
    if (st == GP_OK)
        st = gp_sampler_init(&s->sampler, env->cfg->vocab);
    if (st == GP_OK)
        st = gp_sched_create(&s->scfg, &ops, &s->sched);
    if (st != GP_OK) {
        gp_serve_destroy(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, gp_serve_loop, s) != 0) {
        gp_serve_destroy(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "could not start the serving core's engine thread");
    }
    s->started = true;
    *out = s;
    return GP_OK;
}

void gp_serve_destroy(gp_serve *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        /* what the engine thread left: cancelled, then freed */
        pthread_mutex_lock(&s->mu);
        for (unsigned k = 0; k < (1u << SERVE_TABLE_BITS); k++)
            while (s->table[k]) {
                sreq *r = s->table[k];
                gp_serve_deliver(s, r, "", 0, NULL, 0, GP_SERVE_CANCELLED, NULL);
                gp_serve_unlink(s, r);
                gp_serve_req_free(r);
            }
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    gp_sched_destroy(s->sched);
    gp_sampler_free(&s->sampler);
    free(s->seq_len);
    free(s->model_name);
    free(s);
}

/* The request's own copies and its text state. */
static gp_status make_req(gp_serve *s, const gp_serve_request *in, int max_tokens, sreq **out)
{
    sreq *r = calloc(1, sizeof *r);
    int n_stop = 0;
    const gp_eos_ids *eos = s->env.eos;
    int n_eos = in->ignore_eos || !eos ? 0 : eos->n;
    int n_chat = in->chat ? s->env.n_chat_stop_ids : 0;
    if (r) {
        r->prompt = malloc(sizeof(int32_t) * (size_t)in->n_prompt);
        r->stop_ids = malloc(sizeof(int32_t) * (size_t)(n_eos + n_chat + 1));
    }
    if (!r || !r->prompt || !r->stop_ids) {
        gp_serve_req_free(r);
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for a request of %d prompt tokens", in->n_prompt);
    }
    memcpy(r->prompt, in->prompt, sizeof(int32_t) * (size_t)in->n_prompt);
    for (int i = 0; i < n_eos; i++)
        r->stop_ids[n_stop++] = eos->ids[i];
    for (int i = 0; i < n_chat; i++)
        r->stop_ids[n_stop++] = s->env.chat_stop_ids[i];
    r->n_stop_ids = n_stop;
    r->n_prompt = in->n_prompt;
    r->max_tokens = max_tokens;
    r->sample = in->sample;
    gp_rng_seed(&r->rng, in->seed, 0);
    r->cb = in->cb;
    r->user = in->user;
    gp_status st = gp_stop_text_create(in->stops, in->n_stops, &r->stop);
    if (st == GP_OK && s->env.tok)
        st = gp_detok_create(s->env.tok, in->skip_special, &r->detok);
    if (st != GP_OK) {
        gp_serve_req_free(r);
        return st;
    }
    *out = r;
    return GP_OK;
}

gp_status gp_serve_submit(gp_serve *s, const gp_serve_request *in, uint64_t *id)
{
    if (!s || !in || !in->cb)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_serve_submit: core, request and callback must be non-NULL");
    if (in->n_stops > 0 && !s->env.tok)
        GP_FAIL(GP_ERR_INVALID_ARG, "stop strings need the model's tokenizer, and this model has none");
    if (in->chat && !s->env.chat)
        GP_FAIL(GP_ERR_INVALID_ARG, "chat needs a chat template, and this model has none");
    if (in->max_tokens < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_tokens %d: allowed >= 1 (or absent: up to the context's end)",
                in->max_tokens);
    GP_TRY(gp_sample_params_check(&in->sample, s->env.cfg->vocab));
    int max_tokens = in->max_tokens ? in->max_tokens : s->env.max_context - in->n_prompt;
    gp_sched_request probe = {.prompt = in->prompt, .n_prompt = in->n_prompt, .max_tokens = max_tokens};
    if (in->max_tokens == 0 && in->n_prompt >= s->env.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "a prompt of %d tokens leaves no room in the context of %d tokens",
                in->n_prompt, s->env.max_context);
    GP_TRY(gp_sched_check_request(&s->scfg, &probe));
    sreq *r;
    GP_TRY(make_req(s, in, max_tokens, &r));
    pthread_mutex_lock(&s->mu);
    gp_status st = GP_OK;
    if (s->fatal) {
        gp_set_error("the engine failed and serves no more requests: %s", s->fatal_msg);
        st = GP_ERR_STATE;
    } else if (s->n_inbox + s->sched_waiting >= s->p.max_waiting) {
        gp_set_error("%d requests are waiting, the most allowed (--max-waiting %d); try again later",
                     s->n_inbox + s->sched_waiting, s->p.max_waiting);
        st = GP_SOFT_FULL;
    }
    if (st != GP_OK) {
        pthread_mutex_unlock(&s->mu);
        gp_serve_req_free(r);
        return st;
    }
    r->id = s->next_id++;
    r->t_submit = gp_now_ns();
    table_add(s, r);
    if (s->inbox_tail)
        s->inbox_tail->inbox_next = r;
    else
        s->inbox_head = r;
    s->inbox_tail = r;
    s->n_inbox++;
    *id = r->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return GP_OK;
}

void gp_serve_cancel(gp_serve *s, uint64_t id)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    sreq *r = gp_serve_find(s, id);
    if (r && r->cb && !r->cancel) {
        gp_serve_deliver(s, r, "", 0, NULL, 0, GP_SERVE_CANCELLED, NULL);
        r->cancel = true;
        r->cancel_next = s->cancels;
        s->cancels = r;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

gp_status gp_serve_tokenize(const gp_serve *s, const char *text, size_t len, bool add_special, int32_t **ids,
                            int *n)
{
    if (!s->env.tok)
        GP_FAIL(GP_ERR_STATE, "a text prompt needs the model's tokenizer, and this model has none: send token ids");
    size_t count = 0;
    GP_TRY(gp_tokenizer_encode(s->env.tok, text, len, add_special, ids, &count));
    if (count > (size_t)INT32_MAX) {
        free(*ids);
        *ids = NULL;
        GP_FAIL(GP_ERR_INVALID_ARG, "the prompt encodes to %zu tokens, more than %d", count, INT32_MAX);
    }
    *n = (int)count;
    return GP_OK;
}

gp_status gp_serve_chat_prompt(const gp_serve *s, const gp_chat_msg *msgs, size_t n, int32_t **ids, int *n_ids)
{
    if (!s->env.chat || !s->env.tok)
        GP_FAIL(GP_ERR_STATE, "chat needs the model's tokenizer and chat template, and this model lacks %s",
                !s->env.tok ? "a tokenizer" : "a chat template");
    char *text = NULL;
    size_t len = 0;
    GP_TRY(gp_chat_render(s->env.chat, msgs, n, true, &text, &len));
    /* the template writes its own BOS text: no second one from the tokenizer */
    gp_status st = gp_serve_tokenize(s, text, len, false, ids, n_ids);
    free(text);
    return st;
}

const char *gp_serve_model_name(const gp_serve *s)
{
    return s->model_name;
}

bool gp_serve_has_tokenizer(const gp_serve *s)
{
    return s->env.tok != NULL;
}

bool gp_serve_prefix_cache_on(const gp_serve *s)
{
    return s->p.prefix_cache;
}

int gp_serve_max_context(const gp_serve *s)
{
    return s->env.max_context;
}

int gp_serve_vocab(const gp_serve *s)
{
    return s->env.cfg->vocab;
}

void gp_serve_get_stats(gp_serve *s, gp_serve_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->waiting = s->n_inbox + s->sched_waiting;
    out->running = s->sched_running;
    out->uptime_seconds = (gp_now_ns() - s->t_start) / 1e9;
    pthread_mutex_unlock(&s->mu);
    const gp_session_ops *so = s->env.exec.session;
    out->n_lanes = so->lane_times ? so->lane_times(s->env.exec.ctx, out->lanes, GP_MAX_LANE_TIMES) : 0;
    if (out->n_lanes > GP_MAX_LANE_TIMES)
        out->n_lanes = GP_MAX_LANE_TIMES;
}
