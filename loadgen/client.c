/* The run of bench-serve: requests sent at their arrival times, at most
 * max_concurrency in flight, each a streamed completion on one libcurl
 * multi handle driven from this thread; each event's arrival is timed on
 * CLOCK_MONOTONIC as the write callback parses it. */
#include "lg_http_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>

gp_lg_params gp_lg_default_params(void)
{
    return (gp_lg_params){
        .base_url = "http://127.0.0.1:8000",
        .endpoint = "/v1/completions",
        .request_rate = INFINITY,
        .burstiness = 1.0,
        .request_timeout_s = 21600.0,
        .max_event = 1 << 20,
    };
}

typedef struct req {
    gp_lg_outcome *o;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    gp_lg_sse *sse;
    uint64_t t_send, t_last; /* ns */
    long http;               /* the status, once the body begins; 0 before */
    char http_body[512];     /* the start of a refusal's body */
    size_t http_len;
    char curl_err[CURL_ERROR_SIZE];
    bool done, failed;
    int chunks;                          /* token chunks */
    int usage_prompt, usage_completion;  /* -1 until a usage object names them */
    size_t itl_cap; /* bytes */
} req;

/* The first reason a request fails is its reason, cut to the outcome's size. */
__attribute__((format(printf, 2, 3))) static void fail(req *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    r->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->o->error, sizeof r->o->error, fmt, ap);
    va_end(ap);
    /* A server's words go into the JSON report, which takes UTF-8 only. */
    for (char *c = r->o->error; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
            *c = '?';
}

static bool push_itl(req *r, double gap)
{
    gp_lg_outcome *o = r->o;
    double *itl = gp_grow(o->itl, &r->itl_cap, (size_t)(o->n_itl + 1) * sizeof *itl);
    if (!itl)
        return false;
    o->itl = itl;
    o->itl[o->n_itl++] = gap;
    return true;
}

/* A chunk with choices is a token's, as vLLM counts them (its text may be
 * empty: a token that ends inside a UTF-8 character), except a closing
 * chunk with no text that only carries the finish_reason. */
static bool is_token_chunk(json_t *j)
{
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    if (!json_is_object(c))
        return false;
    json_t *text = json_object_get(c, "text"), *finish = json_object_get(c, "finish_reason");
    bool has_text = json_is_string(text) && json_string_length(text) > 0;
    return has_text || !json_is_string(finish);
}

static void on_event(void *ctx, const char *data, size_t len)
{
    req *r = ctx;
    uint64_t t = gp_now_ns();
    if (r->failed || r->done)
        return;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->done = true;
        return;
    }
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        fail(r, "a stream chunk is not a JSON object: %.*s", (int)(len < 80 ? len : 80), data);
        return;
    }
    json_t *err = json_object_get(j, "error");
    if (err) {
        json_t *msg = json_object_get(err, "message");
        fail(r, "an error chunk in the stream: %s", json_is_string(msg) ? json_string_value(msg) : "(no message)");
    } else if (is_token_chunk(j)) {
        if (r->chunks == 0)
            r->o->ttft = (double)(t - r->t_send) * 1e-9;
        else if (!push_itl(r, (double)(t - r->t_last) * 1e-9))
            fail(r, "out of memory for inter-token latencies");
        r->t_last = t;
        r->chunks++;
    }
    json_t *usage = json_object_get(j, "usage");
    json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
    if (json_is_integer(pt))
        r->usage_prompt = (int)json_integer_value(pt);
    if (json_is_integer(ct))
        r->usage_completion = (int)json_integer_value(ct);
    json_decref(j);
}

static size_t on_write(char *ptr, size_t size, size_t n, void *ctx)
{
    req *r = ctx;
    size_t got = size * n;
    if (!r->http)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
    if (r->http != 200) {
        size_t room = sizeof r->http_body - 1 - r->http_len, take = got < room ? got : room;
        memcpy(r->http_body + r->http_len, ptr, take);
        r->http_len += take;
        r->http_body[r->http_len] = '\0';
        return got;
    }
    if (gp_lg_sse_feed(r->sse, ptr, got) != GP_OK)
        fail(r, "%s", gp_last_error());
    return r->failed ? 0 : got; /* 0 ends the transfer: its outcome is known */
}

static char *request_body(const gp_lg_params *p, const gp_lg_prompt *q)
{
    json_t *prompt;
    if (q->text) {
        prompt = json_string(q->text);
    } else {
        prompt = json_array();
        for (int i = 0; prompt && i < q->n_ids; i++)
            if (json_array_append_new(prompt, json_integer(q->ids[i]))) {
                json_decref(prompt);
                prompt = NULL;
            }
    }
    /* "s:o" takes prompt's reference, and fails on NULL */
    json_t *b = json_pack("{s:s, s:o, s:i, s:f, s:b, s:{s:b}, s:b}", "model", p->model, "prompt", prompt,
                          "max_tokens", q->max_tokens, "temperature", 0.0, "stream", 1, "stream_options",
                          "include_usage", 1, "ignore_eos", 1);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return text;
}

static void req_free(req *r)
{
    curl_slist_free_all(r->headers);
    curl_easy_cleanup(r->easy);
    free(r->body);
    gp_lg_sse_destroy(r->sse);
    memset(r, 0, sizeof *r);
}

static gp_status req_start(req *r, const gp_lg_params *p, const char *url, const gp_lg_prompt *q, gp_lg_outcome *o,
                           CURLM *multi, uint64_t t0)
{
    memset(r, 0, sizeof *r);
    r->o = o;
    r->usage_prompt = r->usage_completion = -1;
    o->prompt_tokens = q->text ? 0 : q->n_ids;
    r->body = request_body(p, q);
    r->easy = curl_easy_init();
    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (r->headers)
        r->headers = curl_slist_append(r->headers, "Accept: text/event-stream");
    if (r->headers) /* no "Expect: 100-continue" wait before a large body */
        r->headers = curl_slist_append(r->headers, "Expect:");
    if (r->headers)
        r->headers = gp_lg_auth_header(r->headers, p->api_key);
    if (!r->body || !r->easy || !r->headers || gp_lg_sse_create(on_event, r, p->max_event, &r->sse) != GP_OK) {
        req_free(r);
        GP_FAIL(GP_ERR_NO_MEMORY, "request setup: out of memory");
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(p->request_timeout_s * 1e3));
    r->t_send = gp_now_ns();
    o->sent = (double)(r->t_send - t0) * 1e-9;
    if (curl_multi_add_handle(multi, e) != CURLM_OK) {
        req_free(r);
        GP_FAIL(GP_ERR_NO_MEMORY, "request setup: the multi handle refused a request");
    }
    return GP_OK;
}

static void req_finish(req *r, CURLcode rc)
{
    gp_lg_outcome *o = r->o;
    if (r->failed) {
        /* the write callback's reason stands */
    } else if (rc != CURLE_OK) {
        fail(r, "connection: %s", r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
    } else if (r->http != 200) {
        if (!r->http)
            curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http);
        fail(r, "HTTP %ld%s%s", r->http, r->http_len ? ": " : "", r->http_body);
    } else if (!r->done) {
        fail(r, "the stream ended without data: [DONE]");
    } else if (r->chunks == 0) {
        fail(r, "the stream carried no token");
    }
    o->ok = !r->failed;
    if (r->usage_prompt >= 0)
        o->prompt_tokens = r->usage_prompt;
    o->output_tokens = r->usage_completion >= 0 ? r->usage_completion : r->chunks;
    o->e2el = r->chunks ? (double)(r->t_last - r->t_send) * 1e-9 : 0.0;
    req_free(r);
}

typedef struct run {
    const gp_lg_params *p;
    const gp_lg_dataset *d;
    gp_lg_outcome *o;
    double *arrive; /* [n] seconds from the start */
    req *slots;     /* [cap] the requests in flight */
    int *free_slots; /* [cap] a stack of the slots not in flight */
    int cap, n_free;
    char *url;
    CURLM *multi;
    int n, arrived, launched, finished, in_flight;
    gp_progress_run progress;
} run;

static gp_status pump(run *r)
{
    int running;
    CURLMcode mc = curl_multi_perform(r->multi, &running);
    if (mc != CURLM_OK)
        GP_FAIL(GP_ERR_IO, "curl_multi_perform: %s", curl_multi_strerror(mc));
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(r->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        req *q;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
        CURLcode rc = m->data.result;
        curl_multi_remove_handle(r->multi, m->easy_handle);
        req_finish(q, rc);
        r->free_slots[r->n_free++] = (int)(q - r->slots);
        r->in_flight--;
        r->finished++;
    }
    gp_progress_update(&r->progress, (uint64_t)r->finished);
    return GP_OK;
}

static gp_status drive(run *r, double *duration_s)
{
    const gp_lg_params *p = r->p;
    int cap = r->cap;
    uint64_t t0 = gp_now_ns();
    while (r->finished < r->n) {
        double now = (double)(gp_now_ns() - t0) * 1e-9;
        while (r->arrived < r->n && r->arrive[r->arrived] <= now)
            r->arrived++;
        while (r->launched < r->arrived && r->in_flight < cap) {
            int i = r->launched;
            gp_lg_prompt q = gp_lg_dataset_get(r->d, i);
            GP_TRY(req_start(&r->slots[r->free_slots[r->n_free - 1]], p, r->url, &q, &r->o[i], r->multi, t0));
            r->n_free--;
            r->launched++;
            r->in_flight++;
        }
        GP_TRY(pump(r));
        if (r->finished == r->n || (r->launched < r->arrived && r->in_flight < cap))
            continue;
        /* Sleep until a socket is ready or the next arrival is due. */
        int wait_ms = 1000;
        if (r->arrived < r->n && r->launched == r->arrived) {
            double due = (r->arrive[r->arrived] - ((double)(gp_now_ns() - t0) * 1e-9)) * 1e3;
            wait_ms = due <= 0 ? 0 : due >= 1000 ? 1000 : (int)ceil(due);
        }
        CURLMcode mc = curl_multi_poll(r->multi, NULL, 0, wait_ms, NULL);
        if (mc != CURLM_OK)
            GP_FAIL(GP_ERR_IO, "curl_multi_poll: %s", curl_multi_strerror(mc));
    }
    *duration_s = (double)(gp_now_ns() - t0) * 1e-9;
    return GP_OK;
}

/* Each request in flight holds a connection: the file limit is raised to
 * fit them (up to its hard limit), or the run is refused before it starts
 * rather than failing requests for want of a descriptor. */
#define LG_SPARE_FDS 64
static gp_status fit_fd_limit(int in_flight)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return GP_OK;
    rlim_t need = (rlim_t)in_flight + LG_SPARE_FDS;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "%d requests in flight need %llu open files, and the limit is %llu; allowed: --max-concurrency at "
                "most %llu, or a higher ulimit -n",
                in_flight, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
                (unsigned long long)(rl.rlim_cur > LG_SPARE_FDS ? rl.rlim_cur - LG_SPARE_FDS : 0));
    return GP_OK;
}

gp_status gp_lg_run(const gp_lg_params *p, const gp_lg_dataset *d, gp_lg_outcome **out, double *duration_s)
{
    if (!p->model || !p->base_url || !p->endpoint || p->endpoint[0] != '/')
        GP_FAIL(GP_ERR_INVALID_ARG, "a run needs a model, a base URL and an endpoint starting with '/'");
    if (p->max_concurrency < 0 || !(p->request_timeout_s > 0.0) || p->max_event == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_concurrency %d, request timeout %g s, max event %zu; allowed: >= 0, > 0, > 0",
                p->max_concurrency, p->request_timeout_s, p->max_event);
    run r = {.p = p, .d = d, .n = gp_lg_dataset_size(d)};
    r.cap = p->max_concurrency > 0 && p->max_concurrency < r.n ? p->max_concurrency : r.n;
    GP_TRY(fit_fd_limit(r.cap));
    r.o = calloc((size_t)r.n, sizeof *r.o);
    r.arrive = malloc((size_t)r.n * sizeof *r.arrive);
    r.slots = calloc((size_t)r.cap + 1, sizeof *r.slots);
    r.free_slots = malloc(((size_t)r.cap + 1) * sizeof *r.free_slots);
    for (int i = 0; r.free_slots && i < r.cap; i++)
        r.free_slots[r.n_free++] = r.cap - 1 - i;
    r.url = gp_lg_url(p->base_url, p->endpoint);
    r.multi = curl_multi_init();
    gp_status st = GP_ERR_NO_MEMORY;
    if (!r.o || !r.arrive || !r.slots || !r.free_slots || !r.url || !r.multi)
        gp_set_error("a run of %d requests: out of memory", r.n);
    else if ((st = gp_lg_arrivals(p->request_rate, p->burstiness, p->seed, r.n, r.arrive)) == GP_OK) {
        gp_progress_begin(&r.progress, &p->progress, "sending requests", "requests", (uint64_t)r.n);
        st = drive(&r, duration_s);
        gp_progress_end(&r.progress, (uint64_t)r.finished);
    }
    for (int i = 0; r.slots && i < r.cap; i++)
        if (r.slots[i].easy) {
            curl_multi_remove_handle(r.multi, r.slots[i].easy);
            req_free(&r.slots[i]);
        }
    curl_multi_cleanup(r.multi);
    free(r.url);
    free(r.slots);
    free(r.free_slots);
    free(r.arrive);
    if (st != GP_OK) {
        gp_lg_outcomes_free(r.o, r.n);
        return st;
    }
    *out = r.o;
    return GP_OK;
}
