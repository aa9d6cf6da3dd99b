/* greenpipe serving core: generation requests from any thread, run by the
 * request scheduler on one engine thread over a backend's mixed batches,
 * their tokens and text handed back through each request's callback. */
#ifndef GP_SERVE_H
#define GP_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"
#include "gp_pipeline.h"
#include "gp_sched.h"
#include "gp_tools.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_serve gp_serve; /* opaque */

typedef struct gp_serve_params {
    gp_sched_policy policy; /* default GP_SCHED_CHUNKED (--schedule chunked|prefill-first) */
    int token_budget;       /* tokens of one step at most (--max-num-batched-tokens); default 2048 */
    int max_waiting;        /* requests queued beside the running ones; a submit beyond is
                               GP_SOFT_FULL (HTTP 429); default 1024 (--max-waiting) */
    int kv_blocks;          /* KV blocks the scheduler admits against; 0 (default): every block the
                               backend holds (max_seqs x max_context / block_size) */
    bool prefix_cache;      /* automatic prefix caching (--no-prefix-cache turns it off); default on */
    /* The backend's host store behind the prefix cache (--kv-store-size):
     * evicted blocks are kept there and reloaded layer by layer. Needs
     * prefix_cache and an executor with the host ops; default off. */
    bool host_tier;
    const char *model_name; /* the id requests name and responses carry (copied) */
} gp_serve_params;
gp_serve_params gp_serve_default_params(void);
/* The KV blocks a backend of max_seqs sequences of max_context tokens holds
 * in blocks of block_size: kv_blocks' bound and its default. */
long long gp_serve_kv_blocks(int max_seqs, int max_context, int block_size);

/* What the core runs on; everything is borrowed for the core's life. */
struct gp_tokenizer;
struct gp_chat_template;
typedef struct gp_serve_env {
    gp_exec exec;                        /* its session's run_batch and reset_seq (and the shared-block
                                            ops for the prefix cache) */
    const gp_config *cfg;
    int max_seqs, max_context, block_size; /* the backend's */
    int max_rows;                        /* tokens one batch may hold (the token budget's bound); 0: any */
    const struct gp_tokenizer *tok;      /* NULL: token ids only (no text in or out) */
    const struct gp_chat_template *chat; /* NULL: chat prompts are refused */
    const int32_t *chat_stop_ids;        /* [n_chat_stop_ids] the template's end-of-turn ids */
    int n_chat_stop_ids;
    const gp_eos_ids *eos;               /* the checkpoint's EOS ids; NULL: none */
} gp_serve_env;

/* Starts the engine thread. GP_ERR_INVALID_ARG naming a bad param. */
gp_status gp_serve_create(const gp_serve_env *env, const gp_serve_params *p, gp_serve **out);
/* Cancels every request (each callback gets its final "cancelled" event),
 * stops the engine thread. NULL is fine. */
void gp_serve_destroy(gp_serve *s);

/* Why a request ended. */
typedef enum gp_serve_finish {
    GP_SERVE_RUNNING = 0,
    GP_SERVE_STOP,      /* EOS, a stop id or a stop string ("stop") */
    GP_SERVE_LENGTH,    /* max_tokens or the context's end ("length") */
    GP_SERVE_CANCELLED, /* gp_serve_cancel or the core's shutdown */
    GP_SERVE_ERROR,     /* the backend failed (message in the event) */
} gp_serve_finish;
const char *gp_serve_finish_name(gp_serve_finish f); /* OpenAI's finish_reason: NULL, "stop", "length",
                                                         "cancelled", "error" */

typedef struct gp_serve_usage {
    int prompt_tokens, completion_tokens;
    int cached_tokens; /* prompt tokens whose KV came from the prefix cache */
} gp_serve_usage;

/* One delivery to a request: the tokens of one step. text/len is the text
 * that settled with them (may be empty: a token can end inside a UTF-8
 * character or a possible stop string), tokens/n_tokens the ids generated
 * (the one that completes a stop string included: none follow it). The last event of a request
 * has finish != GP_SERVE_RUNNING and its usage; after it the request is gone. */
typedef struct gp_serve_event {
    uint64_t id;
    const char *text;
    size_t len;
    const int32_t *tokens;
    int n_tokens;
    gp_serve_finish finish;
    const char *error;     /* GP_SERVE_ERROR: the message */
    gp_serve_usage usage;  /* counts so far (final on the last event) */
} gp_serve_event;
/* Called on the engine thread with the core's lock held: copy what is
 * needed and return; never call back into the core from it. */
typedef void (*gp_serve_cb)(void *user, const gp_serve_event *ev);

typedef struct gp_serve_request {
    const int32_t *prompt;   /* [n_prompt] token ids (copied) */
    int n_prompt;            /* >= 1 */
    int max_tokens;          /* >= 1; 0: up to the context's end. n_prompt + max_tokens <= max_context */
    gp_sample_params sample; /* temperature 0: greedy */
    uint64_t seed;           /* the request's own generator: its tokens do not depend on its batch */
    const char *const *stops; /* [n_stops] stop strings (copied; non-empty); need the tokenizer */
    int n_stops;
    bool ignore_eos;         /* the EOS ids do not end it */
    bool chat;               /* the chat template's end-of-turn ids end it too */
    bool skip_special;       /* special tokens print no text (default for OpenAI: true) */
    gp_serve_cb cb;
    void *user;
} gp_serve_request;

/* Queue r. Refused before anything changes: GP_ERR_INVALID_ARG naming the bad
 * value and what is allowed (prompt and max_tokens beyond the context, ids
 * outside the vocabulary, sampling ranges), GP_SOFT_FULL when max_waiting
 * requests wait, GP_ERR_STATE after a fatal backend failure. *id the
 * request's handle. The callback may run before submit returns. */
gp_status gp_serve_submit(gp_serve *s, const gp_serve_request *r, uint64_t *id);
/* End request id (waiting or running); its blocks are free at the engine's
 * next step. After it returns no callback of id runs again (its final
 * "cancelled" event runs inside this call unless it had finished). Unknown
 * or finished ids are ignored. Any thread. */
void gp_serve_cancel(gp_serve *s, uint64_t id);

/* Tokenize a prompt (any thread): add_special as HF's tokenizer(text).
 * GP_ERR_STATE without a tokenizer. *ids malloc'd. */
gp_status gp_serve_tokenize(const gp_serve *s, const char *text, size_t len, bool add_special, int32_t **ids,
                            int *n);
/* A chat's prompt ids from its messages (the template, assistant header at
 * the end). GP_ERR_STATE without a template or tokenizer; the template's
 * refusal as GP_ERR_INVALID_ARG. */
struct gp_chat_msg;
gp_status gp_serve_chat_prompt(const gp_serve *s, const struct gp_chat_msg *msgs, size_t n, int32_t **ids,
                               int *n_ids);
const char *gp_serve_model_name(const gp_serve *s);
bool gp_serve_prefix_cache_on(const gp_serve *s); /* asked for, and the executor shares KV blocks */
bool gp_serve_has_tokenizer(const gp_serve *s);   /* text in and out; without: token ids only */
int gp_serve_max_context(const gp_serve *s);
int gp_serve_vocab(const gp_serve *s);

/* Latency histograms in seconds, Prometheus-style cumulative buckets. */
#define GP_SERVE_HIST_BUCKETS 16
typedef struct gp_serve_hist {
    double le[GP_SERVE_HIST_BUCKETS];         /* upper bounds, increasing (+Inf is count) */
    long long bucket[GP_SERVE_HIST_BUCKETS];  /* observations <= le[i] */
    long long count;
    double sum;
} gp_serve_hist;

typedef struct gp_serve_stats {
    int running, waiting;
    int kv_blocks_used, kv_blocks_total;
    int kv_blocks_cached;                 /* held by the prefix cache only */
    long long requests_finished[5];       /* by gp_serve_finish (index 0 unused) */
    long long prompt_tokens, generation_tokens;
    long long prefix_hit_tokens, prefix_query_tokens; /* hit rate = hit / query */
    long long prefix_host_hit_tokens;     /* of the queried, those loaded from the host tier */
    long long host_offloaded_blocks, host_offload_failures; /* evicted blocks kept in the host tier, or lost */
    long long prefill_batches, overlapped_steps; /* pd-mux: prefill-lane batches, decode steps beside one */
    long long mixed_steps;                /* pd-mux, adaptive: steps whose prefill chunks rode with the decode rows */
    long long preemptions, steps;
    double step_seconds;                  /* engine time in steps */
    double host_seconds;                  /* scheduling and delivery around them */
    /* Steps of decode rows only (the steady state a decode benchmark
     * measures): their count, rows, time in the backend, and the sum over
     * their rows of the context each attended to. */
    long long decode_steps, decode_rows, decode_context;
    double decode_seconds;
    double uptime_seconds;
    gp_serve_hist ttft, tpot, e2e;        /* time to first token, per output token after it, whole request */
    /* The executor's lanes (session op lane_times; prefill and decode lanes): n_lanes of them. */
    gp_lane_busy lanes[GP_MAX_LANE_TIMES];
    int n_lanes;
} gp_serve_stats;
void gp_serve_get_stats(gp_serve *s, gp_serve_stats *out);

#ifdef __cplusplus
}
#endif
#endif
