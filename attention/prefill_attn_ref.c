/* CPU reference of causal prefill attention (the oracle of gp_prefill_attn):
 * each query row is a decode-attention row over its causal prefix, so the
 * math is gp_decode_attn_ref's. */
#include "gp_attention.h"

void gp_prefill_attn_ref(gp_dtype dtype, const uint16_t *q, const uint16_t *k_cache,
                         const uint16_t *v_cache, const int32_t *block_tables, int max_blocks,
                         int block_size, int n_heads, int n_kv_heads, int head_dim,
                         const gp_prefill_seq_desc *seqs, int n_seqs, float *out)
{
    const size_t row = (size_t)n_heads * (size_t)head_dim;
    for (int i = 0; i < n_seqs; i++) {
        const gp_prefill_seq_desc *d = &seqs[i];
        const int32_t *table = block_tables + (size_t)d->table_row * (size_t)max_blocks;
        for (int r = 0; r < d->q_len; r++) {
            const int32_t len = d->pos0 + r + 1; /* causal: up to and including its own position */
            const size_t t = (size_t)d->q_start + (size_t)r;
            gp_decode_attn_ref(dtype, q + t * row, k_cache, v_cache, table, max_blocks, &len, 1, n_heads, n_kv_heads,
                               head_dim, block_size, out + t * row);
        }
    }
}
