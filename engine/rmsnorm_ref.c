/* CPU oracle of gp_rmsnorm_residual: the same fp32 residual add, then the
 * norm in double, unrounded (tests bound the device's bf16/fp16 rounding). */
#include <math.h>

#include "kernels.h"

void gp_rmsnorm_residual_ref(gp_dtype dt, float *resid, const void *delta_, const void *w_, float *out,
                             int B, int H, float eps)
{
    const uint16_t *delta = delta_, *w = w_;
    if (!resid || !w || !out || B <= 0 || H <= 0)
        return;
    for (int b = 0; b < B; b++) {
        float *r = resid + (size_t)b * (size_t)H; /* [H] */
        if (delta)
            for (int i = 0; i < H; i++)
                r[i] += gp_half_to_f32(delta[(size_t)b * (size_t)H + (size_t)i], dt); /* fp32, as the device */
        double ss = 0.0;
        for (int i = 0; i < H; i++)
            ss += (double)r[i] * (double)r[i];
        double inv = 1.0 / sqrt(ss / H + (double)eps);
        for (int i = 0; i < H; i++)
            out[(size_t)b * (size_t)H + (size_t)i] =
                (float)((double)gp_half_to_f32(w[i], dt) * ((double)r[i] * inv));
    }
}
