/* Layout of gp_ring, shared by the queues sources and the white-box tests that
 * move ck_ring's counters (private: the pipeline uses gp_queues.h only). */
#ifndef GP_RING_IMPL_H
#define GP_RING_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "gp_queues.h"
#include "gp_ring_ck.h"

#define GP_CACHELINE 64

/* A slot is padded to a whole cache line so the producer filling slot k and
 * the consumer copying slot k-1 do not share a line. */
typedef struct gp_ring_slot {
    _Alignas(GP_CACHELINE) gp_payload p;
} gp_ring_slot;

/* A sleeping side's futex word and its "I am about to sleep" flag. The other
 * side reads `waiting` after every push/pop, the owner writes it only on the
 * slow path, so the line stays shared and cheap. */
typedef struct gp_ring_waiter {
    _Alignas(GP_CACHELINE) _Atomic uint32_t seq; /* futex word: bumped by every wake */
    _Atomic uint32_t waiting;                    /* 1 while the owner may be asleep on seq */
} gp_ring_waiter;

/* Counters written by one side only: plain read-modify-write through relaxed
 * atomic loads/stores (no lock prefix), so gp_ring_stats_get may read them
 * from any thread without a data race. */
typedef struct gp_ring_side_stats {
    _Alignas(GP_CACHELINE) _Atomic uint64_t ops;
    _Atomic uint64_t wait_ns;
    _Atomic uint64_t waits;
    _Atomic uint64_t sleeps;
    _Atomic uint64_t occ_sum; /* producer side only */
    _Atomic unsigned occ_max; /* producer side only */
} gp_ring_side_stats;

struct gp_ring {
    ck_ring_t ck;         /* c_head and p_tail/p_head on their own lines (ck pads them) */
    gp_ring_slot *slots;  /* [depth] */
    _Atomic uint64_t *occ_hist; /* [depth]: index = occupancy found, 0..capacity */
    unsigned depth;       /* power of two; capacity depth - 1 */
    unsigned spin;
    _Atomic int closed;   /* set once by gp_ring_close, cleared by gp_ring_reopen */
    gp_ring_waiter cons_wait;  /* consumer sleeps here on an empty ring */
    gp_ring_waiter prod_wait;  /* producer sleeps here on a full ring */
    gp_ring_side_stats push_stats; /* written by the producer */
    gp_ring_side_stats pop_stats;  /* written by the consumer */
};

/* Single-writer increment: the owner is the only writer, so load + store is
 * enough and readers never see a torn value. */
static inline void gp_ring_stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

/* One attempt each way; `occ` gets the occupancy the producer found. Also
 * wake the other side when it sleeps. Defined in ring.c, used by ring_wait.c. */
gp_status gp_ring_push_once(gp_ring *r, const gp_payload *p, unsigned *occ);
gp_status gp_ring_pop_once(gp_ring *r, gp_payload *p);
void gp_ring_record_push(gp_ring *r, unsigned occ);
void gp_ring_wake(gp_ring_waiter *w, int all);

#endif
