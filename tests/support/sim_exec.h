/* A test double of an executor: the CPU executor's role with synthetic stage
 * costs instead of math, for the rebalancer's and the runner's tests. */
#ifndef GP_TEST_SIM_EXEC_H
#define GP_TEST_SIM_EXEC_H

#include "gp_pipeline.h"

/* The CPU executor with synthetic stage costs: no math, stage durations from
 * a caller's cost model, a timeline in virtual time on two "streams" with the
 * CUDA executor's dependencies (A(l, m) after F(l-1, m) and stream order,
 * F(l, m) after A(l, m)), filled into gp_step_timing as the real executors
 * do. Holds a set of pairs for a virtual device, so the rebalancer and the
 * runner are tested end to end in CI. Next tokens are zeros. */
typedef enum gp_sim_side { GP_SIM_ATTN = 0, GP_SIM_FFN = 1 } gp_sim_side;

/* ms one stage takes alone on `sms` SMs of its side. step: the executor's
 * pipelined step counter (0, 1, ...), -1 for sequential steps and for
 * gp_sim_exec_timeline queries the caller makes; micro -1 in sequential
 * steps. Called on the caller's thread only (in step_end and
 * sequential_step). Must return a finite value >= 0. */
typedef double (*gp_sim_cost_fn)(void *user, gp_sim_side side, long step, int layer, int micro, int rows, int sms);

typedef struct gp_sim_params {
    int n_layers;
    int sm_count;            /* virtual device: 132 */
    int granularity;         /* SMs per group: 8 */
    int groups;              /* groups a split makes; 0: sm_count / granularity (the H100 makes 15) */
    const gp_split_info *pairs; /* explicit pairs (copied) instead of A = g, 2g, ... with F the rest; */
    int n_pairs;             /*   NULL/0: generated from the three fields above */
    gp_sim_cost_fn cost;     /* required */
    void *user;
    double attn_slowdown;    /* >= 1: attention progresses at 1/slowdown while an FFN stage runs */
    double ffn_slowdown;     /* >= 1: likewise for FFN while attention runs (HBM and L2 are shared) */
    double begin_ms;         /* embedding and uploads, before the first stage */
    double end_ms;           /* final norm, LM head, argmax, after the last FFN */
    uint64_t a2f_bytes_per_row; /* payload bytes per row crossing A->F (hidden x 4: fp32 residual) */
    int vocab;               /* logits row length (zeros); 0: logits must be NULL */
} gp_sim_params;
/* 132 SMs, granularity 8, 15 groups, slowdowns 1, begin/end 0, 16 KiB per
 * row, vocab 0; n_layers and cost must be set. */
gp_sim_params gp_sim_default_params(void);

typedef struct gp_sim_exec gp_sim_exec;
gp_status gp_sim_exec_create(const gp_sim_params *p, gp_sim_exec **out);
void gp_sim_exec_destroy(gp_sim_exec *x);
gp_exec gp_sim_exec_get(gp_sim_exec *x);
/* The timeline of a step of plan on pair `index` without running it (the
 * cost model called with `step`): t's arrays sized [n_layers][M]. Tests find
 * the best pair by brute force with it. */
gp_status gp_sim_exec_timeline(gp_sim_exec *x, int index, const gp_step_plan *plan, long step, gp_step_timing *t);
/* Pipelined steps completed so far. */
long gp_sim_exec_steps(const gp_sim_exec *x);

#endif
