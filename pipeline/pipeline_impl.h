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
    gp_stage_graph graph;         /* the executor's, N = graph.n_stages */
    int n_layers;
    gp_pipeline_params p;
    gp_ring_set *rings;           /* [N - 1][n_layers]: ring (e, l) carries layer l from stage e to e + 1 */

    /* one thread per stage and the per-step handshake */
    pthread_t threads[GP_PIPE_MAX_STAGES];
    int n_threads_started;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;      /* threads wait for a new generation */
    pthread_cond_t done_cv;       /* the caller waits for running == 0 */
    pthread_cond_t dep_cv;        /* stage 0 waits for the last stage it depends on */
    unsigned long generation;
    int running;
    bool quit;
    gp_step_plan plan;            /* the step being run (written before the generation bump) */

    /* step state shared by the threads */
    atomic_bool abort;
    atomic_int last_done[GP_PIPE_MAX_MICRO]; /* layers whose last stage has been issued, per micro-batch */
    atomic_int dep_waiting;       /* stage 0 is (about to be) asleep on dep_cv */
    gp_status st[GP_PIPE_MAX_STAGES];      /* each stage thread's failure */
    char err[GP_PIPE_MAX_STAGES][512];     /* gp_last_error is per thread: copied here */

    /* per-thread accounting, read by the caller after the join */
    uint64_t dep_wait_ns;         /* stage 0 */
    double *edge_bytes;           /* [N - 1][n_layers]: written by the thread of the edge's first stage */
    uint64_t seq;                 /* payload sequence numbers (stage 0) */

    gp_step_timing timing;
    float *timing_buf;            /* [2][N][n_layers][GP_PIPE_MAX_MICRO] */
    gp_step_stats stats;
    bool stats_valid;
};

/* The ring of edge e (stage e -> e + 1), layer l. */
gp_ring *gp_pipeline_ring(gp_pipeline *pl, int edge, int layer);

/* Fills s from one finished step. */
void gp_stats_compute(gp_pipeline *pl, gp_step_stats *s);
gp_status gp_stats_alloc(gp_step_stats *s, int n_layers);
void gp_stats_free(gp_step_stats *s);

#endif
