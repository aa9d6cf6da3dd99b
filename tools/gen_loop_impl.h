/* The generation loop of greenpipe generate (and of a conversation's
 * turns): prefill onto sequences, then decode, sample, stop and print.
 * Private to the greenpipe program. */
#ifndef GP_GEN_LOOP_IMPL_H
#define GP_GEN_LOOP_IMPL_H

#include <signal.h>

#include "gen_text_impl.h"
#include "gp_pipeline.h"
#include "gp_stage.h"
#include "gp_tools.h"

/* Why a sequence stopped. */
typedef enum gp_gen_stop {
    GP_GEN_RUNNING = 0,      /* not stopped (the loop failed first) */
    GP_GEN_STOP_EOS,         /* an EOS id (not printed) */
    GP_GEN_STOP_TOKEN,       /* one of the extra stop ids (not printed) */
    GP_GEN_STOP_LENGTH,      /* max_tokens generated */
    GP_GEN_STOP_STRING,      /* its text reached a stop string (not printed) */
    GP_GEN_STOP_INTERRUPTED, /* *interrupt was set */
} gp_gen_stop;
const char *gp_gen_stop_name(gp_gen_stop r); /* "EOS", "stop token", "length", "stop string", "interrupted" */

/* A prefill in place of the executor's (gp_session_ops.prefill's contract),
 * e.g. through stored prefixes. */
typedef gp_status (*gp_gen_prefill_fn)(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next,
                                       float *last_logits, float *prompt_logits);

typedef struct gp_gen_params {
    gp_sample_params sample;   /* temperature 0: the backend's greedy token (argmax) */
    gp_repeat_params repeat;   /* gp_repeat_default_params(): off */
    long max_tokens;           /* tokens to generate per sequence, >= 1 */
    const gp_eos_ids *eos;     /* NULL: none */
    const int32_t *stop_ids;   /* [n_stop_ids] more ids that end a sequence unprinted (end-of-turn ids) */
    int n_stop_ids;
    const char *const *stop_strings; /* [n_stop_strings], non-empty; need out */
    int n_stop_strings;
    gp_gen_prefill_fn prefill; /* NULL: the executor's */
    void *prefill_ctx;
    /* The loop stops every running sequence at the next step boundary once
     * this is set (a SIGINT handler's flag); NULL: never. */
    volatile sig_atomic_t *interrupt;
} gp_gen_params;
gp_gen_params gp_gen_default_params(void);

/* One sequence of a run. */
typedef struct gp_gen_seq {
    int seq;                  /* the backend's sequence id */
    const int32_t *tokens;    /* [n], n >= 1: prefilled onto what the sequence already holds */
    int n;
    const int32_t *history;   /* [n_history]: the tokens it already holds, oldest first, for the repeat
                                 penalty's window (NULL, 0: none or not penalised) */
    long n_history;
    gp_rng *rng;              /* its sampling stream; NULL when not sampling */
} gp_gen_seq;

/* What a run made of one sequence. tokens and logits are the caller's. */
typedef struct gp_gen_result {
    int32_t *tokens;          /* [max_tokens]: the generated tokens, a final EOS or stop id included */
    float *logits;            /* NULL, or [max_tokens][vocab]: the model's logits each token was chosen
                                 from (before the repeat penalty) */
    int n;                    /* tokens generated */
    gp_gen_stop stop;
    double ttft_s;            /* host wall clock from the prefill call to its first token */
    double decode_s;          /* from its first token to its last */
} gp_gen_result;
/* Decode tokens/s of r: the tokens after the first over decode_s (the first
 * token is the prefill's); 0 when there are none. */
double gp_gen_decode_rate(const gp_gen_result *r);

/* The run as a whole, host wall clock around the backend's calls. */
typedef struct gp_gen_stats {
    double prefill_s;         /* the prefill call (its first tokens' choice not included) */
    double decode_s;          /* from the prefill's end to the loop's */
    long steps;               /* decode steps after the prefill */
    bool interrupted;
    const char *failed;       /* on failure: the stage ("prefill", "decode step", "sampler",
                                 "detokenizing") */
} gp_gen_stats;

/* Prefill seqs[S] in one call (with p->prefill if set), then decode until
 * each stops: every step runs all S sequences (pipelined through pl when not
 * NULL, else x's sequential steps), finished ones riding along fed the
 * backend's greedy token, their tokens neither printed nor kept, so the
 * batch keeps its shape and the others their tokens. Tokens are chosen from
 * the host logits when sampling or with the repeat penalty on, else they are
 * the backend's argmax (its logits then stay on the device unless
 * res[].logits asks for them). out: NULL (the caller prints res[].tokens),
 * else each sequence's text goes there, sequence i as out's sequence i, and
 * is finished when it stops. prompt_logits: as gp_session_ops.prefill's.
 * vocab: the model's. Returns GP_OK (interrupted included) or the failure,
 * stats->failed naming its stage. */
gp_status gp_gen_run(gp_exec x, gp_pipeline *pl, int vocab, const gp_gen_params *p, int S, const gp_gen_seq *seqs,
                     gp_gen_out *out, float *prompt_logits, gp_gen_result *res, gp_gen_stats *stats);

#endif
