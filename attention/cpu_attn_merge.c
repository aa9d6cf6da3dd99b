/* The log-sum-exp merge of two attention partials over disjoint position
 * sets: how the CPU's partial over offloaded blocks joins the GPU's. */
#include <math.h>

#include "gp_attention.h"

gp_status gp_attn_merge_lse(int n_rows, int head_dim, const float *o_a, const float *lse_a, const float *o_b,
                            const float *lse_b, float *o, float *lse)
{
    if (n_rows < 1 || head_dim < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_attn_merge_lse: n_rows %d, head_dim %d (each must be >= 1)", n_rows,
                head_dim);
    if (!o_a || !lse_a || !o_b || !lse_b || !o || !lse)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_attn_merge_lse: NULL pointer (o_a %p, lse_a %p, o_b %p, lse_b %p, o %p, "
                "lse %p)", (const void *)o_a, (const void *)lse_a, (const void *)o_b, (const void *)lse_b,
                (void *)o, (void *)lse);
    for (int r = 0; r < n_rows; r++) {
        const float la = lse_a[r], lb = lse_b[r];
        const size_t off = (size_t)r * (size_t)head_dim;
        const float m = fmaxf(la, lb);
        if (m == -INFINITY) { /* both empty: the merge is empty too */
            for (int d = 0; d < head_dim; d++)
                o[off + d] = 0.0f;
            lse[r] = -INFINITY;
            continue;
        }
        /* exp(-inf - m) = 0: an empty side drops out */
        const float wa = expf(la - m), wb = expf(lb - m), inv = 1.0f / (wa + wb);
        for (int d = 0; d < head_dim; d++)
            o[off + d] = (wa * o_a[off + d] + wb * o_b[off + d]) * inv;
        lse[r] = m + logf(wa + wb);
    }
    return GP_OK;
}
