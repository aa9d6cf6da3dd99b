/* Text prompts and text output of greenpipe generate: prompts tokenized as
 * HF's tokenizer(text) does (post-processor included), generated tokens
 * detokenized as they arrive. Private to the greenpipe program. */
#ifndef GP_GEN_TEXT_IMPL_H
#define GP_GEN_TEXT_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include "gp_tokenizer.h"
#include "gp_tools.h"

/* texts[n] of lens[n] bytes into prompts (one sequence each; add_special:
 * the post-processor's tokens, BOS, added as HF's tokenizer(text); off for
 * text a chat template already gave its BOS). flag names the option in
 * messages ("--prompt", "--prompt-file"). */
gp_status gp_gen_tokenize(const gp_tokenizer *t, const char *const *texts, const size_t *lens, int n, bool add_special,
                          const char *flag, gp_prompts *out);

/* The text of n_seqs sequences on f. One sequence: streamed, each piece
 * written (and flushed) once the detokenizer has it, then a newline at its
 * end. Several: each sequence's whole text written when that sequence
 * finishes, as one line "[s] text" (s from 0, in the order they finish). */
typedef struct gp_gen_out gp_gen_out;
gp_status gp_gen_out_create(const gp_tokenizer *t, int n_seqs, FILE *f, gp_gen_out **out);
/* A generated token of sequence s (not its EOS). Ids the tokenizer does not
 * know (a model vocabulary padded past the tokenizer's) print nothing and
 * are counted. */
gp_status gp_gen_out_push(gp_gen_out *o, int s, int32_t id);
/* Stop strings (borrowed, each non-empty; GP_ERR_INVALID_ARG otherwise):
 * a sequence's text ends where its first occurrence of any of them begins;
 * the stop string and what follows are not written. Text that could be the
 * start of one is held back until the following text settles it. */
gp_status gp_gen_out_set_stops(gp_gen_out *o, const char *const *stops, int n);
/* Whether sequence s's text reached a stop string (its later tokens print nothing). */
bool gp_gen_out_stopped(const gp_gen_out *o, int s);
/* Sequence s is done (EOS, its last step, a stop string or an interruption):
 * its remaining text, held-back text included, is written. */
gp_status gp_gen_out_finish(gp_gen_out *o, int s);
long gp_gen_out_unknown(const gp_gen_out *o); /* ids not printed */
void gp_gen_out_free(gp_gen_out *o);

#endif
