/* The scheduler's private state: requests, the waiting queue, the running
 * list in admission order, sequence slots, the free-block count and the
 * prefix cache. */
#ifndef GP_SCHED_IMPL_H
#define GP_SCHED_IMPL_H

#include <stdbool.h>

#include "gp_sched.h"

typedef enum rq_state { RQ_WAITING, RQ_RUNNING, RQ_DONE } rq_state;

/* One request. Its tokens are prompt then generated ones, in one buffer that
 * holds every token it can reach, so a preempted request's new prompt is
 * simply its first n_all tokens. */
typedef struct rq {
    uint64_t id;
    int32_t *all;     /* [n_prompt + max_tokens] */
    int n_prompt, n_all, max_tokens;
    int32_t *stop;    /* [n_stop] */
    int n_stop;
    void *sample_ctx;
    bool greedy;
    rq_state state;
    gp_sched_finish finish;
    int seq;          /* slot while running, else -1 */
    int computed;     /* tokens in its cache */
    int prefill_end;  /* tokens to prefill before it decodes: n_all when (re)admitted */
    int nblk;         /* KV blocks its sequence holds, the shared ones among them */
    int preemptions;
    /* prefix cache (when on): its full blocks [0, n_hashed) were looked up
     * or entered; ent[i] the cache entry block i shares, or -1 (private) */
    int *ent;         /* [blocks of n_prompt + max_tokens] */
    int n_hashed, n_shared;
    uint64_t tail_key, tail_serial; /* the chain after block n_hashed - 1 */
    bool uncached;    /* a retain failed: its later blocks stay private */
    int pending;      /* tokens of its part in the prefill batch in flight (GP_SCHED_PD_MUX), else 0 */
    int cached_tokens;
    struct rq *prev, *next; /* in the waiting queue or the running list */
} rq;

/* A cache entry: one full KV block the backend keeps (handle), named by its
 * chain key and checked by its parent entry and its tokens. */
typedef struct pc_entry {
    uint64_t key;     /* gp_kvstore_next_key(parent's key, tokens); compared under key_mask */
    uint64_t serial;  /* unique for the scheduler's life: a child names its parent by it */
    uint64_t parent;  /* serial of the entry of the block before; 0: the first block */
    int handle;
    int ref;          /* running requests sharing it; 0: on the LRU list, evictable */
    int hnext;        /* next entry of its hash bucket, or of the free list; -1: none */
    int lprev, lnext; /* the LRU list (ref 0), head evicted first; -1: none */
} pc_entry;

typedef struct gp_sched_prefix {
    pc_entry *e;      /* [total_blocks]: an entry holds a block, so never more */
    int32_t *tokens;  /* [total_blocks][block_size]: entry i's tokens */
    int *bucket;      /* [n_buckets]: first entry of each key's bucket, -1: none */
    int n_buckets;    /* a power of two */
    int free_head, n_entries;
    int lru_head, lru_tail, n_lru;
    uint64_t next_serial;
    uint64_t key_mask; /* all ones; a test clears bits to force collisions */
    int *match;       /* [blocks of max_context]: entries the last lookup found */
    int *handles;     /* [blocks of max_context]: their handles, for attach_blocks */
    uint64_t *keys;   /* [blocks of max_context]: the chain past the last match, for host_lookup */
} gp_sched_prefix;

/* Running r has prompt tokens still to compute before it decodes. */
static inline bool gp_sched_prefilling(const rq *r)
{
    return r->computed < r->prefill_end;
}

/* A batch being planned or run: its parts, each part's request and the
 * blocks it took for it, and what the backend gives back. */
typedef struct sched_batch {
    gp_batch_part *parts; /* [max_seqs] */
    rq **rq;              /* [max_seqs]; NULL: a part whose request was cancelled in flight */
    int *blk;             /* [max_seqs] */
    int n;
    int32_t *next;        /* [max_seqs] the backend's greedy tokens */
    float *logits;        /* [max_seqs][vocab] */
} sched_batch;

typedef struct rq_list {
    rq *head, *tail;
    int n;
} rq_list;

struct gp_sched {
    gp_sched_config cfg;
    gp_sched_ops ops;
    rq **reqs; /* every request held, any state */
    int n_reqs, cap_reqs;
    rq_list waiting; /* FIFO; preempted requests go back to its head */
    rq_list running; /* admission order: the tail is the newest */
    rq **slot;       /* [max_seqs]: the running request of each sequence slot */
    int free_blocks;  /* neither a request's nor the prefix cache's */
    gp_sched_prefix *pc; /* NULL: prefix caching off */
    sched_batch b;   /* the step being built (under PD-mux: its decode rows) */
    int budget_left;
    /* GP_SCHED_PD_MUX: the prefill lane's batch, launched (in flight) or
     * completed with pf_status and not yet committed (pf_done) */
    sched_batch pf;
    gp_batch pf_batch; /* what the lane was handed: valid until it is done */
    bool pf_inflight, pf_done;
    gp_status pf_status;
    gp_sched_event *events;
    int n_events;
    gp_sched_stats stats;
};

void gp_sched_list_unlink(rq_list *l, rq *r);
void gp_sched_list_push_tail(rq_list *l, rq *r);
void gp_sched_list_push_head(rq_list *l, rq *r);
/* Give back r's slot (its sequence reset) and blocks; r leaves the running list. */
void gp_sched_release_slot(gp_sched *s, rq *r);
/* Planning, running and committing batches (sched_step.c), shared by the
 * two-lane step (sched_pd.c). plan_decodes: a decode row of every running
 * request past its prefill; plan_prefills: chunks up to budget_left
 * (whole_only: whole prompts but for the first part); unplan: give a batch's
 * blocks back; commit: its parts ran (sampling where a request's pending
 * tokens end); run: run_batch then commit, or unplan on failure. */
void gp_sched_plan_decodes(gp_sched *s, sched_batch *b);
void gp_sched_plan_prefills(gp_sched *s, sched_batch *b, int whole_only);
void gp_sched_unplan(gp_sched *s, sched_batch *b);
void gp_sched_commit(gp_sched *s, sched_batch *b);
bool gp_sched_wants_logits(const sched_batch *b);
gp_status gp_sched_run(gp_sched *s, sched_batch *b);
/* Preempt the newest running request whose prefill is not on the lane. */
void gp_sched_preempt_newest(gp_sched *s);
/* One GP_SCHED_PD_MUX step (sched_pd.c). */
gp_status gp_sched_step_pd(gp_sched *s);
/* The prefill lane's batch in flight, waited for (GP_SCHED_PD_MUX): its
 * result is kept for the next step to commit. */
void gp_sched_pd_wait(gp_sched *s);
/* Drop cancelled r's part from the completed prefill batch. */
void gp_sched_pd_forget(gp_sched *s, const rq *r);

/* Prefix cache (prefix.c). Every physical block is free, private to one
 * running request, or a cache entry shared by ref >= 0 of them. */
gp_status gp_sched_prefix_create(gp_sched *s);
/* Drops every entry (ops.drop_block), shared or not. */
void gp_sched_prefix_destroy(gp_sched *s);
/* Blocks a request may take: free ones and evictable entries. */
int gp_sched_blocks_avail(const gp_sched *s);
/* n free blocks taken, evicting the least recently used entries first as needed (n <= avail). */
void gp_sched_take_blocks(gp_sched *s, int n);
/* The leading cached full blocks of waiting r's tokens to prefill, leaving
 * one to compute, into pc->match; *lru_hits of them are evictable now. */
int gp_sched_prefix_match(gp_sched *s, const rq *r, int *lru_hits);
/* With a host tier: the blocks after the hit device blocks that the tier
 * holds (pinned until gp_sched_prefix_host_load), at most max. */
int gp_sched_prefix_host_lookup(gp_sched *s, const rq *r, int hit, int max);
/* Running r on seq, holding its hit attached blocks, takes the n looked-up
 * blocks (n = 0: lets the lookup go); GP_OK or the tier's refusal (nothing
 * appended). */
gp_status gp_sched_prefix_host_load(gp_sched *s, rq *r, int hit, int n);
/* Empty sequence seq starts with the n blocks matched: r's first n blocks,
 * computed; GP_OK or the backend's refusal (nothing changed). */
gp_status gp_sched_prefix_attach(gp_sched *s, rq *r, int seq, int n);
/* r's blocks that became full enter the cache (or match an equal entry). */
void gp_sched_prefix_register(gp_sched *s, rq *r);
/* r lets go of its entries (the last block's first onto the LRU list). */
void gp_sched_prefix_release(gp_sched *s, rq *r);
/* Every invariant of the block accounting, the cache and the lists, in
 * O(blocks + requests): GP_ERR_STATE naming the first one broken. For tests. */
gp_status gp_sched_check(const gp_sched *s);

#endif
