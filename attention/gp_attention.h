/* greenpipe attention stage: the device paged KV cache, RoPE + KV append, and
 * GQA flash-decoding attention over the paged cache. C-callable; no CUDA types.
 *
 * Element type: every kernel runs in bf16 or fp16 (GP_DTYPE_BF16 or
 * GP_DTYPE_F16), the dtype of the gp_kv_view it is given: q, k, v, qkv, the
 * biases and the outputs of a call are all of that dtype (void pointers to
 * 16-bit elements); softmax and accumulation are float32 either way. */
#ifndef GP_ATTENTION_H
#define GP_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"
#include "gp_kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- device KV cache */

/* Device pools of every layer plus the per-step block tables, lengths and
 * positions. Row b of the step tables is the b-th sequence of the batch (not
 * its sequence id). */
typedef struct gp_kv_device gp_kv_device; /* opaque */

/* Device bytes gp_kv_device_create allocates (0 on overflow or bad args,
 * a dtype other than BF16 or F16 included; the same for both). */
uint64_t gp_kv_device_bytes(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                            int max_blocks_per_seq);

/* Allocates K and V pools for all layers (zeroed) of 16-bit elements of
 * dtype (GP_DTYPE_BF16 or GP_DTYPE_F16; anything else is GP_ERR_INVALID_ARG
 * naming it and the allowed ones), block tables (-1),
 * lengths/positions (0) and two pinned staging buffers. Checks cudaMemGetInfo
 * first: GP_ERR_DEVICE_MEMORY names the bytes needed and free. Synchronous
 * (not for use inside a step). max_seqs = most rows a step may have. */
gp_status gp_kv_device_create(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                              int max_blocks_per_seq, gp_kv_device **out);
/* An offloaded cache: block ids [0, n_device) are device
 * memory of their own; ids [n_device, l->n_blocks) of layer l's K and V are
 * a window onto staging buffer l % 2 (CUDA virtual memory: one physical
 * buffer mapped under every layer of that parity), which the caller fills
 * with that layer's offloaded blocks before its attention reads them. The
 * kernels read and write through views as ever. Device memory: n_device
 * blocks per layer and part, and 4 windows (2 parities x K, V). n_device and
 * n_blocks - n_device must be multiples of gp_kv_device_offload_align
 * blocks (GP_ERR_INVALID_ARG naming them otherwise). GP_ERR_UNSUPPORTED
 * when the driver lacks virtual memory management. */
gp_status gp_kv_device_create_offload(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                                      int max_blocks_per_seq, int n_device, gp_kv_device **out);
/* The current device's mapping granularity in blocks of l (one layer's K or V). */
gp_status gp_kv_device_offload_align(const gp_kv_layout *l, gp_dtype dtype, int *blocks);
/* Synchronises the device before freeing; NULL is fine. */
void gp_kv_device_destroy(gp_kv_device *kv);

/* Upload the step tables for B rows from the host bookkeeping: row b gets
 * seq_ids[b]'s block table, lens[b] = gp_kv_len + 1 (the token decoded this
 * step included), positions[b] = gp_kv_len. Call after gp_kv_reserve(seq, 1)
 * and before gp_kv_advance(seq, 1). seq_ids must be distinct. Only the table
 * columns the step can read (up to the block of the longest row) are copied;
 * later columns keep stale values that no kernel reads.
 * Asynchronous on stream, from one of two pinned staging buffers owned by kv.
 * A staging buffer is refilled only after its previous copy completed (an
 * event wait that blocks the host only when it is two uploads ahead of the
 * GPU), so calling again early is safe. The DEVICE tables are single-
 * buffered: the caller must order this upload after every kernel of the
 * previous step that reads them (same stream, or an event wait). Not
 * capturable into a CUDA graph (GP_ERR_STATE while stream is capturing):
 * upload before launching a graph that reads the tables. */
gp_status gp_kv_device_sync_tables(gp_kv_device *kv, const gp_kv_tables *t, int B,
                                   const int *seq_ids, void *stream);
/* Same, from raw host arrays (tests, benchmarks, custom schedulers):
 * tables [B][table_stride] block ids, lens [B] in [1, max_blocks*block_size]
 * (positions = lens - 1). Every referenced block id is checked to be in
 * [0, n_blocks). Same staging and ordering rules as above. */
gp_status gp_kv_device_upload(gp_kv_device *kv, int B, const int32_t *tables, int table_stride,
                              const int32_t *lens, void *stream);

const gp_kv_layout *gp_kv_device_layout(const gp_kv_device *kv);
int gp_kv_device_max_seqs(const gp_kv_device *kv);
int gp_kv_device_max_blocks_per_seq(const gp_kv_device *kv);
/* The element type of the pools (GP_DTYPE_BF16 or GP_DTYPE_F16; BF16 for NULL). */
gp_dtype gp_kv_device_dtype(const gp_kv_device *kv);
/* Layer's pools: device [n_blocks][block_size][n_kv_heads][head_dim] of
 * gp_kv_device_dtype; NULL when layer is out of range. */
void *gp_kv_device_k(const gp_kv_device *kv, int layer);
void *gp_kv_device_v(const gp_kv_device *kv, int layer);
/* Block `block`'s K and V of every layer to host memory: payload gets them
 * layer-major (layer 0 K, layer 0 V, layer 1 K, ...; each
 * [block_size][n_kv_heads][head_dim], the stored-prefix payload layout), as
 * one strided copy on stream, the pools lying layer after layer; pinned
 * payload memory makes it asynchronous. GP_ERR_INVALID_ARG for a block
 * outside the pool. */
gp_status gp_kv_device_copy_block_out(const gp_kv_device *kv, int block, void *payload, void *stream);
int32_t *gp_kv_device_block_tables(const gp_kv_device *kv); /* device [max_seqs][max_blocks_per_seq] */
int32_t *gp_kv_device_lens(const gp_kv_device *kv);         /* device [max_seqs] */
int32_t *gp_kv_device_positions(const gp_kv_device *kv);    /* device [max_seqs] */

/* What the kernels read: one layer's pools and the step tables, all device
 * pointers. The kernels take a view so they work on any storage. */
typedef struct gp_kv_view {
    /* The 16-bit type of k and v, and of q, qkv, biases and outputs of
     * every call given this view: GP_DTYPE_BF16 or GP_DTYPE_F16. */
    gp_dtype dtype;
    void *k;                     /* [n_blocks][block_size][n_kv_heads][head_dim] */
    void *v;                     /* [n_blocks][block_size][n_kv_heads][head_dim] */
    const int32_t *block_tables; /* [n_rows][max_blocks] */
    const int32_t *lens;         /* [n_rows]: valid tokens incl. this step's, in [1, max_blocks*block_size] */
    const int32_t *positions;    /* [n_rows]: position of this step's token (= lens - 1) */
    int n_rows;                  /* rows the tables hold; a call's B must not exceed it */
    int n_blocks;
    int block_size;
    int n_kv_heads;
    int head_dim;
    int max_blocks;              /* row stride of block_tables */
    /* [n_rows] or NULL: the block-table row of each row (prefill: many token
     * rows of one sequence share its table row); NULL: row b uses row b.
     * Read by gp_rope_kv_append only. */
    const int32_t *row_table;
} gp_kv_view;

gp_status gp_kv_device_view(const gp_kv_device *kv, int layer, gp_kv_view *out);
/* Rows [first, first+count) of a view, e.g. one micro-batch. */
gp_status gp_kv_view_rows(const gp_kv_view *in, int first, int count, gp_kv_view *out);

/* ---------------------------------------------------- token rows <-> cache
 * K and V of n consecutive positions pos0 .. pos0 + n - 1 of one sequence,
 * between its paged blocks in one layer's pools (position p in block
 * table[p / block_size], slot p % block_size) and two dense buffers
 * [n][n_kv_heads][head_dim] (the stored-prefix layout of kvstore/): the
 * scatter of a reload (GP_KV_TO_CACHE) or the gather that stores a prefix
 * (GP_KV_FROM_CACHE). 16-bit elements, bit copies. table: device, the
 * sequence's block table; an entry outside [0, n_blocks) moves nothing for
 * its positions. Asynchronous, capturable, no allocation. */
typedef enum gp_kv_copy_dir { GP_KV_TO_CACHE = 0, GP_KV_FROM_CACHE = 1 } gp_kv_copy_dir;
gp_status gp_kv_copy_tokens(const gp_kv_layout *l, void *k_pool, void *v_pool, const int32_t *table, int pos0,
                            int n, void *k_buf, void *v_buf, gp_kv_copy_dir dir, void *stream);
/* The host oracle: the same moves on host arrays. */
void gp_kv_copy_tokens_ref(const gp_kv_layout *l, uint16_t *k_pool, uint16_t *v_pool, const int32_t *table,
                           int pos0, int n, uint16_t *k_buf, uint16_t *v_buf, gp_kv_copy_dir dir);

/* --------------------------------------------------------- RoPE + KV append */

/* For each row b: RoPE (HF rotate_half, fp32 angle = (float)pos * inv_freq[i],
 * accurate cosf/sinf) on the q and k heads of qkv, q to q_out, k and the
 * unrotated v into the cache at (block_tables[b][pos / block_size],
 * pos % block_size). fp32 math, one rounding to kv->dtype at each store.
 * With a bias (Qwen2's q/k/v bias, fused here where it costs nothing), each
 * value is float(qkv) + float(bias) in float32 before RoPE: q and k store
 * round(rope(float(x) + float(bias))), v stores round(float(v) + float(bias_v)).
 *   qkv      device [B][(n_heads + 2 n_kv_heads) head_dim] of kv->dtype: q heads, k heads, v heads
 *   bias     device [(n_heads + 2 n_kv_heads) head_dim] of kv->dtype, or NULL (none)
 *   inv_freq device float [head_dim/2] (gp_rope_inv_freq, uploaded)
 *   q_out    device [B][n_heads][head_dim] of kv->dtype
 * Uses kv->positions and kv->block_tables (through kv->row_table when
 * set: row b's table row is row_table[b]). A row whose position or block id
 * is out of range is skipped (nothing written for it, q_out row included)
 * rather than corrupting memory; the host path guarantees they are valid.
 * Asynchronous, capturable, no allocation. */
gp_status gp_rope_kv_append(const gp_kv_view *kv, int B, int n_heads, const void *qkv,
                            const void *bias, const float *inv_freq, void *q_out, void *stream);

/* Float reference on host arrays (same layouts, 16-bit elements of dtype,
 * BF16 or F16, as uint16_t bits; bias NULL or [(n_heads + 2 n_kv_heads)
 * head_dim]): adds the bias in float, then RoPE, in the kernel's order;
 * writes K and V rounded to dtype into the host caches like the kernel and
 * q_out as unrounded float [B][n_heads][head_dim]. Uses gp_ref_rope of the
 * model reference. */
void gp_rope_kv_append_ref(gp_dtype dtype, const uint16_t *qkv, const uint16_t *bias, int B,
                           int n_heads, int n_kv_heads, int head_dim, const int32_t *positions,
                           const float *inv_freq, const int32_t *block_tables, int max_blocks,
                           int block_size, uint16_t *k_cache, uint16_t *v_cache, float *q_out);

/* --------------------------------------------------------- decode attention */

/* Supported: head_dim 16, 32, 64, 128, 256; n_heads / n_kv_heads 1..8. */
#define GP_DECODE_ATTN_MAX_GROUP 8
/* Upper bound on context splits (forced or automatic). */
#define GP_DECODE_ATTN_MAX_SPLITS 1024

/* The decode-attention kernels; gp_decode_attn_choose holds the rule that
 * picks one for a call. */
typedef enum gp_attn_kernel {
    GP_ATTN_KERNEL_AUTO = 0,      /* the automatic rule (gp_decode_attn_choose) */
    GP_ATTN_KERNEL_CUDACORE,      /* CUDA cores, a CTA per (row, KV head, split); every shape */
    GP_ATTN_KERNEL_CUDACORE_PIPE, /* the same, the next tile's loads in flight during the math */
    GP_ATTN_KERNEL_MMA,           /* tensor cores, a CTA per (row, KV head, split); head_dim 128 */
    GP_ATTN_KERNEL_STREAM,        /* tensor cores, persistent warps over whole (row, KV head)
                                     items; head_dim 128, unsplit calls, out 4-byte aligned */
} gp_attn_kernel;
#define GP_ATTN_KERNEL_COUNT 5
/* Most warps per SM a streaming-kernel cap may name (an SM holds at most 64). */
#define GP_ATTN_STREAM_WARPS_CAP_MAX 64

typedef struct gp_decode_attn_params {
    int sm_count;         /* SMs this call may use (the partition's); 0 = whole device */
    int max_splits;       /* most context splits the heuristic may pick; 0 = auto (<= 256) */
    int ctas_per_sm_hint; /* CTAs per SM the split heuristic fills; 0 = 1 (its measured best) */
    int force_splits;     /* > 0: exactly this many splits (tests, tuning); 0 = heuristic */
    /* GP_ATTN_KERNEL_AUTO (default): the automatic rule. Another kernel: that
     * one for every call it serves (gp_attn_kernel), the automatic rule for
     * the calls it cannot serve (comparisons, tuning). */
    gp_attn_kernel kernel;
    /* Streaming kernel: most warps per SM, an even 2..GP_ATTN_STREAM_WARPS_CAP_MAX
     * (fewer copies in flight, a smaller share of HBM for a co-running
     * partition; a cap above what the SM holds changes nothing); 0 (default)
     * = no cap. */
    int stream_warps_cap;
    /* Streaming kernel: 1 (default) marks its K/V copies L2 evict_first, so
     * K/V, read once, does not displace what co-running GEMMs reuse; 0
     * leaves them to the usual L2 policy. */
    int kv_evict_first;
} gp_decode_attn_params;
gp_decode_attn_params gp_decode_attn_default_params(void);

/* GP_OK when every field of p is in range; else GP_ERR_INVALID_ARG naming
 * the field, its value and what is allowed. Pure host logic. */
gp_status gp_decode_attn_params_check(const gp_decode_attn_params *p);

/* "auto", "cudacore", "cudacore_pipe", "mma", "stream"; "unknown" for a
 * value outside the enum. */
const char *gp_attn_kernel_name(gp_attn_kernel k);
/* The kernel a name of gp_attn_kernel_name stands for; GP_ERR_INVALID_ARG
 * (naming the text and the allowed names) for anything else. */
gp_status gp_attn_kernel_parse(const char *name, gp_attn_kernel *out);

/* The facts of one call that the kernel choice rests on besides the params:
 * its shape and what gp_decode_attn learns from the device. */
typedef struct gp_attn_call {
    int B, n_kv_heads, head_dim, group; /* group = query heads per KV head */
    int n_splits;            /* context splits the call runs with (>= 1) */
    int sm_count;            /* SMs the call may use */
    int stream_warps_per_sm; /* resident warps per SM of the streaming kernel; 0 = not
                                known, the streaming kernel is not considered */
    int out_aligned4;        /* out is 4-byte aligned (the streaming kernel stores 16-bit pairs) */
} gp_attn_call;

/* The kernel gp_decode_attn runs for call c under p (NULL: defaults). The
 * automatic rule: the streaming kernel for an unsplit call it serves whose
 * B x n_kv_heads items give every resident warp (sm_count x warps per SM,
 * capped by p->stream_warps_cap) at least two; else the tensor-core split
 * kernel where it serves (head_dim 128); else the CUDA-core kernel, its
 * pipelined form for split calls (their single wave of short CTAs computes
 * all at once, so the next tile's loads hide behind the math). A forced
 * p->kernel replaces the rule for every call it serves. stream_warps (may be
 * NULL) receives the streaming kernel's grid in warps, 0 for the others.
 * Pure host logic: no device is touched. GP_ERR_INVALID_ARG for bad params
 * or facts. */
gp_status gp_decode_attn_choose(const gp_decode_attn_params *p, const gp_attn_call *c,
                                gp_attn_kernel *kernel, int *stream_warps);

/* The kernel gp_decode_attn runs for a call of this shape under p (NULL:
 * defaults), with the splits it would pick and a 4-byte aligned output: for
 * reports. Queries the device (SM count, the streaming kernel's occupancy)
 * where the rule needs it; the occupancy is the bf16 kernels' (an fp16
 * call's streaming-kernel grid uses its own, so the rare shape at the
 * rule's threshold may differ). */
gp_status gp_decode_attn_kernel(int B, int n_heads, int n_kv_heads, int head_dim, int max_len,
                                const gp_decode_attn_params *p, gp_attn_kernel *out);

/* Splits the heuristic picks: the most that keep the (batch x KV head x
 * split) grid within one CTA per SM of sm_count (ctas_per_sm_hint when
 * set: a decode batch's attention costs each CTA's fixed latency and the
 * merge, not bandwidth), each split >= 256 tokens of the longest row,
 * capped by max_splits (auto: 256); 1 when B * n_kv_heads already gives
 * every SM a CTA. max_len = upper bound of lens in this call. p may be
 * NULL (defaults). The same for both dtypes. */
gp_status gp_decode_attn_splits(int B, int n_heads, int n_kv_heads, int head_dim, int max_len,
                                const gp_decode_attn_params *p, int *n_splits);
/* Workspace bytes for a call with n_splits (0 when n_splits <= 1: none needed). */
size_t gp_decode_attn_workspace_bytes(int B, int n_heads, int head_dim, int n_splits);
/* Largest workspace any call with B <= max_B and lens <= max_len needs under
 * p: size it once at setup, no allocation inside a step. */
gp_status gp_decode_attn_workspace_max(int max_B, int n_heads, int n_kv_heads, int head_dim,
                                       int max_len, const gp_decode_attn_params *p,
                                       size_t *bytes);

/* out = softmax(q K^T / sqrt(head_dim)) V per query head over the row's lens[b]
 * cached tokens (GQA: query head h reads KV head h / (n_heads/n_kv_heads)).
 * q and out are of kv->dtype (BF16 or F16).
 *   q   device [B][n_heads][head_dim] (16-byte aligned; q_out of rope)
 *   out device [B][n_heads][head_dim]
 *   workspace device, >= gp_decode_attn_workspace_bytes(B, n_heads, head_dim,
 *       splits), 16-byte aligned; may be NULL/0, then fewer splits are used
 *       (down to 1) unless force_splits demands more (GP_ERR_INVALID_ARG).
 * max_len: host upper bound of lens (it only steers the split heuristic;
 * results do not depend on it). The kernel is gp_decode_attn_choose's for
 * the call (p->kernel, p->stream_warps_cap and p->kv_evict_first steer it;
 * a bad value is GP_ERR_INVALID_ARG). lens must be in [1, max_blocks*block_size]
 * and the table entries they reach valid block ids: the host path
 * guarantees it; the kernel clamps lens to that range and gives a row of
 * length 0 a zero output. Asynchronous, capturable, no allocation. */
gp_status gp_decode_attn(const gp_kv_view *kv, int B, int n_heads, int max_len, const void *q,
                         void *out, void *workspace, size_t workspace_bytes,
                         const gp_decode_attn_params *p, void *stream);

/* Reference in double on host arrays (same layouts; q and the caches are
 * 16-bit elements of dtype, BF16 or F16, as uint16_t bits); out float
 * [B][n_heads][head_dim]; a row of length 0 gives zeros. */
void gp_decode_attn_ref(gp_dtype dtype, const uint16_t *q, const uint16_t *k_cache,
                        const uint16_t *v_cache, const int32_t *block_tables, int max_blocks,
                        const int32_t *lens, int B, int n_heads, int n_kv_heads, int head_dim,
                        int block_size, float *out);

/* --------------------------------------------------------- prefill attention */

/* One sequence's share of a prefill chunk: its query tokens are rows
 * [q_start, q_start + q_len) of the chunk at positions pos0 .. pos0 + q_len
 * - 1; its K/V for positions 0 .. pos0 + q_len - 1 (this chunk's included)
 * are in the paged cache through block-table row table_row. */
typedef struct gp_prefill_seq_desc {
    int32_t q_start, q_len, pos0, table_row;
} gp_prefill_seq_desc;

/* Head sizes the prefill attention kernel serves. */
#define GP_PREFILL_ATTN_HEAD_DIMS "16, 32, 64, 128"
int gp_prefill_attn_supports(int head_dim);

/* The prefill-attention kernels. GP_PREFILL_ATTN_AUTO runs the Hopper one
 * where it serves (1.6x the mma.sync one at 8k and 32k tokens:
 * docs/PERFORMANCE.md), else the mma.sync one. GP_PREFILL_ATTN_MMA: the
 * FlashAttention-2-style kernel on mma.sync (every head size of
 * GP_PREFILL_ATTN_HEAD_DIMS, sm_80 and later). GP_PREFILL_ATTN_HOPPER: the
 * FlashAttention-3-style kernel (a producer warpgroup copying K/V tiles,
 * two consumer warpgroups on wgmma); head_dim 128 on compute capability
 * 9.0, in builds that include sm_90 code. */
typedef enum gp_prefill_attn_kernel {
    GP_PREFILL_ATTN_AUTO = 0,
    GP_PREFILL_ATTN_MMA,
    GP_PREFILL_ATTN_HOPPER,
} gp_prefill_attn_kernel;
#define GP_PREFILL_ATTN_KERNEL_NAMES "auto, mma, hopper"
/* "auto", "mma", "hopper"; "unknown" for a value outside the enum. */
const char *gp_prefill_attn_kernel_name(gp_prefill_attn_kernel k);
/* The kernel named s (one of GP_PREFILL_ATTN_KERNEL_NAMES); else
 * GP_ERR_INVALID_ARG naming s and the allowed names. */
gp_status gp_prefill_attn_kernel_parse(const char *s, gp_prefill_attn_kernel *out);
/* A comma-separated list of those names: at most cap kernels into out, *n
 * their count; GP_ERR_INVALID_ARG naming the list for an empty one, more
 * than cap, or a name gp_prefill_attn_kernel_parse refuses. */
gp_status gp_prefill_attn_kernel_parse_list(const char *list, gp_prefill_attn_kernel *out, int cap, int *n);
/* 1 when kernel k can run head_dim on the current device in this build
 * (AUTO: whenever some kernel can). */
int gp_prefill_attn_kernel_serves(gp_prefill_attn_kernel k, int head_dim);
/* GP_OK when k is a gp_prefill_attn_kernel and, unless AUTO, serves
 * head_dim on the current device in this build; else GP_ERR_INVALID_ARG
 * (not a kernel) or GP_ERR_UNSUPPORTED (cannot serve), the message starting
 * with who and saying what each kernel serves. */
gp_status gp_prefill_attn_kernel_check(gp_prefill_attn_kernel k, int head_dim, const char *who);

/* Causal GQA attention of a prefill chunk on tensor cores (CTAs of 128
 * query rows of one head and sequence, K/V tiles streamed from the paged
 * cache through shared memory, online softmax in fp32, q.k and p.v as bf16
 * or fp16 products (kv->dtype) with fp32 accumulation, p rounded to that
 * dtype). Query row r of sequence i attends to the positions
 * 0 .. pos0 + (r - q_start) of its cache.
 *   kv    the layer's view: k, v, block_tables (rows named by table_row),
 *         block_size, n_kv_heads, head_dim, max_blocks, n_blocks
 *   q     device [n_rows][n_heads][head_dim] of kv->dtype (RoPE applied)
 *   out   device [n_rows][n_heads][head_dim] of kv->dtype
 *   seqs  device [n_seqs]; max_q_len: host bound of their q_len (the grid)
 *   kernel which kernel (gp_prefill_attn_kernel); one that cannot serve
 *         the call is refused, naming why
 * Rows no sequence names are not written. head_dim one of
 * GP_PREFILL_ATTN_HEAD_DIMS, n_heads a multiple of n_kv_heads; q, out and
 * the pools 16-byte aligned. The host path guarantees positions and table
 * entries are valid. Asynchronous, capturable, no allocation. */
gp_status gp_prefill_attn(const gp_kv_view *kv, int n_heads, const void *q, void *out, int n_rows,
                          const gp_prefill_seq_desc *seqs, int n_seqs, int max_q_len,
                          gp_prefill_attn_kernel kernel, void *stream);

/* Reference in double on host arrays (same layouts, host seqs; 16-bit
 * elements of dtype as uint16_t bits); out float [n_rows][n_heads][head_dim],
 * rows no sequence names left untouched. */
void gp_prefill_attn_ref(gp_dtype dtype, const uint16_t *q, const uint16_t *k_cache,
                         const uint16_t *v_cache, const int32_t *block_tables, int max_blocks,
                         int block_size, int n_heads, int n_kv_heads, int head_dim,
                         const gp_prefill_seq_desc *seqs, int n_seqs, float *out);

#ifdef __cplusplus
}
#endif
#endif
