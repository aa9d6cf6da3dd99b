/* A test double of the reload backend (gp_kv_reload_ops): virtual streams
 * for load, process and write whose ops take set durations, markers with
 * completion times, a log of every op's start, end and buffer, and the
 * checks of the schedule's orderings the reload tests assert on. */
#ifndef GP_TEST_SIM_RELOAD_H
#define GP_TEST_SIM_RELOAD_H

#include <stddef.h>

#include "gp_kvstore.h"

/* The backend calls, for counts and injected failures. */
typedef enum gp_sim_reload_call {
    GP_SIM_RL_LOAD = 0, /* the stage calls share gp_kv_reload_stage's values */
    GP_SIM_RL_PROCESS = 1,
    GP_SIM_RL_WRITE = 2,
    GP_SIM_RL_RECORD,
    GP_SIM_RL_WAIT,
    GP_SIM_RL_MARKER_CREATE,
    GP_SIM_RL_LAYER_READY,
    GP_SIM_RL_CALL_COUNT
} gp_sim_reload_call;

typedef struct gp_sim_reload_params {
    int n_layers, n_buffers;   /* what the checks expect */
    double dur[GP_KV_RELOAD_STAGE_COUNT]; /* seconds each op of a stage takes */
    int jitter;                /* 1: each op's time scaled by 0.5..1.5, fixed per (stage, layer) */
    int write_on_compute;      /* 1: WRITE runs on the PROCESS stream; 0: a stream of its own */
} gp_sim_reload_params;

/* One load, process or write as it ran on its virtual stream. */
typedef struct gp_sim_reload_rec {
    gp_kv_reload_stage stage;
    int layer, buf;
    double start, end;
} gp_sim_reload_rec;

typedef struct gp_sim_reload gp_sim_reload;

gp_status gp_sim_reload_create(const gp_sim_reload_params *p, gp_sim_reload **out);
void gp_sim_reload_destroy(gp_sim_reload *x);
const gp_kv_reload_ops *gp_sim_reload_ops(void);
/* The nth call of `call` from now fails (1: the next); 0 cancels. */
void gp_sim_reload_fail(gp_sim_reload *x, gp_sim_reload_call call, int nth);
/* A marker's completion time, -1 while it was never recorded. */
double gp_sim_reload_marker_time(const void *marker);

/* The ops in the order enqueued; *n gets the count. */
const gp_sim_reload_rec *gp_sim_reload_log(const gp_sim_reload *x, int *n);
int gp_sim_reload_calls(const gp_sim_reload *x, gp_sim_reload_call call);
int gp_sim_reload_live_markers(const gp_sim_reload *x);
/* The latest end of any op. */
double gp_sim_reload_makespan(const gp_sim_reload *x);
/* How many rules the log breaks, the first described in why: a layer
 * processed before its load ended or written before its process ended, a
 * buffer loaded before the write of its previous layer ended, a layer's ops
 * on different buffers, a wait on a marker never recorded, layer_ready out
 * of order, before its write, or with a marker that is not the write's end;
 * with `complete`, also every layer not loaded, processed, written and
 * announced exactly once. */
int gp_sim_reload_check(const gp_sim_reload *x, int complete, char *why, size_t cap);

#endif
