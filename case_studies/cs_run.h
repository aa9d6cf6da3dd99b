/* Private to the case study's program: the run-wide state and the runner of
 * one workload's configurations (cs_run.c). */
#ifndef GP_CS_RUN_H
#define GP_CS_RUN_H

#include "gp_case_study.h"
#include "gp_engine.h"
#include "gp_weights.h"

typedef struct cs_env {
    const gp_cs_options *o;
    gp_config cfg;
    gp_device_weights *dw;
    gp_green_pool *pool;     /* every split of the run, built once */
    gp_sm_info info;
    int sm_count;
} cs_env;

/* One workload's engine, executor and pipeline, shared by its rows. */
typedef struct cs_workload_run {
    cs_env *env;
    const gp_cs_workload *w;
    gp_assembly as;          /* the engine and its executor (gp_assemble_engine) */
    gp_engine *engine;       /* as.engine */
    gp_cuda_exec *exec;      /* as.exec */
    gp_pipeline *pipe;
    gp_stats_window *window;
    gp_rebalancer *reb;      /* during a row with --rebalance */
    int pair;                /* pool pair in force */
    int *ids;                /* [B] */
    int32_t *tok, *next;     /* [B] */
    bool prefilled;          /* --context prefill: the contexts hold their prefilled C tokens */
} cs_workload_run;

gp_status cs_workload_open(cs_env *env, const gp_cs_workload *w, cs_workload_run *wr);
void cs_workload_close(cs_workload_run *wr);
/* Fill r (configuration and outcome; an error row on failure) and return the
 * row's status, so the sweep can stop on GP_ERR_DEVICE_FAULT. */
gp_status cs_run_seq(cs_workload_run *wr, gp_cs_row *r);
gp_status cs_run_pipelined(cs_workload_run *wr, int pair, int M, unsigned depth, gp_cs_row *r);

/* The engine parameters a workload runs with (cs_workload_open), and the
 * device bytes they, the weights and n_pairs partition pairs need, for the
 * check before anything is allocated. */
gp_engine_params cs_engine_params(const gp_cs_options *o, const gp_cs_workload *w);
gp_status cs_workload_memory(const gp_config *cfg, const gp_cs_options *o, const gp_cs_workload *w, int n_pairs,
                             gp_cs_memory *out);

#endif
