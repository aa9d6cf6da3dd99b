/* greenpipe CUDA engine: device buffers for one decode step, the stage API
 * that every runner drives (the sequential step here, the pipeline's CUDA
 * executor on partitions), and the sequential step (all SMs), eager or
 * replayed as a CUDA graph. C-callable; no CUDA types (streams are void*). */
#ifndef GP_ENGINE_H
#define GP_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_attention.h"
#include "gp_model.h"
#include "gp_stage.h"
#include "gp_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_engine gp_engine; /* opaque */

typedef struct gp_engine_params {
    int max_batch;     /* sequences per step */
    int max_context;   /* tokens per sequence, prompt included */
    int block_size;    /* KV cache block size in tokens */
    bool use_graphs;   /* replay each step shape as a CUDA graph (default on) */
    int gemm_tune;     /* 0 (default): cuBLASLt's heuristic picks each layer GEMM's
                          algorithm; N in 1..GP_GEMM_TUNE_MAX_CANDIDATES: the fastest of
                          its first N candidates, timed on the GEMM's own SM partition
                          before a step shape is first captured (and before a prefill
                          first runs a chunk shape). Timing-based, so two
                          runs may pick differently (results differ in rounding only) */
    int gemm_skinny_max_m; /* GEMMs of at most this many rows use the skinny kernel, the others
                              cuBLASLt (gp_gemm_set_skinny_max_m); 0..GP_GEMM_SKINNY_MAX_M,
                              default GP_GEMM_SKINNY_DEFAULT_MAX_M (where it measured faster) */
    bool split_swiglu; /* the FFN's SwiGLU as a kernel of its own after the gate/up projection even
                          where the skinny kernel can apply it in its epilogue (the same bits;
                          default false: fused; true for comparisons) */
    /* Decode attention (gp_decode_attn_params): GP_ATTN_KERNEL_AUTO (default)
     * lets the rule of gp_decode_attn_choose pick per call; another kernel
     * runs wherever it serves (comparisons). The streaming kernel's warps per
     * SM cap (0, the default: none) and L2 evict_first marking of its K/V
     * copies (default on) are measurement knobs. */
    gp_attn_kernel attn_kernel;
    int attn_stream_warps_cap;
    bool attn_kv_evict_first;
    /* Most prompt tokens one prefill forward takes (GEMMs at M = this many
     * rows; the step's activation buffers hold max(max_batch, prefill_chunk)
     * rows). 1..GP_ENGINE_MAX_PREFILL_CHUNK, default
     * GP_ENGINE_DEFAULT_PREFILL_CHUNK (docs/PERFORMANCE.md, "Real prefill"). */
    int prefill_chunk;
    /* Prefill attention: GP_PREFILL_ATTN_AUTO (default) lets
     * gp_prefill_attn pick; another kernel is used
     * for every prefill (comparisons) and refused at creation where it
     * cannot serve the model on this device. */
    gp_prefill_attn_kernel prefill_attn_kernel;
    /* Offloaded KV cache: 0 (default) keeps the whole cache on
     * the device. Else the device bytes the cache may take: each sequence's
     * newest blocks stay there, its oldest live in pinned host memory and
     * are copied, a layer ahead, into one of two staging buffers as large
     * as all offloaded blocks of one layer's K or V, which the budget also
     * holds (gp_engine_kv_offload_plan says how it splits). Sequential eager
     * steps and prefill only: use_graphs must be false. */
    uint64_t kv_vram_budget;
    /* Activation sparsity (gp_engine_set_sparsity): a step's union of active
     * inputs grows with its rows, and where it nears all of them the sparse
     * kernel reads as many bytes as the dense GEMM, more slowly. So each
     * decode step runs a projection sparse only where the union density the
     * last sparse step of that batch size measured is below the crossover
     * timed on the lane (both kernels, the first step of each batch size;
     * gp_sparse_crossover); a projection run dense runs sparse again after
     * sparse_probe dense steps to measure anew (default 16, 1..1000000),
     * the interval doubling (up to 16 x) each time the measurement confirms
     * dense. A dense step is the exact model, unmasked. sparse_always
     * (default false) runs every calibrated projection sparse on every step:
     * the masks of the CPU reference, the comparison. Pipelined steps always
     * run sparse (their micro-batches' unions are not the step's). */
    bool sparse_always;
    int sparse_probe;
} gp_engine_params;
#define GP_ENGINE_DEFAULT_PREFILL_CHUNK 2048
#define GP_ENGINE_MAX_PREFILL_CHUNK 65536
gp_engine_params gp_engine_default_params(void);

/* Device bytes the engine needs for these params (KV pools + activations +
 * workspaces), so callers can check before creating. Weights not included. */
uint64_t gp_engine_device_bytes(const gp_config *cfg, const gp_engine_params *p);

/* dw is borrowed and must outlive the engine. The engine dtype is the
 * weights' (gp_device_weights_dtype: GP_DTYPE_BF16 or GP_DTYPE_F16): its
 * 16-bit activations, views and KV cache are of it; accumulation, the
 * residual stream and the logits are fp32 in both (docs/ARCHITECTURE.md,
 * "engine dtype"). Fails with GP_ERR_DEVICE_MEMORY naming needed and free
 * bytes when the device cannot hold it. */
gp_status gp_engine_create(gp_device_weights *dw, const gp_engine_params *p, gp_engine **out);
void gp_engine_destroy(gp_engine *e);
const gp_config *gp_engine_config(const gp_engine *e);
gp_dtype gp_engine_dtype(const gp_engine *e);

/* Prefill S prompts (gp_prefill_seq: distinct sequences, 1 <= S <=
 * max_batch) in one call: their tokens are packed in order and run in
 * chunks of at most prefill_chunk tokens (a chunk may hold several prompts,
 * a prompt may span several chunks), each chunk one forward: GEMMs at M =
 * the chunk's tokens, RoPE + K/V written into the paged cache, causal
 * tensor-core attention of each token over its sequence's cache (earlier
 * chunks and earlier calls included). The sequences then hold their
 * prompts. next [S] (may be NULL): the greedy token after each prompt;
 * last_logits (host [S][vocab], may be NULL) the logits it was chosen from;
 * prompt_logits (host [sum of n][vocab], may be NULL) the logits at every
 * prompt position, prompts in order (the LM head over every token: for
 * checks, not speed). Everything is checked before anything runs (sequence
 * ids, lengths, tokens, room in max_context): a bad call leaves the cache as
 * it was. The host waits at the end of the call. */
gp_status gp_engine_prefill_batch(gp_engine *e, int S, const gp_prefill_seq *seqs, int32_t *next,
                                  float *last_logits, float *prompt_logits);
/* One prompt: gp_engine_prefill_batch with S = 1. */
gp_status gp_engine_prefill(gp_engine *e, int seq, int n, const int32_t *prompt, int32_t *next,
                            float *last_logits);
/* Device time of the last gp_engine_prefill_batch (events around all its
 * chunks, host uploads between chunks included), or -1. */
float gp_engine_last_prefill_ms(const gp_engine *e);
/* Where a prefill's time goes: ms per kernel class summed over chunks and
 * layers (events between kernels, so slightly slower than a plain call).
 * The sequences then hold their prompts, as after gp_engine_prefill_batch. */
typedef struct gp_prefill_breakdown {
    float embed, norms, qkv_gemm, rope_kv, attention, o_gemm, gate_up_gemm, swiglu, down_gemm, head,
        total; /* ms; total: first to last event */
} gp_prefill_breakdown;
gp_status gp_engine_prefill_breakdown(gp_engine *e, int S, const gp_prefill_seq *seqs, gp_prefill_breakdown *out);

/* One decode step over B sequences (seq_ids[B] distinct, tokens[B] their next
 * inputs). next[B] receives the greedy tokens; logits (host [B][vocab]) may
 * be NULL. Host waits only at the end of the step, for next[]. */
gp_status gp_engine_decode_step(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens,
                                int32_t *next, float *logits);
void gp_engine_reset_seq(gp_engine *e, int seq);
/* Shorten sequence seq to its first len tokens, keeping their K/V (e.g. to
 * decode again from a prefilled context); GP_ERR_INVALID_ARG beyond its length. */
gp_status gp_engine_truncate_seq(gp_engine *e, int seq, int len);
/* Shared KV blocks (a serving prefix cache; kvcache/gp_kvcache.h's
 * gp_kv_block_retain, gp_kv_block_drop, gp_kv_attach on the engine's
 * tables, under its KV lock): a handle is a block of the paged pool, kept
 * while any sequence or retain holds it. The kernels read a block through
 * each sequence's table, so several sequences read one block as they would
 * their own. An offloaded cache refuses (GP_ERR_UNSUPPORTED, its reason). */
gp_status gp_engine_kv_retain_block(gp_engine *e, int seq, int index, int *handle);
void gp_engine_kv_drop_block(gp_engine *e, int handle);
gp_status gp_engine_kv_attach(gp_engine *e, int seq, const int *handles, int n);
/* Device time of the last gp_engine_decode_step (its events), or -1. */
float gp_engine_last_step_ms(const gp_engine *e);
/* The event that last step's time starts from (cudaEvent_t as void*, with
 * timing), to place other device times on that step's clock (e.g. weight
 * copies: gp_device_weights_stream_copy_log); recorded again by the next
 * step. */
void *gp_engine_last_step_event(const gp_engine *e);

/* Benchmark support: give sequences 0..B-1 a context of C tokens of random
 * K/V (no prefill) so a step's cost equals that of a real C-token context. */
gp_status gp_engine_fill_context(gp_engine *e, int B, int C, uint64_t seed);
/* The same for one sequence, its K/V what its blocks hold (random after
 * gp_engine_fill_context): a prompt chunk after them costs what a later
 * chunk of a long prompt does. */
gp_status gp_engine_fill_seq_len(gp_engine *e, int seq, int C);

/* Time n_steps decode steps of sequences 0..B-1 with device events (after
 * warmup steps), feeding each step's greedy tokens to the next; ms[n_steps]
 * receives each step's time (first kernel to last). wall_ms (may be NULL):
 * host seconds from before the first timed step to after the last, per
 * step, so what runs between steps counts too (streamed weights' copies,
 * the token read-back). Contexts grow by one token per step. */
gp_status gp_engine_time_steps(gp_engine *e, int B, int warmup, int n_steps, float *ms, double *wall_ms);

/* Per-stage times of one step (eager launch, events between stages), for a
 * breakdown: ms per kernel class summed over layers. */
typedef struct gp_step_breakdown {
    float embed, attn_norm, qkv_gemm, rope_kv, attention, o_gemm, ffn_norm, gate_up_gemm, swiglu,
        down_gemm, head; /* ms */
} gp_step_breakdown;
gp_status gp_engine_breakdown(gp_engine *e, int B, gp_step_breakdown *out);


/* ------------------------------------------------------------ lanes and stages
 * An engine is a model state (weights, KV cache, the RoPE table and the
 * model-wide features: sparsity, CPU-assisted FFN, stored prefixes,
 * offloaded KV), shared by every lane, plus its default lane. A lane is
 * what one execution resource owns: its stream, GEMM context with an SM
 * target, decode-attention workspace and parameters for its SMs, the
 * scratch of its stages, and (a lane with rows) its activations, batch
 * inputs and outputs, graph cache and timing events. Many lanes run over
 * one model state on one device: each opens its own batches.
 *
 * The one stage API (docs/ARCHITECTURE.md section 2): a runner opens a
 * batch (gp_engine_step_prepare, or a lane's prefill / mixed batch),
 * launches stages with gp_stage_run on the lanes it chooses, ordering them
 * with events, and closes it (gp_engine_step_finish). A stage reads and
 * writes exactly the views of its gp_stage_io (device views of the
 * engine's device, contiguous rows: f32 residual [nb][hidden], QKV rows
 * [nb][(n_heads + 2 n_kv_heads) head_dim] and attention output [nb][n_heads
 * head_dim] of the engine dtype (gp_engine_dtype); a view of another dtype
 * is refused); the rows' tokens, positions, table rows and sequence
 * descriptors, and the head's logits and next tokens, come from the batch
 * the io names (NULL: the default lane's); scratch is the running lane's.
 * Each stage marks its weight groups in use, makes its stream wait on their
 * ready events, launches and releases them on every exit path; it never
 * synchronises, so it can be captured into a graph. */
typedef struct gp_lane gp_lane; /* opaque */
typedef struct gp_stage_batch gp_stage_batch; /* opaque: a lane's open batch */

/* A lane over e's model state on stream (cudaStream_t, e.g. a green-context
 * partition's; NULL: a stream of its own) for sm_count SMs (0: the whole
 * device). rows 0: no activations of its own: it runs stages over views it
 * is handed (the pipeline's partitions) and borrows the default lane's
 * buffers, so its stages must not overlap the default lane's on the same
 * rows. rows >= 1: its own activations, scratch, attention workspace and
 * batch staging for batches of up to rows rows (at most max(max_batch,
 * prefill_chunk)), for prefills and decode steps of its own
 * (gp_lane_prefill_batch, gp_lane_decode_step, gp_lane_run_batch). */
gp_status gp_lane_create(gp_engine *e, void *stream, int sm_count, int rows, gp_lane **out);
/* NULL and the engine's own lane are ignored. Lanes left at
 * gp_engine_destroy go with their engine (their handles then dangle). */
void gp_lane_destroy(gp_lane *lane);
/* The engine's default lane: its stream, every SM (the sequential step's). */
gp_lane *gp_engine_lane(gp_engine *e);
void *gp_lane_stream(const gp_lane *lane);
/* Device time of the lane's last decode step or batch (first kernel to
 * last, its events), or -1. */
float gp_lane_last_ms(const gp_lane *lane);

/* The engine's step activations, for runners that hand them between stages;
 * rows = max(max_batch, prefill_chunk) (decode rows or a prefill chunk's tokens). */
typedef enum gp_act {
    GP_ACT_RESID = 0, /* f32 [rows][hidden]: the residual stream */
    GP_ACT_QKV,       /* engine dtype [rows][qkv rows]: QKV projection output */
    GP_ACT_ATTN,      /* engine dtype [rows][n_heads head_dim]: attention output */
} gp_act;
/* Rows [b0, b0+nb) of one of the default lane's activations. */
gp_status gp_engine_act_view(const gp_engine *e, gp_act which, int b0, int nb, gp_tensor_view *out);
/* The same of a lane with rows of its own. */
gp_status gp_lane_act_view(const gp_lane *lane, gp_act which, int b0, int nb, gp_tensor_view *out);

gp_status gp_stage_run(gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io);
/* The same stage captured on the lane's stream into a graph to replay
 * (*exec: a cudaGraphExec_t, the caller's to destroy); what names it in a
 * failure's message. Nothing runs until the graph is launched. */
gp_status gp_stage_capture(gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io, const char *what, void **exec);

/* The decode-attention context splits the heuristic picks for rows rows at
 * context max_len on lane's SMs, for gp_stage_io.attn_splits. */
gp_status gp_lane_attn_splits(const gp_lane *lane, int rows, int max_len, int *out);
/* The decode-attention kernel the stages run for rows rows at context
 * max_len on lane's SMs (the splits the heuristic picks), for reports. */
gp_status gp_lane_attn_kernel(const gp_lane *lane, int rows, int max_len, gp_attn_kernel *out);

/* Opt-in timed cuBLASLt choice (params gemm_tune = N > 0): time up to N
 * candidates of each layer GEMM (QKV, O, gate+up, down) for rows-row
 * batches on lane's stream, i.e. on its partition, and keep the fastest
 * (gp_gemm_tune); later launches on the lane use it. Layer 0's weights, scratch
 * activations; not capturable, so call it before capturing a step shape. A
 * no-op with gemm_tune 0, and for shapes the skinny kernel serves. The LM
 * head is left to the heuristic (its output alone would need B x vocab x 4
 * bytes of scratch). */
gp_status gp_lane_tune_gemms(gp_lane *lane, int rows);
/* True when the engine's weights are streamed (gp_device_weights_streamed):
 * eager steps only. */
bool gp_engine_weights_streamed(const gp_engine *e);
/* Activation sparsity (sparse/gp_sparse.h): thresholds [n_layers][4] in
 * gp_sparse_proj order (copied), NULL to turn it off. From then on decode
 * steps of at most GP_SPARSE_MAX_B rows read only the weights of the inputs
 * above each threshold (sequential and pipelined steps alike); prefill and
 * larger batches stay dense. The four projections of every layer are
 * transposed once into a second device copy (the layer weights' bytes
 * again; GP_ERR_DEVICE_MEMORY naming the bytes when they do not fit).
 * A projection whose threshold is 0 in a layer runs the dense GEMM there
 * (it would mask only exact zeros); one at 0 in every layer gets no
 * transposed copy. Where the sparse gate/up kernel serves, its split sum
 * applies the SwiGLU (one kernel fewer, the same bits).
 * On streamed weights the copies are made too, each group copied in once
 * for it, and they are device memory beyond the streaming budget (as the
 * CPU-assisted FFN's hot cache): they must fit beside the budget's slots
 * still to be allocated, else GP_ERR_DEVICE_MEMORY with the bytes. Streamed
 * weights whose FFN groups are on demand (the CPU-assisted FFN's setup)
 * copy only the attention projections: the FFN's decode steps are the CPU-
 * assisted FFN's (gp_engine_set_cpu_ffn). Captured step graphs are dropped. */
gp_status gp_engine_set_sparsity(gp_engine *e, const float *thresholds);
/* Tensor parallel: this engine is rank `rank` of tp (its weights a
 * gp_tp_config shard, gp_host_weights_shard). After every layer's o and
 * down projection the step's residual rows (fp32, n = rows x hidden) go
 * through sum(ctx, rows, n, stream) on the lane's stream, which must
 * leave the sum over the ranks in place (an all-reduce: comm/'s gp_comm_sum_f32)
 * and be capturable in a CUDA graph: rank 0's rows then hold the residual
 * plus its partial output, every other rank's its partial output alone
 * (the projection overwrites them), so the sum is the next residual on
 * every rank. The LM head is split by vocabulary too: rank r computes the
 * logits of rows [r s, (r+1) s) of the head (s = vocab / tp rounded up)
 * into segment r of a buffer of tp segments of n = rows x s floats,
 * gather(ctx, buf, n, stream) must leave every rank's segment in place (an
 * all-gather: gp_comm_gather_f32), and a kernel puts them in vocabulary
 * order. sum and gather NULL: one rank (tp 1). Captured graphs are dropped.
 * GP_ERR_INVALID_ARG for rank outside 0..tp-1, tp outside 1..8, tp > 1
 * without sum or gather. */
typedef gp_status (*gp_engine_reduce_fn)(void *ctx, float *rows, size_t n, void *stream);
typedef gp_status (*gp_engine_gather_fn)(void *ctx, float *buf, size_t n, void *stream);
typedef struct gp_engine_tp {
    int rank, tp;
    gp_engine_reduce_fn sum;
    gp_engine_gather_fn gather;
    void *ctx;
} gp_engine_tp;
gp_status gp_engine_set_tp(gp_engine *e, const gp_engine_tp *tp);
/* Steps each projection (gp_sparse_proj order) ran sparse and dense by the
 * per-step choice (gp_engine_params.sparse_always, sparse_probe) since the
 * last statistics reset (gp_engine_sparsity_stats); a projection whose
 * threshold is 0 everywhere counts as dense. GP_ERR_STATE without sparsity. */
gp_status gp_engine_sparse_steps(const gp_engine *e, long sparse[4], long dense[4]);
/* The device bytes gp_engine_set_sparsity takes for thresholds of cfg on
 * sm_count SMs: the transposed copies and the two split workspaces;
 * ffn_on_demand: without the FFN projections' copies. 0 for NULL or
 * sm_count < 1. Pure arithmetic, no device. */
uint64_t gp_engine_sparse_device_bytes(const gp_config *cfg, const float *thresholds, bool ffn_on_demand,
                                       int sm_count);
bool gp_engine_sparse_on(const gp_engine *e);
/* Active inputs per layer and projection ([n_layers][4]) summed over the
 * sparse calls since the last reset: the union over each call's rows, so a
 * call's density is active / the projection's input width; a projection run
 * dense (threshold 0) counts its whole width once per step served.
 * Synchronises the engine stream; between steps only. */
gp_status gp_engine_sparsity_stats(gp_engine *e, long *active, int reset);

/* ------------------------------------------------------ CPU-assisted FFN
 * --cpu-ffn: at small decode batch with sparsity on, each
 * layer's FFN neurons split in two. The "hot" ones (gate row, up row, down
 * column) sit in a device cache of hot_per_layer slots per layer; the
 * "cold" ones are computed by CPU threads (gp_cold_ffn_run) from the FFN
 * input copied to pinned host memory on a side stream, while the GPU
 * computes the hot ones; both partial sums are added into the residual.
 * The hot set starts as the calibration's most frequent neurons and is
 * re-chosen every reload_window steps from decayed frequencies of the
 * observed activity (sparse/gp_sparse.h, the hot-set tracker).
 *
 * Where the FFN weights live: on resident weights the dense FFN stays on
 * the device (prefill and steps above GP_SPARSE_MAX_B rows use it, and
 * set_sparsity's transposed copy stays too), so the hot cache
 * (gp_cpu_ffn_stats.hot_bytes) is extra device memory. On streamed weights
 * created with gp_weights_stream_params.ffn_on_demand the steps it serves
 * acquire no FFN group: the FFN weights stay in host memory, copied only
 * for prefill and larger steps, and the hot cache is the FFN's only device
 * memory in decode (set_sparsity on streamed weights keeps no transposed
 * copy: the attention projections run dense).
 *
 * A reload's copies run asynchronously from the packs (page-locked at
 * setup) on a copy stream, each layer's FFN in the next step waiting only
 * for its own; where the packs cannot be page-locked they are pageable
 * copies waited for between steps (gp_cpu_ffn_stats.reload_async). */
typedef struct gp_cpu_ffn_params {
    int hot_per_layer;    /* H: hot slots per layer, 1..ffn; a multiple of GP_HOTSET_ALIGN or ffn itself, as
                             gp_hotset_capacity derives it from a byte budget. No default (0 is refused) */
    int reload_window;    /* decode steps between reloads of the hot set; default 64 */
    double decay;         /* per-step decay of the neuron frequencies, in (0, 1); default 0.99 */
    double margin;        /* hysteresis of a swap (gp_hotset_params); default 0.05 */
    int max_swaps;        /* swaps per layer and reload at most; 0 (default): no cap */
    int n_threads;        /* CPU threads of the cold neurons: 0 (default) the online CPUs up to 16, or 1..16 */
    int chunks;           /* the cold list's pieces (gp_cold_ffn_params; results depend on it, never on
                             n_threads); 1..256, default 48 */
} gp_cpu_ffn_params;
gp_cpu_ffn_params gp_cpu_ffn_default_params(void);

/* Turns the CPU-assisted FFN on (w NULL: off). w: the model's host weights
 * (any host dtype; each layer's FFN is packed once in the engine dtype,
 * 3 x hidden x ffn x 2 bytes per layer of host memory; w is not kept);
 * calib (may be NULL): its per-neuron freq, when recorded, chooses the first
 * hot set (else the first H neurons). Requires gp_engine_set_sparsity first
 * (its gate/up and down thresholds; GP_ERR_STATE otherwise); setting the
 * sparsity again turns this off. Applies to the decode steps the sparse
 * projections serve (at most GP_SPARSE_MAX_B rows, not prompts run through
 * steps): those run eager, never from a captured graph (the host callbacks),
 * whatever use_graphs says; larger steps and prefill are unchanged. The
 * sequential step only: an FFN stage of a micro-batch, or one captured into
 * a graph, is GP_ERR_UNSUPPORTED. Fills the hot cache synchronously.
 * Streamed weights whose FFN groups are not on demand are GP_ERR_STATE. */
struct gp_sparsity; /* sparse/gp_sparse.h */
gp_status gp_engine_set_cpu_ffn(gp_engine *e, const gp_host_weights *w, const struct gp_sparsity *calib,
                                const gp_cpu_ffn_params *p);
bool gp_engine_cpu_ffn_on(const gp_engine *e);

typedef struct gp_cpu_ffn_stats {
    int hot_per_layer;      /* H */
    long steps;             /* decode steps that ran the CPU-assisted FFN */
    long active, hits;      /* active neurons observed over steps and layers, and those that were hot */
    double hit_rate;        /* hits / active (0 when none) */
    long reloads, swaps;    /* reload plans committed, neuron swaps in them */
    uint64_t swap_bytes;    /* host -> device bytes of those swaps */
    double cpu_ms;          /* host ms of the cold-neuron FFN, summed over steps and layers */
    double cpu_ms_per_step; /* cpu_ms / steps */
    uint64_t cpu_bytes;     /* bytes the CPU read (weights and x, gp_cold_ffn_stats.bytes), summed */
    double cpu_bytes_per_step;
    uint64_t hot_bytes;     /* device bytes of the hot cache (every layer) */
    uint64_t host_bytes;    /* host bytes of the packed FFN weights */
    int reload_async;       /* 1: the packs are page-locked and reloads overlap the next step */
} gp_cpu_ffn_stats;
/* Statistics since set_cpu_ffn or the last reset; GP_ERR_STATE when off.
 * The steps it serves add nothing to gp_engine_sparsity_stats' gate/up and
 * down counts (their activity is here, as the hit rate's). */
gp_status gp_engine_cpu_ffn_stats(gp_engine *e, gp_cpu_ffn_stats *out, int reset);

/* ---------------------------------------------------- stored prefixes
 * The KV of whole blocks of prompts kept in a host store
 * (kvstore/gp_kvstore.h: hash-chain keys, LRU in a pinned pool, optional
 * checksummed files), so that a prompt whose leading blocks were stored
 * before reloads their KV layer by layer (the lag-2 load / process / write
 * schedule of gp_kv_reload_run: copies on a copy stream into staging
 * buffers, scatters into the KV memory on a second stream, events only)
 * and prefills only the rest. With an offloaded KV cache the reloaded
 * positions below a sequence's host quota go to its host blocks (what the
 * cache copies in before each layer's attention), the rest to its device
 * blocks. */
typedef struct gp_prefix_params {
    /* Names the weights in the store's identity, so that blocks of other
     * weights never match: a checkpoint path, or a preset with its seed.
     * Required. The engine adds its shape, dtype and block_tokens. */
    const char *model;
    uint64_t store_bytes; /* payload bytes of the pinned host pool (--kv-store-size); required, at least
                             one block (gp_engine_prefix_block_bytes) */
    const char *dir;      /* block files (--kv-store DIR); NULL (default): memory only */
    /* Tokens per stored block (--kv-store-block): a prompt reuses whole
     * blocks only; the reload copies one piece per block, layer and K|V, so
     * small blocks are small copies that cannot fill the link (at 16 tokens
     * a piece is 32 KiB for llama3-8b). 1..65536; default
     * GP_PREFIX_DEFAULT_BLOCK_TOKENS. */
    int block_tokens;
    int n_buffers; /* reload staging buffers, 2..GP_KV_RELOAD_MAX_BUFFERS; default 2 (gp_kvstore.h says when
                      3 pay) */
    /* The suffix prefill's layer l waits only for layer l of the reload (its
     * attention reads that layer's prefix), so it starts while later layers
     * still copy; false: it waits for the whole reload. Default true. */
    bool overlap;
} gp_prefix_params;
#define GP_PREFIX_DEFAULT_BLOCK_TOKENS 256
gp_prefix_params gp_prefix_default_params(void);

/* Payload bytes of one stored block for this engine and block_tokens (the
 * smallest store_bytes); 0 for a bad block_tokens or on overflow. */
uint64_t gp_engine_prefix_block_bytes(const gp_engine *e, int block_tokens);

/* Creates the store (its pinned pool of store_bytes, rounded down to whole
 * blocks, allocated now), the staging buffers (n_buffers x the longest
 * prefix max_context allows, on the device) and the streams.
 * GP_ERR_INVALID_ARG naming a bad field; GP_ERR_STATE when already on;
 * GP_ERR_DEVICE_MEMORY / pinned-allocation failures naming the bytes.
 * Nothing is left allocated on failure. */
gp_status gp_engine_prefix_enable(gp_engine *e, const gp_prefix_params *p);
/* The store (NULL when off), for its statistics (gp_kvstore_get_stats). */
struct gp_kvstore *gp_engine_prefix_store(gp_engine *e);

/* One prefill with reuse: what the call obtained and where its time went. */
typedef struct gp_prefix_stats {
    int prompt_tokens;
    int matched_tokens;    /* reloaded from the store: whole blocks, at most prompt_tokens - 1 */
    uint64_t bytes_loaded; /* host-to-device bytes of the reload */
    float reload_ms;       /* device: the call's start to the last layer written (0 without a match) */
    float suffix_ms;       /* device: the suffix prefill, its waits for the reload included */
    float ttft_ms;         /* device: the call's start to the first token ready */
    double reload_gbps;    /* bytes_loaded / reload_ms */
    double wall_ms;        /* host: the whole call */
} gp_prefix_stats;

/* Prefill prompt[0..n) into sequence seq, which must be empty: the longest
 * run of its leading whole blocks held by the store (leaving at least one
 * token to prefill, whose logits choose next) is reloaded, then the rest is
 * prefilled (gp_engine_prefill). next and last_logits as gp_engine_prefill;
 * st (may be NULL) gets the split. Without prefixes enabled, or with no
 * match, a plain prefill. Checked before any work (ids, tokens, room); a
 * failure leaves the sequence empty. The matched blocks are pinned in the
 * store until the reload completed (the host waits for it). */
gp_status gp_engine_prefill_prefix(gp_engine *e, int seq, int n, const int32_t *prompt, int32_t *next,
                                   float *last_logits, gp_prefix_stats *st);

/* Where the last reload's time went, per layer, in ms from the call's
 * start (device events): its copies (the copy stream), its scatter into the
 * cache (the write stream), and the suffix prefill reaching the layer's
 * attention (after waiting for it). With overlap the suffix's layer l runs
 * while layer l + 1 copies. */
typedef struct gp_prefix_trace_layer {
    float load_begin, load_end, write_begin, write_end, suffix_attn;
} gp_prefix_trace_layer;
/* layers [n_layers] and the first token's time, of the last
 * gp_engine_prefill_prefix that reloaded; GP_ERR_STATE when there was none
 * (or it failed, or its suffix ran through decode steps, unmarked). */
gp_status gp_engine_prefix_trace(gp_engine *e, gp_prefix_trace_layer *layers, float *first_token);

/* Storing a sequence's prefix: what it did. */
typedef struct gp_prefix_store_stats {
    int blocks;         /* whole blocks in the tokens given */
    int blocks_present; /* already held (touched, not copied) */
    int blocks_stored;  /* copied into the store (those refused for want of room are not) */
    int blocks_refused; /* put refused (GP_SOFT_FULL: pinned blocks fill the pool) */
    uint64_t bytes_stored; /* device-to-host payload bytes */
    double ms;             /* host: the whole call */
} gp_prefix_store_stats;

/* Stores the KV of every whole block of tokens[0..n), which sequence seq
 * holds (its first n tokens: the caller's promise, since the cache keeps no
 * tokens), in the store: blocks already held are only touched; the others
 * are gathered from the paged cache, copied to the host and put. Host waits
 * for the copies. GP_ERR_STATE without prefixes enabled or when seq holds
 * fewer than n tokens. */
gp_status gp_engine_prefix_store_seq(gp_engine *e, int seq, int n, const int32_t *tokens,
                                     gp_prefix_store_stats *st);

/* The host tier behind a scheduler's prefix cache (serving): blocks the
 * device cache evicts are kept in the store, and a later request whose
 * prompt continues past its device hits with stored blocks reloads them
 * layer by layer beside its mixed batch. The store's blocks are the paged
 * cache's (block_tokens = the engine's block_size), named by the
 * scheduler's chain keys, which start from gp_engine_host_seed (the store's
 * chain seed, gp_kvstore_seed of its identity), so that they are the keys
 * gp_engine_prefill_prefix computes. A resident KV memory only: the feature
 * table refuses a prefix cache with an offloaded one. GP_ERR_STATE without
 * stored prefixes, or with blocks of another size.
 *   offload: retained block handle's KV goes into the store under key
 *     (tokens: its block_tokens tokens) unless held: a gather and a
 *     device-to-host copy on the copy-side stream, waited for; a put the
 *     pool refuses (pinned blocks fill it) is GP_SOFT_FULL.
 *   lookup: the longest run of keys[0..n) the store holds (tokens: theirs),
 *     at most what one batch's reload stages beside the loads already
 *     waiting, into *held, pinned until the next load.
 *   load: sequence seq, holding only attached blocks (or none), appends the
 *     first n (<= held) blocks of the last lookup as computed tokens, their
 *     blocks reserved now; the next gp_lane_run_batch copies them in with
 *     one lag-2 reload for every load waiting (a provider on the KV
 *     memory's hooks: the batch's layer l waits for layer l only); the
 *     lookup's other pins go (n = 0: all). A batch that fails before its
 *     first layer leaves the loads waiting for the next; gp_engine_reset_seq
 *     drops seq's. The pins go once the copies completed, before the batch
 *     returns. */
uint64_t gp_engine_host_seed(const gp_engine *e);
gp_status gp_engine_host_offload(gp_engine *e, int handle, uint64_t key, const int32_t *tokens);
gp_status gp_engine_host_lookup(gp_engine *e, const uint64_t *keys, const int32_t *tokens, int n, int *held);
gp_status gp_engine_host_load(gp_engine *e, int seq, int n);

/* ------------------------------------------------------ offloaded KV
 * How kv_vram_budget splits the cache: whole blocks per sequence, device
 * blocks ids [0, n_device), the host ones each sequence's first
 * host_blocks_per_seq table entries; device and host sizes as allocated. */
typedef struct gp_kv_offload_plan {
    uint64_t budget;          /* kv_vram_budget as given */
    int device_blocks_per_seq, host_blocks_per_seq;
    int n_device, n_host;     /* blocks: max_batch x each */
    int n_blocks;             /* block ids: n_device + the staging window, rounded to align_blocks */
    int align_blocks;         /* the device's virtual-memory granularity in blocks of one layer's K or V */
    uint64_t device_bytes;    /* device-resident blocks + 4 staging windows */
    uint64_t host_bytes;      /* pinned host blocks */
    uint64_t full_bytes;      /* the whole cache on the device */
} gp_kv_offload_plan;
/* The split for cfg and p (p->kv_vram_budget > 0) in dtype dt: the most
 * device blocks per sequence the budget holds. A budget that holds the
 * whole cache offloads nothing. GP_ERR_INVALID_ARG naming the least budget
 * when even every block on the host does not fit. Queries the current
 * device's granularity. */
gp_status gp_engine_kv_offload_plan(const gp_config *cfg, const gp_engine_params *p, gp_dtype dt,
                                    gp_kv_offload_plan *out);
/* The engine's split, or NULL when its KV cache is not offloaded. */
const gp_kv_offload_plan *gp_engine_kv_offload(const gp_engine *e);
typedef struct gp_kv_offload_stats {
    uint64_t bytes_in, bytes_out; /* host-to-device (before attention), device-to-host (write-backs) */
    long copies_in, copies_out;   /* copies enqueued */
} gp_kv_offload_stats;
/* Counts since the last reset; GP_ERR_STATE when not offloaded. */
gp_status gp_engine_kv_offload_stats(gp_engine *e, gp_kv_offload_stats *out, bool reset);

/* The device weights the engine runs on (not owned by it). */
gp_device_weights *gp_engine_weights(const gp_engine *e);

/* The two ends of a step for runners that launch the stages themselves:
 * prepare validates the inputs, reserves KV room, uploads tokens and block
 * tables on stream and returns the longest context; finish copies next (and
 * logits) back on stream, waits for them and advances the sequences. */
/* Opens a batch of B rows on e's default lane for FFN stages alone: the
 * sequences, their tokens and KV cache live in another engine (attention
 * and FFN on two GPUs: the FFN side's engine runs FFN stages over the
 * residual rows copied to it). Every projection dense. EMBED, ATTN,
 * ATTN_CORE, QKV, O_FFN_QKV and HEAD stages over it are refused: they read
 * sequence state or weights this side need not hold. Open until the next
 * call that opens a batch on the lane. GP_ERR_INVALID_ARG for B outside
 * 1..max_batch. */
gp_status gp_engine_open_ffn_rows(gp_engine *e, int B);
gp_status gp_engine_step_prepare(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens, void *stream,
                                 int *max_len);
gp_status gp_engine_step_finish(gp_engine *e, int B, const int *seq_ids, int32_t *next, float *logits,
                                void *stream);
int gp_engine_max_batch(const gp_engine *e);
int gp_engine_max_context(const gp_engine *e); /* tokens per sequence */

/* A lane's own batches (a lane with rows, or the default lane): as
 * gp_engine_prefill_batch and gp_engine_decode_step, on the lane's stream
 * with its buffers, over the shared model state; the host waits at the end
 * of each call. Lanes of one engine may run concurrently on the device
 * (their batches interleaved without host waits between their launches);
 * their calls must name distinct sequences. Lanes may be driven from
 * several host threads, each on its own sequences: the KV tables' reserve
 * and advance are taken under the model state's lock; the engine's other
 * calls (settings, stored prefixes, destroy) must not run beside them. Features
 * with per-step state of their own (offloaded KV, CPU-assisted FFN, stored
 * prefixes) run on the default lane only. */
gp_status gp_lane_prefill_batch(gp_lane *lane, int S, const gp_prefill_seq *seqs, int32_t *next,
                                float *last_logits);
gp_status gp_lane_decode_step(gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                              float *logits);
/* One forward over a mixed batch (stage/gp_stage.h gp_batch: prefill
 * parts, then decode parts): embedding, per layer norm + QKV over all rows,
 * RoPE + KV append of every row at its position, the prefill attention over
 * the prefill rows and the decode attention over the decode rows, O and FFN
 * over all rows; the head over each part's last row. next [n_parts] (may be
 * NULL): each part's greedy token; logits (host [n_parts][vocab], may be
 * NULL) the logits it was chosen from. Checked by gp_batch_check before any
 * work: at most the lane's rows tokens, at most max_batch parts. The
 * sequences then hold their new tokens. The host waits at the end. */
gp_status gp_lane_run_batch(gp_lane *lane, const gp_batch *b, int32_t *next, float *logits);

/* ---------------------------------------------------------- feature table
 * Which features of a run combine, decided in one place for every asker
 * (greenpipe's options, gp_backend, the case study, the engine assembly):
 * each refusal names the two features and the physical reason. Pure C
 * (library gp_engine_features): programs that only parse options link it
 * without the engine. */
typedef enum gp_feature {
    GP_FEAT_CPU = 0,        /* the float32 CPU reference */
    GP_FEAT_CUDA,           /* the CUDA engine */
    GP_FEAT_PIPELINED,      /* pipelined steps: attention and FFN on two partitions */
    GP_FEAT_PIPE_SHAPE,     /* an SM split or a micro-batch count */
    GP_FEAT_PREFILL_CHUNK,  /* a prefill chunk size */
    GP_FEAT_STREAMED,       /* weights beyond VRAM, streamed within a budget */
    GP_FEAT_KV_OFFLOAD,     /* an offloaded KV cache */
    GP_FEAT_KV_STORE,       /* stored prefixes */
    GP_FEAT_SPARSITY,       /* sparse decode projections */
    GP_FEAT_SPARSITY_STATS, /* counts of the active inputs */
    GP_FEAT_SPARSE_ALWAYS,  /* every calibrated projection sparse on every step */
    GP_FEAT_CPU_FFN,        /* the CPU-assisted FFN */
    GP_FEAT_CPU_FFN_THREADS,/* its CPU threads */
    GP_FEAT_CPU_THREADS,    /* the CPU reference's worker threads */
    GP_FEAT_PROMPT_LOGITS,  /* logits of every prompt position */
    GP_FEAT_PREFIX_CACHE,   /* KV blocks shared between requests by their token chain (serving) */
    GP_FEAT_PD_LANES,       /* prefill and decode lanes on two SM partitions (serving) */
    GP_FEAT_TP,             /* tensor parallel over several GPUs */
    GP_FEAT_TP_PEER,        /* its sums over peer memory sized */
    GP_FEAT_AFD,            /* attention and FFN on two GPUs */
    GP_FEAT_COUNT
} gp_feature;

/* What a run asks for. Zero-initialised: the CPU reference, sequential
 * steps, nothing else. */
typedef struct gp_feature_set {
    bool cuda;               /* the CUDA engine; false: the CPU reference */
    bool pipelined;          /* pipelined steps */
    bool pipe_shape;         /* an SM split or micro-batches given */
    bool graphs;             /* CUDA graphs asked for (gp_features_graphs decides) */
    bool prefill_chunk;      /* a prefill chunk size given */
    uint64_t vram_budget;    /* streamed weights: the device bytes they may take; 0: resident */
    uint64_t kv_vram_budget; /* offloaded KV: the device bytes of the cache; 0: all on the device */
    uint64_t kv_store_bytes; /* stored prefixes: the host pool; 0: off */
    bool sparsity;           /* a calibration's thresholds */
    bool sparsity_stats;     /* counts of the active inputs asked for */
    bool sparse_always;      /* sparse on every step, not the per-step choice */
    uint64_t cpu_ffn_budget; /* the CPU-assisted FFN's hot cache (device bytes); 0: off */
    bool cpu_ffn_threads;    /* its threads given */
    bool cpu_threads;        /* the CPU reference's worker threads given */
    bool prompt_logits;      /* logits of every prompt position asked for */
    bool prefix_cache;       /* automatic prefix caching (greenpipe serve) */
    bool pd_lanes;           /* prefill and decode lanes on a green pair (greenpipe serve --pd-split) */
    bool tp;                 /* tensor parallel over more than one GPU (--tp) */
    bool tp_peer;            /* the size of its sums over peer memory given (--tp-peer-bytes) */
    bool afd;                /* attention and FFN on two GPUs (--engine afd; pipelined is set too) */
} gp_feature_set;

/* GP_OK, or GP_ERR_UNSUPPORTED naming the first refused pair of the table
 * (or the CPU-assisted FFN's cache against the VRAM budget, with the
 * bytes) and why; GP_ERR_INVALID_ARG for NULL. */
gp_status gp_features_check(const gp_feature_set *f);
/* Whether steps are captured as CUDA graphs: asked for, on the CUDA engine,
 * and nothing the run holds changes between steps what a graph would bake
 * in. When not, *why (may be NULL) says why in a phrase ("streamed weights
 * move between steps"); "" when graphs were not asked for. */
bool gp_features_graphs(const gp_feature_set *f, const char **why);

/* The table itself, for tests and reports: a refused pair (needs false: a
 * and b do not combine) or a requirement (needs true: a needs b). */
typedef struct gp_feature_rule {
    gp_feature a, b;
    bool needs;
    const char *why; /* the physical reason */
} gp_feature_rule;
int gp_feature_rules(const gp_feature_rule **out);
/* "streamed weights (vram_budget, --vram-budget)"; "?" out of range. */
const char *gp_feature_name(gp_feature f);
/* Bit 1 << k for each feature k the set holds. */
uint32_t gp_features_mask(const gp_feature_set *f);

#ifdef __cplusplus
}
#endif
#endif
