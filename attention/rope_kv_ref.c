/* CPU reference of RoPE + KV append (the oracle of gp_rope_kv_append): float
 * math through the model reference's gp_ref_rope, bf16 stores like the kernel. */
#include <stdlib.h>
#include <string.h>

#include "gp_attention.h"

void gp_rope_kv_append_ref(const gp_bf16 *qkv, int B, int n_heads, int n_kv_heads, int head_dim,
                           const int32_t *positions, const float *inv_freq,
                           const int32_t *block_tables, int max_blocks, int block_size,
                           gp_bf16 *k_cache, gp_bf16 *v_cache, float *q_out)
{
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const int rows = q_dim + 2 * kv_dim;
    float *buf = malloc((size_t)(q_dim + kv_dim) * sizeof *buf); /* [n_heads + n_kv][head_dim] */
    if (!buf)
        return;
    for (int b = 0; b < B; b++) {
        const gp_bf16 *row = qkv + (size_t)b * (size_t)rows;
        int pos = positions[b];
        for (int i = 0; i < q_dim + kv_dim; i++)
            buf[i] = gp_bf16_to_f32(row[i]);
        /* q and k heads are adjacent, so one call rotates both */
        gp_ref_rope(buf, n_heads + n_kv_heads, head_dim, pos, inv_freq);
        memcpy(q_out + (size_t)b * (size_t)q_dim, buf, (size_t)q_dim * sizeof *buf);
        int blk = block_tables[(size_t)b * (size_t)max_blocks + (size_t)(pos / block_size)];
        /* heads of one slot are contiguous: [n_kv][head_dim] */
        size_t off = ((size_t)blk * (size_t)block_size + (size_t)(pos % block_size)) * (size_t)kv_dim;
        for (int i = 0; i < kv_dim; i++) {
            k_cache[off + i] = gp_f32_to_bf16(buf[q_dim + i]);
            v_cache[off + i] = row[q_dim + kv_dim + i];
        }
    }
    free(buf);
}
