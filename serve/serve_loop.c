/* The serving core's engine thread: each turn it hands new requests and
 * cancellations to the scheduler, runs one scheduler step on the executor,
 * and turns the step's tokens into text deltas for the requests' callbacks. */
#include <stdlib.h>
#include <string.h>

#include "serve_impl.h"

static gp_status op_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_serve *s = ctx;
    uint64_t t0 = gp_now_ns();
    gp_status st = s->env.exec.session->run_batch(s->env.exec.ctx, b, next, logits, NULL);
    double dt = (gp_now_ns() - t0) / 1e9;
    s->run_seconds += dt;
    if (st != GP_OK)
        return st;
    bool decode_only = true;
    long long context = 0;
    for (int i = 0; i < b->n_parts; i++) {
        s->seq_len[b->parts[i].seq] += b->parts[i].n;
        decode_only &= b->parts[i].kind == GP_BATCH_DECODE;
        context += s->seq_len[b->parts[i].seq];
    }
    if (decode_only) { /* under no lock: the engine thread's own until update_stats */
        s->decode_steps++;
        s->decode_rows += b->n_parts;
        s->decode_context += context;
        s->decode_seconds += dt;
    }
    return GP_OK;
}

static void op_reset_seq(void *ctx, int seq)
{
    gp_serve *s = ctx;
    s->env.exec.session->reset_seq(s->env.exec.ctx, seq);
    s->seq_len[seq] = 0;
}

static int32_t op_sample(void *ctx, const float *logits, int vocab, void *sample_ctx)
{
    gp_serve *s = ctx;
    sreq *r = sample_ctx;
    (void)vocab;
    return gp_sample(&s->sampler, &r->sample, logits, &r->rng);
}

static gp_status op_retain(void *ctx, int seq, int index, int *handle)
{
    gp_serve *s = ctx;
    return s->env.exec.session->retain_block(s->env.exec.ctx, seq, index, handle);
}

static void op_drop(void *ctx, int handle)
{
    gp_serve *s = ctx;
    s->env.exec.session->drop_block(s->env.exec.ctx, handle);
}

static gp_status op_attach(void *ctx, int seq, const int *handles, int n)
{
    gp_serve *s = ctx;
    GP_TRY(s->env.exec.session->attach_blocks(s->env.exec.ctx, seq, handles, n));
    s->seq_len[seq] = n * s->env.block_size;
    return GP_OK;
}

static gp_status op_host_offload(void *ctx, int handle, uint64_t key, const int32_t *tokens)
{
    gp_serve *s = ctx;
    return s->env.exec.session->host_offload(s->env.exec.ctx, handle, key, tokens);
}

static gp_status op_host_lookup(void *ctx, const uint64_t *keys, const int32_t *tokens, int n, int *held)
{
    gp_serve *s = ctx;
    return s->env.exec.session->host_lookup(s->env.exec.ctx, keys, tokens, n, held);
}

static gp_status op_host_load(void *ctx, int seq, int n)
{
    gp_serve *s = ctx;
    GP_TRY(s->env.exec.session->host_load(s->env.exec.ctx, seq, n));
    s->seq_len[seq] += n * s->env.block_size;
    return GP_OK;
}

static gp_status op_prefill_launch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_serve *s = ctx;
    GP_TRY(s->env.exec.session->prefill_launch(s->env.exec.ctx, b, next, logits));
    s->pf_batch = b; /* the scheduler's until it is done */
    return GP_OK;
}

static gp_status op_prefill_poll(void *ctx, bool wait, bool *done)
{
    gp_serve *s = ctx;
    gp_status st = s->env.exec.session->prefill_poll(s->env.exec.ctx, wait, done);
    if (*done && st == GP_OK)
        for (int i = 0; i < s->pf_batch->n_parts; i++)
            s->seq_len[s->pf_batch->parts[i].seq] += s->pf_batch->parts[i].n;
    return st;
}

static gp_status op_pd_plan(void *ctx, const gp_pd_plan_in *in, gp_pd_plan *out)
{
    gp_serve *s = ctx;
    return s->env.exec.session->pd_plan(s->env.exec.ctx, in, out);
}

gp_sched_ops gp_serve_sched_ops(gp_serve *s)
{
    gp_sched_ops o = {.run_batch = op_run_batch, .reset_seq = op_reset_seq, .sample = op_sample, .ctx = s};
    if (s->p.prefix_cache) {
        o.retain_block = op_retain;
        o.drop_block = op_drop;
        o.attach_blocks = op_attach;
    }
    if (s->p.policy == GP_SCHED_PD_MUX) {
        o.prefill_launch = op_prefill_launch;
        o.prefill_poll = op_prefill_poll;
        if (s->env.exec.session->pd_plan)
            o.pd_plan = op_pd_plan;
    }
    if (s->p.host_tier) {
        o.host_offload = op_host_offload;
        o.host_lookup = op_host_lookup;
        o.host_load = op_host_load;
    }
    return o;
}

/* Out of the scheduler (a finished or cancelled request) and freed; under mu. */
static void finish_req(gp_serve *s, sreq *r)
{
    if (r->in_sched) {
        (void)gp_sched_cancel(s->sched, r->id); /* a finished request is left as it is */
        (void)gp_sched_release(s->sched, r->id);
    }
    s->st.prompt_tokens += r->n_prompt;
    gp_serve_unlink(s, r);
    gp_serve_req_free(r);
}

/* Text of token id through the request's detokenizer and stop strings;
 * final flushes both. Ids beyond the tokenizer's (a padded vocabulary) print
 * nothing. */
static gp_status text_of(gp_serve *s, sreq *r, int32_t id, bool final, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (!r->detok)
        return GP_OK;
    char *piece = NULL, *tail = NULL;
    size_t n = 0, nt = 0;
    gp_status st = GP_OK;
    if (id >= 0 && id < gp_tokenizer_vocab_size(s->env.tok))
        st = gp_detok_push(r->detok, id, &piece, &n);
    if (st == GP_OK && final && (st = gp_detok_flush(r->detok, &tail, &nt)) == GP_OK && nt) {
        char *both = realloc(piece, n + nt);
        if (!both) {
            gp_set_error("out of memory for %zu bytes of request %llu's text", n + nt, (unsigned long long)r->id);
            st = GP_ERR_NO_MEMORY;
        } else {
            memcpy(both + n, tail, nt);
            piece = both;
            n += nt;
        }
    }
    if (st == GP_OK)
        st = gp_stop_text_feed(r->stop, piece ? piece : "", n, final, text, len);
    free(piece);
    free(tail);
    return st;
}

/* One token of the last step for its request; under mu. */
static void on_event(gp_serve *s, const gp_sched_event *ev, uint64_t now)
{
    sreq *r = gp_serve_find(s, ev->id);
    if (!r || r->cancel) /* cancelled meanwhile: the cancellation list frees it */
        return;
    if (!r->t_first) {
        gp_sched_result res;
        if (gp_sched_result_of(s->sched, r->id, &res) == GP_OK)
            r->cached_tokens = res.cached_tokens;
        r->t_first = now;
        gp_serve_hist_add(&s->st.ttft, (now - r->t_submit) / 1e9);
    }
    r->t_last = now;
    r->generated++;
    gp_serve_finish f = ev->finish == GP_SCHED_LENGTH ? GP_SERVE_LENGTH
                        : ev->finish == GP_SCHED_STOP ? GP_SERVE_STOP
                                                      : GP_SERVE_RUNNING;
    const char *text;
    size_t len;
    gp_status st = text_of(s, r, ev->token, f != GP_SERVE_RUNNING, &text, &len);
    if (st != GP_OK) {
        gp_serve_deliver(s, r, "", 0, NULL, 0, GP_SERVE_ERROR, gp_last_error());
        finish_req(s, r);
        return;
    }
    if (f == GP_SERVE_RUNNING && gp_stop_text_stopped(r->stop))
        f = GP_SERVE_STOP; /* a stop string: the scheduler is told by finish_req */
    gp_serve_deliver(s, r, text, len, &ev->token, 1, f, NULL);
    if (f != GP_SERVE_RUNNING)
        finish_req(s, r);
}

/* Every request ends with the backend's failure; under mu. */
static void fail_all(gp_serve *s, gp_status st, const char *msg)
{
    for (unsigned k = 0; k < (1u << SERVE_TABLE_BITS); k++)
        for (sreq *r = s->table[k], *nx; r; r = nx) {
            nx = r->next;
            if (!r->in_sched || r->cancel)
                continue;
            gp_serve_deliver(s, r, "", 0, NULL, 0, GP_SERVE_ERROR, msg);
            finish_req(s, r);
        }
    if (st == GP_ERR_DEVICE_FAULT) {
        s->fatal = true;
        snprintf(s->fatal_msg, sizeof s->fatal_msg, "%s", msg);
    }
}

static void update_stats(gp_serve *s, double turn_s)
{
    gp_sched_stats ss;
    gp_sched_get_stats(s->sched, &ss);
    s->sched_waiting = ss.waiting;
    s->sched_running = ss.running;
    s->st.kv_blocks_used = ss.total_blocks - ss.free_blocks;
    s->st.kv_blocks_cached = ss.cached_blocks;
    s->st.preemptions = ss.preemptions;
    s->st.steps = ss.steps;
    s->st.prefix_query_tokens = ss.prefix_query_tokens;
    s->st.prefix_hit_tokens = ss.prefix_hit_tokens;
    s->st.prefix_host_hit_tokens = ss.prefix_host_hit_tokens;
    s->st.host_offloaded_blocks = ss.host_offloaded_blocks;
    s->st.host_offload_failures = ss.host_offload_failures;
    s->st.prefill_batches = ss.prefill_batches;
    s->st.overlapped_steps = ss.overlapped_steps;
    s->st.mixed_steps = ss.mixed_steps;
    s->st.step_seconds += s->run_seconds;
    s->st.decode_steps = s->decode_steps;
    s->st.decode_rows = s->decode_rows;
    s->st.decode_context = s->decode_context;
    s->st.decode_seconds = s->decode_seconds;
    s->st.host_seconds += turn_s - s->run_seconds;
}

void *gp_serve_loop(void *arg)
{
    gp_serve *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->inbox_head && !s->cancels && s->sched_running + s->sched_waiting == 0)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop)
            break;
        uint64_t t0 = gp_now_ns();
        sreq *in = s->inbox_head, *cancels = s->cancels;
        s->inbox_head = s->inbox_tail = NULL;
        s->n_inbox = 0;
        s->cancels = NULL;
        /* submissions: the scheduler is the engine thread's alone */
        for (sreq *r = in, *nx; r; r = nx) {
            nx = r->inbox_next;
            if (r->cancel)
                continue;
            gp_sched_request q = {.id = r->id, .prompt = r->prompt, .n_prompt = r->n_prompt,
                                  .max_tokens = r->max_tokens, .stop_ids = r->stop_ids,
                                  .n_stop = r->n_stop_ids, .sample_ctx = r,
                                  .greedy = r->sample.temperature == 0.0};
            if (gp_sched_submit(s->sched, &q) != GP_OK) { /* checked at submit: only memory fails here */
                gp_serve_deliver(s, r, "", 0, NULL, 0, GP_SERVE_ERROR, gp_last_error());
                finish_req(s, r);
                continue;
            }
            r->in_sched = true;
        }
        for (sreq *r = cancels, *nx; r; r = nx) {
            nx = r->cancel_next;
            finish_req(s, r);
        }
        gp_sched_stats ss;
        gp_sched_get_stats(s->sched, &ss);
        s->sched_waiting = ss.waiting;
        s->sched_running = ss.running;
        if (ss.waiting + ss.running == 0) {
            s->run_seconds = 0;
            update_stats(s, (gp_now_ns() - t0) / 1e9); /* cancellations gave blocks back */
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        s->run_seconds = 0;
        int n_ev = 0;
        gp_status st = gp_sched_step(s->sched, &n_ev);
        char msg[512] = "";
        if (st != GP_OK)
            snprintf(msg, sizeof msg, "%s", gp_last_error());
        uint64_t now = gp_now_ns();
        pthread_mutex_lock(&s->mu);
        if (st != GP_OK) {
            fail_all(s, st, msg);
        } else {
            const gp_sched_event *ev = gp_sched_events(s->sched, &n_ev);
            for (int i = 0; i < n_ev; i++)
                on_event(s, &ev[i], now);
        }
        update_stats(s, (gp_now_ns() - t0) / 1e9);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
