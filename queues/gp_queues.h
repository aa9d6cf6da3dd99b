/* Per-layer single-producer single-consumer rings that carry a payload record
 * from each attention stage to its FFN stage, with wait and occupancy stats. */
#ifndef GP_QUEUES_H
#define GP_QUEUES_H

#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One micro-batch handed from the attention stage (producer) to the FFN stage
 * (consumer) of one layer: the views of the data that crosses, and the event
 * that makes it ready. The consumer reads exactly these views (and owns
 * nothing else of the producer's). The ring copies the record by value; the
 * memory and the event stay owned by the executor. */
typedef struct gp_payload {
    int32_t tok_begin;    /* first batch row of the micro-batch */
    int32_t tok_count;    /* rows in the micro-batch */
    int32_t layer;        /* layer index */
    int32_t micro;        /* micro-batch index */
    gp_tensor_view x;     /* activation rows the consumer reads (the attention output), or empty */
    gp_tensor_view resid; /* residual rows the consumer reads and adds into, or empty */
    void *event;          /* cudaEvent_t recorded when the producer's stage finished; NULL when the
                             stage finished inside the call (CPU executor) */
    uint64_t seq;         /* sequence number set by the producer, for validation */
} gp_payload;

/* Bytes that cross from producer to consumer: the payload's views. */
uint64_t gp_payload_bytes(const gp_payload *p);

/* Depth and capacity. A ring has `depth` slots (ck_ring's size), and like every
 * ck_ring it keeps one slot free to tell full from empty, so it holds at most
 * depth - 1 payloads: gp_ring_capacity() == depth - 1. The depth must be a power
 * of two from GP_RING_MIN_DEPTH to GP_RING_MAX_DEPTH (capacity 1 to 4095); the
 * default depth 4 lets the producer run up to 3 micro-batches ahead. */
#define GP_RING_MIN_DEPTH 2u
#define GP_RING_MAX_DEPTH 4096u
#define GP_RING_DEFAULT_DEPTH 4u
/* Retries (each one ck_pr_stall, a `pause` on x86-64, and one attempt) before
 * a blocked side sleeps: 0.1-0.2 ms measured on an AMD EPYC host. */
#define GP_RING_DEFAULT_SPIN 4096u
#define GP_RING_MAX_SPIN (1u << 24)

typedef struct gp_ring_params {
    unsigned depth; /* slots, a power of two in [2, 4096]; capacity is depth - 1 */
    unsigned spin;  /* failed retries spun before sleeping; 0 sleeps at once; at most GP_RING_MAX_SPIN */
} gp_ring_params;

typedef struct gp_ring gp_ring;

gp_ring_params gp_ring_default_params(void); /* depth 4, spin GP_RING_DEFAULT_SPIN */

/* p may be NULL for the defaults. A bad depth or spin gives GP_ERR_INVALID_ARG
 * and gp_last_error() names the value and what is allowed. */
gp_status gp_ring_create(const gp_ring_params *p, gp_ring **out);
void gp_ring_destroy(gp_ring *r); /* NULL is ignored; no thread may be inside a call on r */
unsigned gp_ring_capacity(const gp_ring *r); /* depth - 1 */
unsigned gp_ring_depth(const gp_ring *r);
/* Payloads in the ring now; exact only when neither side is running. */
unsigned gp_ring_size(const gp_ring *r);

/* Roles: at any time at most one thread pushes and at most one thread pops.
 * The threads may change between steps if the change is synchronized (e.g. a
 * join or a barrier).
 *
 * try_push: GP_OK, GP_SOFT_FULL when the ring holds capacity payloads,
 * GP_ERR_STATE once the ring is closed.
 * try_pop: GP_OK, GP_SOFT_EMPTY when empty, GP_ERR_STATE when closed and empty.
 * push/pop block instead of returning the soft status: a bounded spin, then a
 * futex sleep until the other side makes room / publishes a payload, or until
 * the ring is closed. Payloads pushed before the close are still popped; pop
 * returns GP_ERR_STATE only once the ring is closed and drained, push returns
 * GP_ERR_STATE as soon as the ring is closed. */
gp_status gp_ring_try_push(gp_ring *r, const gp_payload *p);
gp_status gp_ring_try_pop(gp_ring *r, gp_payload *p);
gp_status gp_ring_push(gp_ring *r, const gp_payload *p);
gp_status gp_ring_pop(gp_ring *r, gp_payload *p);

/* Close from any thread (the producer when it is done or failed, the consumer
 * when it failed): wakes a blocked producer and a blocked consumer. Idempotent.
 * Closed by the producer after its last push, the consumer pops everything and
 * then gets GP_ERR_STATE. Closed by another thread while a push is under way,
 * that push may still return GP_OK after the consumer has already seen
 * "closed and empty": a failure path, where the payload is abandoned anyway. */
void gp_ring_close(gp_ring *r);
int gp_ring_is_closed(const gp_ring *r);
/* Only when both sides are quiescent (neither inside a call on r, and their
 * last calls synchronized with this thread): discards queued payloads, clears
 * closed, keeps the statistics. */
void gp_ring_reopen(gp_ring *r);

/* Occupancy is what the producer found when a push arrived, before any wait:
 * 0..capacity, and a push that found the ring full counts as capacity. Waits
 * are counted for calls that did not succeed at their first attempt, and last
 * from that first failure until the call returns (including a pop or push that
 * ends with GP_ERR_STATE); a sleep is one futex wait. */
typedef struct gp_ring_stats {
    uint64_t pushes, pops;               /* successful calls, blocking and try_ */
    uint64_t push_wait_ns, pop_wait_ns;  /* time blocked (spinning or sleeping), CLOCK_MONOTONIC */
    uint64_t push_waits, pop_waits;      /* blocking calls that had to wait at all */
    uint64_t push_sleeps, pop_sleeps;    /* futex sleeps (a wait may sleep several times) */
    uint64_t occupancy_sum;              /* sum over pushes of the occupancy found */
    unsigned occupancy_max;              /* largest occupancy found */
    unsigned capacity;                   /* the ring's capacity, so readers size the histogram */
    uint64_t occupancy_hist[GP_RING_MAX_DEPTH + 1]; /* [occupancy] pushes; entries past capacity stay 0 */
} gp_ring_stats;

/* Every counter is read with a relaxed atomic load, so this is safe from any
 * thread at any time and no counter is torn; the counters agree with each
 * other (pushes == sum of the histogram, ...) only when both sides are idle,
 * e.g. between steps. */
void gp_ring_stats_get(const gp_ring *r, gp_ring_stats *out);
/* Only while both sides are idle; a concurrent push or pop may lose its update. */
void gp_ring_stats_reset(gp_ring *r);

/* A set of n per-layer rings with the same params. */
typedef struct gp_ring_set gp_ring_set;
gp_status gp_ring_set_create(int n_rings, const gp_ring_params *p, gp_ring_set **out);
void gp_ring_set_destroy(gp_ring_set *s);
gp_ring *gp_ring_set_get(gp_ring_set *s, int i); /* NULL (and an error text) when i is out of range */
int gp_ring_set_count(const gp_ring_set *s);
void gp_ring_set_close(gp_ring_set *s);
void gp_ring_set_reopen(gp_ring_set *s); /* gp_ring_reopen on each; same quiescence rule */

#ifdef __cplusplus
}
#endif
#endif
