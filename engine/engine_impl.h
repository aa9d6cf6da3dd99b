/* Layout of the CUDA engine, private to engine/: executors drive its stages
 * through gp_engine.h. */
#ifndef GP_ENGINE_IMPL_H
#define GP_ENGINE_IMPL_H

#include <pthread.h>

#include <cuda_runtime_api.h>

#include "gp_attention.h"
#include "gp_engine.h"
#include "gp_kvcache.h"
#include "gp_sparse.h"
#include "gp_weights.h"
#include "kernels.h"
#include "kv_memory.h"

#define GP_ENGINE_MAX_GRAPHS 64

/* Kernel classes of a step, for the per-kernel breakdown. */
enum { GP_K_EMBED, GP_K_ATTN_NORM, GP_K_QKV, GP_K_ROPE, GP_K_ATTN, GP_K_O, GP_K_FFN_NORM,
       GP_K_GATE_UP, GP_K_SWIGLU, GP_K_DOWN, GP_K_HEAD, GP_K_COUNT };

/* Activation sparsity (gp_engine_set_sparsity, engine_sparse.c): the
 * calibration's thresholds and the projections transposed so an input's
 * weights are one row (sparse/gp_sparse.h). */
typedef struct gp_sparse_choice gp_sparse_choice;
typedef struct gp_engine_sparse {
    float *t;              /* host [n_layers][GP_SPARSE_PROJ_COUNT] */
    void **wt;             /* host [n_layers][GP_SPARSE_PROJ_COUNT]: device rows of W^T in arena */
    void *arena;           /* device: every transposed projection (NULL: none has a copy) */
    size_t arena_bytes;
    int *active;           /* device [n_layers][GP_SPARSE_PROJ_COUNT]: active inputs summed over calls */
    float *ws[2];          /* device split partials: [0] the attention projections', [1] the FFN's, so
                              the A and F sides of a split never share one */
    size_t ws_bytes;       /* each */
    long served_steps;     /* decode steps the sparse path served since the last statistics reset:
                              a projection run dense (threshold 0) counts all its inputs once each */
    unsigned copied;       /* bit p: projection p has its transposed copy (a threshold above 0 in some
                              layer), so its sparse kernel can run */
    gp_sparse_choice *choice; /* the per-step sparse/dense choice (engine_sparse_choice.c) */
} gp_engine_sparse;

typedef struct gp_graph_entry {
    int B, splits;
    unsigned sparse_mask; /* the projections it runs sparse (gp_stage_batch.sparse_mask) */
    cudaGraphExec_t exec;
} gp_graph_entry;

/* The rows of the batch a lane opened, as every stage reads them (never
 * from engine fields): rows [0, prefill_rows) are prefill-chunk tokens
 * attended causally over their sequences' caches, rows [prefill_rows,
 * rows) decode rows, one token of one sequence each. */
struct gp_stage_batch {
    int rows;             /* 0: none open (stages refused) */
    bool ffn_only;        /* gp_engine_open_ffn_rows: rows without sequences, FFN stages alone */
    int prefill_rows;
    int n_seqs, max_q;    /* the prefill rows' sequences (seqs) and their longest share */
    int decode_table0;    /* step-table row of decode row prefill_rows: decode row r reads table row
                             decode_table0 + r - prefill_rows */
    int sparse_rows;      /* the rows the sparse decision counts: a decode step's, so micro-batches mask
                             as the whole step does; 0: dense (prompt rows) */
    unsigned sparse_mask; /* bit p (gp_sparse_proj): projection p runs its sparse kernel this step where
                             it serves; clear: its dense GEMM (the step's choice, gp_engine_sparse_plan) */
    const int32_t *tokens;           /* device [rows] */
    const int32_t *positions;        /* device [prefill_rows]: each prefill token's position */
    const int32_t *table_rows;       /* device [prefill_rows]: its sequence's step-table row */
    const gp_prefill_seq_desc *seqs; /* device [n_seqs] */
    gp_kv_memory *km;                /* the KV memory whose hooks the batch's stages call: the model
                                        state's for the default lane's batches, NULL (no hooks) for
                                        another lane's, which gp_lane_check_features admits only while
                                        the memory has none */
    float *logits;                   /* device [rows the head runs][vocab]: the head's outputs */
    int32_t *next;
    /* the step tables of the batch's sequences (block tables [max_batch]
     * [max_blocks], lengths and positions [max_batch]); NULL: the KV
     * cache's own (the default lane's) */
    const int32_t *block_tables, *lens, *kv_positions;
};

/* What one execution resource owns: its stream, GEMM context (with its SM
 * target, so lanes never share a cuBLASLt workspace), decode-attention
 * workspace and parameters for its SMs, the scratch of its stages' parts,
 * and, for a lane that opens batches, the activations, the batch inputs and
 * outputs with their staging, the graph cache and the timing events. A lane
 * made without rows (gp_lane_create with rows 0, the pipeline's partitions)
 * runs stages over views it is handed and borrows the engine's default
 * lane's buffers and scratch: its stages are ordered with the default
 * lane's by events. */
struct gp_lane {
    gp_engine *e;               /* the model state it runs over */
    struct gp_lane *next_lane;  /* the engine's list of lanes it made */
    cudaStream_t stream;
    bool own_stream;
    bool own_buffers;
    gp_gemm_ctx *gemm;          /* owned */
    void *attn_ws;              /* decode-attention split workspace */
    size_t attn_ws_bytes;
    gp_decode_attn_params ap;   /* sm_count: the lane's SMs; force_splits from gp_stage_io */

    int rows;          /* activation rows: max(max_batch, prefill_chunk) for the default lane */
    float *resid;      /* device [rows][hidden]: the fp32 residual stream */
    /* 16-bit activations, elements of the engine dtype (uint16_t: the storage of either) */
    uint16_t *h_attn;  /* device [rows][hidden]: normed input of the attention stage */
    uint16_t *h_ffn;   /* device [rows][hidden]: normed input of the FFN stage */
    uint16_t *qkv;     /* device [rows][qkv_rows] */
    uint16_t *q;       /* device [rows][n_heads*head_dim], RoPE applied */
    uint16_t *attn;    /* device [rows][n_heads*head_dim] */
    uint16_t *gu;      /* device [rows][2*ffn] */
    uint16_t *act;     /* device [rows][ffn] */
    float *logits;     /* device [max_batch][vocab] */
    int32_t *tok_d;    /* device [max_batch] step inputs */
    int32_t *next_d;   /* device [max_batch] greedy outputs */
    int32_t *tok_h;    /* pinned [max_batch] */
    int32_t *next_h;   /* pinned [max_batch] */
    uint16_t *tune_x;  /* device GEMM-tuning scratch (engine dtype) (gemm_tune > 0 only), kept so that */
    float *tune_y;     /*   later captures do not allocate and free (a device sync) again */
    size_t tune_rows;  /* rows both hold; 0: none yet */

    /* batch inputs: one upload per forward; device and two pinned staging
     * copies laid out alike: tokens [rows], positions [rows], step-table
     * row of each token [rows], then gp_prefill_seq_desc [max_batch] */
    int32_t *pf_d;
    int32_t *pf_h[2];
    cudaEvent_t pf_ev[2]; /* the upload from pf_h[i] has completed */
    size_t pf_words;
    float *head_rows;     /* device [max_batch][hidden]: each prompt's last residual row */
    /* a lane other than the default one: its own step tables (block tables
     * [max_batch][max_blocks], lengths, positions [max_batch]) and their
     * pinned staging, one upload per call; NULL on the default lane, whose
     * step tables are the KV cache's */
    int32_t *tab_d, *tab_h;
    gp_batch_part *parts; /* host [max_batch]: a step's rows as batch parts, for the one input check */
    gp_stage_batch batch; /* the batch open on this lane */
    cudaEvent_t ev_pf_begin, ev_pf_end;
    cudaEvent_t ev_begin, ev_end, ev_done;
    gp_graph_entry graphs[GP_ENGINE_MAX_GRAPHS];
    int n_graphs;

    /* breakdown mode: an event after every kernel, tagged with its class */
    cudaEvent_t *bd_ev;
    int *bd_class;
    int bd_n, bd_cap;
};

/* The model state every lane shares (weights, KV tables and pools, the
 * RoPE table, the model-wide features), then its default lane: the
 * sequential step's and the prefill's, on every SM. */
struct gp_engine {
    gp_config cfg;
    gp_dtype dtype;               /* the engine dtype: its weights', its activations' and KV cache's
                                     (GP_DTYPE_BF16 or GP_DTYPE_F16) */
    gp_engine_params p;
    gp_device_weights *dw;        /* borrowed */
    const gp_host_weights *w;     /* device-pointer view of dw */
    gp_kv_tables *tables;         /* host block bookkeeping */
    gp_kv_device *kv;             /* device pools + step tables */
    int max_blocks;               /* per sequence */
    int sm_count;
    int device;                   /* CUDA ordinal of the engine's buffers (their views' device) */
    float *inv_freq;              /* device [head_dim/2] */

    gp_engine_sparse *sp;         /* NULL: dense projections */
    struct gp_engine_prefix *px;  /* stored prefixes (engine_prefix.c); NULL: off */
    gp_kv_memory *km;             /* the KV memory (kv_memory.h): resident or offloaded, and its providers */
    struct gp_engine_cpu_ffn *cf; /* CPU-assisted FFN (engine_cpu_ffn.c); NULL: off */
    /* Tensor parallel (gp_engine_set_tp): this engine's rank, and the
     * all-reduce of the residual rows after o and down and the gather of
     * the head split by vocabulary, NULL: one rank; each rank's logits in
     * its segment of tp_head [tp][max_batch x slice] (one lane runs under
     * tensor parallelism: the feature table refuses the others). */
    int tp_rank, tp;
    gp_engine_reduce_fn tp_reduce;
    gp_engine_gather_fn tp_gather;
    void *tp_ctx;
    float *tp_head;

    pthread_mutex_t kv_lock;      /* the KV tables' host bookkeeping: lanes driven by several host threads
                                     reserve and advance their sequences under it */
    gp_lane lane;                 /* the default lane */
    gp_lane *lanes;               /* lanes made over this state (gp_lane_create), a list */
};

/* The KV memory a lane's batches drive: the model state's on the default
 * lane; none on another (its hooks carry one call's plan at a time). */
static inline gp_kv_memory *gp_lane_kv_memory(const gp_lane *lane)
{
    return lane == &lane->e->lane ? lane->e->km : NULL;
}

/* The default lane's batch, for stages handed none (io->batch NULL). */
static inline const gp_stage_batch *gp_lane_batch_of(const gp_lane *lane, const gp_stage_io *io)
{
    return io->batch ? io->batch : &lane->e->lane.batch;
}

/* The decode-attention parameters of p (engine.c), before a lane sets its
 * SM count, and the split workspace they need at most over every SM count:
 * what gp_engine_device_bytes counts and each lane allocates. */
gp_decode_attn_params gp_engine_attn_params(const gp_engine_params *p);
gp_status gp_engine_attn_ws_bytes(const gp_config *c, const gp_engine_params *p, size_t *bytes);

/* Lane internals (lane.c): buffers of rows activation rows (the default
 * lane's included), their release, and dropping every lane's captured
 * graphs (they baked the projections a new sparsity changes). */
gp_status gp_lane_alloc(gp_lane *lane, int rows);
/* A lane's GEMM context on stream with SM budget sms (0: the device), set
 * as e's parameters ask (the skinny kernel's largest M). */
gp_status gp_lane_gemm_create(const gp_engine *e, void *stream, int sms, gp_gemm_ctx **out);
void gp_lane_free(gp_lane *lane);
void gp_engine_drop_graphs(gp_engine *e);
/* The step tables of S sequences (row s = seq_ids[s]) with lens[s] tokens
 * after the call, on lane's stream: the KV cache's (the default lane) or
 * the lane's own; b's table pointers set to match. */
gp_status gp_lane_upload_tables(gp_lane *lane, int S, const int *seq_ids, const int32_t *lens, gp_stage_batch *b);
/* The rows [io->b0, io->b0 + io->nb) of the lane's open batch through the
 * embedding and every layer (ATTN, FFN), their residual in the lane's own
 * rows (io->resid set to them); the head is the caller's. */
gp_status gp_lane_forward(gp_lane *lane, gp_stage_io *io);
/* Staging buffer buf (tokens [rows], positions [rows], step-table rows
 * [rows], sequence descriptors, as the lane's pf_h lays them out) uploaded
 * on the lane's stream, and the open batch's row pointers set to the device
 * copy and its outputs to the lane's. */
gp_status gp_lane_upload_staged(gp_lane *lane, int buf);
/* Layer's KV view with b's step tables. */
gp_status gp_lane_kv_view(const gp_engine *e, const gp_stage_batch *b, int layer, gp_kv_view *out);
/* A lane's decode step: dense forces every projection dense (prompt tokens
 * run through steps). */
gp_status gp_lane_step(gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                       float *logits, bool dense);
/* Refuses, for a lane other than the default one, the features whose
 * per-step state is the model state's (offloaded KV, CPU-assisted FFN,
 * sparse projections' split workspaces). */
gp_status gp_lane_check_features(const gp_lane *lane, const char *who);
/* What the lane's batches are checked against (gp_batch_check): the model
 * state's sequences, vocabulary and context, max_rows rows (0: no limit). */
gp_batch_limits gp_lane_limits(const gp_lane *lane, int max_rows);
/* gp_kv_reserve and gp_kv_advance of the model state's tables under its lock. */
gp_status gp_engine_kv_reserve(gp_engine *e, int seq, int n);
gp_status gp_engine_kv_advance(gp_engine *e, int seq, int n);

/* Kernels the stages tag in breakdown mode: per layer 5 in ATTN (norm, QKV,
 * RoPE + KV append, attention, O) and 4 in FFN (norm, gate/up, SwiGLU,
 * down); 1 in EMBED; 3 in HEAD (norm, LM head, argmax). A breakdown opens
 * one event more than it can record: a full set reads as an overflow. */
#define GP_BD_MARKS_LAYER 9
#define GP_BD_MARKS_EMBED 1
#define GP_BD_MARKS_HEAD 3

/* Breakdown mode (engine_step.c): open makes cap events that the stages
 * record after each kernel (tagged with its class); sum adds the gaps from
 * begin into acc per class; close frees them. */
gp_status gp_engine_bd_open(gp_lane *lane, int cap);
/* engine_prefix.c: frees e->px (the engine's destroy). */
void gp_engine_prefix_free(gp_engine *e);
/* engine_sparse.c: frees e->sp (the engine's destroy). */
void gp_engine_sparse_free(gp_engine *e);
/* Projection p (gp_sparse_proj) of layer for nb rows of batch b on lane:
 * the sparse kernel over the transposed weights when a calibration is set,
 * the step is a decode step of b->sparse_rows <= GP_SPARSE_MAX_B rows (the
 * whole step's, so micro-batches mask as the sequential step does; 0:
 * prompt rows, dense) and the step chose it (b->sparse_mask), else the
 * dense GEMM over w. */
gp_status gp_engine_sparse_proj(gp_engine *e, const gp_lane *lane, const gp_stage_batch *b, int layer, int p,
                                int nb, const void *x, const void *w, void *y, gp_gemm_out out);
/* Would the sparse kernels serve this call (on, resident weights, a decode
 * step of at most GP_SPARSE_MAX_B rows)? A projection whose threshold is 0
 * runs the dense GEMM even then: it masks nothing. */
bool gp_engine_sparse_serves(const gp_engine *e, int step_rows, int nb);
/* Does the sparse gate/up kernel serve this call (as gp_engine_sparse_proj
 * would choose it)? Then gp_engine_sparse_gate_up_swiglu computes
 * gate/up and SwiGLU into act in one call whose split sum applies the
 * SwiGLU (gp_sparse_gemv's GP_SPARSE_OUT_SWIGLU: the bits of gate/up, then
 * gp_swiglu, with one kernel fewer); otherwise the caller runs the gate/up
 * projection and gp_swiglu. */
bool gp_engine_sparse_fused_swiglu(const gp_engine *e, const gp_stage_batch *b, int layer, int nb);
gp_status gp_engine_sparse_gate_up_swiglu(gp_engine *e, const gp_lane *lane, int layer, int nb, const void *h,
                                          void *act);
/* engine_sparse_choice.c: the per-step choice of each projection's kernel.
 * plan: the mask of the projections a decode step of B rows on lane runs
 * sparse (every calibrated one with sparse_always, in pipelined steps
 * (choose false) and for B above GP_SPARSE_MAX_B); the first step of a
 * batch size times both kernels of each projection on the lane (not
 * capturable: before the step's capture). observe: after the step's
 * host wait, the union density each sparse projection measured (its
 * counters copied back at the step's end by gp_engine_sparse_snapshot, on
 * the step's stream). reset: the counters were zeroed. free: with e->sp. */
gp_status gp_engine_sparse_plan(gp_engine *e, gp_lane *lane, int B, bool choose, unsigned *mask);
gp_status gp_engine_sparse_snapshot(gp_engine *e, cudaStream_t s);
void gp_engine_sparse_observe(gp_engine *e);
void gp_engine_sparse_choice_reset(gp_engine *e);
/* Steps projection p ran dense by the choice (0 for one without a copy). */
long gp_engine_sparse_dense_steps(const gp_engine *e, int p);
void gp_engine_sparse_choice_free(gp_engine *e);
/* engine_cpu_ffn.c: the CPU-assisted FFN. free: the engine's destroy and a
 * new sparsity. step: does a decode step of step_rows rows (0: prompt
 * rows) take it (on, sparse, at most GP_SPARSE_MAX_B rows)? part: the FFN
 * after its norm for rows [b0, b0 + nb) (the whole step of step_rows) of
 * normed input h, added into resid, on lane's stream. begin/end: around a step
 * (prepare forgets a failed step's layers; finish, after the host waited
 * for the step, observes the activity and reloads when due). */
void gp_engine_cpu_ffn_free(gp_engine *e);
bool gp_engine_cpu_ffn_step(const gp_engine *e, int step_rows);
gp_status gp_engine_cpu_ffn_part(gp_engine *e, const gp_lane *lane, int layer, int b0, int nb, int step_rows,
                                 const void *h, float *resid);
void gp_engine_cpu_ffn_begin(gp_engine *e);
/* Layer's FFN norm weights on the device (the steps it serves read no FFN
 * weight group). */
const void *gp_engine_cpu_ffn_norm(const gp_engine *e, int layer);
gp_status gp_engine_cpu_ffn_end(gp_engine *e);
gp_status gp_engine_bd_sum(gp_lane *lane, cudaEvent_t begin, float acc[GP_K_COUNT]);
void gp_engine_bd_close(gp_lane *lane);

#endif
