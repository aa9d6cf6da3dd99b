/* Layout of the CUDA engine (private to engine/ and the pipeline that will
 * drive its stages on partitions). */
#ifndef GP_ENGINE_IMPL_H
#define GP_ENGINE_IMPL_H

#include <cuda_runtime_api.h>

#include "gp_attention.h"
#include "gp_engine.h"
#include "kernels.h"

#define GP_ENGINE_MAX_GRAPHS 64

/* What one stage launch needs besides the engine: where it runs. A partition
 * brings its own stream, GEMM context (with its SM target) and attention
 * workspace, so stages of different partitions never share scratch. */
typedef struct gp_stage_ctx {
    cudaStream_t stream;
    gp_gemm_ctx *gemm;
    void *attn_ws;              /* decode-attention split workspace */
    size_t attn_ws_bytes;
    gp_decode_attn_params ap;   /* force_splits set per step so graphs are stable */
} gp_stage_ctx;

/* Kernel classes of a step, for the per-kernel breakdown. */
enum { GP_K_EMBED, GP_K_ATTN_NORM, GP_K_QKV, GP_K_ROPE, GP_K_ATTN, GP_K_O, GP_K_FFN_NORM,
       GP_K_GATE_UP, GP_K_SWIGLU, GP_K_DOWN, GP_K_HEAD, GP_K_COUNT };

typedef struct gp_graph_entry {
    int B, splits;
    cudaGraphExec_t exec;
} gp_graph_entry;

struct gp_engine {
    gp_config cfg;
    gp_engine_params p;
    gp_device_weights *dw;        /* borrowed */
    const gp_host_weights *w;     /* device-pointer view of dw */
    gp_kv_tables *tables;         /* host block bookkeeping */
    gp_kv_device *kv;             /* device pools + step tables */
    int max_blocks;               /* per sequence */
    gp_stage_ctx sc;              /* the whole-GPU stage context */
    int sm_count;

    float *inv_freq;   /* device [head_dim/2] */
    float *resid;      /* device [max_batch][hidden]: the fp32 residual stream */
    gp_bf16 *h_attn;   /* device [max_batch][hidden]: normed input of the attention stage */
    gp_bf16 *h_ffn;    /* device [max_batch][hidden]: normed input of the FFN stage */
    gp_bf16 *qkv;      /* device [max_batch][qkv_rows] */
    gp_bf16 *q;        /* device [max_batch][n_heads*head_dim], RoPE applied */
    gp_bf16 *attn;     /* device [max_batch][n_heads*head_dim] */
    gp_bf16 *gu;       /* device [max_batch][2*ffn] */
    gp_bf16 *act;      /* device [max_batch][ffn] */
    float *logits;     /* device [max_batch][vocab] */
    int32_t *tok_d;    /* device [max_batch] step inputs */
    int32_t *next_d;   /* device [max_batch] greedy outputs */
    int32_t *tok_h;    /* pinned [max_batch] */
    int32_t *next_h;   /* pinned [max_batch] */
    gp_bf16 *tune_x;   /* device GEMM-tuning scratch (gemm_tune > 0 only), kept so that */
    float *tune_y;     /*   later captures do not allocate and free (a device sync) again */
    size_t tune_rows;  /* rows both hold; 0: none yet */

    cudaEvent_t ev_begin, ev_end, ev_done;
    gp_graph_entry graphs[GP_ENGINE_MAX_GRAPHS];
    int n_graphs;

    /* breakdown mode: an event after every kernel, tagged with its class */
    cudaEvent_t *bd_ev;
    int *bd_class;
    int bd_n, bd_cap;
};

/* Stage entry points over batch rows [b0, b0+nb). Each marks its weight
 * group in use, makes sc->stream wait on the group's ready event, launches,
 * and releases the group on every exit path. No synchronisation inside. */
gp_status gp_engine_embed_stage(gp_engine *e, int b0, int nb, const gp_stage_ctx *sc);
gp_status gp_engine_attn_stage(gp_engine *e, int layer, int b0, int nb, int max_len,
                               const gp_stage_ctx *sc);
gp_status gp_engine_ffn_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc);
gp_status gp_engine_head_stage(gp_engine *e, int b0, int nb, const gp_stage_ctx *sc);

/* The same layer with the QKV and O projections moved beside the FFN (the
 * pipeline's "qkvo on F" placement): qkv = attention norm + QKV projection of
 * layer; attn_core = RoPE + KV append + decode attention (no GEMM);
 * o_ffn_qkv = O projection of layer, its FFN, then the QKV projection of
 * layer + 1 (none after the last layer). qkv(0), then per layer attn_core and
 * o_ffn_qkv, computes exactly the attention + FFN stages above. */
gp_status gp_engine_qkv_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc);
gp_status gp_engine_attn_core_stage(gp_engine *e, int layer, int b0, int nb, int max_len,
                                    const gp_stage_ctx *sc);
gp_status gp_engine_o_ffn_qkv_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc);

/* Opt-in timed cuBLASLt choice (params gemm_tune = N > 0): before a step
 * shape is first captured, time up to N candidates of each layer GEMM
 * (QKV, O, gate+up, down) for rows-row batches on ctx's stream, i.e. on its
 * partition, and keep the fastest (gp_gemm_tune); later captures on ctx use
 * it. Layer 0's weights, scratch activations; not capturable. A no-op with
 * gemm_tune 0, and for shapes the skinny kernel serves. The LM head is left
 * to the heuristic (its output alone would need B x vocab x 4 bytes of
 * scratch). */
gp_status gp_engine_tune_gemms(gp_engine *e, gp_gemm_ctx *ctx, int rows);

/* The two ends of a decode step, for runners that launch the stages
 * themselves (the pipeline): prepare validates the inputs, reserves KV room,
 * uploads tokens and block tables on s and returns the longest context;
 * finish copies next (and logits) back on s, waits for them and advances the
 * sequences. */
gp_status gp_engine_step_prepare(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens,
                                 cudaStream_t s, int *max_len);
gp_status gp_engine_step_finish(gp_engine *e, int B, const int *seq_ids, int32_t *next, float *logits,
                                cudaStream_t s);

#endif
