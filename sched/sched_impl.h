/* The scheduler's private state: requests, the waiting queue, the running
 * list in admission order, sequence slots and the free-block count. */
#ifndef GP_SCHED_IMPL_H
#define GP_SCHED_IMPL_H

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
    rq_state state;
    gp_sched_finish finish;
    int seq;          /* slot while running, else -1 */
    int computed;     /* tokens in its cache */
    int prefill_end;  /* tokens to prefill before it decodes: n_all when (re)admitted */
    int nblk;         /* KV blocks it holds */
    int preemptions;
    struct rq *prev, *next; /* in the waiting queue or the running list */
} rq;

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
    int free_blocks;
    /* the step being built: parts, their requests, blocks each reserved */
    gp_batch_part *parts;
    rq **part_rq;
    int *part_blk;
    int n_parts, budget_left;
    float *logits; /* [max_seqs][vocab] */
    gp_sched_event *events;
    int n_events;
    gp_sched_stats stats;
};

void gp_sched_list_unlink(rq_list *l, rq *r);
void gp_sched_list_push_tail(rq_list *l, rq *r);
void gp_sched_list_push_head(rq_list *l, rq *r);
/* Give back r's slot (its sequence reset) and blocks; r leaves the running list. */
void gp_sched_release_slot(gp_sched *s, rq *r);

#endif
