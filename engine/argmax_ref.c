/* CPU oracle of gp_argmax_rows: gp_argmax (reference/reference.c) on each row, so
 * the device kernel and the reference model share one definition. */
#include "gp_reference.h"
#include "kernels.h"

void gp_argmax_rows_ref(const float *logits, int32_t *out, int B, int V)
{
    if (!logits || !out || B <= 0 || V <= 0)
        return;
    for (int b = 0; b < B; b++)
        out[b] = gp_argmax(logits + (size_t)b * (size_t)V, V);
}
