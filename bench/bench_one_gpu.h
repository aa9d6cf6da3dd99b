/* What the multi-GPU benchmarks (gp_bench_tp, gp_bench_afd) share: the
 * one-GPU reference (the whole model on the current GPU, where it fits) and
 * their --csv rows, one shape for both, which bench/placement_report.py
 * reads beside the case study's --csv. */
#ifndef GP_BENCH_ONE_GPU_H
#define GP_BENCH_ONE_GPU_H

#include <stdbool.h>
#include <stdio.h>

#include "gp_model.h"
#include "gp_weights.h"

/* The whole model's synthetic bf16 weights on the current GPU when they fit
 * beside 4 GiB (a KV cache and activations); else GP_OK with *out NULL: no
 * one-GPU row. */
gp_status gp_bench_whole_weights(const gp_config *cfg, gp_device_weights **out);

/* One measured placement of a model over GPUs. */
typedef struct gp_place_row {
    const char *placement; /* "one GPU", "TP", "AFD", "PP" */
    bool prefill;          /* B prompts of C tokens prefilled; else decode steps at context C */
    int gpus, B, C, M;     /* M: micro-batches (1 where the placement has none) */
    bool ok;
    const char *error;     /* when not ok: why */
    double ms;             /* median step (or prefill) */
    double floor_ms;       /* the per-GPU floor of docs/ARCHITECTURE.md §5 (gp_step_floor); 0: none stated */
    bool floor_hbm;        /* that floor is memory's, else the tensor cores' */
    double busy0, busy1;   /* each GPU's busy share of the step (%); < 0: not measured */
    double cross_mb;       /* MB crossing between the GPUs a step; < 0: not measured */
} gp_place_row;

/* A row of placement over gpus GPUs at B x C with M micro-batches, nothing
 * measured yet: not ok, no floor, busy shares and crossing not measured. */
gp_place_row gp_place_row_at(const char *placement, int gpus, int B, int C, int M);
/* The one-GPU reference's row at B x C: timed at ms (0: not timed, then
 * failed with gp_last_error's message, or, without the whole model's
 * weights (!fits), not fitting one GPU); decode rows with cfg's floor. */
gp_place_row gp_place_one_gpu_row(const gp_config *cfg, bool prefill, int B, int C, double ms, bool fits);
/* Opens path for writing and puts the header; NULL with a message on stderr
 * naming prog and the path when it cannot. */
FILE *gp_place_csv_open(const char *prog, const char *path);
/* One line: r under model (its name) on this process's GPU 0 (its name). */
void gp_place_csv_row(FILE *f, const gp_config *model, const gp_place_row *r);
/* r's floor_ms and floor_hbm from cfg's floor at B x C with M micro-batches
 * (cfg: the part one GPU holds). */
void gp_place_floor(const gp_config *cfg, int M, gp_place_row *r);

#endif
