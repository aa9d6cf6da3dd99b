/* A fake serving core for the HTTP server's tests: the gp_serve_* functions
 * the server calls, deterministic and on its own engine thread. Compiled
 * into a test executable, it stands in for the real core (whose objects are
 * then not pulled from the gp_serve archive).
 *
 * Text is tokenized byte by byte (ids 0..255, add_special puts BOS 1
 * first); a chat's ids are its messages' contents one after the other. A
 * request echoes its prompt's ids, one per step, each with the text
 * "<id> ": it stops ("stop") after echoing the whole prompt unless
 * ignore_eos, and ends at max_tokens or the context's end ("length"). */
#ifndef GP_SERVE_FAKE_H
#define GP_SERVE_FAKE_H

#include <stdbool.h>

#include "gp_serve.h"

typedef enum gp_serve_fake_mode {
    GP_SERVE_FAKE_RUN = 0, /* a token per step for every running request */
    GP_SERVE_FAKE_PAUSE,   /* requests are taken but get no tokens */
    GP_SERVE_FAKE_FULL,    /* submit refuses: GP_SOFT_FULL (the queue is full) */
    GP_SERVE_FAKE_DEAD,    /* submit refuses: GP_ERR_STATE (a fatal backend failure) */
} gp_serve_fake_mode;

typedef struct gp_serve_fake_counts {
    int submitted;  /* accepted by submit */
    int cancelled;  /* cancels that ended a running request */
    int running;
} gp_serve_fake_counts;

/* model: the served id; step_us: the time of one step; chat: whether chat
 * prompts are taken (else GP_ERR_STATE as a core without a template). */
gp_serve *gp_serve_fake_create(const char *model, int max_context, int step_us, bool chat);
void gp_serve_fake_destroy(gp_serve *s);
void gp_serve_fake_set_mode(gp_serve *s, gp_serve_fake_mode m);
gp_serve_fake_counts gp_serve_fake_counts_get(gp_serve *s);
/* Wait (at most timeout_s) until the counts satisfy
 * submitted >= min_submitted, cancelled >= min_cancelled and
 * running == running_eq (running_eq < 0: any); true when they do. */
bool gp_serve_fake_wait(gp_serve *s, int min_submitted, int min_cancelled, int running_eq, double timeout_s);

#endif
