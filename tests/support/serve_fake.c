/* A deterministic fake of the serving core's request interface for the
 * HTTP server's tests (serve_fake.h); events run on its own engine thread
 * under its lock, as the real core's do. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gp_chat.h"
#include "serve_fake.h"

#define FAKE_VOCAB 512

typedef struct fake_req {
    uint64_t id;
    int32_t *prompt;
    int n_prompt, limit, n_out;
    bool ignore_eos;
    gp_serve_cb cb;
    void *user;
} fake_req;

struct gp_serve {
    char model[128];
    int max_context, step_us;
    bool chat;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a request arrived, a count changed, or stop */
    pthread_t thread;
    bool stop;
    gp_serve_fake_mode mode;
    fake_req *reqs; /* [cap] running, n of them */
    int n, cap;
    uint64_t next_id;
    gp_serve_fake_counts counts;
};

static void ts_after(struct timespec *t, double s)
{
    clock_gettime(CLOCK_MONOTONIC, t);
    long long ns = t->tv_nsec + (long long)(s * 1e9);
    t->tv_sec += ns / 1000000000LL;
    t->tv_nsec = ns % 1000000000LL;
}

/* Deliver one event of r (lock held); the request is gone after a final one. */
static void deliver(gp_serve *s, int i, gp_serve_finish fin, bool token)
{
    fake_req *r = &s->reqs[i];
    char text[16] = "";
    int32_t tok = 0;
    if (token) {
        tok = r->prompt[r->n_out % r->n_prompt];
        snprintf(text, sizeof text, "%d ", tok);
        r->n_out++;
        if (r->n_out == r->limit)
            fin = GP_SERVE_LENGTH;
        else if (!r->ignore_eos && r->n_out == r->n_prompt)
            fin = GP_SERVE_STOP;
    }
    gp_serve_event ev = {.id = r->id, .text = text, .len = strlen(text), .tokens = &tok, .n_tokens = token,
                         .finish = fin, .usage = {r->n_prompt, r->n_out, 0}};
    r->cb(r->user, &ev);
    if (fin != GP_SERVE_RUNNING) {
        free(r->prompt);
        s->reqs[i] = s->reqs[--s->n];
        s->counts.running = s->n;
        pthread_cond_broadcast(&s->cv);
    }
}

static void *engine(void *arg)
{
    gp_serve *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->n == 0 || s->mode == GP_SERVE_FAKE_PAUSE) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        for (int i = s->n - 1; i >= 0; i--)
            deliver(s, i, GP_SERVE_RUNNING, true);
        struct timespec t;
        ts_after(&t, s->step_us * 1e-6);
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &t) == 0) {
        }
    }
    while (s->n)
        deliver(s, s->n - 1, GP_SERVE_CANCELLED, false);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

gp_serve *gp_serve_fake_create(const char *model, int max_context, int step_us, bool chat)
{
    gp_serve *s = calloc(1, sizeof *s);
    snprintf(s->model, sizeof s->model, "%s", model);
    s->max_context = max_context, s->step_us = step_us, s->chat = chat;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_create(&s->thread, NULL, engine, s);
    return s;
}

void gp_serve_fake_destroy(gp_serve *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->reqs);
    free(s);
}

void gp_serve_fake_set_mode(gp_serve *s, gp_serve_fake_mode m)
{
    pthread_mutex_lock(&s->mu);
    s->mode = m;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

gp_serve_fake_counts gp_serve_fake_counts_get(gp_serve *s)
{
    pthread_mutex_lock(&s->mu);
    gp_serve_fake_counts c = s->counts;
    pthread_mutex_unlock(&s->mu);
    return c;
}

bool gp_serve_fake_wait(gp_serve *s, int min_submitted, int min_cancelled, int running_eq, double timeout_s)
{
    struct timespec t;
    ts_after(&t, timeout_s);
    pthread_mutex_lock(&s->mu);
    bool ok;
    for (;;) {
        ok = s->counts.submitted >= min_submitted && s->counts.cancelled >= min_cancelled &&
             (running_eq < 0 || s->counts.running == running_eq);
        if (ok || pthread_cond_timedwait(&s->cv, &s->mu, &t) != 0)
            break;
    }
    ok = s->counts.submitted >= min_submitted && s->counts.cancelled >= min_cancelled &&
         (running_eq < 0 || s->counts.running == running_eq);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ------------------------------------------------------------ the core's interface */

gp_status gp_serve_submit(gp_serve *s, const gp_serve_request *r, uint64_t *id)
{
    if (r->n_prompt < 1 || r->n_prompt + r->max_tokens > s->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "prompt of %d tokens with max_tokens %d is beyond the context of %d tokens",
                r->n_prompt, r->max_tokens, s->max_context);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= FAKE_VOCAB)
            GP_FAIL(GP_ERR_INVALID_ARG, "prompt id %d is outside the vocabulary [0, %d)", r->prompt[i], FAKE_VOCAB);
    pthread_mutex_lock(&s->mu);
    if (s->mode == GP_SERVE_FAKE_FULL || s->mode == GP_SERVE_FAKE_DEAD) {
        bool full = s->mode == GP_SERVE_FAKE_FULL;
        pthread_mutex_unlock(&s->mu);
        if (full)
            GP_FAIL(GP_SOFT_FULL, "the queue is full: try again");
        GP_FAIL(GP_ERR_STATE, "the backend failed: the server cannot generate");
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->reqs = realloc(s->reqs, sizeof *s->reqs * (size_t)s->cap);
    }
    fake_req *q = &s->reqs[s->n++];
    *q = (fake_req){.id = s->next_id++, .n_prompt = r->n_prompt, .ignore_eos = r->ignore_eos,
                    .limit = r->max_tokens ? r->max_tokens : s->max_context - r->n_prompt,
                    .cb = r->cb, .user = r->user};
    q->prompt = malloc(sizeof *q->prompt * (size_t)r->n_prompt);
    memcpy(q->prompt, r->prompt, sizeof *q->prompt * (size_t)r->n_prompt);
    *id = q->id;
    s->counts.submitted++;
    s->counts.running = s->n;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return GP_OK;
}

void gp_serve_cancel(gp_serve *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (s->reqs[i].id == id) {
            s->counts.cancelled++;
            deliver(s, i, GP_SERVE_CANCELLED, false);
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

static gp_status bytes_to_ids(const char *text, size_t len, bool bos, int32_t **ids, int *n)
{
    *ids = malloc(sizeof **ids * (len + 1));
    *n = 0;
    if (bos)
        (*ids)[(*n)++] = 1;
    for (size_t i = 0; i < len; i++)
        (*ids)[(*n)++] = (unsigned char)text[i];
    return GP_OK;
}

gp_status gp_serve_tokenize(const gp_serve *s, const char *text, size_t len, bool add_special, int32_t **ids, int *n)
{
    return bytes_to_ids(text, len, add_special, ids, n);
}

gp_status gp_serve_chat_prompt(const gp_serve *s, const struct gp_chat_msg *msgs, size_t n, int32_t **ids,
                               int *n_ids)
{
    if (!s->chat)
        GP_FAIL(GP_ERR_STATE, "this model has no chat template: use /v1/completions");
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += msgs[i].len;
    *ids = malloc(sizeof **ids * (total + 1));
    *n_ids = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < msgs[i].len; k++)
            (*ids)[(*n_ids)++] = (unsigned char)msgs[i].content[k];
    return GP_OK;
}

const char *gp_serve_model_name(const gp_serve *s)
{
    return s->model;
}

int gp_serve_max_context(const gp_serve *s)
{
    return s->max_context;
}

int gp_serve_vocab(const gp_serve *s)
{
    return FAKE_VOCAB;
}

bool gp_serve_has_tokenizer(const gp_serve *s)
{
    (void)s;
    return true;
}

const char *gp_serve_finish_name(gp_serve_finish f)
{
    static const char *names[] = {NULL, "stop", "length", "cancelled", "error"};
    return f >= 0 && f <= GP_SERVE_ERROR ? names[f] : NULL;
}

void gp_serve_get_stats(gp_serve *s, gp_serve_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    out->running = s->n;
    pthread_mutex_unlock(&s->mu);
}
