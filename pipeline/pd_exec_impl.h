/* The prefill/decode executor's state, shared by its session (pd_exec.c),
 * its start-up profile (pd_profile.c) and its trace (pd_trace.c). */
#ifndef GP_PD_EXEC_IMPL_H
#define GP_PD_EXEC_IMPL_H

#include <pthread.h>

#include "gp_engine.h"
#include "gp_green.h"
#include "pipeline_impl.h"

/* One pair's lanes and their account. */
typedef struct px_pair {
    gp_lane *decode, *prefill;
    gp_split_info info;
    char name[16];        /* "32:100": obtained decode SMs, prefill SMs */
    double selected_s;
    gp_pd_lane_time t_decode, t_prefill;
} px_pair;

/* One lane batch, for the trace. */
typedef struct px_event {
    uint64_t t0, t1;      /* host clock, ns */
    int track;            /* px_track */
    int rows;
    const char *what;     /* "decode", "prefill" or "mixed" */
} px_event;

struct gp_pd_exec {
    gp_engine *e;                /* borrowed */
    px_pair *pairs;
    int n_pairs;
    gp_lane *whole_prefill;      /* a prefill lane on every SM, for batches with no decode rows beside */
    int prefill_rows;
    bool idle_whole;             /* decode on the engine's own lane (every SM) while no prefill batch runs */
    int cur;                     /* the selected pair */
    bool to_whole;               /* the next launch goes to whole_prefill (the planner's choice) */
    gp_pd_planner *planner;      /* NULL: every launch on the selected pair */
    uint64_t t_create, t_selected;
    pthread_t worker;
    pthread_mutex_t mu;          /* the batch hand-over below, and every account and the trace */
    pthread_cond_t cv;
    bool started, stop;
    /* the prefill batch: launched -> running (worker) -> done (status) */
    bool launched, done;
    gp_lane *pf_lane;            /* the lane it runs on */
    gp_pd_lane_time *pf_time;    /* its account */
    int pf_track;
    gp_status status;
    char error[512];             /* the worker's message, handed to the polling thread */
    gp_batch_part *parts;        /* [max_batch]: a copy of the launched batch's parts */
    gp_batch batch;
    int32_t *next;
    float *logits;
    int *ids;                    /* [max_batch]: a decode-only batch's sequences, */
    int32_t *tok, *scratch;      /*   tokens and greedy outputs (when the caller wants none) */
    gp_pd_lane_time whole_decode, whole_mixed, whole_prefill_t;
    long long split_changes;
    /* the trace: NULL until gp_pd_exec_trace_start */
    px_event *ev;
    size_t n_ev, cap_ev, dropped;
};

/* Trace tracks: pair i's decode lane 2i, its prefill lane 2i + 1, then the
 * engine's own lane (decode and mixed batches on every SM, pair
 * GP_PD_WHOLE) and the prefill lane on every SM: a prefill lane's track is
 * odd. */
static inline int px_track(const gp_pd_exec *x, int pair, bool prefill)
{
    return 2 * (pair == GP_PD_WHOLE ? x->n_pairs : pair) + prefill;
}

/* Adds a finished batch to acct and the trace; under mu. */
void gp_px_account(gp_pd_exec *x, gp_pd_lane_time *acct, int track, const gp_lane *lane, uint64_t t0, int rows);
/* Launches b on lane (the worker runs it) and waits for nothing. */
gp_status gp_px_launch_on(gp_pd_exec *x, gp_lane *lane, gp_pd_lane_time *acct, int track, const gp_batch *b,
                          int32_t *next, float *logits);
gp_status gp_px_poll(gp_pd_exec *x, bool wait, bool *done);

#endif
