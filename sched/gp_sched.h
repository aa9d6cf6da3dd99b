/* greenpipe request scheduler: a queue of generation requests run by
 * continuous batching over any backend that runs mixed batches, with a
 * per-step token budget, KV block admission, preemption by recompute and
 * automatic prefix caching. */
#ifndef GP_SCHED_H
#define GP_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_common.h"
#include "gp_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One caller at a time: a server serializes submit, cancel and step (its
 * event loop) around one scheduler. */
typedef struct gp_sched gp_sched; /* opaque */

/* What the scheduler drives: one mixed batch per step, and the reset of a
 * sequence slot it gives back. The CPU reference and the CUDA engine each
 * plug in through this table. */
typedef struct gp_sched_ops {
    /* Run b (prefill parts first, then decode parts; sequence ids in
     * [0, max_seqs)): each part's greedy token (the first largest logit
     * after its last token) to next [b->n_parts], and, when logits is not
     * NULL, those logits to logits [b->n_parts][vocab]. logits is NULL when
     * every part the step samples belongs to a greedy request, so a GPU
     * backend copies n_parts ids, not n_parts x vocab floats. A failed batch
     * leaves every sequence as it was. */
    gp_status (*run_batch)(void *ctx, const gp_batch *b, int32_t *next, float *logits);
    /* Empty sequence seq's cache (its slot is handed to another request). */
    void (*reset_seq)(void *ctx, int seq);
    /* The next token of a request from its logits [vocab]; sample_ctx is the
     * request's own (its sampling parameters and seed). NULL: greedy, the
     * first largest logit. */
    int32_t (*sample)(void *ctx, const float *logits, int vocab, void *sample_ctx);
    /* Automatic prefix caching (gp_sched_config.prefix_cache needs all
     * three). A handle names a full block of KV the backend keeps alive for
     * the scheduler's cache (>= 0). retain_block: keep block index (its
     * tokens [index x block_size, (index + 1) x block_size), computed) of
     * running sequence seq alive past seq's reset, as *handle; the sequence
     * goes on using it, and never writes its positions again. drop_block:
     * the cache let go of handle (evicted, or the scheduler destroyed).
     * attach_blocks: empty sequence seq starts with handles[0..n) (n >= 1)
     * as its first n x block_size tokens, their KV as it was retained; a
     * refusal leaves seq empty. A failed retain leaves the block private to
     * its request (and that request's later blocks uncached); a failed
     * attach is a miss (the tokens are computed): the cache is never
     * needed for a correct result. */
    gp_status (*retain_block)(void *ctx, int seq, int index, int *handle);
    void (*drop_block)(void *ctx, int handle);
    gp_status (*attach_blocks)(void *ctx, int seq, const int *handles, int n);
    /* A host tier behind the prefix cache (optional: all three or none;
     * needs the three above). Blocks are named by the cache's chain keys
     * (gp_sched_config.chain_seed). host_offload: the cache is about to drop
     * handle (evicted): keep its KV under key (tokens: its block_size tokens)
     * if the tier has room; a failure loses only that block's reuse.
     * host_lookup: the longest run of keys[0..n) the tier holds (tokens:
     * theirs, n x block_size), at most as many as one host_load takes, into
     * *held, pinned until the next host_load. host_load: sequence seq, which
     * holds only its attached blocks (or none), appends the first n (<= held)
     * blocks of the last lookup as computed tokens; their KV may arrive with
     * the next run_batch (layer by layer), which runs it however that batch
     * ends (a failed one leaves it pending for the next), and a reset of seq
     * before then drops it. The lookup's other pins go; n = 0 lets all go.
     * A failed load appends nothing: the tokens are computed. */
    gp_status (*host_offload)(void *ctx, int handle, uint64_t key, const int32_t *tokens);
    gp_status (*host_lookup)(void *ctx, const uint64_t *keys, const int32_t *tokens, int n, int *held);
    gp_status (*host_load)(void *ctx, int seq, int n);
    /* A prefill lane beside the one run_batch runs on (GP_SCHED_PD_MUX needs
     * both): prefill_launch starts b (prefill parts only, distinct from any
     * sequence of the run_batch calls made before it completes) and returns
     * at once; b, its tokens, next [b->n_parts] and logits (NULL, or
     * [b->n_parts][vocab]) stay the scheduler's until it completes, when
     * they hold what run_batch would give. prefill_poll: *done tells whether
     * the launched batch completed (wait: block until it has); once done it
     * returns the batch's status (a failed batch leaves its sequences as
     * they were) and the lane is free for the next launch. */
    gp_status (*prefill_launch)(void *ctx, const gp_batch *b, int32_t *next, float *logits);
    gp_status (*prefill_poll)(void *ctx, bool wait, bool *done);
    /* Optional with GP_SCHED_PD_MUX: the planner of an adaptive backend,
     * asked each step that finds the prefill lane free and prompt tokens
     * waiting (gp_pd_plan_in, gp_stage.h). GP_PD_RUN_LANE: a batch of at
     * most plan.tokens is launched on the lane (the backend has selected
     * its partitions); GP_PD_RUN_MIXED: chunks of at most plan.tokens join
     * the step's decode rows in one run_batch. NULL: every batch goes to
     * the lane, token_budget tokens at most. A failed plan fails the step
     * before anything runs. */
    gp_status (*pd_plan)(void *ctx, const gp_pd_plan_in *in, gp_pd_plan *out);
    void *ctx;
} gp_sched_ops;

typedef enum gp_sched_policy {
    /* Every running decode row first, then prefill chunks of partly
     * prefilled and waiting requests until the token budget is used
     * (Sarathi-Serve, vLLM v1): decodes never stall behind a long prompt. */
    GP_SCHED_CHUNKED = 0,
    /* Whole pending prompts while any wait (up to the budget; a prompt
     * longer than the whole budget in chunks), decode rows otherwise. */
    GP_SCHED_PREFILL_FIRST,
    /* Prefill and decode on two lanes at once (PD-multiplexing: the
     * backend's two SM partitions): every step runs the decode rows of the
     * requests past their prefill (run_batch), while one batch of prefill
     * chunks up to the token budget runs on the prefill lane
     * (prefill_launch), launched when the lane is free and polled at every
     * step; a request joins the decode rows in the step that finds its last
     * chunk completed. Decode rows never wait for a prefill, nor count
     * against the budget. */
    GP_SCHED_PD_MUX,
} gp_sched_policy;

typedef struct gp_sched_config {
    gp_sched_policy policy;
    int token_budget; /* tokens of one step at most: >= 1 */
    int max_seqs;     /* the backend's sequence slots: the most requests running, and parts of a batch */
    int vocab;
    int max_context;  /* tokens per sequence */
    int block_size;   /* tokens per KV block: >= 1 */
    int total_blocks; /* KV blocks the backend holds for all sequences: >= 1 */
    /* Keep full blocks by the hash chain of their tokens (prompt and
     * generated) for later requests whose tokens start alike: a block is
     * free, private to one running request, or a cache entry shared by
     * n >= 0 of them. An admission attaches the longest run of cached
     * leading blocks (leaving one token to compute); entries no request
     * uses are evicted least recently used first when a block is needed.
     * Needs the ops' three. */
    bool prefix_cache;
    /* The seed of the cache's key chain (gp_kvstore_next_key from it): a
     * host tier's store seed (gp_kvstore_seed), so that a block's key is
     * the store's; any value without a tier. */
    uint64_t chain_seed;
} gp_sched_config;

gp_status gp_sched_create(const gp_sched_config *cfg, const gp_sched_ops *ops, gp_sched **out);
void gp_sched_destroy(gp_sched *s);

/* One generation request; everything is copied by gp_sched_submit. */
typedef struct gp_sched_request {
    uint64_t id;              /* unique among the requests the scheduler holds */
    const int32_t *prompt;    /* [n_prompt] */
    int n_prompt;             /* >= 1 */
    int max_tokens;           /* >= 1; n_prompt + max_tokens <= max_context */
    const int32_t *stop_ids;  /* [n_stop]: EOS and stop ids; generating one ends the request (it is kept) */
    int n_stop;
    void *sample_ctx;         /* handed to ops.sample (borrowed until the request finishes) */
    bool greedy;              /* its tokens are the backend's greedy ones (run_batch's next): no logits, no
                                 ops.sample */
} gp_sched_request;

/* The checks gp_sched_submit makes of r against c, for a caller that
 * refuses a request before handing it over (any thread): GP_ERR_INVALID_ARG
 * naming the bad value and what is allowed. */
gp_status gp_sched_check_request(const gp_sched_config *c, const gp_sched_request *r);

/* Evict every cached block no running request uses (drop_block each), so
 * that free_blocks counts them again. */
void gp_sched_evict_cached(gp_sched *s);

/* Queue r at the tail (FIFO). Refused before anything changes: a message
 * names the bad value and what is allowed. */
gp_status gp_sched_submit(gp_sched *s, const gp_sched_request *r);

/* End request id (waiting or running) at once: its sequence is reset and its
 * blocks are free before the call returns (under GP_SCHED_PD_MUX, a request
 * in the prefill batch in flight first waits for that batch). A finished
 * request is left as it is. */
gp_status gp_sched_cancel(gp_sched *s, uint64_t id);

typedef enum gp_sched_finish {
    GP_SCHED_RUNNING = 0, /* not finished (waiting or running) */
    GP_SCHED_LENGTH,      /* max_tokens generated */
    GP_SCHED_STOP,        /* a stop id generated */
    GP_SCHED_CANCELLED,
} gp_sched_finish;
const char *gp_sched_finish_name(gp_sched_finish f); /* "running", "length", "stop", "cancelled" */

/* A token a request generated in the last step; finish is set on its last. */
typedef struct gp_sched_event {
    uint64_t id;
    int32_t token;
    gp_sched_finish finish;
} gp_sched_event;

/* One engine batch: schedule by the policy, run it, sample the parts that
 * reached their last pending token. *n_events (may be NULL) receives the
 * events of this step (gp_sched_events). A step with nothing to run does
 * nothing. A failed batch (the backend's status is returned) runs no token
 * and gives its blocks back; requests it admitted stay running with an empty
 * cache (or the cached blocks attached), those it preempted stay queued, so
 * the next step goes on. */
gp_status gp_sched_step(gp_sched *s, int *n_events);
/* The events of the last step; valid until the next step. */
const gp_sched_event *gp_sched_events(const gp_sched *s, int *n);

typedef struct gp_sched_result {
    const int32_t *tokens; /* [n_tokens] generated so far; valid until the request is released */
    int n_tokens;
    gp_sched_finish finish;
    int preemptions;       /* times its sequence was taken back and recomputed */
    int cached_tokens;     /* prompt tokens its first admission took from the prefix cache and the host
                              tier (whole blocks) */
} gp_sched_result;
gp_status gp_sched_result_of(const gp_sched *s, uint64_t id, gp_sched_result *out);
/* Forget a finished request (its id may be submitted again). */
gp_status gp_sched_release(gp_sched *s, uint64_t id);

typedef struct gp_sched_stats {
    int waiting, running;
    int free_blocks, total_blocks; /* free: neither a request's nor cached */
    long long steps, preemptions;
    long long prefill_tokens, decode_tokens; /* rows run */
    int cached_blocks;     /* blocks the prefix cache holds that no running request uses (evictable) */
    /* tokens to prefill at each admission (a readmission after preemption
     * too), and those of them attached from the cache: the hit rate */
    long long prefix_query_tokens, prefix_hit_tokens;
    /* The host tier: tokens admissions loaded from it (beyond the device
     * hits above), blocks offloaded into it on eviction, and offloads that
     * failed (those blocks' KV was lost to later requests). */
    long long prefix_host_hit_tokens, host_offloaded_blocks, host_offload_failures;
    /* GP_SCHED_PD_MUX: prefill batches launched, and steps whose decode
     * rows ran while one was launched and not yet found done (the overlap
     * the two lanes give, where the backend runs them at once). */
    long long prefill_batches, overlapped_steps;
    /* With ops.pd_plan: steps whose prefill chunks ran in the decode rows' batch instead. */
    long long mixed_steps;
} gp_sched_stats;
void gp_sched_get_stats(const gp_sched *s, gp_sched_stats *out);

#ifdef __cplusplus
}
#endif
#endif
