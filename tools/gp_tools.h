/* greenpipe command-line helpers: strict number and prompt parsing shared by
 * the tools and tested without a GPU. */
#ifndef GP_TOOLS_H
#define GP_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

/* Parse a whole decimal integer in [min, max]; the message names flag, the
 * text given and the allowed range. */
gp_status gp_parse_long(const char *text, long min, long max, const char *flag, long *out);
gp_status gp_parse_u64(const char *text, const char *flag, uint64_t *out);
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

/* The commands; argc/argv start at the command name. Return the exit code. */
int gp_cmd_inspect(int argc, char **argv);
int gp_cmd_generate(int argc, char **argv);
int gp_cmd_devices(int argc, char **argv);
int gp_cmd_tokenize(int argc, char **argv);

#endif
