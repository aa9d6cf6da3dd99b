/* CPU oracle of gp_swiglu: silu(g) * u in double from the same bf16/fp16
 * inputs, left unrounded so tests can bound the device's single rounding. */
#include <math.h>

#include "ffn_kernels.h"

void gp_swiglu_ref(gp_dtype dt, const void *gu_, float *out, int B, int F)
{
    const uint16_t *gu = gu_;
    if (!gu || !out || B <= 0 || F <= 0)
        return;
    for (int b = 0; b < B; b++) {
        const uint16_t *g = gu + (size_t)b * 2u * (size_t)F; /* [F] gate, then [F] up */
        for (int i = 0; i < F; i++) {
            double gv = gp_half_to_f32(g[i], dt), uv = gp_half_to_f32(g[F + i], dt);
            out[(size_t)b * (size_t)F + (size_t)i] = (float)(gv / (1.0 + exp(-gv)) * uv);
        }
    }
}
