/* greenpipe pipeline: the step runner that runs a chain of N stages per
 * (layer, micro-batch) of M micro-batches, one thread per stage and
 * per-layer rings between consecutive stages, over an executor (CUDA
 * partitions or CPU threads), and the statistics of every step. Attention ->
 * ring -> FFN is the two-stage graph the executors of this folder run.
 * Includes no CUDA header. */
#ifndef GP_PIPELINE_H
#define GP_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gp_common.h"
#include "gp_model.h"
#include "gp_queues.h"
#include "gp_reference.h"
#include "gp_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_PIPE_MAX_MICRO 4
#define GP_PIPE_MAX_STAGES 4

/* ------------------------------------------------------------ executor */

/* The rows of one step and how they split into micro-batches. */
typedef struct gp_step_plan {
    int B;                        /* rows (sequences) in the step */
    int M;                        /* micro-batches, 1..GP_PIPE_MAX_MICRO */
    int b0[GP_PIPE_MAX_MICRO];    /* first row of each micro-batch */
    int nb[GP_PIPE_MAX_MICRO];    /* rows of each micro-batch (>= 1) */
    int n_layers;
} gp_step_plan;

/* Stage times of one step in ms from the step's start, as the executor saw
 * them (device events for CUDA, the host clock for the CPU executor). */
typedef struct gp_step_timing {
    float step_ms;                    /* start of the step to the end of its last stage */
    float *begin[GP_PIPE_MAX_STAGES]; /* [n_layers][M] of each stage of the graph */
    float *end[GP_PIPE_MAX_STAGES];   /* [n_layers][M] */
} gp_step_timing;

/* The SM split (or CPU threads) of one partition pair. */
typedef struct gp_split_info {
    int a_req, f_req;   /* requested attention / FFN SMs (0: the sequential engine) */
    int a_got, f_got;   /* obtained, as the driver reports them */
    bool partitioned;   /* false: plain streams sharing every SM (fallback) */
    const char *unit;   /* "SMs" or "threads" */
} gp_split_info;

/* One lane's account: a kind of batch on one partition. */
typedef struct gp_lane_busy {
    char lane[16];       /* what it ran: "decode", "prefill" or "mixed" (decode rows and prefill chunks) */
    char partition[16];  /* its SMs: "32:100" (a pair's: decode SMs, prefill SMs) or "all" */
    double busy_s;       /* device time of its batches */
    double selected_s;   /* a pair's lanes: wall time the pair was the selected one; "all": 0 */
    long long batches, rows;
} gp_lane_busy;
#define GP_MAX_LANE_TIMES 40

/* The chain of stages a pipelined step runs per (layer, micro-batch):
 * stage 0 reads a micro-batch's residual rows where the executor keeps
 * them, each later stage the payload of the stage before it. The first is
 * the attention side of the statistics, the last the FFN side. */
typedef struct gp_stage_graph {
    int n_stages;                          /* 2..GP_PIPE_MAX_STAGES */
    const char *names[GP_PIPE_MAX_STAGES]; /* for messages: "attention", "FFN" */
} gp_stage_graph;

/* The step protocol a gp_pipeline drives (docs/ARCHITECTURE.md section 2).
 * Calls of one pipelined step come in this order: step_begin (caller
 * thread), then stage(i, ...) from the thread of stage i, every stage's
 * thread at once, then step_end (caller thread); abort_step instead of
 * step_end when a stage failed. For each (layer L, micro-batch m): stage i
 * is called after stage i-1 of (L, m) has returned, with its payload; stage
 * 0 of (L, m) only once stage N-1 of (L-1, m) has returned, so an executor
 * can order them on the device (an event wait). A stage reads exactly the
 * views of the payload it is handed, wherever they point, and the
 * executor's next stage 0 of that micro-batch reads the residual rows
 * where its last stage left them. */
typedef struct gp_step_ops {
    const char *name;
    gp_stage_graph graph;
    /* Validate and upload the step's inputs, embed; plan says the micro-batches. */
    gp_status (*step_begin)(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens);
    /* Issue stage `stage` of (layer, micro): in is the payload of stage - 1
     * (NULL for stage 0), out receives what crosses to stage + 1 (rows, the
     * views, the event that makes them ready; NULL for the last stage). */
    gp_status (*stage)(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out);
    /* Close the step (final norm, LM head, argmax after every last stage),
     * wait for it: next[B], logits [B][vocab] (may be NULL), the timing
     * arrays of each stage, sized by the plan. */
    gp_status (*step_end)(void *ctx, int32_t *next, float *logits, gp_step_timing *t);
    void (*abort_step)(void *ctx);
} gp_step_ops;

/* What greenpipe generate, the case study and the tests ask of an executor
 * besides pipelined steps: whole steps and prompts, and the partition pairs
 * the pipelined steps may run on. */
typedef struct gp_session_ops {
    const char *name;
    /* The sequential engine (no split, whole device): the reference row.
     * logits and step_ms may be NULL. */
    gp_status (*sequential_step)(void *ctx, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                                 float *logits, float *step_ms);
    /* Fill the KV caches of S sequences from their prompts in one call
     * (gp_prefill_seq: distinct sequences, each may already hold tokens).
     * next [S] (may be NULL) receives the greedy token after each prompt,
     * last_logits [S][vocab] (may be NULL) the logits it was chosen from,
     * prompt_logits [sum of n][vocab] (may be NULL) the logits at every
     * prompt position, prompts in order. NULL where the executor computes
     * nothing (the simulated one of tests/support). */
    gp_status (*prefill)(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last_logits,
                         float *prompt_logits);
    void (*reset_seq)(void *ctx, int seq); /* forget seq's tokens; NULL like prefill */
    /* One forward over a mixed batch (gp_stage.h: prefill chunks, then decode
     * rows; checked by gp_batch_check before anything changes): next
     * [n_parts] (may be NULL) each part's greedy token, logits
     * [n_parts][vocab] (may be NULL) the logits after each part's last
     * token, step_ms (may be NULL) its time. NULL like prefill. */
    gp_status (*run_batch)(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms);
    /* Shared KV blocks, for a prefix cache (NULL where the executor has
     * none). A handle names a block the executor keeps (>= 0).
     * retain_block: keep full block index of sequence seq past seq's reset;
     * drop_block: let a retained block go; attach_blocks: empty sequence seq
     * starts with the retained blocks handles[0..n) as its first n x
     * block_size tokens. */
    gp_status (*retain_block)(void *ctx, int seq, int index, int *handle);
    void (*drop_block)(void *ctx, int handle);
    gp_status (*attach_blocks)(void *ctx, int seq, const int *handles, int n);
    /* A host tier behind the prefix cache (NULL where the executor has
     * none; GP_ERR_STATE where its backend holds no store): the engine's
     * gp_engine_host_seed, _offload, _lookup and _load, whose contract the
     * scheduler's host ops (sched/gp_sched.h) follow. */
    uint64_t (*host_seed)(void *ctx);
    gp_status (*host_offload)(void *ctx, int handle, uint64_t key, const int32_t *tokens);
    gp_status (*host_lookup)(void *ctx, const uint64_t *keys, const int32_t *tokens, int n, int *held);
    gp_status (*host_load)(void *ctx, int seq, int n);
    /* A prefill lane beside run_batch's (NULL where the executor has none):
     * the scheduler's prefill_launch and prefill_poll (sched/gp_sched.h,
     * GP_SCHED_PD_MUX). */
    gp_status (*prefill_launch)(void *ctx, const gp_batch *b, int32_t *next, float *logits);
    gp_status (*prefill_poll)(void *ctx, bool wait, bool *done);
    /* The planner of an adaptive prefill lane (NULL where the executor has
     * none): the scheduler's pd_plan (sched/gp_sched.h); a lane choice
     * selects its pair before it returns. */
    gp_status (*pd_plan)(void *ctx, const gp_pd_plan_in *in, gp_pd_plan *out);
    /* Where the executor's lanes spent their time since it was made (NULL
     * where it keeps no account): at most cap entries to out, returns how
     * many it has. */
    int (*lane_times)(void *ctx, gp_lane_busy *out, int cap);
    /* Partition pairs this executor holds; index -1 in split_info is the one
     * in force. May be NULL (one fixed pair). */
    int (*n_splits)(void *ctx);
    gp_status (*select_split)(void *ctx, int index); /* between steps only */
    void (*split_info)(void *ctx, int index, gp_split_info *out);
} gp_session_ops;

/* An executor: its two interfaces over one context. step is NULL for an
 * executor that serves no pipelined steps. */
typedef struct gp_exec {
    const gp_step_ops *step;
    const gp_session_ops *session;
    void *ctx;
} gp_exec;

/* ------------------------------------------------------------ runner */

typedef struct gp_pipeline_params {
    int micro_batches;                  /* M, 1..GP_PIPE_MAX_MICRO */
    int micro_sizes[GP_PIPE_MAX_MICRO]; /* rows per micro-batch; all 0: split B evenly */
    gp_ring_params ring;                /* per-layer ring depth and spin */
} gp_pipeline_params;
gp_pipeline_params gp_pipeline_default_params(void); /* M = 2, even split, ring defaults */

typedef struct gp_pipeline gp_pipeline; /* opaque */

/* exec is borrowed and must outlive the pipeline; starts one thread per
 * stage of its graph. */
gp_status gp_pipeline_create(gp_exec exec, int n_layers, const gp_pipeline_params *p, gp_pipeline **out);
void gp_pipeline_destroy(gp_pipeline *pl);
/* Change M, sizes or ring depth between steps (rings are rebuilt if the depth
 * changes). */
gp_status gp_pipeline_set_params(gp_pipeline *pl, const gp_pipeline_params *p);
const gp_pipeline_params *gp_pipeline_params_get(const gp_pipeline *pl);
/* The micro-batch plan for B rows under p (checks sizes sum to B). */
gp_status gp_pipeline_plan(const gp_pipeline_params *p, int n_layers, int B, gp_step_plan *out);

/* One pipelined decode step: next[B] greedy tokens, logits [B][vocab] or NULL.
 * On failure every thread is stopped, the rings are drained and the executor's
 * step aborted; the pipeline stays usable. */
gp_status gp_pipeline_step(gp_pipeline *pl, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                           float *logits);

/* ------------------------------------------------------------ statistics */

/* One step, derived from the executor's stage times, the rings and the host
 * waits. Arrays are [n_layers][M] or [n_layers]. Two-sided: attention is the
 * graph's first stage, FFN its last, A->F the bytes its first stage hands
 * on; the times of every stage are in gp_pipeline_last_timing. */
typedef struct gp_step_stats {
    int B, M, n_layers;
    int nb[GP_PIPE_MAX_MICRO];
    gp_split_info split;
    float step_ms;
    double tokens_per_s;
    float *attn_ms;          /* [n_layers][M] attention stage latency */
    float *ffn_ms;           /* [n_layers][M] FFN stage latency */
    double *a2f_bytes;       /* [n_layers] bytes crossing A->F, all micro-batches */
    double a2f_mb_per_token; /* average over layers of a2f_bytes / B / 1e6 */
    /* backlog: payloads in a ring when a stage pushed into it (host side), and
     * stages ready but not yet started on the device (from stage times) */
    double ring_occupancy_mean;
    unsigned ring_occupancy_max;
    double attn_backlog_mean;   /* micro-batches ready for attention at each attention start */
    double ffn_backlog_mean;    /* payloads whose attention ended, at each FFN start */
    /* idle */
    double producer_wait_ms;    /* host, first stage: blocked on a full ring or on the FFN it depends on */
    double consumer_wait_ms;    /* host, last stage: blocked on an empty ring */
    double attn_idle_ms;        /* partition A: step time not covered by attention stages */
    double ffn_idle_ms;         /* partition F: step time not covered by FFN stages */
} gp_step_stats;

/* The last successful step's statistics and stage times (valid until the
 * next step; NULL after a failed one). */
const gp_step_stats *gp_pipeline_last_stats(const gp_pipeline *pl);
const gp_step_timing *gp_pipeline_last_timing(const gp_pipeline *pl);

/* Averages over a window of steps, for reports and the rebalancer. */
typedef struct gp_stats_summary {
    int steps;
    int B, M, n_layers;
    gp_split_info split;
    double step_ms_mean, step_ms_min, step_ms_max;
    double tokens_per_s;
    double attn_ms_per_layer, ffn_ms_per_layer; /* all micro-batches of one layer */
    double *attn_ms_layer, *ffn_ms_layer;       /* [n_layers] mean per layer */
    double *a2f_mb_per_token_layer;             /* [n_layers] */
    double a2f_mb_per_token;
    double ring_occupancy_mean;
    unsigned ring_occupancy_max;
    double attn_backlog_mean, ffn_backlog_mean;
    double producer_wait_ms, consumer_wait_ms;
    double attn_idle_share, ffn_idle_share;     /* of the step time */
} gp_stats_summary;

typedef struct gp_stats_window gp_stats_window; /* opaque accumulator */
gp_status gp_stats_window_create(int n_layers, gp_stats_window **out);
void gp_stats_window_destroy(gp_stats_window *w);
void gp_stats_window_reset(gp_stats_window *w);
gp_status gp_stats_window_add(gp_stats_window *w, const gp_step_stats *s);
/* Summary of the steps added since the last reset; arrays owned by w. */
gp_status gp_stats_window_summary(gp_stats_window *w, gp_stats_summary *out);

/* The "pipeline statistics" report: a text table, and JSON (a jansson json_t*,
 * returned as void* to keep jansson out of this header; free with json_decref). */
void gp_stats_report_text(FILE *f, const char *title, const gp_stats_summary *s);
void *gp_stats_report_json(const gp_stats_summary *s);

/* ------------------------------------------------------------ rebalancer */

/* Resizes the SM split between steps from windowed statistics, choosing only
 * among the executor's pooled pairs (gp_session_ops.n_splits/split_info). */
typedef enum gp_rebalance_policy {
    GP_REBALANCE_OFF = 0,
    GP_REBALANCE_RATIO = 1, /* attention share from the attention/FFN latency ratio, bounded: the sqrt
                               form for M = 1, linear for M >= 2 (gp_rebalance_target_share) */
    GP_REBALANCE_MODEL = 2, /* predict step time per pair from latency-vs-SM samples; pick the best */
} gp_rebalance_policy;
const char *gp_rebalance_policy_name(gp_rebalance_policy p);

typedef struct gp_rebalance_params {
    gp_rebalance_policy policy;
    int window;              /* steps averaged per decision */
    double hysteresis;       /* move only for a predicted gain above this fraction */
    double min_share, max_share; /* bounds of the attention share */
    int cooldown;            /* steps after a move before the next decision */
} gp_rebalance_params;
gp_rebalance_params gp_rebalance_default_params(void);

/* One decision (taken at a window's end, moving or not), with its inputs. */
typedef struct gp_rebalance_decision {
    int step;                /* steps observed when it was taken */
    int from, to;            /* pair indices */
    int from_a, to_a;        /* attention SMs of those pairs */
    double attn_ms, ffn_ms;  /* window means per layer */
    double attn_backlog, ffn_backlog, a2f_mb_per_token, step_ms;
    double target_share;     /* ratio: the share asked for */
    double predicted_from_ms, predicted_to_ms; /* model: predicted step times */
    char reason[160];
} gp_rebalance_decision;

typedef struct gp_rebalancer gp_rebalancer; /* opaque */
/* pairs[n_pairs]: the candidate splits in the executor's index order. */
gp_status gp_rebalancer_create(const gp_rebalance_params *p, const gp_split_info *pairs, int n_pairs,
                               gp_rebalancer **out);
void gp_rebalancer_destroy(gp_rebalancer *r);
/* Feed the statistics of one step run on pair `current`. *next receives the
 * pair for the next step; returns true when a decision was taken (then *d is
 * filled and also kept in the log). */
bool gp_rebalancer_observe(gp_rebalancer *r, int current, const gp_step_stats *s, int *next,
                           gp_rebalance_decision *d);
int gp_rebalancer_log(const gp_rebalancer *r, const gp_rebalance_decision **out);

/* ---------------------------------------- rebalancer internals
 * The pure functions the rebalancer decides with, exposed so tests check them
 * and reports can quote them. */

/* Step time of n_layers x M stages of uniform length on two in-order streams
 * (A issues (l, m) in layer-major order, F likewise) with the runner's
 * dependencies: A(l, m) after F(l-1, m), F(l, m) after A(l, m). From 0 to the
 * end of the last FFN; 0 for a non-positive or non-finite input. */
double gp_overlap_step_ms(int n_layers, int M, double attn_stage_ms, double ffn_stage_ms);

/* The ratio policy's attention share: with t_a, t_f the measured attention and
 * FFN latency per layer at share s0, and latency inversely proportional to a
 * side's SMs, the work is w_a = t_a s0, w_f = t_f (1 - s0), and
 *   M >= 2 (the sides overlap, the slower one sets the step):
 *          s* = w_a / (w_a + w_f)                     (equal latencies)
 *   M == 1 (the sides alternate, the step is their sum):
 *          s* / (1 - s*) = sqrt(w_a / w_f)            (minimum of w_a/s + w_f/(1-s))
 * clamped to [min_share, max_share]. s0 clamped (with non-positive or
 * non-finite latencies) when there is nothing to go on. */
double gp_rebalance_target_share(double attn_ms, double ffn_ms, double share, int M, double min_share,
                                 double max_share);

/* Latency of one side against its SM count, fitted to samples (s_i, t_i), as
 * a roofline sum: t(s) = m max(1, s_sat / s) + c / s, with m the
 * memory-bound part at full bandwidth (reached from s_sat =
 * GP_REBALANCE_SAT_SHARE x total_sms SMs up: docs/ARCHITECTURE.md section 6, a copy on
 * 56 of 132 SMs moves 99% of the bytes of all 132) and c the compute part
 * (ms x SMs). With >= 2 distinct counts, m, c >= 0 by least squares of the
 * relative error (counts all at or below s_sat cannot tell the two apart:
 * c alone). With one count (s0, t0) the split between m and c is unknown and
 * the prediction is the optimistic one, so that the policy explores rather
 * than stalls (a measurement then corrects it): more SMs scale as compute,
 * t0 s0 / s; fewer cost only as memory, t0 max(1, s_sat / s) / max(1,
 * s_sat / s0), i.e. nothing down to s_sat. */
#define GP_REBALANCE_SAT_SHARE (56.0 / 132.0)
typedef struct gp_latency_fit {
    int n;             /* distinct SM counts used (0: no fit) */
    double mem_ms;     /* m (n >= 2) */
    double comp;       /* c, ms x SMs (n >= 2) */
    double s_sat;      /* SMs from which the memory part runs at full bandwidth */
    double s0, t0;     /* the one sample (n == 1) */
} gp_latency_fit;
gp_status gp_latency_fit_make(const double *sms, const double *ms, int n, double total_sms, gp_latency_fit *out);
double gp_latency_fit_eval(const gp_latency_fit *f, double sms);

/* ------------------------------------------------------------ executors */

/* CPU executor: the float32 reference's stages (attention -> FFN), with
 * worker threads standing in for partitions (attention on a_threads, FFN on
 * f_threads). Needs no GPU;
 * CI runs the real scheduler end to end on it. model is borrowed. */
typedef struct gp_cpu_exec gp_cpu_exec;
gp_status gp_cpu_exec_create(gp_cpu_model *model, int a_threads, int f_threads, gp_cpu_exec **out);
void gp_cpu_exec_destroy(gp_cpu_exec *x);
gp_exec gp_cpu_exec_get(gp_cpu_exec *x);


/* CUDA executor: stages of the engine on the pool's partition pairs (the
 * graph attention -> FFN: attention on A, FFN and the head on F), graphs per stage when use_graphs. engine and
 * pool are borrowed; the pool's pairs are the splits select_split chooses.
 * pool NULL: sequential steps and prefill only (n_splits 0; a pipelined step
 * is refused with GP_ERR_STATE). */
typedef struct gp_engine gp_engine;
typedef struct gp_green_pool gp_green_pool;
typedef struct gp_cuda_exec gp_cuda_exec;
gp_status gp_cuda_exec_create(gp_engine *engine, gp_green_pool *pool, bool use_graphs, gp_cuda_exec **out);
void gp_cuda_exec_destroy(gp_cuda_exec *x);
gp_exec gp_cuda_exec_get(gp_cuda_exec *x);
/* The event the last pipelined step's gp_step_timing counts from
 * (cudaEvent_t as void*, with timing), to place other device times on that
 * step's clock (e.g. weight copies: gp_device_weights_stream_copy_log);
 * recorded again by the next step. */
void *gp_cuda_exec_step_event(const gp_cuda_exec *x);

/* The decode-attention kernel (gp_attn_kernel_name) that attention stages of
 * rows rows at context max_len run on partition A of pair (-1: the pair in
 * force), for reports. */
gp_status gp_cuda_exec_attn_kernel(gp_cuda_exec *x, int pair, int rows, int max_len, const char **name);

/* Which partition runs a layer's QKV and O projections. QKVO_A (default):
 * attention stage = norm, QKV, RoPE, decode attention, O; A->F carries the
 * fp32 residual rows. QKVO_F: attention stage = RoPE + decode attention only
 * (no GEMM on A); the FFN stage of layer l runs O(l), FFN(l), then norm and
 * QKV of layer l+1; A->F carries the bf16 attention output rows. Same math,
 * same kernels, another split of the work between the sides. */
typedef enum gp_placement { GP_PLACE_QKVO_A = 0, GP_PLACE_QKVO_F = 1 } gp_placement;
const char *gp_placement_name(gp_placement p); /* "qkvo-a", "qkvo-f" */
gp_status gp_placement_parse(const char *s, gp_placement *out);
/* Takes effect from the next step (captured stage graphs are dropped). */
gp_status gp_cuda_exec_set_placement(gp_cuda_exec *x, gp_placement p);

/* Where a step's fill and drain run: the uploads, the embedding, the first
 * micro-batch's layer-0 attention stage (with QKVO_F's layer-0 QKV of the
 * whole batch) before the pipeline fills, and the last micro-batch's last
 * FFN stage and the LM head after it drains. Nothing overlaps them, so
 * WHOLE (default) runs them on the whole GPU; PARTITION keeps them on A and
 * F (for comparison). */
typedef enum gp_fill_drain { GP_FILL_DRAIN_WHOLE = 0, GP_FILL_DRAIN_PARTITION = 1 } gp_fill_drain;
const char *gp_fill_drain_name(gp_fill_drain f); /* "whole", "partition" */
gp_status gp_fill_drain_parse(const char *s, gp_fill_drain *out);
/* Takes effect from the next step. */
gp_status gp_cuda_exec_set_fill_drain(gp_cuda_exec *x, gp_fill_drain f);


/* AFD executor (attention-FFN disaggregation over two GPUs of this
 * process): the graph attention -> FFN with the attention stages, the
 * embedding, the head and the KV cache on ea's default lane (CUDA device
 * dev_a) and the FFN stages on ef's (dev_f); each micro-batch's fp32
 * residual rows cross by peer copy before and after its FFN stage, and
 * with M micro-batches the GPUs ping-pong. Both engines are borrowed, one
 * model in one dtype (ef needs only the FFN weights' use: its KV cache may
 * be minimal, max_batch at least ea's); per-stage graphs when use_graphs.
 * Sequential steps and prefill run on ea alone (the whole model there).
 * GP_ERR_UNSUPPORTED when the GPUs lack peer access. */
typedef struct gp_afd_exec gp_afd_exec;
gp_status gp_afd_exec_create(gp_engine *ea, int dev_a, gp_engine *ef, int dev_f, bool use_graphs,
                             gp_afd_exec **out);
void gp_afd_exec_destroy(gp_afd_exec *x);
gp_exec gp_afd_exec_get(gp_afd_exec *x);
/* The FFN side opened from a model source beside ea (on dev_a, holding the
 * whole model: prefill and sequential steps run there): src's FFN groups
 * alone on dev_f (a preset's generated, a checkpoint's read and uploaded) in
 * ea's dtype, an engine over them for ea's batches, and the AFD executor of
 * the two (gp_afd_pair_exec). GP_ERR_NO_DEVICE naming the count when the
 * host lacks the devices. Leaves dev_a current. */
typedef struct gp_afd_pair gp_afd_pair;
gp_status gp_afd_pair_open(const gp_model_source *src, gp_engine *ea, int dev_a, int dev_f, bool use_graphs,
                           gp_afd_pair **out);
gp_exec gp_afd_pair_exec(gp_afd_pair *p);
double gp_afd_pair_ffn_gb(const gp_afd_pair *p); /* the FFN GPU's weights, GB */
void gp_afd_pair_close(gp_afd_pair *p);


/* ------------------------------------------------------------ tensor-parallel serving */

/* Rank 0 leads, the other ranks follow (library gp_pipeline_tp): the
 * leader wraps its executor so that every session operation that changes
 * the engines' state (run_batch, reset_seq, and the prefix cache's
 * retain_block, drop_block and attach_blocks) goes to the followers over the
 * group's links (comm/'s gp_group_send) in order before (a batch: its
 * collectives wait for every rank) or after (a retained block's handle,
 * which followers check) the leader runs it; the followers repeat each on
 * their executor (gp_tp_follow) until gp_tp_lead_end. The leader's session
 * offers those operations and lane_times, nothing else (no host tier, no
 * prefill lane). A follower's refusal of a batch's input is the leader's
 * too and is passed over; any other failure ends gp_tp_follow with it, and
 * the process that leaves fails the group, so the leader's next collective
 * returns. */
typedef struct gp_group gp_group;
typedef struct gp_tp_lead gp_tp_lead;
gp_status gp_tp_lead_create(gp_exec inner, gp_group *g, gp_tp_lead **out);
gp_exec gp_tp_lead_get(gp_tp_lead *l);
gp_status gp_tp_lead_end(gp_tp_lead *l);
void gp_tp_lead_destroy(gp_tp_lead *l);
/* ops_done (may be NULL): the operations repeated. GP_OK after the
 * leader's end. */
gp_status gp_tp_follow(gp_exec inner, gp_group *g, long long *ops_done);


/* ------------------------------------------------------------ prefill and decode lanes */

/* The latency model of prefill and decode on two SM partitions: step times
 * measured per partition pair (gp_pd_exec_profile at start-up, or a profile
 * file), fitted by least squares, and the planner that chooses, each time
 * the prefill lane is free, where the waiting prefill goes (gp_pd_plan). */
#define GP_PD_MAX_SPLITS 16
#define GP_PD_WHOLE (-1) /* the split index of every SM: no partition */

typedef enum gp_pd_kind {
    GP_PD_DECODE = 0, /* decode rows on a pair's decode partition, or on every SM */
    GP_PD_PREFILL,    /* a prefill batch on a pair's prefill partition, or on every SM */
    GP_PD_MIXED,      /* decode rows and prefill tokens in one batch on every SM (chunked prefill's step) */
} gp_pd_kind;
const char *gp_pd_kind_name(gp_pd_kind k); /* "decode", "prefill", "mixed" */
gp_status gp_pd_kind_parse(const char *s, gp_pd_kind *out);

/* One measured step. */
typedef struct gp_pd_sample {
    gp_pd_kind kind;
    int split;         /* the profile's split index, or GP_PD_WHOLE (always for MIXED) */
    bool corun;        /* measured while the pair's other partition worked (DECODE beside a prefill
                          batch, PREFILL beside decode steps); false with GP_PD_WHOLE */
    int rows;          /* decode rows (DECODE, MIXED); 0 for PREFILL */
    long long context; /* the decode rows' contexts summed (DECODE, MIXED); 0 for PREFILL */
    int tokens;        /* prefill tokens (PREFILL, MIXED); 0 for DECODE */
    int position;      /* tokens their sequence held before (PREFILL, MIXED: a later chunk of a long
                          prompt attends over them); 0 for DECODE */
    float ms;          /* the step's time (device events) */
} gp_pd_sample;

/* What a profile was measured on, and its samples. */
typedef struct gp_pd_profile {
    char device[128]; /* the GPU ("NVIDIA H100 80GB HBM3") */
    char model[128];  /* the model and dtype it ran ("llama3-8b bf16") */
    int n_splits;
    int decode_sms[GP_PD_MAX_SPLITS];  /* each pair's decode partition, obtained SMs */
    int prefill_sms[GP_PD_MAX_SPLITS]; /* its prefill partition */
    int n_samples, cap_samples;
    gp_pd_sample *samples;             /* owned; gp_pd_profile_free */
} gp_pd_profile;
/* Appends s (checked: kind, split in range or WHOLE, counts >= 0, ms > 0). */
gp_status gp_pd_profile_add(gp_pd_profile *p, const gp_pd_sample *s);
void gp_pd_profile_free(gp_pd_profile *p); /* frees the samples and zeroes p */
/* JSON: {"format": "greenpipe-pd-profile", "version": 1, "device", "model",
 * "splits": [{"decode_sms", "prefill_sms"}], "samples": [{"kind", "split"
 * (-1: every SM), "corun", "rows", "context", "tokens", "position", "ms"}]}. A bad file
 * is GP_ERR_INVALID_ARG naming the path and the bad field; one that cannot
 * be opened GP_ERR_IO. */
gp_status gp_pd_profile_save(const gp_pd_profile *p, const char *path);
gp_status gp_pd_profile_load(const char *path, gp_pd_profile *out);

/* The fitted model, per (kind, split, corun):
 *   DECODE  ms = c0 + c1 rows + c2 context
 *   PREFILL ms = c0 + c1 tokens + c2 a
 *   MIXED   ms = c0 + c1 rows + c2 context + c3 tokens + c4 a
 * where a = tokens x (position + tokens / 2), the prompt tokens' attention
 * pairs (several prompt sizes at position 0 pin c2 as well as later
 * chunks);
 * Every split needs DECODE and PREFILL samples beside the other side
 * (corun) and alone; every SM (GP_PD_WHOLE) needs DECODE, PREFILL and
 * MIXED; each with at least as many distinct points as coefficients. A
 * missing set is GP_ERR_INVALID_ARG naming it ("split 1 (32:100): prefill
 * beside decode: 1 distinct point; 2 needed"). */
typedef struct gp_pd_model gp_pd_model; /* opaque */
gp_status gp_pd_model_fit(const gp_pd_profile *p, gp_pd_model **out); /* p is copied */
void gp_pd_model_destroy(gp_pd_model *m);
const gp_pd_profile *gp_pd_model_profile(const gp_pd_model *m);
/* The predicted step in ms, never below the smallest sample of its set; -1
 * for a set the model does not hold (corun with GP_PD_WHOLE, a bad split).
 * predict: prompt tokens at position 0. */
float gp_pd_model_predict_at(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun, int rows,
                             long long context, int tokens, int position);
float gp_pd_model_predict(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun, int rows,
                          long long context, int tokens);
/* The largest |predicted - measured| / measured over a set's samples. */
float gp_pd_model_fit_error(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun);

typedef struct gp_pd_planner_params {
    float tpot_ms;   /* the decode step to stay under on average (greenpipe serve --pd-tpot-ms); default 40 */
    int window;      /* decode steps that average (--pd-tpot-window): a mixed batch's step may spend the
                        slack the last window - 1 observed steps left under tpot_ms (gp_pd_planner_observe),
                        as a request's TPOT is the mean of its steps; 1: every step under tpot_ms;
                        default 32, 1..100000 */
    int hysteresis;  /* launches in a row that must choose a smaller decode partition before the
                        planner takes one (a larger one is taken at once: it protects the TPOT); a
                        prediction near the target would otherwise flip the partition launch by launch
                        and the inter-token time with it; default 3 (--pd-hysteresis), >= 1 */
    int lane_tokens; /* the prefill lane's rows: a lane batch's most tokens (the executor's prefill rows) */
    bool mixed;      /* mixed batches on every SM are candidates (default on; --pd-no-mixed) */
} gp_pd_planner_params;
gp_pd_planner_params gp_pd_planner_default_params(void); /* lane_tokens 0: must be set */

/* One launch's choice. */
typedef struct gp_pd_choice {
    gp_pd_run run;
    int split;            /* GP_PD_RUN_LANE: the pair, or GP_PD_WHOLE (no decode rows: every SM prefills);
                             GP_PD_RUN_MIXED: GP_PD_WHOLE */
    int tokens;           /* the batch's most prefill tokens, >= 1 */
    float decode_ms;      /* predicted decode step beside it (0 without decode rows) */
    float prefill_tok_s;  /* predicted prefill tokens per second */
    bool meets_tpot;      /* decode_ms <= tpot_ms (true without decode rows) */
} gp_pd_choice;

/* The rule, each launch (in->decode_rows and in->decode_context describe
 * the step's decode rows; n = min(lane_tokens, token_budget, backlog)):
 *  - no decode rows: GP_PD_RUN_LANE on GP_PD_WHOLE, n tokens;
 *  - else every pair s is a candidate with decode_ms = DECODE(s, corun) and
 *    prefill rate n / PREFILL(s, corun, n); with mixed on, the mixed batch
 *    of the most tokens m <= min(token_budget, backlog) whose MIXED step
 *    stays under tpot_ms is one too (decode_ms = that step, rate m / it);
 *    the candidate with the highest prefill rate among those under tpot_ms
 *    wins; none under it: the one of the smallest decode_ms (meets_tpot
 *    false);
 *  - hysteresis: a lane choice whose decode partition is smaller than the
 *    last lane choice's is replaced by the last one until it has come
 *    hysteresis launches in a row.
 * For the mixed batch "under tpot_ms" is under the step limit: tpot_ms
 * plus the slack the observed steps of the window left (the sum of tpot_ms
 * - each, where positive); a lane candidate is held to tpot_ms itself (its
 * rows stay on the partition for every step of its batch). */
typedef struct gp_pd_planner gp_pd_planner; /* opaque */
gp_status gp_pd_planner_create(const gp_pd_model *m, const gp_pd_planner_params *p, gp_pd_planner **out);
void gp_pd_planner_destroy(gp_pd_planner *pl);
gp_status gp_pd_planner_choose(gp_pd_planner *pl, const gp_pd_plan_in *in, gp_pd_choice *out);
/* A decode step's time as the rows saw it (the executor's run_batch), into
 * the window the mixed batch's step limit averages over. */
void gp_pd_planner_observe(gp_pd_planner *pl, float ms);

/* The prefill/decode executor: two lanes over engine's model state and KV
 * cache on each of n_pairs green pairs (the decode lane, max_batch rows, on
 * the pair's A stream; the prefill lane, prefill_rows rows, on its F
 * stream), and a prefill lane on every SM; its session runs run_batch on
 * the selected pair's decode lane and the scheduler's prefill batches
 * (prefill_launch, prefill_poll) on its prefill lane from a thread of its
 * own, so both partitions work at once. Decode-only batches replay a CUDA
 * graph per (lane, batch size). engine and pairs are borrowed. The engine's
 * features must let lanes run (the feature table's pd_lanes). */
typedef struct gp_green_pair gp_green_pair;
typedef struct gp_pd_exec gp_pd_exec;
typedef struct gp_pd_exec_params {
    int prefill_rows; /* the prefill lanes' rows (the engine's prefill chunk), >= 1 */
    bool idle_whole;  /* decode on the engine's own lane, every SM, while no prefill batch runs;
                         default off (--pd-idle-whole; always on with a planner) */
} gp_pd_exec_params;
gp_status gp_pd_exec_create(gp_engine *engine, const gp_green_pair *const *pairs, int n_pairs,
                            const gp_pd_exec_params *p, gp_pd_exec **out);
void gp_pd_exec_destroy(gp_pd_exec *x);
gp_exec gp_pd_exec_get(gp_pd_exec *x);

/* What gp_pd_exec_profile measures: decode steps of rows x context on each
 * pair's decode partition alone and beside a prefill batch of
 * lane_tokens on its prefill partition (and that batch's time beside
 * them), prefill batches alone, and on every SM decode steps, prefill
 * batches and mixed batches. reps: repetitions of each point (the median
 * is kept). */
typedef struct gp_pd_profile_params {
    int rows[4], n_rows;          /* decode rows; default 1, 16, 64 (at most max_batch - 1 and prefill_rows - 1) */
    int context[4], n_context;    /* tokens per decode row; default 512, 2048 and, where it fits, 8192
                                     (where the max context less the decode steps' room, min(1024, max
                                     context / 2), is below 2048: a quarter of that and all of it) */
    int tokens[4], n_tokens;      /* prefill tokens, ascending; default 64, top / 4 and top, top the smaller of
                                     prefill_rows and max_context - 1 (a short prompt's point: predictions
                                     never go below a set's smallest sample) */
    int position;                 /* the largest prompt measured again after this many tokens (a later chunk
                                     of a long prompt); 0: not; default min(8192, the max context less the
                                     largest prompt and one), 0 where that is below 1024 */
    int reps;                     /* default 3 */
} gp_pd_profile_params;
gp_pd_profile_params gp_pd_profile_default_params(int prefill_rows, int max_batch, int max_context);
/* Measures on the executor's lanes with synthetic contexts (every sequence
 * is reset before it returns; call it before serving). out is filled (free
 * it with gp_pd_profile_free). */
gp_status gp_pd_exec_profile(gp_pd_exec *x, const gp_pd_profile_params *pp, gp_pd_profile *out);
/* Turns the adaptive plan on: the session's pd_plan asks a planner over m
 * (borrowed; the pairs must be the profile's, in its order) and selects
 * the pair it chooses. */
gp_status gp_pd_exec_set_planner(gp_pd_exec *x, const gp_pd_model *m, const gp_pd_planner_params *p);

/* Where each lane's time went since create. */
typedef struct gp_pd_lane_time {
    double busy_s;       /* device time of its batches (events) */
    long long batches;   /* batches (decode steps, prefill batches) it ran */
    long long rows;      /* rows (tokens) they held */
} gp_pd_lane_time;
typedef struct gp_pd_exec_stats {
    int n_splits;
    struct {
        int decode_sms, prefill_sms;
        double selected_s;       /* wall time this pair was the selected one */
        gp_pd_lane_time decode, prefill;
    } split[GP_PD_MAX_SPLITS];
    gp_pd_lane_time whole_decode;  /* decode-only batches on every SM */
    gp_pd_lane_time whole_mixed;   /* batches with prefill rows on every SM (mixed) */
    gp_pd_lane_time whole_prefill; /* prefill batches on every SM's prefill lane */
    long long split_changes;
    double wall_s;                 /* since create */
} gp_pd_exec_stats;
void gp_pd_exec_get_stats(gp_pd_exec *x, gp_pd_exec_stats *out);

/* Records every lane batch (host clock begin and end, its lane, rows and
 * split) from now on, up to max_events (then the newest are dropped and
 * counted); write_trace writes them as a Chrome trace-event JSON file
 * (Perfetto and chrome://tracing open it): one track per lane. */
gp_status gp_pd_exec_trace_start(gp_pd_exec *x, size_t max_events);
gp_status gp_pd_exec_write_trace(gp_pd_exec *x, const char *path);

/* ------------------------------------------------------------ engine assembly */

/* The CUDA engine and its executor as every program assembles them
 * (gp_backend, the case study, tools through gp_backend): the features are
 * checked (gp_features_check, engine/gp_engine.h), steps are captured as CUDA
 * graphs where gp_features_graphs allows it (the one place that decides),
 * the engine gets features->kv_vram_budget, then its sparsity, CPU-assisted
 * FFN and stored prefixes as the features ask, and the executor runs it
 * sequentially or, with pool, pipelined on pool's pairs. Everything a
 * pointer names is borrowed for the call, except dw and pool, borrowed for
 * the assembly's life. */
typedef struct gp_feature_set gp_feature_set;     /* engine/gp_engine.h */
typedef struct gp_engine_params gp_engine_params; /* engine/gp_engine.h */
typedef struct gp_prefix_params gp_prefix_params; /* engine/gp_engine.h */
typedef struct gp_assembly_params {
    const gp_feature_set *features;   /* what the run asks for; cuda must be set */
    const gp_engine_params *engine;   /* sizes and tuning; use_graphs and kv_vram_budget are the features' */
    const float *sparse_thresholds;   /* [n_layers][4] with features->sparsity, else NULL */
    const gp_host_weights *cpu_ffn_weights; /* with features->cpu_ffn_budget (packed once, not kept), else NULL */
    const struct gp_sparsity *cpu_ffn_calib; /* chooses the first hot set; may be NULL */
    int cpu_ffn_threads;              /* 0: the online CPUs up to 16 */
    const gp_prefix_params *prefix;   /* with features->kv_store_bytes, else NULL */
    gp_green_pool *pool;              /* partitions of pipelined steps; NULL: sequential steps and prefill */
} gp_assembly_params;
typedef struct gp_assembly {
    gp_engine *engine;
    gp_cuda_exec *exec;
    bool graphs;           /* steps captured as CUDA graphs */
    const char *eager_why; /* when not: why ("" when graphs were not asked for) */
} gp_assembly;
/* GP_ERR_UNSUPPORTED from the feature table, GP_ERR_INVALID_ARG where the
 * params disagree with the features, or the engine's own statuses; on
 * failure nothing is left assembled. */
struct gp_device_weights; /* weights/gp_weights.h */
gp_status gp_assemble_engine(struct gp_device_weights *dw, const gp_assembly_params *p, gp_assembly *out);
void gp_assembly_close(gp_assembly *a); /* NULL and a closed one are fine */

/* ------------------------------------------------------------ backends */

/* A step backend with the model it runs, made in one call: the float32 CPU
 * reference or the CUDA engine over a green-context pair, for greenpipe
 * generate and the tests that compare engines. Its gp_exec serves sequential
 * steps (session->sequential_step) and, through a gp_pipeline, pipelined ones. */
typedef enum gp_backend_kind { GP_BACKEND_CPU = 0, GP_BACKEND_CUDA = 1 } gp_backend_kind;
const char *gp_backend_kind_name(gp_backend_kind k); /* "cpu", "cuda" */
gp_status gp_backend_kind_parse(const char *s, gp_backend_kind *out);

typedef struct gp_backend_params {
    gp_backend_kind kind;
    int n_seqs;            /* sequences (and max batch) */
    int max_context;       /* tokens per sequence */
    int block_size;        /* KV cache block size in tokens (default 16) */
    /* pipelined steps: attention and FFN resources. CUDA: SMs of the
     * green-context pair (attn_units, ffn_units: -1 (GP_SPLIT_REST) for
     * the rest; default 24 and the rest, the case study's best split on the
     * H100); without green contexts the pair falls back to plain streams
     * sharing the GPU and its split says so. CPU: worker threads (default
     * 1 and 1). */
    int attn_units, ffn_units;
    bool pipelined;        /* serve pipelined steps (default off: sequential steps and prefill only;
                              the CUDA backend then makes no partition pair) */
    bool afd;              /* CUDA, with pipelined: attention and FFN on GPUs 0 and 1 of this process
                              (gp_afd_pair_open): the whole model and the KV cache on GPU 0 (prefill
                              and sequential steps there), the FFN weights again on GPU 1; pipelined
                              steps run the attention stages on GPU 0, the FFN stages on GPU 1 */
    bool pd_lanes;         /* CUDA: prefill and decode lanes instead (gp_pd_exec; greenpipe serve
                              --pd-split D:P): the decode lane on attn_units SMs, the prefill lane
                              (prefill_chunk rows) on ffn_units; default off */
    bool pd_idle_whole;    /* with pd_lanes: decode on every SM while no prefill batch runs
                              (gp_pd_exec_params.idle_whole; --pd-idle-whole); default off */
    /* with pd_lanes: the adaptive split (--pd-split auto). n_pd_splits > 0: a pair per entry of
       pd_decode_sms (the decode partition's SMs, the prefill partition the rest; --pd-splits),
       a planner over a profile loaded from pd_profile_path, or else measured at open (and
       written to pd_profile_save when not NULL), with pd_planner's targets; 0 (default): the
       one static pair attn_units:ffn_units */
    int n_pd_splits;
    int pd_decode_sms[GP_PD_MAX_SPLITS];
    const char *pd_profile_path, *pd_profile_save; /* borrowed until open returns */
    gp_pd_planner_params pd_planner;
    bool use_graphs;       /* CUDA: replay steps and stages as graphs (default on) */
    gp_dtype dtype;        /* CUDA: the engine dtype, GP_DTYPE_BF16 or GP_DTYPE_F16, or
                              GP_DTYPE_AUTO (the default: --dtype auto, gp_dtype_resolve_auto of
                              the weights' dtype; synthetic presets bf16). CPU: where the reference rounds
                              activations (gp_cpu_model_set_act_dtype): GP_DTYPE_F32 (the default: none),
                              BF16 or F16 (as the CUDA engine of that dtype). */
    int prefill_chunk;     /* CUDA: most prompt tokens per prefill forward (gp_engine_params.prefill_chunk,
                              1..GP_ENGINE_MAX_PREFILL_CHUNK); 0 (default): the engine's default. The CPU
                              backend prefills position by position and takes 0 only. */
    uint64_t vram_budget;  /* CUDA: 0 (default): the weights resident on the device. Else weights beyond VRAM:
                              every weight in pinned host memory and at most this many bytes of them on the
                              device (gp_device_weights_streamed with gp_weights_stream_default_params and
                              the window of sequential or pipelined steps: gp_weights_stream_window), run
                              eager (CUDA graphs would bake the streamed addresses: use_graphs is not applied,
                              and gp_backend_describe says so). */
    const float *sparse_thresholds; /* NULL (default): dense. Else a calibration's thresholds [n_layers][4]
                              (sparse/gp_sparse.h; borrowed until open returns): decode steps of at most 16 rows
                              mask each projection's small inputs (gp_engine_set_sparsity on the cuda backend;
                              gp_cpu_model_set_sparsity on the cpu one); prefill stays dense. With vram_budget
                              the transposed copies are device memory beside the budget. */
    /* CUDA: tensor parallel over tp GPUs of this host, one process each
     * (greenpipe generate --tp forks them): this process is rank tp_rank,
     * runs on CUDA device tp_rank, meets the others at tp_rendezvous
     * (comm/'s gp_rdv_parse) and holds its shard of the weights
     * (gp_model_source_load_host_shard: read straight from the source);
     * its o and down outputs are summed over the ranks by NCCL. tp 1 (the
     * default): one GPU. */
    int tp, tp_rank;
    const char *tp_rendezvous;
    size_t tp_peer_bytes;   /* tp > 1: the ranks' sums of up to this many bytes go over peer memory
                              (comm/'s gp_comm_peer_setup, where every rank can map the others' memory;
                              else NCCL alone, and gp_backend_describe says why); larger ones through
                              NCCL; 0: NCCL alone; default GP_COMM_PEER_BYTES_DEFAULT */
    bool sparse_always;     /* cuda, with sparse_thresholds: every calibrated projection sparse on every
                              step (the CPU reference's masks exactly); default false: each step runs a
                              projection sparse only where its batch's measured union density makes the
                              sparse kernel the faster one, else the dense GEMM (no mask: exact) (gp_engine_params
                              sparse_always) */
    /* CUDA only: stored prefixes (gp_engine_prefix_enable; gp_backend_prefill_prefix reuses them).
     * The CPU backend refuses a store (the feature table); a dir or block without one is
     * GP_ERR_INVALID_ARG. */
    uint64_t kv_store_bytes; /* 0 (default): off. Else the store's pinned host pool (--kv-store-size),
                              rounded down to whole blocks; at least one block */
    const char *kv_store_dir; /* block files (--kv-store DIR; borrowed until open returns); NULL (default):
                              memory only. Needs kv_store_bytes */
    int kv_store_block;    /* tokens per stored block (--kv-store-block); 0 (default):
                              GP_PREFIX_DEFAULT_BLOCK_TOKENS. Needs kv_store_bytes */
    uint64_t kv_vram_budget; /* CUDA, sequential steps: 0 (default) the whole KV cache on the device; else
                              an offloaded cache of at most this many device bytes (gp_engine_params
                              kv_vram_budget), run eager; the describe line gives the split */
    /* CUDA, sequential steps, with sparse_thresholds: the CPU-assisted FFN (gp_engine_set_cpu_ffn,
     * --cpu-ffn SIZE). 0 (default): off. Else the hot cache's device bytes, turned into hot neurons
     * per layer by gp_hotset_capacity. On resident weights the cache is extra VRAM (the dense
     * weights stay); with vram_budget it is part of that budget (below it), the streamed weights get
     * the rest, and their FFN groups are on demand (ffn_on_demand: copied for prefill only). The
     * host weights are loaded beside the device ones to pack the FFN for the CPU. */
    uint64_t cpu_ffn_budget;
    const struct gp_sparsity *cpu_ffn_calib; /* its freq chooses the first hot set (borrowed until open
                              returns); NULL: the first neurons */
    int cpu_ffn_threads;   /* CPU threads of the cold neurons; 0 (default): the online CPUs up to 16 */
    /* CPU only: threads of the reference's own worker, which runs the prefill and the sequential
     * steps (gp_cpu_model_set_threads; pipelined steps run on attn_units + ffn_units instead);
     * 0 (default): the online CPUs up to 16, or GP_REF_THREADS; else 1..GP_POOL_MAX_THREADS.
     * The cuda backend refuses it. gp_backend_describe gives the threads obtained. */
    int cpu_threads;
    gp_progress_cb progress; /* weights loaded or synthesized into host memory (the cpu backend, and the
                              cuda one's host copy for --cpu-ffn), in bytes; fn NULL (default): none */
} gp_backend_params;
gp_backend_params gp_backend_default_params(gp_backend_kind kind);
/* The features p asks for, as the feature table reads them (gp_features_check,
 * which every open asks before anything loads). */
void gp_backend_features(const gp_backend_params *p, gp_feature_set *out);

/* The host memory the cpu backend of p takes for src, known before anything
 * loads: *weights the host weights (every parameter in *dtype, which
 * gp_model_source_host_dtype gives), *kv the reference's float32 KV cache
 * of p's sequences and context (gp_cpu_model_kv_bytes). For a caller that
 * weighs them against gp_host_mem_available before a load of minutes. */
gp_status gp_backend_host_need(const gp_model_source *src, const gp_backend_params *p, uint64_t *weights,
                               uint64_t *kv, gp_dtype *dtype);

/* The VRAM budget of p for cfg, checked before anything loads
 * (gp_weights_stream_check with the backend's streaming params); GP_OK
 * without a budget. */
gp_status gp_backend_check_budget(const gp_backend_params *p, const gp_config *cfg);

/* The stored-prefix settings of p for cfg, checked before anything loads:
 * the pool holds at least one block of kv_store_block tokens of cfg's KV
 * (engine dtypes are 16-bit), and a prompt of max_context tokens can reuse
 * one (the engine checks both again when it enables the store). GP_OK with
 * the store off. */
gp_status gp_backend_check_kv_store(const gp_backend_params *p, const gp_config *cfg);

typedef struct gp_backend gp_backend; /* opaque */
/* Loads src's weights (CUDA synthetic weights are generated on the device).
 * With kv_store_bytes the store's identity names the weights by src: the
 * checkpoint's real path, or the preset with its seed (synthetic weights
 * differ per seed). */
gp_status gp_backend_open(const gp_model_source *src, const gp_backend_params *p, gp_backend **out);
/* Over host weights w (borrowed: they must outlive the backend). Refuses
 * kv_store_bytes (GP_ERR_UNSUPPORTED): host weights do not say where they
 * came from, which the store's identity needs. */
gp_status gp_backend_open_weights(const gp_host_weights *w, const gp_backend_params *p, gp_backend **out);
void gp_backend_close(gp_backend *b);
gp_exec gp_backend_exec(gp_backend *b);
/* tp > 1: the group of the ranks (comm/'s gp_group, for gp_tp_lead_create
 * and gp_tp_follow); NULL otherwise. */
gp_group *gp_backend_group(const gp_backend *b);
const gp_config *gp_backend_config(const gp_backend *b);
/* What was loaded and where it runs, for a status line. */
const char *gp_backend_describe(const gp_backend *b);
/* Active inputs per layer and projection since the last reset
 * (gp_engine_sparsity_stats); the cuda backend with sparsity only. */
gp_status gp_backend_sparsity_stats(gp_backend *b, long *active, int reset);
/* The CPU-assisted FFN's statistics (gp_engine_cpu_ffn_stats, engine/gp_engine.h); GP_ERR_STATE when it
 * is off. */
typedef struct gp_cpu_ffn_stats gp_cpu_ffn_stats;
gp_status gp_backend_cpu_ffn_stats(gp_backend *b, gp_cpu_ffn_stats *out, int reset);
/* The dtype the backend runs in (CUDA: its engine's; CPU: its activation
 * rounding, GP_DTYPE_F32 for none), for banners and reports. */
gp_dtype gp_backend_dtype(const gp_backend *b);

/* Stored prefixes on the cuda backend (engine/gp_engine.h, "stored
 * prefixes"; the types are declared there and in kvstore/gp_kvstore.h).
 * prefill_prefix: gp_engine_prefill_prefix, one prompt into empty sequence
 * seq, reloading its longest stored run of whole blocks (a plain prefill
 * with the store off). store_seq: gp_engine_prefix_store_seq, the whole
 * blocks of the n tokens seq holds into the store. kvstore_stats:
 * gp_kvstore_get_stats of the store. The cpu backend, and store_seq and
 * kvstore_stats with the store off, give GP_ERR_STATE. */
typedef struct gp_prefix_stats gp_prefix_stats;
typedef struct gp_prefix_store_stats gp_prefix_store_stats;
typedef struct gp_kvstore_stats gp_kvstore_stats;
gp_status gp_backend_prefill_prefix(gp_backend *b, int seq, int n, const int32_t *tokens, int32_t *next,
                                    float *last_logits, gp_prefix_stats *st);
gp_status gp_backend_prefix_store_seq(gp_backend *b, int seq, int n, const int32_t *tokens,
                                      gp_prefix_store_stats *st);
gp_status gp_backend_kvstore_stats(gp_backend *b, gp_kvstore_stats *out, bool reset);
/* The prefill/decode executor of a backend opened with pd_lanes, or NULL:
 * its statistics, trace and model (gp_pd_exec_*). */
gp_pd_exec *gp_backend_pd_exec(gp_backend *b);
/* Its planner's model (with n_pd_splits), or NULL. */
const gp_pd_model *gp_backend_pd_model(const gp_backend *b);

#ifdef __cplusplus
}
#endif
#endif
