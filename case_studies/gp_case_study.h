/* decode_pipeline_case_study: options, result rows, report writers and the
 * tuning profile. Everything here but the runner (case_study_run.c) needs no
 * GPU, so CI tests the parsing, the writers and the profile. */
#ifndef GP_CASE_STUDY_H
#define GP_CASE_STUDY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gp_common.h"
#include "gp_green.h"
#include "gp_attention.h"
#include "gp_pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_CS_MAX_SPLITS 64
#define GP_CS_MAX_WORKLOADS 16
#define GP_CS_MAX_DEPTHS 8
#define GP_CS_PATH 4096

/* ------------------------------------------------------------ options */

typedef struct gp_cs_workload {
    int B, C;           /* sequences, tokens already cached in each */
    char label[32];     /* "small", "large" or "B:C" */
    int gemm_tune;      /* > 0: this workload's engine times that many GEMM candidates, because the
                           profile's row was measured so (seq too, so the comparison stays fair);
                           0: --gemm-tune's value */
} gp_cs_workload;

typedef struct gp_cs_options {
    /* --sm-splits: attention:FFN SMs; "seq" (always run as the reference row,
     * may be named), "sweep" (every valid split at the device granularity) */
    gp_split_req splits[GP_CS_MAX_SPLITS];
    int n_splits;
    bool sweep;
    bool splits_given;           /* false: the default split set */
    /* --workload small|large|B:C[,...] */
    gp_cs_workload workloads[GP_CS_MAX_WORKLOADS];
    int n_workloads;
    bool workloads_given;        /* false: small and large */
    /* --micro-batches 1,2,4 */
    int micro[GP_PIPE_MAX_MICRO];
    int n_micro;
    /* --placement qkvo-a[,qkvo-f]: where the QKV and O projections run */
    gp_placement placements[2];
    int n_placements;
    gp_fill_drain fill_drain;    /* --fill-drain whole|partition: where fill and drain run */
    bool context_prefill;        /* --context prefill: contexts from a real prefill of random tokens
                                    (default random: random K/V, no prefill) */
    /* --queue-depth 4[,8] */
    unsigned depths[GP_CS_MAX_DEPTHS];
    int n_depths;
    char model[GP_CS_PATH];      /* --model preset|checkpoint-dir (default llama3-8b) */
    int steps;                   /* --steps: timed steps per repeat */
    bool warmup;                 /* --warmup / --no-warmup (on by default) */
    int warmup_steps;            /* steps run untimed first (default 3) */
    int repeat;                  /* --repeat: repeats per configuration */
    gp_rebalance_policy rebalance; /* --rebalance off|ratio|model */
    char tuning[GP_CS_PATH];     /* --tuning FILE: follow its choice (gp_cs_tuning_choose) */
    bool autotune;               /* --autotune: sweep and write the profile to --tuning-out */
    char tuning_out[GP_CS_PATH]; /* --tuning-out FILE (default tuning.json) */
    uint64_t seed;               /* --seed */
    int gemm_tune;               /* --gemm-tune N: timed choice among N cuBLASLt candidates (0: off) */
    bool gemm_tune_given;        /* --gemm-tune was given: a profile row does not change it */
    char profile[GP_CS_PATH];    /* --profile FILE ("": the shipped one, gp_cs_profile_path) */
    bool profile_off;            /* --profile none */
    gp_attn_kernel attn_kernel;  /* --attn-kernel NAME: the decode-attention kernel (auto: the rule) */
    int attn_warps_cap;          /* --attn-warps-cap N: streaming kernel's warps per SM (0: no cap) */
    bool attn_kv_evict_first;    /* --attn-kv-evict on|off: its K/V copies marked L2 evict_first (on) */
    gp_dtype dtype;              /* --dtype auto|bf16|fp16: the engine's 16-bit type (GP_DTYPE_AUTO: the
                                    checkpoint's own, bf16 for fp32 checkpoints and presets) */
    uint64_t vram_budget;        /* --vram-budget SIZE: 0 (default): the weights resident on the GPU; else
                                    weights beyond VRAM: all in pinned host memory, at most this many bytes
                                    of them on the GPU, streamed; every row runs eager (no CUDA graphs) */
    char json[GP_CS_PATH], csv[GP_CS_PATH], trace[GP_CS_PATH], svg[GP_CS_PATH];
    int progress;                /* --progress / --no-progress; -1: when stderr is a terminal */
    bool stats;                  /* --stats: print each pipelined row's pipeline statistics report */
} gp_cs_options;

/* Defaults: seq + the default split set, small and large, M = 1,2, depth 4,
 * llama3-8b, steps 8, warm-up on (3 steps), repeat 5, rebalance off, seed 0. */
void gp_cs_default_options(gp_cs_options *o);

/* Parses argv. Returns 0 (run), 1 (--help printed to out: exit 0) or 2 (bad
 * command line: a message naming the flag, the value and what is allowed,
 * then the usage, printed to err: exit 2). Checks everything that needs no
 * device: numbers, ranges, duplicates, unknown flags. */
int gp_cs_parse_args(int argc, char **argv, gp_cs_options *o, FILE *out, FILE *err);
void gp_cs_usage(FILE *f);

/* Checks the splits against the device (granularity, sum, minimum) and
 * expands "sweep" and the default set into plans, seq first (a plan with
 * attn_sms = ffn_sms = 0). GP_ERR_INVALID_ARG names the bad split and the
 * allowed values. */
gp_status gp_cs_resolve_splits(const gp_cs_options *o, const gp_sm_info *info, gp_split_side side,
                               gp_split_plan *plans, int cap, int *n);

/* Scales the small/large presets to the device (H100: 132 SMs, ~80 GB):
 * on a GPU with fewer SMs or less memory, B (and C) shrink so the workload
 * fits and keeps its character; *note receives a sentence saying what was
 * changed ("" when nothing was). */
void gp_cs_scale_workloads(gp_cs_options *o, int sm_count, double device_gib, char *note, size_t note_len);

/* ------------------------------------------------------------ results */

/* One step's stage times, kept for the trace (ms from the step's start). */
typedef struct gp_cs_trace {
    int n_layers, M;
    float step_ms;
    float *attn_begin, *attn_end, *ffn_begin, *ffn_end; /* [n_layers][M] */
} gp_cs_trace;

/* Weight streaming of a row's timed steps (--vram-budget), per step: the
 * streamer's statistics (gp_streamer_stats) over every timed step of every
 * repeat, divided by their count. on false: resident weights, all 0. */
typedef struct gp_cs_stream {
    bool on;
    int steps;                   /* timed steps the figures cover */
    double gb_per_step;          /* weight bytes copied host to device, 1e9 */
    double copy_gbps;            /* those bytes over the copy engine's busy time; 0 when none */
    double copy_ms_per_step;     /* copy-engine busy time */
    double wait_attn_ms_per_step;/* compute streams stalled on attention-group copies */
    double wait_ffn_ms_per_step; /* ... on FFN-group copies */
    double hits_per_step, misses_per_step, prefetches_per_step, evictions_per_step;
    uint64_t peak_device_bytes;  /* most weight bytes on the GPU during the timed steps */
} gp_cs_stream;

/* One host-to-device weight-group copy in the traced step (streamed weights). */
typedef struct gp_cs_copy {
    char group[24];              /* "attn 3", "ffn 3", "head" */
    uint64_t bytes;
    float begin_ms, end_ms;      /* the copy engine's, from the step's start as the stage times
                                    (begin negative: issued in the step before) */
} gp_cs_copy;

typedef struct gp_cs_row {
    /* configuration */
    char workload[32];
    int B, C;
    bool seq;                    /* the sequential engine on all SMs: the reference row */
    gp_split_info split;         /* requested and obtained */
    int M;
    /* Rows of each micro-batch as the pipeline actually split B: uneven when
     * M does not divide B (the first B % M get one row more). All 0: not
     * known (seq rows, rows that failed before the pipeline was set up). */
    int micro_rows[GP_PIPE_MAX_MICRO];
    unsigned depth;
    gp_placement placement;      /* QKV/O with attention (qkvo-a) or with the FFN (qkvo-f) */
    gp_rebalance_policy rebalance;
    char tag[32];                /* who chose this row: "tuned" or "rule" (--tuning: measured, cold-start
                                    rule), "best-known (NAME)" or "cold-start rule" (the profile) */
    int gemm_tune;               /* GEMM candidates timed for the row's engine (0: the heuristic's pick) */
    char attn_kernel[24];        /* decode-attention kernel of the row's attention stages (seq: on every
                                    SM; pipelined: micro-batch 0 on partition A); "" when not known */
    /* outcome */
    bool ok;
    char error[512];             /* why the configuration failed */
    int n_samples;
    double *samples_ms;          /* [n_samples] ms per step, one per repeat (median of its steps) */
    double ms_median, ms_min, ms_max;
    double tokens_per_s;
    double attn_ms_per_layer, ffn_ms_per_layer;
    double a2f_mb_per_token;
    double ring_occupancy_mean, attn_backlog, ffn_backlog;
    double attn_idle_share, ffn_idle_share;
    double floor_ms, floor_share; /* docs/ARCHITECTURE.md §5 */
    double speedup_vs_seq;       /* seq row's median / this median (same workload, same run) */
    gp_cs_trace trace;           /* one representative step (n_layers 0: none) */
    gp_rebalance_decision *decisions; /* rebalancer log of this row */
    int n_decisions;
    gp_cs_stream stream;         /* weight streaming per step (--vram-budget) */
    /* Weight-group copies that overlap the traced step: the pipelined row's
     * trace step, or the seq row's last timed step, whose length is
     * copy_step_ms. NULL / 0: resident weights, or no copy log. */
    gp_cs_copy *copies;          /* [n_copies], by start */
    int n_copies;
    float copy_step_ms;
} gp_cs_row;

typedef struct gp_cs_meta {
    char gpu[128];
    int sm_count;
    char driver[32], cuda[32], commit[64], model[128], timestamp[64];
    char dtype[8];               /* the dtype the engine ran in ("bf16", "fp16") */
    char notes[1536];            /* e.g. workload scaling, unpartitioned fallback, the profile's choices */
    char stopped[64];            /* "" when the run went through every configuration; else why it
                                    stopped early ("SIGINT", "SIGTERM", "device fault") */
    /* Weights beyond VRAM (--vram-budget); vram_budget 0: resident, the rest unused. */
    uint64_t vram_budget;        /* device bytes the weights may hold */
    uint64_t weight_bytes;       /* every weight as laid out on the GPU, all in pinned host memory */
    int layer_groups;            /* attention and FFN groups of the model (2 per layer) */
    int kept_groups;             /* of them kept on the GPU for good (gp_streamer_stats.kept_groups) */
    uint64_t kept_bytes;
    int prefetch_depth;          /* streamed groups copied ahead of the one in use */
} gp_cs_meta;

void gp_cs_row_free(gp_cs_row *r);
/* Allocates t's four [n_layers][M] arrays (zeroed) as one block held by
 * attn_begin, in struct order. gp_cs_row_free releases a trace made so, or
 * one whose four arrays were malloc'ed separately.
 * GP_ERR_INVALID_ARG / GP_ERR_NO_MEMORY otherwise. */
gp_status gp_cs_trace_alloc(gp_cs_trace *t, int n_layers, int M);

/* ------------------------------------------------------------ writers */

/* Markdown table on f (one line per row; error rows say why). */
void gp_cs_write_markdown(FILE *f, const gp_cs_meta *m, const gp_cs_row *rows, int n);
/* Each writer returns GP_ERR_IO naming the path when it cannot write. */
gp_status gp_cs_write_json(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n);
gp_status gp_cs_write_csv(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n);
/* Chrome trace (Perfetto): a process per row with a trace, a track per
 * partition, a slice per stage (layer, micro-batch), flow arrows from each
 * attention slice to its FFN slice, rebalancer decisions as instant events;
 * rows with weight copies (streamed weights) add a "copy" track, a slice per
 * group copy named by the group ("attn 3"), and the seq row its step. */
gp_status gp_cs_write_trace(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n);
/* tokens/s against attention SMs, one line per workload and M, the seq level
 * of each workload as a dashed line. */
gp_status gp_cs_write_svg(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n);
/* One row and the metadata as --json writes them (jansson json_t*, returned
 * as void* like gp_stats_report_json; json_decref it), for other writers
 * such as the tuning profile. NULL when out of memory. */
void *gp_cs_row_json(const gp_cs_row *r);
void *gp_cs_meta_json(const gp_cs_meta *m);

/* ------------------------------------------------------------ tuning */

/* What the rule or a measurement picks for one workload. */
typedef struct gp_cs_choice {
    bool seq;                    /* no split beats the sequential engine */
    double attn_share;           /* attention SMs / all SMs */
    int attn_sms;                /* rounded to the granularity (0 for seq) */
    int M;
    unsigned depth;
    gp_placement placement;
    int gemm_tune;               /* GEMM candidates it was measured with (0: the heuristic's pick) */
    double ms;                   /* measured (profile entries), 0 for the rule */
} gp_cs_choice;

typedef struct gp_cs_tuning gp_cs_tuning; /* opaque: a loaded profile */

/* Writes the profile: every row, the best configuration per workload, and
 * the fitted cold-start rule with its documentation inside the file. */
gp_status gp_cs_tuning_write(const char *path, const gp_cs_meta *m, const gp_config *cfg, const gp_cs_row *rows,
                             int n);
gp_status gp_cs_tuning_read(const char *path, gp_cs_tuning **out);
void gp_cs_tuning_free(gp_cs_tuning *t);
/* The rule's choice for (B, C) on this model, rounded to the device's
 * granularity; the best measured configuration for exactly (B, C) if the
 * profile has one (best_found false otherwise). */
gp_status gp_cs_tuning_pick(const gp_cs_tuning *t, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                            gp_cs_choice *rule, gp_cs_choice *best, bool *best_found);
/* The profile's choice for (B, C): the best measured configuration when the
 * profile measured exactly this workload (measured true), since a
 * measurement outranks the rule's generalisation (the rule may misclassify
 * a workload it was fitted to); else the rule's. */
gp_status gp_cs_tuning_choose(const gp_cs_tuning *t, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                              gp_cs_choice *out, bool *measured);

/* The device a profile may apply to, as the runner sees it. */
typedef struct gp_cs_device {
    char name[128];              /* cudaDeviceProp.name, e.g. "NVIDIA H100 80GB HBM3" */
    int sm_count;
    int cc_major, cc_minor;      /* compute capability */
} gp_cs_device;

/* Whether the profile's "device" section names d (a listed name, the SM
 * count and the compute capability all equal). False for a profile without
 * one (an --autotune profile: it says only its SM count). *why (may be NULL)
 * receives what differs. */
bool gp_cs_tuning_device_matches(const gp_cs_tuning *t, const gp_cs_device *d, char *why, size_t why_len);
/* The profile's short name ("h100-sxm"; the file name without .json when it
 * has none) and where its figures came from ("" when it does not say). */
const char *gp_cs_tuning_name(const gp_cs_tuning *t);
const char *gp_cs_tuning_source(const gp_cs_tuning *t);

/* The best configuration known for a workload on this device: the profile's
 * measurement when the device matches and the profile measured exactly this
 * workload on this model shape (best_known, tag "best-known (NAME)"), else
 * the profile's cold-start rule for this device (tag "cold-start rule").
 * row: the choice is a split, to be run as a row of its own (seq is the seq
 * row already). note: a sentence for the report saying what was chosen and
 * why. */
typedef struct gp_cs_profile_choice {
    gp_cs_choice choice;
    bool best_known;
    bool row;
    char tag[32];
    char note[640];
} gp_cs_profile_choice;
gp_status gp_cs_profile_choose(const gp_cs_tuning *t, const gp_cs_device *d, const gp_config *cfg,
                               const gp_sm_info *info, const gp_cs_workload *w, gp_cs_profile_choice *out);

/* The profile a run uses: --profile FILE, else the one shipped in the
 * repository (case_studies/profiles/h100-sxm.json); NULL when the run uses
 * none: --profile none, or a run that names its own configurations
 * (--sm-splits, --tuning or --autotune) without --profile FILE. */
const char *gp_cs_profile_path(const gp_cs_options *o);

/* ------------------------------------------------------------ winners */

/* The fastest configuration of one workload of a run, against its seq row. */
typedef struct gp_cs_winner {
    char workload[32];
    int B, C;
    int row;                     /* index of the fastest ok row (seq wins ties); -1: none ran */
    int seq_row;                 /* index of the ok seq row; -1: none */
    int best_split_row;          /* index of the fastest ok split row; -1: none */
    double speedup;              /* seq median / winner median; 0 without a seq row */
} gp_cs_winner;

/* One entry per workload, in the order of first appearance; returns how
 * many (at most cap). */
int gp_cs_winners(const gp_cs_row *rows, int n, gp_cs_winner *out, int cap);
/* The report's line for w: "large (1024:384): 24:108 qkvo-f M=2 depth 4
 * [best-known (h100-sxm)], 39.330 ms, 1.03x seq (40.570 ms)"; when seq wins
 * it says so and gives the fastest split's speedup beside it. */
void gp_cs_winner_text(const gp_cs_winner *w, const gp_cs_row *rows, char *buf, size_t len);

/* ------------------------------------------------------------ device memory */

/* Device bytes one workload needs, by part, so a refusal can say where they go. */
typedef struct gp_cs_memory {
    uint64_t weights;      /* the model's bf16 weights; with weights_streamed, the --vram-budget */
    bool weights_streamed; /* weights beyond VRAM: only the budget is on the device */
    uint64_t kv_cache;     /* paged K and V of B sequences at the longest context the run reaches */
    uint64_t activations;  /* the engine's step buffers and its attention and GEMM workspaces */
    uint64_t pairs;        /* GEMM workspaces of the partition pairs (two per split) */
} gp_cs_memory;

/* Checked before anything is allocated: GP_OK when need fits in device_free,
 * else GP_ERR_DEVICE_MEMORY with a message "<what> needs N bytes (weights ..
 * + KV cache .. + ...) but the GPU has F bytes free of T" (GP_ERR_OVERFLOW
 * when the sum does not fit 64 bits). Pure arithmetic: tested without a GPU. */
gp_status gp_cs_memory_check(const char *what, const gp_cs_memory *need, uint64_t device_free,
                             uint64_t device_total);

/* A sentence for the report's notes naming every (workload, M) whose batch M
 * does not divide, with the micro-batch sizes the pipeline makes of it
 * ("large: B 1024 with M 3: micro-batches of 342+341+341 rows"); "" when
 * every split is even. */
void gp_cs_micro_note(const gp_cs_options *o, char *note, size_t len);

/* ------------------------------------------------------------ signals */

/* SIGINT and SIGTERM only set a flag (a sig_atomic_t; nothing else happens
 * in the handler); the sweep stops after the configuration in progress and
 * the reports are written with the rows that finished. GP_ERR_STATE naming
 * the signal when a handler cannot be installed. */
gp_status gp_cs_signals_install(void);
/* The signal received since the install (SIGINT, SIGTERM), 0 when none. */
int gp_cs_signal_pending(void);
/* Forgets a received signal (tests). */
void gp_cs_signal_clear(void);

/* ------------------------------------------------------------ sweep */

/* Why a run ended. */
typedef enum gp_cs_stop {
    GP_CS_STOP_NONE = 0,     /* every configuration ran */
    GP_CS_STOP_SIGNAL,       /* SIGINT or SIGTERM arrived: stopped after the row in progress */
    GP_CS_STOP_DEVICE_FAULT, /* a row or workload hit GP_ERR_DEVICE_FAULT: the GPU context is unusable */
} gp_cs_stop;

/* What measures the rows: the CUDA runner in the program, a fake in tests.
 * run() gets a row whose configuration is filled in (workload, B, C, seq or
 * split request, M, depth), fills its outcome (an error row on failure) and
 * returns the row's status. */
typedef struct gp_cs_runner {
    void *ctx;
    /* Opens workload wi of the options; on failure gp_last_error says why
     * and every row of the workload becomes an error row carrying it. */
    gp_status (*open)(void *ctx, int wi);
    void (*close)(void *ctx, int wi);
    /* plan: index into the sweep's plans; 0 is seq (M 1, depth 0). */
    gp_status (*run)(void *ctx, int wi, int plan, int M, unsigned depth, gp_cs_row *r);
    /* Optional: at most one more row after the workload's own (the --tuning
     * rule's); *made false when it adds none. opened: open() succeeded. */
    gp_status (*extra)(void *ctx, int wi, bool opened, gp_cs_row *r, bool *made);
} gp_cs_runner;

typedef struct gp_cs_sweep_params {
    const gp_cs_options *o;      /* workloads, micro-batch counts, depths */
    const gp_split_plan *plans;  /* [n_plans], seq (attn_sms 0) first, as gp_cs_resolve_splits gives */
    int n_plans;
    const bool *no_rows;         /* [n_plans] or NULL: plans with no rows of their own (the rule's) */
    const char (*why)[256];      /* [n_plans] or NULL: why a split cannot run ("": it can) */
    bool extra;                  /* the runner has extra(): room for one more row per workload */
    FILE *progress;              /* before each row "[k/n] row: rows done of n, elapsed, ~the rest's estimate",
                                    redrawn in place on a terminal, a line each otherwise; a last line of
                                    the rows and the time; or NULL */
} gp_cs_sweep_params;

typedef struct gp_cs_sweep_result {
    int n_rows;                  /* rows filled, every one finished (ok or an error row) */
    int planned;                 /* rows the whole run would have made */
    gp_cs_stop stop;
    int signal;                  /* with GP_CS_STOP_SIGNAL: SIGINT or SIGTERM */
    char why[600];               /* with GP_CS_STOP_DEVICE_FAULT: the failing row's error */
} gp_cs_sweep_result;

/* Rows the whole sweep makes (the size of rows[] to give gp_cs_sweep_run). */
int gp_cs_sweep_count(const gp_cs_sweep_params *p);
/* Runs every configuration in report order into rows[cap] (zeroed by the
 * caller): per workload the seq row, then
 * split x M x depth, then extra; speedups against each workload's seq row.
 * Before each row it checks gp_cs_signal_pending(); after each it checks the
 * row's status: a signal or GP_ERR_DEVICE_FAULT stops the sweep (the
 * faulting row is kept as an error row; no close() follows a fault, since
 * the context is unusable). Any other failure is an error row and the sweep
 * goes on. GP_ERR_INVALID_ARG when cap is below gp_cs_sweep_count. */
gp_status gp_cs_sweep_run(const gp_cs_sweep_params *p, const gp_cs_runner *rn, gp_cs_row *rows, int cap,
                          gp_cs_sweep_result *res);

/* Ends a run: records an early stop in m (stopped, a sentence in notes),
 * writes the markdown table to out and every report o asks for (JSON, CSV,
 * trace, SVG) with the rows there are, and says on err what failed, or why
 * the run stopped early and what the files hold. extra_failures: failures
 * the caller had (e.g. the tuning profile). Returns the exit status: 0; 1
 * when a row or report failed or a device fault stopped the run; 128 + the
 * signal (130 SIGINT, 143 SIGTERM) when interrupted. */
int gp_cs_finish(const gp_cs_options *o, gp_cs_meta *m, const gp_cs_row *rows, const gp_cs_sweep_result *res,
                 int extra_failures, FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif
#endif
