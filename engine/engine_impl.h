/* Layout of the CUDA engine, private to engine/: executors drive its stages
 * through gp_engine.h. */
#ifndef GP_ENGINE_IMPL_H
#define GP_ENGINE_IMPL_H

#include <cuda_runtime_api.h>

#include "gp_attention.h"
#include "gp_engine.h"
#include "gp_kvcache.h"
#include "gp_sparse.h"
#include "gp_weights.h"
#include "kernels.h"
#include "kv_memory.h"

#define GP_ENGINE_MAX_GRAPHS 64

/* Where a stage runs: a stream, a GEMM context (with its SM target, so
 * contexts of different partitions never share a workspace) and the
 * decode-attention workspace and parameters for its SMs. */
struct gp_stage_ctx {
    cudaStream_t stream;
    gp_gemm_ctx *gemm;          /* owned */
    void *attn_ws;              /* decode-attention split workspace: the engine's, borrowed by partitions */
    size_t attn_ws_bytes;
    gp_decode_attn_params ap;   /* sm_count: the context's SMs; force_splits from gp_stage_io */
};

/* Kernel classes of a step, for the per-kernel breakdown. */
enum { GP_K_EMBED, GP_K_ATTN_NORM, GP_K_QKV, GP_K_ROPE, GP_K_ATTN, GP_K_O, GP_K_FFN_NORM,
       GP_K_GATE_UP, GP_K_SWIGLU, GP_K_DOWN, GP_K_HEAD, GP_K_COUNT };

/* Activation sparsity (gp_engine_set_sparsity, engine_sparse.c): the
 * calibration's thresholds and the projections transposed so an input's
 * weights are one row (sparse/gp_sparse.h). */
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
} gp_engine_sparse;

typedef struct gp_graph_entry {
    int B, splits;
    cudaGraphExec_t exec;
} gp_graph_entry;

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
    gp_stage_ctx sc;              /* the whole-GPU stage context */
    int sm_count;
    int device;                   /* CUDA ordinal of the engine's buffers (their views' device) */

    int rows;          /* activation rows: max(max_batch, prefill_chunk) */
    float *inv_freq;   /* device [head_dim/2] */
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

    /* prefill: the chunk's inputs, one upload per chunk; device and two
     * pinned staging copies laid out alike: tokens [rows], positions [rows],
     * block-table row of each token [rows], then gp_prefill_seq_desc [max_batch] */
    int32_t *pf_d;
    int32_t *pf_h[2];
    cudaEvent_t pf_ev[2]; /* the upload from pf_h[i] has completed */
    size_t pf_words;
    int pf_rows;          /* tokens of the chunk being run; 0: none (prefill stages refused) */
    int pf_seqs, pf_max_q;/* its sequences and their longest share */
    float *head_rows;     /* device [max_batch][hidden]: each prompt's last residual row */
    cudaEvent_t ev_pf_begin, ev_pf_end;

    cudaEvent_t ev_begin, ev_end, ev_done;
    gp_graph_entry graphs[GP_ENGINE_MAX_GRAPHS];
    int n_graphs;

    gp_engine_sparse *sp;         /* NULL: dense projections */
    struct gp_engine_prefix *px;  /* stored prefixes (engine_prefix.c); NULL: off */
    gp_kv_memory *km;             /* the KV memory (kv_memory.h): resident or offloaded, and its providers */
    struct gp_engine_cpu_ffn *cf; /* CPU-assisted FFN (engine_cpu_ffn.c); NULL: off */
    int step_rows;                /* rows of the decode step being run (gp_engine_step_prepare): the sparse
                                     decision is the step's, not a micro-batch's, as the CPU reference's */
    bool prefill_steps;           /* prompts run through decode steps (prefill_by_steps): dense */

    /* breakdown mode: an event after every kernel, tagged with its class */
    cudaEvent_t *bd_ev;
    int *bd_class;
    int bd_n, bd_cap;
};

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
gp_status gp_engine_bd_open(gp_engine *e, int cap);
/* engine_prefix.c: frees e->px (the engine's destroy). */
void gp_engine_prefix_free(gp_engine *e);
/* engine_sparse.c: frees e->sp (the engine's destroy). */
void gp_engine_sparse_free(gp_engine *e);
/* Projection p (gp_sparse_proj) of layer for nb rows: the sparse kernel over
 * the transposed weights when a calibration is set and the step is a decode
 * step of at most GP_SPARSE_MAX_B rows (the whole step's, so micro-batches
 * mask as the sequential step does), else the dense GEMM over w. */
gp_status gp_engine_sparse_proj(gp_engine *e, const gp_stage_ctx *sc, bool prefill, int layer, int p, int nb,
                                const void *x, const void *w, void *y, gp_gemm_out out);
/* Would the sparse kernels serve this call (on, resident weights, a decode
 * step of at most GP_SPARSE_MAX_B rows)? A projection whose threshold is 0
 * runs the dense GEMM even then: it masks nothing. */
bool gp_engine_sparse_serves(const gp_engine *e, bool prefill, int nb);
/* Does the sparse gate/up kernel serve this call (gp_engine_sparse_serves
 * and a threshold above 0)? Then gp_engine_sparse_gate_up_swiglu computes
 * gate/up and SwiGLU into act in one call whose split sum applies the
 * SwiGLU (gp_sparse_gemv's GP_SPARSE_OUT_SWIGLU: the bits of gate/up, then
 * gp_swiglu, with one kernel fewer); otherwise the caller runs the gate/up
 * projection and gp_swiglu. */
bool gp_engine_sparse_fused_swiglu(const gp_engine *e, bool prefill, int layer, int nb);
gp_status gp_engine_sparse_gate_up_swiglu(gp_engine *e, const gp_stage_ctx *sc, int layer, int nb, const void *h,
                                          void *act);
/* engine_cpu_ffn.c: the CPU-assisted FFN. free: the engine's destroy and a
 * new sparsity. step: does the step being run (its step_rows) take it
 * (on, sparse, a decode step of at most GP_SPARSE_MAX_B rows)? part: the
 * FFN after its norm for rows [b0, b0 + nb) (the whole step) of normed
 * input h, added into resid, on sc's stream. begin/end: around a step
 * (prepare forgets a failed step's layers; finish, after the host waited
 * for the step, observes the activity and reloads when due). */
void gp_engine_cpu_ffn_free(gp_engine *e);
bool gp_engine_cpu_ffn_step(const gp_engine *e, bool prefill);
gp_status gp_engine_cpu_ffn_part(gp_engine *e, const gp_stage_ctx *sc, int layer, int b0, int nb, const void *h,
                                 float *resid);
void gp_engine_cpu_ffn_begin(gp_engine *e);
/* Layer's FFN norm weights on the device (the steps it serves read no FFN
 * weight group). */
const void *gp_engine_cpu_ffn_norm(const gp_engine *e, int layer);
gp_status gp_engine_cpu_ffn_end(gp_engine *e);
gp_status gp_engine_bd_sum(gp_engine *e, cudaEvent_t begin, float acc[GP_K_COUNT]);
void gp_engine_bd_close(gp_engine *e);

#endif
