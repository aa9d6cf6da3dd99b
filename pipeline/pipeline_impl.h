/* Private to pipeline/: the step runner's layout and the statistics helper it
 * calls after each step. */
#ifndef GP_PIPELINE_IMPL_H
#define GP_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "gp_pipeline.h"

struct gp_pipeline {
    gp_exec exec;                 /* borrowed */
    int n_layers;
    gp_pipeline_params p;
    gp_ring_set *rings;           /* [n_layers] */

    /* the two threads and the per-step handshake */
    pthread_t producer, consumer;
    int n_threads_started;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;      /* threads wait for a new generation */
    pthread_cond_t done_cv;       /* the caller waits for running == 0 */
    pthread_cond_t dep_cv;        /* the producer waits for an FFN it depends on */
    unsigned long generation;
    int running;
    bool quit;
    gp_step_plan plan;            /* the step being run (written before the generation bump) */

    /* step state shared by the threads */
    atomic_bool abort;
    atomic_int ffn_done[GP_PIPE_MAX_MICRO]; /* layers whose FFN has been issued, per micro-batch */
    atomic_int dep_waiting;       /* the producer is (about to be) asleep on dep_cv */
    gp_status prod_st, cons_st;
    char prod_err[512], cons_err[512]; /* gp_last_error is per thread: copied here */

    /* producer-thread accounting, read by the caller after the join */
    uint64_t dep_wait_ns;
    double *a2f_bytes;            /* [n_layers] */
    uint64_t seq;                 /* payload sequence numbers */

    gp_step_timing timing;
    float *timing_buf;            /* [4][n_layers][GP_PIPE_MAX_MICRO] */
    gp_step_stats stats;
    bool stats_valid;
};

/* Fills s from one finished step. */
void gp_stats_compute(gp_pipeline *pl, gp_step_stats *s);
gp_status gp_stats_alloc(gp_step_stats *s, int n_layers);
void gp_stats_free(gp_step_stats *s);

#endif
