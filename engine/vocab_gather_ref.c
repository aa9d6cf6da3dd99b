/* CPU oracle of gp_vocab_gather: the ranks' segments of a head split by
 * vocabulary, in vocabulary order. */
#include "gp_model.h"
#include "kernels.h"

void gp_vocab_gather_ref(const float *parts, float *logits, int B, int V, int tp)
{
    gp_vocab_in_order(parts, logits, B, V, tp); /* the reference model's own order (model/) */
}
