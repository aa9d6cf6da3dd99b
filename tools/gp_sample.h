/* Token sampling on the host from one step's fp32 logits: temperature,
 * top-k and top-p (nucleus) with a seeded xoshiro256** generator, one
 * stream per sequence so a sequence's tokens do not depend on its batch. */
#ifndef GP_SAMPLE_H
#define GP_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

/* xoshiro256**: small, fast and statistically sound for sampling; the state
 * is seeded through splitmix64 so that any seed (0 included) is usable. */
typedef struct gp_rng {
    uint64_t s[4];
} gp_rng;
/* Stream `stream` of seed: distinct streams of one seed are independent. */
void gp_rng_seed(gp_rng *r, uint64_t seed, uint64_t stream);
uint64_t gp_rng_next(gp_rng *r);
double gp_rng_uniform(gp_rng *r); /* [0, 1), 53 random bits */

typedef struct gp_sample_params {
    double temperature; /* 0: greedy (argmax); otherwise logits are divided by it */
    int top_k;          /* 0: off; otherwise only the k largest logits stay */
    double top_p;       /* 1: off; otherwise the smallest prefix of the sorted
                           probabilities (after top-k) whose mass reaches top_p */
} gp_sample_params;
#define GP_SAMPLE_MAX_TEMPERATURE 100.0

/* Range checks of the three values for a vocabulary of vocab tokens; the
 * message names the flag, the value and the allowed range. */
gp_status gp_sample_params_check(const gp_sample_params *p, int vocab);

/* Scratch for gp_sample over vocab tokens (index and probability arrays). */
typedef struct gp_sampler {
    int vocab;
    int32_t *idx;
    double *prob;
} gp_sampler;
gp_status gp_sampler_init(gp_sampler *s, int vocab);
void gp_sampler_free(gp_sampler *s);

/* One token from logits[vocab]. Candidates are ordered by logit, larger
 * first, equal logits by lower id, so top-k keeps the lower ids of a tie and
 * every run orders them alike. NaN logits count as -inf. With temperature 0
 * the result is the first largest logit (gp_argmax's rule) and rng is not
 * used; otherwise exactly one draw is taken from rng. */
int32_t gp_sample(gp_sampler *s, const gp_sample_params *p, const float *logits, gp_rng *rng);

/* The candidates gp_sample would draw from after top-k and top-p: their
 * count, with s->idx[0..n) the ids and s->prob[0..n) their probabilities
 * (renormalised to sum to 1), for tests and diagnostics. */
int gp_sample_candidates(gp_sampler *s, const gp_sample_params *p, const float *logits);

#endif
