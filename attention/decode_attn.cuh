/* Decode attention (flash-decoding over the paged cache): launch shape,
 * kernel arguments and launcher, private to the attention library; the public
 * entry is gp_decode_attn. */
#ifndef GP_DECODE_ATTN_CUH
#define GP_DECODE_ATTN_CUH

#include <cuda_runtime.h>

#include "gp_attention.h"

#define GP_ATTN_THREADS 128        /* 4 warps per (row, KV head, split) CTA */
#define GP_ATTN_COMBINE_THREADS 128 /* one warp per (row, query head) */
#define GP_ATTN_MIN_SPLIT_TOKENS 256 /* a split shorter than this costs more to merge than it saves (H100) */
#define GP_ATTN_AUTO_MAX_SPLITS 256

/* q, k, v and out are 16-bit elements of dtype (the view's): the kernels'
 * template T (common/gp_half.cuh) reads them through casts. */
typedef struct gp_attn_args {
    const void *q;           /* [B][n_heads][head_dim] */
    const void *k;           /* [n_blocks][block_size][n_kv][head_dim] */
    const void *v;           /* [n_blocks][block_size][n_kv][head_dim] */
    const int32_t *tables;   /* [B][max_blocks] */
    const int32_t *lens;     /* [B] */
    void *out;               /* [B][n_heads][head_dim] */
    gp_dtype dtype;          /* GP_DTYPE_BF16 or GP_DTYPE_F16 */
    float *ws_acc;           /* [B][n_heads][n_splits][head_dim]: unnormalised split outputs */
    float *ws_ml;            /* [B][n_heads][n_splits][2]: (max, sum) of each split, log2 units */
    int B, n_heads, n_kv, group; /* group = n_heads / n_kv query heads per KV head */
    int block_size, bs_shift;    /* bs_shift = log2(block_size) when a power of two, else -1 */
    int max_blocks, n_splits;
    float scale_log2;        /* log2(e) / sqrt(head_dim): scores in log2 units for exp2f */
    int stream_warps;        /* > 0: the streaming kernel with this many persistent warps (n_splits 1) */
    int kv_evict_first;      /* streaming kernel: K/V copies marked L2 evict_first (params kv_evict_first) */
} gp_attn_args;

/* The tensor-core split kernel (decode_attn_mma.cu; head_dim 128, group <=
 * 8): its launch (without the combine; a->dtype picks the instantiation). */
gp_status gp_decode_attn_mma_launch(const gp_attn_args *a, cudaStream_t stream);

/* The streaming kernel (decode_attn_stream.cu): persistent warps that each
 * read whole (row, KV head) items, for batches that fill the SMs many times
 * over (head_dim 128, group <= 8, one split): its resident warps per SM, and
 * its launch (a->stream_warps warps). */
gp_status gp_decode_attn_stream_occupancy(gp_dtype dtype, int group, int *warps_per_sm);
gp_status gp_decode_attn_stream_launch(const gp_attn_args *a, cudaStream_t stream);

/* Launches kernel (gp_decode_attn_choose's, not AUTO) and, when n_splits >
 * 1, the combine. */
gp_status gp_decode_attn_launch(const gp_attn_args *a, int head_dim, gp_attn_kernel kernel,
                                cudaStream_t stream);

#endif
