/* CPU oracle of gp_embed: row gather with bf16/fp16 -> fp32 widening (exact), NaN
 * rows for ids outside [0, V) and zero rows for ids the table does not hold,
 * as the device does. */
#include <math.h>

#include "kernels.h"

void gp_embed_ref(gp_dtype dt, const int32_t *tokens, const void *table_, float *resid, int B, int H, int V, int lo,
                  int rows)
{
    const uint16_t *table = table_;
    if (!tokens || !table || !resid || B <= 0 || H <= 0)
        return;
    for (int b = 0; b < B; b++) {
        float *dst = resid + (size_t)b * (size_t)H; /* [H] */
        int32_t t = tokens[b];
        for (int i = 0; i < H; i++)
            dst[i] = (t < 0 || t >= V)         ? NAN
                     : (t < lo || t - lo >= rows) ? 0.0f
                                                  : gp_half_to_f32(table[(size_t)(t - lo) * (size_t)H + (size_t)i], dt);
    }
}
