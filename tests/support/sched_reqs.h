/* Requests for the scheduler's tests on the CPU reference: prompts drawn from
 * a seeded stream in groups sharing prefixes, each request's greedy tokens of
 * running it alone, and the checks that a scheduled run gave exactly those. */
#ifndef GP_SCHED_REQS_H
#define GP_SCHED_REQS_H

#include <stdbool.h>

#include "gp_reference.h"
#include "gp_sched.h"

#define GP_SREQ_MAX_CTX 64 /* a prompt's room, and the alone runs' context */
#define GP_SREQ_MAX_GEN 16 /* the most answer tokens a request keeps */

typedef struct gp_sreq {
    gp_sched_request r;
    int32_t prompt[GP_SREQ_MAX_CTX];
    int arrival;                   /* step at which it is submitted */
    int32_t want[GP_SREQ_MAX_GEN]; /* greedy tokens of running it alone */
    int n_want;
    int32_t got[GP_SREQ_MAX_GEN];  /* from the step events */
    int n_got;
    int cancelled;
} gp_sreq;

/* What a test's requests are drawn from and run alone on. The test sets all
 * but w; gp_sreq_env_load loads w. */
typedef struct gp_sreq_env {
    gp_host_weights w;  /* gp_sched_cpu_tiny_weights' */
    uint64_t rng;       /* the prompts' random stream */
    int block;          /* the alone runs' block size */
    int max_gen;        /* gp_sreq_make_groups' answers: 1 to max_gen (<= GP_SREQ_MAX_GEN) tokens */
    bool even_arrivals; /* gp_sreq_make_groups' request i of n arrives at i * spread / n, else at random */
} gp_sreq_env;

/* 0, or -1 with the failure on stderr: what a cmocka group setup answers. */
int gp_sreq_env_load(gp_sreq_env *e);
void gp_sreq_env_free(gp_sreq_env *e);

/* Uniform in [0, n), from e's stream. */
int gp_sreq_rnd(gp_sreq_env *e, int n);

/* The prompt's first n_prompt tokens under id, answering max_tokens. */
void gp_sreq_set(gp_sreq *q, uint64_t id, int n_prompt, int max_tokens);

/* A request id of n_prompt tokens drawn from e's stream, answering
 * max_tokens. */
void gp_sreq_random(gp_sreq_env *e, gp_sreq *q, uint64_t id, int n_prompt, int max_tokens);

/* q: of again, its tokens alone included, under id. */
void gp_sreq_again(gp_sreq *q, const gp_sreq *of, uint64_t id);

/* q->want: alone and greedy, gp_cpu_prefill then one gp_cpu_decode_step a
 * token. */
void gp_sreq_run_alone(const gp_sreq_env *e, gp_sreq *q);

/* n requests with ids from 1000, request i of group i % groups (at most 8):
 * the group's prefix of prefix_len tokens and a suffix of its own, arriving
 * over spread steps; each run alone. */
void gp_sreq_make_groups(gp_sreq_env *e, gp_sreq *q, int n, int groups, int prefix_len, int spread);

/* Before a run of q[0..n): no tokens got, none cancelled; the last arrival. */
int gp_sreq_reset(gp_sreq *q, int n);

/* Submits the requests of q[0..n) arriving at step. */
void gp_sreq_submit_arrivals(gp_sched *s, gp_sreq *q, int n, int step);

/* The step's n_ev events into the requests of q[0..n) they name. */
void gp_sreq_collect(gp_sched *s, gp_sreq *q, int n, int n_ev);

/* Submits q alone into s and steps until it finishes, calling check(ctx)
 * after every step; its tokens, result's and events', are those alone. */
gp_sched_result gp_sreq_serve_one(gp_sched *s, gp_sreq *q, void (*check)(const void *ctx), const void *ctx);

/* q's result after its run: its tokens alone (a cancelled one's a prefix of
 * them), the events' the same, and whole blocks of its prompt cached, at
 * least one prompt token computed. */
void gp_sreq_check_result(const gp_sreq *q, const gp_sched_result *res, int block_size);

/* Exact accounting: the scheduler's invariants, and the reference's pool
 * using as many blocks as the scheduler counts used. */
void gp_sreq_check_pool(const gp_sched *s, gp_cpu_model *m);

/* With every request released, dropping the cache gives every block back. */
void gp_sreq_check_emptied(gp_sched *s);

#endif
