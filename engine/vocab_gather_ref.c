/* CPU oracle of gp_vocab_gather: the ranks' segments of a head split by
 * vocabulary, in vocabulary order. */
#include <stddef.h>

#include "kernels.h"

void gp_vocab_gather_ref(const float *parts, float *logits, int B, int V, int tp)
{
    if (!parts || !logits || B <= 0 || V <= 0 || tp < 1)
        return;
    const int s = (V + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
        const int lo = r * s, n = V - lo < s ? V - lo : s;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < n; j++)
                logits[(size_t)b * V + lo + j] = parts[(size_t)r * B * s + (size_t)b * n + j];
    }
}
