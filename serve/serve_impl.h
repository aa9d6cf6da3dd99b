/* The serving core's private state: the requests it holds, the inbox of
 * submissions and cancellations the engine thread takes at each step, and
 * the statistics /metrics reads. */
#ifndef GP_SERVE_IMPL_H
#define GP_SERVE_IMPL_H

#include <pthread.h>

#include "gp_serve.h"
#include "gp_tokenizer.h"

/* One request. Everything but cb/user belongs to the engine thread once
 * the request is taken from the inbox; cb/user are read and cleared under
 * the core's lock. */
typedef struct sreq {
    uint64_t id;
    gp_serve_cb cb; /* NULL once cancelled by its caller: nothing is delivered any more */
    void *user;
    int32_t *prompt;
    int n_prompt, max_tokens;
    int32_t *stop_ids;
    int n_stop_ids;
    gp_sample_params sample;
    gp_rng rng;
    gp_detok *detok;     /* NULL without a tokenizer */
    gp_stop_text *stop;
    int generated;       /* tokens delivered */
    int cached_tokens;
    bool in_sched;       /* submitted to the scheduler (the engine thread's view) */
    bool cancel;         /* cancelled, the scheduler not yet told */
    uint64_t t_submit, t_first, t_last; /* gp_now_ns */
    struct sreq *next;   /* the table's hash chain */
    struct sreq *inbox_next, *cancel_next;
} sreq;

#define SERVE_TABLE_BITS 12

struct gp_serve {
    gp_serve_env env;
    gp_serve_params p;
    char *model_name;
    gp_sched *sched;
    gp_sched_config scfg;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool fatal;            /* the backend failed for good: submits are refused */
    char fatal_msg[256];
    sreq *inbox_head, *inbox_tail; /* submitted, not yet in the scheduler */
    int n_inbox;
    sreq *cancels;         /* marked cancel, not yet taken out of the scheduler */
    sreq *table[1 << SERVE_TABLE_BITS]; /* every request held, by id */
    uint64_t next_id;
    int sched_waiting, sched_running; /* the scheduler's, after the last step (under mu) */
    gp_sampler sampler;    /* the engine thread's */
    double run_seconds;    /* inside the backend's run_batch during the current step */
    int *seq_len;          /* [max_seqs] tokens each backend sequence holds (the engine thread's) */
    const gp_batch *pf_batch; /* the prefill lane's batch in flight (pd-mux), the scheduler's */
    gp_serve_stats st;     /* under mu */
    long long decode_steps, decode_rows, decode_context; /* the engine thread's; copied into st */
    double decode_seconds;
    uint64_t t_start;
};

/* The request with id, or NULL (under mu). */
sreq *gp_serve_find(gp_serve *s, uint64_t id);
void gp_serve_unlink(gp_serve *s, sreq *r);
void gp_serve_req_free(sreq *r);
void gp_serve_hist_add(gp_serve_hist *h, double v);
/* Deliver a request's final event (under mu) and forget its callback. */
void gp_serve_deliver(gp_serve *s, sreq *r, const char *text, size_t len, const int32_t *tokens, int n,
                      gp_serve_finish f, const char *error);
/* The engine thread. */
void *gp_serve_loop(void *arg);
/* The scheduler's ops over the executor. */
gp_sched_ops gp_serve_sched_ops(gp_serve *s);

#endif
