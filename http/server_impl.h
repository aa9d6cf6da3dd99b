/* The HTTP server's layout, shared by its routing (server.c) and its
 * generation requests (server_gen.c); included only inside http/. */
#ifndef GP_HTTP_SERVER_IMPL_H
#define GP_HTTP_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "gp_http.h"

typedef struct gp_http_conn gp_http_conn;

struct gp_http {
    struct MHD_Daemon *daemon;
    gp_http_params p;           /* host and api_key point at the copies below */
    char *host, *api_key;
    int port;
    long long started;          /* wall-clock seconds: /v1/models' "created" */
    _Atomic(gp_serve *) core;   /* NULL until gp_http_set_core */
    atomic_ullong next_id;      /* "cmpl-<n>" / "chatcmpl-<n>" */
    uint64_t seed_base;         /* unseeded requests draw from it */
    atomic_bool stopping;
    pthread_mutex_t lock;       /* guards conns */
    gp_http_conn *conns;        /* POST requests in flight, woken by gp_http_stop */

    /* The engine thread only queues a connection that has news; this
     * thread wakes them, so a step with hundreds of streams costs the
     * engine one wake-up instead of one per stream. */
    pthread_t waker;
    pthread_mutex_t wake_mu;    /* guards the fields below and every conn's wake_* */
    pthread_cond_t wake_cv;     /* the waker's: news or stop */
    pthread_cond_t wake_done_cv; /* a batch is signalled */
    gp_http_conn *wake_head;    /* connections to wake, through wake_next */
    bool waking;                /* the waker signals a batch it took, without wake_mu */
    bool wake_stop;
};

/* One POST request: its body while it arrives, then the generation it
 * waits on. Text and the end arrive on the engine thread (on_event), and
 * are taken and formatted on the connection's own thread. */
struct gp_http_conn {
    gp_http *h;
    struct MHD_Connection *mc;
    gp_http_conn *prev, *next;  /* h->conns */
    gp_http_conn *wake_next;    /* h->wake_head's list while wake_queued */
    bool wake_queued;
    gp_api_kind kind;
    char *body;                 /* [cap] bytes, len received */
    size_t len, cap;
    bool too_big;               /* over max_body: the rest is counted in len and dropped */

    gp_serve *core;             /* the core it was submitted to */
    uint64_t req_id;
    bool submitted, stream;
    bool include_usage;         /* a last chunk of usage alone, after the one with finish_reason */
    char id[32];
    long long created;

    pthread_mutex_t mu;         /* guards the fields below; the engine thread takes it */
    pthread_cond_t cv;          /* CLOCK_MONOTONIC */
    char *text;                 /* [text_cap] settled text not yet taken (stream) or all of it */
    size_t text_len, text_cap;
    bool text_lost;             /* an append failed for memory: the request ends in an error */
    int32_t *ids;               /* [n_ids] generated ids not yet taken (stream) or all of them */
    int n_ids;
    size_t ids_cap;             /* bytes */
    int32_t *take_ids;          /* ids copied out of ids */
    size_t take_ids_cap;        /* bytes */
    bool want_ids;              /* choices carry "token_ids": asked for, or the model has no tokenizer */
    gp_serve_finish finish;     /* GP_SERVE_RUNNING until the last event */
    gp_serve_usage usage;
    char *error;                /* GP_SERVE_ERROR's message */

    /* the stream's side (connection thread only) */
    char *take;                 /* [take_cap] text copied out of text */
    size_t take_cap;
    char *out;                  /* [out_cap] SSE bytes, out_pos of out_len sent */
    size_t out_len, out_pos, out_cap;
    bool first_sent, done_sent;
};

/* Answer status with body (malloc'd, taken; NULL closes the connection)
 * and one extra header when hname is not NULL. */
enum MHD_Result gp_http_respond(struct MHD_Connection *mc, unsigned status, const char *ctype, char *body,
                                const char *hname, const char *hval);
/* An OpenAI error object; type from the status. */
enum MHD_Result gp_http_respond_error(struct MHD_Connection *mc, unsigned status, const char *param,
                                      const char *message);

/* A finished body of c: parse, tokenize, submit, then answer (whole or streamed). */
enum MHD_Result gp_http_generate(gp_http *h, gp_http_conn *c);
/* c's request is over (NOTIFY_COMPLETED): cancel it if it still runs, free c. */
void gp_http_conn_end(gp_http_conn *c);
gp_http_conn *gp_http_conn_new(gp_http *h, struct MHD_Connection *mc, gp_api_kind kind);
/* The waker thread (h->waker). */
void *gp_http_waker(void *arg);

#endif
