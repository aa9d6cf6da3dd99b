/* The server's generation requests: a parsed body submitted to the core,
 * its events copied on the engine thread, and its answer (one JSON body, or
 * server-sent events) formatted on the connection's own thread. */
#define _GNU_SOURCE /* POLLRDHUP: the peer's half-close */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server_impl.h"

/* How often a waiting connection looks whether its client hung up: a
 * disconnect is seen at once when a write fails, and within this while the
 * request waits for tokens. */
#define GP_HTTP_POLL_NS 100000000L

gp_http_conn *gp_http_conn_new(gp_http *h, struct MHD_Connection *mc, gp_api_kind kind)
{
    gp_http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->h = h, c->mc = mc, c->kind = kind;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&h->lock);
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    pthread_mutex_unlock(&h->lock);
    return c;
}

void gp_http_conn_end(gp_http_conn *c)
{
    /* The core ignores finished ids; after cancel returns no event of this
     * request runs, so c can go. */
    if (c->submitted)
        gp_serve_cancel(c->core, c->req_id);
    gp_http *h = c->h;
    pthread_mutex_lock(&h->wake_mu);
    if (c->wake_queued)
        for (gp_http_conn **p = &h->wake_head; *p; p = &(*p)->wake_next)
            if (*p == c) {
                *p = c->wake_next;
                break;
            }
    while (h->waking) /* c may be in the batch being signalled */
        pthread_cond_wait(&h->wake_done_cv, &h->wake_mu);
    pthread_mutex_unlock(&h->wake_mu);
    pthread_mutex_lock(&h->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&h->lock);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->body), free(c->text), free(c->error), free(c->take), free(c->out), free(c->ids), free(c->take_ids);
    free(c);
}


/* Batches of at most this many are signalled without wake_mu, so the
 * engine thread queueing the next step's news never waits for them. */
#define GP_HTTP_WAKE_BATCH 256

void *gp_http_waker(void *arg)
{
    gp_http *h = arg;
    gp_http_conn *batch[GP_HTTP_WAKE_BATCH];
    pthread_mutex_lock(&h->wake_mu);
    while (!h->wake_stop) {
        if (!h->wake_head) {
            pthread_cond_wait(&h->wake_cv, &h->wake_mu);
            continue;
        }
        /* Unqueued before the signal: news arriving after it queues the
         * connection again instead of being missed. */
        int n = 0;
        while (h->wake_head && n < GP_HTTP_WAKE_BATCH) {
            gp_http_conn *c = h->wake_head;
            h->wake_head = c->wake_next;
            c->wake_queued = false;
            batch[n++] = c;
        }
        h->waking = true;
        pthread_mutex_unlock(&h->wake_mu);
        /* The news was written under c->mu before c was queued, and a waiter
         * checks it under c->mu before it sleeps: no signal is lost. */
        for (int i = 0; i < n; i++)
            pthread_cond_signal(&batch[i]->cv);
        pthread_mutex_lock(&h->wake_mu);
        h->waking = false;
        pthread_cond_broadcast(&h->wake_done_cv);
    }
    pthread_mutex_unlock(&h->wake_mu);
    return NULL;
}

/* The engine thread, core lock held: copy and queue for the waker, nothing more. */
static void on_event(void *user, const gp_serve_event *ev)
{
    gp_http_conn *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->len) {
        char *text = gp_grow(c->text, &c->text_cap, c->text_len + ev->len);
        if (text) {
            c->text = text;
            memcpy(c->text + c->text_len, ev->text, ev->len);
            c->text_len += ev->len;
        } else {
            c->text_lost = true;
        }
    }
    if (ev->n_tokens) {
        int32_t *ids = gp_grow(c->ids, &c->ids_cap, (size_t)(c->n_ids + ev->n_tokens) * sizeof *ids);
        if (ids) {
            c->ids = ids;
            memcpy(c->ids + c->n_ids, ev->tokens, (size_t)ev->n_tokens * sizeof *ids);
            c->n_ids += ev->n_tokens;
        } else {
            c->text_lost = true;
        }
    }
    c->usage = ev->usage;
    if (ev->finish != GP_SERVE_RUNNING) {
        c->finish = ev->finish;
        if (ev->error)
            c->error = strdup(ev->error);
    }
    pthread_mutex_unlock(&c->mu);
    gp_http *h = c->h;
    pthread_mutex_lock(&h->wake_mu);
    if (!c->wake_queued) {
        c->wake_queued = true;
        c->wake_next = h->wake_head;
        if (!h->wake_head)
            pthread_cond_signal(&h->wake_cv);
        h->wake_head = c;
    }
    pthread_mutex_unlock(&h->wake_mu);
}

/* The client closed its side (or the socket failed). */
static bool peer_gone(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Wait until c has text (any text unless whole) or has finished. False
 * when its client went away or the server stops: the request is cancelled. */
static bool wait_events(gp_http_conn *c, bool whole)
{
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->finish != GP_SERVE_RUNNING || (!whole && (c->text_len || c->n_ids)))
            break;
        if (atomic_load(&c->h->stopping) || peer_gone(c->mc)) {
            pthread_mutex_unlock(&c->mu);
            gp_serve_cancel(c->core, c->req_id);
            return false;
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += GP_HTTP_POLL_NS;
        if (t.tv_nsec >= 1000000000L)
            t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &t);
    }
    pthread_mutex_unlock(&c->mu);
    return true;
}

/* An idle connection is closed after timeout_s; a generation may take
 * longer, so the limit is lifted while the core has the request. */
static void set_timeout(gp_http_conn *c, unsigned s)
{
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, s);
}

static bool out_append(gp_http_conn *c, const char *a, size_t n)
{
    char *out = gp_grow(c->out, &c->out_cap, c->out_len + n);
    if (!out)
        return false;
    c->out = out;
    memcpy(c->out + c->out_len, a, n);
    c->out_len += n;
    return true;
}

/* One SSE event of json j (taken; NULL: out of memory). */
static bool out_event(gp_http_conn *c, char *j)
{
    bool ok = j && out_append(c, "data: ", 6) && out_append(c, j, strlen(j)) && out_append(c, "\n\n", 2);
    free(j);
    return ok;
}

/* Take what arrived since the last call and format it as SSE events. */
static bool stream_fill(gp_http_conn *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->text_len;
    int n_ids = c->n_ids;
    char *take = c->text_lost ? NULL : gp_grow(c->take, &c->take_cap, n + 1);
    if (take)
        c->take = take;
    int32_t *take_ids = take ? gp_grow(c->take_ids, &c->take_ids_cap, (size_t)n_ids * sizeof *take_ids + 1) : NULL;
    if (take_ids)
        c->take_ids = take_ids;
    bool ok = take_ids != NULL;
    if (ok && n)
        memcpy(c->take, c->text, n);
    if (ok && n_ids)
        memcpy(c->take_ids, c->ids, (size_t)n_ids * sizeof *c->ids);
    c->text_len = 0;
    c->n_ids = 0;
    gp_serve_finish fin = c->finish;
    gp_serve_usage u = c->usage;
    pthread_mutex_unlock(&c->mu);
    if (!ok)
        return false;
    const char *model = gp_serve_model_name(c->core);
    bool end = fin != GP_SERVE_RUNNING;
    /* the last chunk carries the usage: the finish chunk, or the usage
     * chunk after it when the client asked for one. A step's token is a
     * chunk even when its text is not settled yet (empty), so a client
     * counts and times tokens as they come. */
    if (n || n_ids || end) {
        gp_api_ids ids = {.ids = c->take_ids, .n = n_ids};
        char *j = gp_api_chunk_json(c->kind, c->id, model, c->created, !c->first_sent, c->take, n,
                                    gp_serve_finish_name(fin), end && !c->include_usage ? &u : NULL,
                                    c->want_ids ? &ids : NULL);
        ok = out_event(c, j);
        c->first_sent = true;
    }
    if (ok && end && c->include_usage)
        ok = out_event(c, gp_api_chunk_json(c->kind, c->id, model, c->created, false, NULL, 0, NULL, &u, NULL));
    if (ok && end) {
        ok = out_append(c, "data: [DONE]\n\n", 14);
        c->done_sent = true;
        set_timeout(c, (unsigned)c->h->p.timeout_s);
    }
    return ok;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    gp_http_conn *c = cls;
    while (c->out_pos == c->out_len) {
        c->out_pos = c->out_len = 0;
        if (c->done_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!wait_events(c, false))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!stream_fill(c)) {
            gp_serve_cancel(c->core, c->req_id);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = c->out_len - c->out_pos < max ? c->out_len - c->out_pos : max;
    memcpy(buf, c->out + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result answer_stream(gp_http_conn *c)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result q = MHD_queue_response(c->mc, 200, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result answer_whole(gp_http_conn *c)
{
    if (!wait_events(c, true))
        return MHD_NO;
    set_timeout(c, (unsigned)c->h->p.timeout_s);
    /* The events have all arrived: the engine no longer touches c. */
    if (c->text_lost)
        return gp_http_respond_error(c->mc, 500, NULL, "out of host memory for the answer's text");
    if (c->finish == GP_SERVE_ERROR)
        return gp_http_respond_error(c->mc, 500, NULL, c->error ? c->error : "the backend failed");
    if (c->finish == GP_SERVE_CANCELLED)
        return gp_http_respond_error(c->mc, 503, NULL, "the request was cancelled: the server is shutting down");
    return gp_http_respond(c->mc, 200, "application/json",
                           gp_api_response_json(c->kind, c->id, gp_serve_model_name(c->core), c->created,
                                                c->text ? c->text : "", c->text_len,
                                                gp_serve_finish_name(c->finish), &c->usage,
                                                c->want_ids ? &(gp_api_ids){.ids = c->ids, .n = c->n_ids} : NULL),
                           NULL, NULL);
}

/* The prompt's ids: text tokenized with the special tokens, ids as given,
 * a chat rendered by the template. */
static gp_status prompt_ids(gp_serve *core, const gp_api_request *r, int32_t **ids, int *n)
{
    if (r->kind == GP_API_CHAT)
        return gp_serve_chat_prompt(core, r->messages, r->n_messages, ids, n);
    if (r->prompt_ids) {
        *ids = malloc(sizeof **ids * (size_t)r->n_prompt_ids);
        if (!*ids)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %d prompt ids", r->n_prompt_ids);
        memcpy(*ids, r->prompt_ids, sizeof **ids * (size_t)r->n_prompt_ids);
        *n = r->n_prompt_ids;
        return GP_OK;
    }
    return gp_serve_tokenize(core, r->prompt_text, r->prompt_len, true, ids, n);
}

/* A request without a seed gets one of its own: the first draw of stream n
 * of the server's seed. */
static uint64_t request_seed(const gp_http *h, uint64_t n)
{
    gp_rng r;
    gp_rng_seed(&r, h->seed_base, n);
    return gp_rng_next(&r);
}

/* The status a refusal of the core maps to. */
static unsigned refusal_status(gp_status st)
{
    switch (st) {
    case GP_ERR_INVALID_ARG: return 400;
    case GP_SOFT_FULL: return 429;
    case GP_ERR_STATE: return 503;
    default: return 500;
    }
}

enum MHD_Result gp_http_generate(gp_http *h, gp_http_conn *c)
{
    gp_serve *core = atomic_load(&h->core);
    if (atomic_load(&h->stopping))
        return gp_http_respond_error(c->mc, 503, NULL, "the server is shutting down");
    c->core = core;
    c->created = (long long)time(NULL);
    unsigned long long n = atomic_fetch_add(&h->next_id, 1);
    snprintf(c->id, sizeof c->id, "%s-%llu", c->kind == GP_API_CHAT ? "chatcmpl" : "cmpl", n);

    gp_api_limits lim = {.model = gp_serve_model_name(core), .vocab = gp_serve_vocab(core),
                         .max_context = gp_serve_max_context(core), .max_stops = 16};
    gp_api_request req;
    gp_api_error err;
    memset(&req, 0, sizeof req);
    if (gp_api_parse(c->kind, c->body ? c->body : "", c->len, &lim, &req, &err) != GP_OK) {
        gp_api_request_free(&req);
        return gp_http_respond(c->mc, (unsigned)err.status, "application/json", gp_api_error_json(&err), NULL, NULL);
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    gp_status st = prompt_ids(core, &req, &ids, &n_ids);
    /* a text prompt without a tokenizer, a chat without a template: the
     * client can still send what this model takes */
    unsigned status = st == GP_ERR_STATE ? 400 : refusal_status(st);
    if (st == GP_OK) {
        gp_serve_request sr = {
            .prompt = ids, .n_prompt = n_ids, .max_tokens = req.max_tokens, .sample = req.sample,
            .seed = req.seed_given ? req.seed : request_seed(h, n),
            .stops = (const char *const *)req.stops, .n_stops = req.n_stops,
            .ignore_eos = req.ignore_eos, .chat = c->kind == GP_API_CHAT, .skip_special = true,
            .cb = on_event, .user = c,
        };
        c->stream = req.stream;
        c->include_usage = req.include_usage;
        c->want_ids = req.return_token_ids || !gp_serve_has_tokenizer(core);
        set_timeout(c, 0);
        st = gp_serve_submit(core, &sr, &c->req_id);
        c->submitted = st == GP_OK;
        status = refusal_status(st);
    }
    free(ids);
    gp_api_request_free(&req);
    if (st != GP_OK) {
        /* the core's message (prompt beyond the context, queue full, ...) */
        set_timeout(c, (unsigned)h->p.timeout_s);
        return gp_http_respond_error(c->mc, status, NULL, gp_last_error());
    }
    return c->stream ? answer_stream(c) : answer_whole(c);
}
