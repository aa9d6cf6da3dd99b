/* Batched, chunked prefill of the CUDA engine. */
#include "engine_impl.h"

gp_status gp_engine_prefill_batch(gp_engine *e, int S, const gp_prefill_seq *seqs, int32_t *next,
                                  float *last_logits, float *prompt_logits)
{
    (void)e; (void)S; (void)seqs; (void)next; (void)last_logits; (void)prompt_logits;
    GP_FAIL(GP_ERR_UNSUPPORTED, "gp_engine_prefill_batch: in progress");
}
