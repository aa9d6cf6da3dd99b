/* CPU reference of gp_kv_copy_tokens (its oracle): the same moves between a
 * sequence's paged blocks and dense [n][n_kv_heads][head_dim] buffers. */
#include <string.h>

#include "gp_attention.h"
#include "gp_kvcache.h"

void gp_kv_copy_tokens_ref(const gp_kv_layout *l, uint16_t *k_pool, uint16_t *v_pool, const int32_t *table,
                           int pos0, int n, uint16_t *k_buf, uint16_t *v_buf, gp_kv_copy_dir dir)
{
    const size_t row = (size_t)l->n_kv_heads * (size_t)l->head_dim;
    for (int t = 0; t < n; t++) {
        const int p = pos0 + t, blk = table[p / l->block_size];
        if (blk < 0 || blk >= l->n_blocks)
            continue;
        const size_t at = gp_kv_offset(l, blk, p % l->block_size, 0);
        uint16_t *kb = k_buf + (size_t)t * row, *vb = v_buf + (size_t)t * row;
        if (dir == GP_KV_TO_CACHE) {
            memcpy(k_pool + at, kb, row * sizeof *kb);
            memcpy(v_pool + at, vb, row * sizeof *vb);
        } else {
            memcpy(kb, k_pool + at, row * sizeof *kb);
            memcpy(vb, v_pool + at, row * sizeof *vb);
        }
    }
}
