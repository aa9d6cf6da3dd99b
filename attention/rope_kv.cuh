/* RoPE + KV append: the kernel's launch shape and launcher (private to the
 * attention library; the public entry is gp_rope_kv_append). */
#ifndef GP_ROPE_KV_CUH
#define GP_ROPE_KV_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gp_attention.h"

/* One CTA per batch row: the row's (n_heads + 2 n_kv_heads) * head_dim values
 * are a few KB, so a CTA per row keeps cos/sin in shared memory, computed once
 * per row instead of once per head. */
#define GP_ROPE_THREADS 256

/* The 16-bit pointers are of the view's dtype (the kernel's template T). */
typedef struct gp_rope_args {
    const void *qkv;           /* [B][(n_heads + 2 n_kv) head_dim] */
    const void *bias;          /* [(n_heads + 2 n_kv) head_dim] or NULL */
    const int32_t *positions;  /* [B] */
    const float *inv_freq;     /* [head_dim/2] */
    const int32_t *tables;     /* [table rows][max_blocks] */
    const int32_t *row_table;  /* [B] table row of each row, or NULL: row b */
    void *k_cache;             /* [n_blocks][block_size][n_kv][head_dim] */
    void *v_cache;             /* [n_blocks][block_size][n_kv][head_dim] */
    void *q_out;               /* [B][n_heads][head_dim] */
    int B, n_heads, n_kv, head_dim, block_size, max_blocks, n_blocks;
} gp_rope_args;

gp_status gp_rope_kv_launch(const gp_rope_args *a, gp_dtype dtype, cudaStream_t stream);

#endif
