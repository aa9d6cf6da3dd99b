/* Private to the attention library: the parameter checks and the kernel
 * rule of decode_attn_choose.c, shared with the CUDA entry points so that
 * the whole rule lives in one file. */
#ifndef GP_DECODE_ATTN_RULE_H
#define GP_DECODE_ATTN_RULE_H

#include "gp_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GP_ERR_INVALID_ARG (message prefixed with fn) for a field of p outside
 * what gp_decode_attn_params allows. */
gp_status gp_attn_check_params(const char *fn, const gp_decode_attn_params *p);

/* Whether the choice for c (its device facts not yet filled in) may fall on
 * the streaming kernel: only then does gp_decode_attn query its occupancy. */
bool gp_attn_stream_candidate(const gp_decode_attn_params *p, const gp_attn_call *c);

#ifdef __cplusplus
}
#endif
#endif
