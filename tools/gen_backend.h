/* The two backends of greenpipe generate behind one interface: the float32
 * CPU reference and the CUDA engine. Private to tools/. */
#ifndef GP_GEN_BACKEND_H
#define GP_GEN_BACKEND_H

#include "gp_model.h"

typedef struct gen_backend gen_backend; /* opaque */

/* name: "cpu" or "cuda". Loads the weights of src and makes room for n_seqs
 * sequences of up to ctx tokens. */
gp_status gen_backend_open(const char *name, const gp_model_source *src, int n_seqs, int ctx,
                           int block_size, gen_backend **out);
/* What was loaded, for the status line. */
const char *gen_backend_describe(const gen_backend *b);
/* Prefill seq; next receives the greedy token after the prompt and logits
 * [vocab] (may be NULL) the logits it was chosen from. */
gp_status gen_backend_prefill(gen_backend *b, int seq, int n, const int32_t *prompt, int32_t *next,
                              float *logits);
/* One decode step of n sequences; next [n] greedy tokens, logits [n][vocab]
 * (may be NULL). */
gp_status gen_backend_step(gen_backend *b, int n, const int *ids, const int32_t *feed, int32_t *next,
                           float *logits);
void gen_backend_close(gen_backend *b);

#endif
