/* greenpipe command-line helpers, tested without a GPU: strict number and
 * prompt parsing, EOS ids of a checkpoint and token sampling. */
#ifndef GP_TOOLS_H
#define GP_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parse a whole decimal integer in [min, max]; the message names flag, the
 * text given and the allowed range. */
gp_status gp_parse_long(const char *text, long min, long max, const char *flag, long *out);
/* For programs' flags: gp_parse_long, its refusal printed as "prog:
 * message" on stderr; 0, or 2 (the usage exit code) when refused. */
int gp_arg_long(const char *prog, const char *text, long min, long max, const char *flag, long *out);
/* text: comma-separated integers, each as gp_parse_long's; at most cap into
 * out, *n their count. GP_ERR_INVALID_ARG naming flag for an empty list or
 * item, more than cap items, or an item gp_parse_long refuses. */
gp_status gp_parse_long_list(const char *text, long min, long max, const char *flag, long *out, int cap, int *n);
gp_status gp_parse_u64(const char *text, const char *flag, uint64_t *out);
/* A size in bytes, > 0: a whole decimal number, optionally followed at once
 * by a unit in any case: K, M, G, T or KiB, MiB, GiB, TiB (binary: x 2^10,
 * 2^20, 2^30, 2^40) or KB, MB, GB, TB (decimal: x 10^3, 10^6, 10^9, 10^12):
 * "4G", "4GiB", "512m", "4GB", "1073741824". The message names flag, the
 * text and the allowed form (GP_SIZE_FORM); beyond 64 bits is out of range. */
#define GP_SIZE_UNITS                                                                                             \
    "digits, optionally followed by K, M, G, T or KiB, MiB, GiB, TiB (binary: x 2^10, 2^20, 2^30, 2^40) or KB, "  \
    "MB, GB, TB (decimal: x 10^3, 10^6, 10^9, 10^12), any case, no space: 512M, 4GiB, 4GB"
#define GP_SIZE_FORM "expected a size in bytes > 0: " GP_SIZE_UNITS
gp_status gp_parse_size(const char *text, const char *flag, uint64_t *out);
/* A file path given to flag: GP_OK unless it is empty or starts with "--"
 * (the next flag taken as the value, "--dump-logits --steps 3"), checked
 * before the long work that would end in writing or reading it. */
gp_status gp_parse_path(const char *text, const char *flag);
/* An output file given to flag, checked before the work that ends in writing
 * it: gp_parse_path, then the path opened for writing (made, without
 * truncating what is there, and removed again if we made it). A FIFO is
 * trusted as it is. GP_ERR_INVALID_ARG naming flag, path and the system's
 * reason (a missing or read-only directory, a directory given as the file). */
gp_status gp_check_out_file(const char *path, const char *flag);
/* An output directory given to flag: an existing directory we can make a
 * file in, or one we can make (one level; removed again after the test). A
 * file there, or a directory we cannot write, is GP_ERR_INVALID_ARG naming
 * flag, path and the reason. */
gp_status gp_check_out_dir(const char *path, const char *flag);
/* The exit code of input that could not be had: 1 for the machine's
 * failures (GP_ERR_IO, GP_ERR_NO_MEMORY), 2 for the user's or the
 * checkpoint's (a wrong path, a malformed file). */
int gp_input_exit_code(gp_status st);
/* The long name of option val in getopt_long's table opts ("?" when none),
 * for a program's messages about a flag given by either form. */
struct option;
const char *gp_opt_name(const struct option *opts, int val);
/* A whole finite decimal number ("0.7", "1e-3"); ranges are the caller's. */
gp_status gp_parse_double(const char *text, const char *flag, double *out);

/* "5,17,42;11,400,2": sequences separated by ';', ids by ','. Spaces around
 * ids are allowed; empty sequences, non-numbers and negative ids are not.
 * ids[total] holds all ids, lens[n_seqs] each sequence's count; free both. */
typedef struct gp_prompts {
    int n_seqs;
    int *lens;    /* [n_seqs] */
    int *offsets; /* [n_seqs] start of each sequence in ids */
    int32_t *ids; /* [sum of lens] */
} gp_prompts;
gp_status gp_parse_prompts(const char *text, gp_prompts *out);
void gp_prompts_free(gp_prompts *p);

/* The end-of-sequence ids of a checkpoint: "eos_token_id" of
 * generation_config.json where it has one, else of config.json (a number or
 * a list of numbers; null or absent: none). Each must lie in [0, vocab). */
#define GP_EOS_MAX 64
typedef struct gp_eos_ids {
    int n;
    int32_t ids[GP_EOS_MAX];
    const char *from; /* "generation_config.json", "config.json" or NULL (none) */
} gp_eos_ids;
/* One file's text; *found says whether it names eos_token_id (non-null).
 * label names the file in messages. */
gp_status gp_eos_parse_json(const char *text, size_t len, const char *label, int vocab, gp_eos_ids *out,
                            bool *found);
/* Both files of checkpoint directory dir; a missing generation_config.json
 * is no error, an unreadable or malformed one is. */
gp_status gp_eos_load_dir(const char *dir, int vocab, gp_eos_ids *out);
bool gp_eos_has(const gp_eos_ids *e, int32_t id);

/* Progress of long work on f (tools/progress.c): on a terminal one line
 * redrawn in place ("\r"), ended by a newline; otherwise only the start and
 * the end of each phase, one line each. prog prefixes every line
 * ("greenpipe"). */
typedef struct gp_cli_progress {
    FILE *f;
    bool tty;
    const char *prog;
} gp_cli_progress;
void gp_cli_progress_init(gp_cli_progress *p, FILE *f, const char *prog);
gp_progress_cb gp_cli_progress_cb(gp_cli_progress *p);

/* The commands; argc/argv start at the command name. Return the exit code. */
int gp_cmd_inspect(int argc, char **argv);
int gp_cmd_generate(int argc, char **argv);
int gp_cmd_chat(int argc, char **argv);
int gp_cmd_serve(int argc, char **argv);
int gp_cmd_bench_serve(int argc, char **argv);
int gp_cmd_devices(int argc, char **argv);
int gp_cmd_tokenize(int argc, char **argv);
int gp_cmd_calibrate(int argc, char **argv);

/* ------------------------------------------------------------ stop strings */

/* Text that arrives in pieces (a detokenizer's), cut at stop strings: it
 * ends where the first occurrence of any of them begins; the stop string
 * and what follows are dropped. Text that could be the start of one is held
 * back until the following text settles it. */
typedef struct gp_stop_text gp_stop_text;
/* stops[n] are copied; each must be non-empty (GP_ERR_INVALID_ARG naming
 * its index). n = 0 lets every piece through as it is. */
gp_status gp_stop_text_create(const char *const *stops, int n, gp_stop_text **out);
void gp_stop_text_free(gp_stop_text *t);
/* Feed piece[n]; final: no more text follows (nothing is held back).
 * text and len: what is let through now, valid until the next call. */
gp_status gp_stop_text_feed(gp_stop_text *t, const char *piece, size_t n, bool final, const char **text,
                            size_t *len);
bool gp_stop_text_stopped(const gp_stop_text *t); /* a stop string was found: later text is dropped */

/* ------------------------------------------------------------ sampling */

/* Token sampling on the host from one step's fp32 logits: temperature,
 * top-k, top-p (nucleus) and min-p with a seeded xoshiro256** generator,
 * one stream per sequence so a sequence's tokens do not depend on its
 * batch; and llama.cpp's repeat penalty, applied to the logits before. */
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
    double min_p;       /* 0 (zero-initialised): off; otherwise (after top-k and top-p)
                           only tokens whose probability is at least min_p times
                           the most likely token's stay (llama.cpp's min-p). The
                           probabilities are those at the temperature, as top-p's;
                           llama.cpp takes them before it, the same at temperature 1 */
} gp_sample_params;
#define GP_SAMPLE_MAX_TEMPERATURE 100.0

/* Range checks of the values for a vocabulary of vocab tokens; the
 * message names the flag, the value and the allowed range. */
gp_status gp_sample_params_check(const gp_sample_params *p, int vocab);

/* Scratch for gp_sample over vocab tokens (index and probability arrays). */
typedef struct gp_sampler {
    int vocab;
    int32_t *idx;
    double *prob;
    uint8_t *seen; /* [vocab] all zero between calls: the repeat penalty's marks */
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

/* llama.cpp's repeat penalty (--repeat-penalty, --repeat-last-n): each
 * distinct token among the last last_n tokens of a sequence's context
 * (prompt included) has its logit divided by penalty when positive,
 * multiplied by it otherwise. Applied before the sampler's steps, greedy
 * decoding included (llama.cpp applies penalties, then greedy). */
#define GP_REPEAT_DEFAULT_LAST_N 64
#define GP_REPEAT_MAX_PENALTY 100.0
typedef struct gp_repeat_params {
    double penalty; /* default 1: off; (0, GP_REPEAT_MAX_PENALTY] */
    int last_n;     /* default GP_REPEAT_DEFAULT_LAST_N; 0: off; -1: the whole context */
} gp_repeat_params;
gp_repeat_params gp_repeat_default_params(void);
/* Range checks; the message names the flag, the value and the allowed range. */
gp_status gp_repeat_params_check(const gp_repeat_params *r);
bool gp_repeat_on(const gp_repeat_params *r); /* changes logits at all */
/* Penalises logits[vocab] in place for the context ctx[n] (oldest first);
 * ids outside [0, vocab) are ignored. */
void gp_repeat_penalize(gp_sampler *s, const gp_repeat_params *r, float *logits, const int32_t *ctx, long n);

#ifdef __cplusplus
}
#endif

#endif
