/* The one-shot all-reduce's CPU reference: the ranks' rows summed in rank
 * order, as the kernel sums them on every rank. */
#include "peer_sum.h"

void gp_peer_sum_ref(const float *const *ranks, int n_ranks, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float s = ranks[0][i];
        for (int r = 1; r < n_ranks; r++)
            s += ranks[r][i];
        out[i] = s;
    }
}
