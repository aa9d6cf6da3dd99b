/* Chat on top of the generation loop: the template and its end-of-turn ids
 * for generate --chat, and the turn-by-turn conversation of greenpipe chat,
 * which keeps its sequence's KV cache between turns. Private to the
 * greenpipe program. */
#ifndef GP_GEN_CHAT_IMPL_H
#define GP_GEN_CHAT_IMPL_H

#include <stdio.h>

#include "gen_loop_impl.h"
#include "gp_chat.h"
#include "gp_tokenizer.h"

#define GEN_CHAT_MAX_STOP_IDS 8

/* The template (by name when name is not NULL, else from dir's
 * tokenizer_config.json) and the ids of its end-of-turn texts that the
 * tokenizer knows as single tokens (a generated one ends the answer). */
typedef struct gen_chat {
    const gp_chat_template *tpl;
    int32_t stop_ids[GEN_CHAT_MAX_STOP_IDS];
    int n_stop_ids;
} gen_chat;
gp_status gen_chat_setup(const gp_tokenizer *tok, const char *dir, const char *name, gen_chat *out);

/* texts[n] (lens[n] bytes) as user messages after system (NULL: none),
 * each rendered with the assistant's header into rendered[n] (malloc'd
 * strings, rlens their lengths; free with gen_chat_free_texts). */
gp_status gen_chat_render_each(const gen_chat *c, const char *system, const char *const *texts, const size_t *lens,
                               int n, char ***rendered, size_t **rlens);
void gen_chat_free_texts(char **rendered, size_t *rlens, int n);

/* What a conversation runs on: the backend's sequence 0, and the options
 * shared with generate. */
typedef struct gen_chat_env {
    gp_exec x;
    gp_pipeline *pl;        /* NULL: sequential steps */
    const gp_config *cfg;
    const gp_tokenizer *tok;
    const gen_chat *chat;
    gp_gen_params gen;      /* sampling, repeat penalty, EOS, stop strings; max_tokens 0: to the context's end;
                               interrupt (set by Ctrl-C) stops the answer in progress and is cleared
                               before each */
    gp_rng *rng;            /* sampling stream, NULL when greedy */
    const char *system;     /* NULL: none */
    long max_context;       /* tokens the sequence may hold */
    bool verbose_prompt;    /* ids of each turn on stderr */
} gen_chat_env;

/* Read user lines from in until its end (or an interrupted read), answer
 * each on out, a status line per turn on stderr. Returns the exit code:
 * 0 at the end of input, 1 on a failure of the backend or the machine. */
int gen_chat_converse(const gen_chat_env *env, FILE *in, FILE *out);

#endif
