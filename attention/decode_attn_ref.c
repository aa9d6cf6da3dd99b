/* CPU reference of decode attention over the paged cache (the oracle of
 * gp_decode_attn): plain softmax in double, straight through the block tables. */
#include <math.h>
#include <stdlib.h>

#include "gp_attention.h"

void gp_decode_attn_ref(gp_dtype dtype, const uint16_t *q, const uint16_t *k_cache,
                        const uint16_t *v_cache, const int32_t *block_tables, int max_blocks,
                        const int32_t *lens, int B, int n_heads, int n_kv_heads, int head_dim,
                        int block_size, float *out)
{
    const int group = n_heads / n_kv_heads;
    const double scale = 1.0 / sqrt((double)head_dim);
    int max_len = 0;
    for (int b = 0; b < B; b++)
        if (lens[b] > max_len)
            max_len = lens[b];
    double *sc = malloc((size_t)(max_len > 0 ? max_len : 1) * sizeof *sc); /* [len] */
    double *o = malloc((size_t)head_dim * sizeof *o);                      /* [head_dim] */
    if (!sc || !o) {
        free(sc);
        free(o);
        return;
    }
    for (int b = 0; b < B; b++) {
        const int32_t *table = block_tables + (size_t)b * (size_t)max_blocks;
        const int len = lens[b];
        for (int h = 0; h < n_heads; h++) {
            const int kvh = h / group;
            const uint16_t *qh = q + ((size_t)b * n_heads + h) * (size_t)head_dim;
            float *oh = out + ((size_t)b * n_heads + h) * (size_t)head_dim;
            double mx = -INFINITY;
            for (int t = 0; t < len; t++) {
                size_t off = (((size_t)table[t / block_size] * block_size + (size_t)(t % block_size))
                              * (size_t)n_kv_heads + (size_t)kvh) * (size_t)head_dim;
                double s = 0.0;
                for (int d = 0; d < head_dim; d++)
                    s += (double)gp_half_to_f32(qh[d], dtype) * (double)gp_half_to_f32(k_cache[off + d], dtype);
                sc[t] = s * scale;
                if (sc[t] > mx)
                    mx = sc[t];
            }
            double sum = 0.0;
            for (int d = 0; d < head_dim; d++)
                o[d] = 0.0;
            for (int t = 0; t < len; t++) {
                size_t off = (((size_t)table[t / block_size] * block_size + (size_t)(t % block_size))
                              * (size_t)n_kv_heads + (size_t)kvh) * (size_t)head_dim;
                double p = exp(sc[t] - mx);
                sum += p;
                for (int d = 0; d < head_dim; d++)
                    o[d] += p * (double)gp_half_to_f32(v_cache[off + d], dtype);
            }
            for (int d = 0; d < head_dim; d++)
                oh[d] = len > 0 ? (float)(o[d] / sum) : 0.0f;
        }
    }
    free(sc);
    free(o);
}
