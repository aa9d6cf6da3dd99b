/* greenpipe command-line helpers: strict number and prompt parsing shared by
 * the tools and tested without a GPU. */
#ifndef GP_TOOLS_H
#define GP_TOOLS_H

#include <stdint.h>

#include "gp_common.h"

/* Parse a whole decimal integer in [min, max]; the message names flag, the
 * text given and the allowed range. */
gp_status gp_parse_long(const char *text, long min, long max, const char *flag, long *out);
gp_status gp_parse_u64(const char *text, const char *flag, uint64_t *out);

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

/* The commands; argc/argv start at the command name. Return the exit code. */
int gp_cmd_inspect(int argc, char **argv);
int gp_cmd_generate(int argc, char **argv);
int gp_cmd_devices(int argc, char **argv);
int gp_cmd_tokenize(int argc, char **argv);

#endif
