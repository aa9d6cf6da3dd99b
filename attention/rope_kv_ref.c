/* CPU reference of RoPE + KV append (the oracle of gp_rope_kv_append): float
 * math through the model reference's gp_ref_rope, stores rounded to the
 * dtype (bf16 or fp16) like the kernel. The order is the kernel's: bias
 * added in float to the value read, then RoPE (q, k), then one rounding. */
#include <stdlib.h>
#include <string.h>

#include "gp_attention.h"
#include "gp_reference.h"

void gp_rope_kv_append_ref(gp_dtype dtype, const uint16_t *qkv, const uint16_t *bias, int B,
                           int n_heads, int n_kv_heads, int head_dim, const int32_t *positions,
                           const float *inv_freq, const int32_t *block_tables, int max_blocks,
                           int block_size, uint16_t *k_cache, uint16_t *v_cache, float *q_out)
{
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const int rows = q_dim + 2 * kv_dim;
    float *buf = malloc((size_t)(q_dim + kv_dim) * sizeof *buf); /* [n_heads + n_kv][head_dim] */
    if (!buf)
        return;
    for (int b = 0; b < B; b++) {
        const uint16_t *row = qkv + (size_t)b * (size_t)rows;
        int pos = positions[b];
        for (int i = 0; i < q_dim + kv_dim; i++)
            buf[i] = bias ? gp_half_to_f32(row[i], dtype) + gp_half_to_f32(bias[i], dtype)
                          : gp_half_to_f32(row[i], dtype);
        /* q and k heads are adjacent, so one call rotates both */
        gp_ref_rope(buf, n_heads + n_kv_heads, head_dim, pos, inv_freq);
        memcpy(q_out + (size_t)b * (size_t)q_dim, buf, (size_t)q_dim * sizeof *buf);
        int blk = block_tables[(size_t)b * (size_t)max_blocks + (size_t)(pos / block_size)];
        /* heads of one slot are contiguous: [n_kv][head_dim] */
        size_t off = ((size_t)blk * (size_t)block_size + (size_t)(pos % block_size)) * (size_t)kv_dim;
        for (int i = 0; i < kv_dim; i++) {
            const int vi = q_dim + kv_dim + i;
            k_cache[off + i] = gp_f32_to_half(buf[q_dim + i], dtype);
            v_cache[off + i] = bias ? gp_f32_to_half(gp_half_to_f32(row[vi], dtype)
                                                     + gp_half_to_f32(bias[vi], dtype), dtype)
                                    : row[vi];
        }
    }
    free(buf);
}
