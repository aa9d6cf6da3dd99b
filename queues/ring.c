/* gp_ring lifetime, the non-blocking push/pop over ck_ring's SPSC typed ring,
 * and close/reopen. The blocking paths are in ring_wait.c. */
#include "gp_ring_impl.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ck_ring_*_spsc_gp_slot: payloads are stored by value in the slot array. */
CK_RING_PROTOTYPE(gp_slot, gp_ring_slot)

gp_ring_params gp_ring_default_params(void)
{
    gp_ring_params p = { GP_RING_DEFAULT_DEPTH, GP_RING_DEFAULT_SPIN };
    return p;
}

static gp_status gp_ring_check_params(const gp_ring_params *p)
{
    unsigned d = p->depth;
    if (d < GP_RING_MIN_DEPTH || d > GP_RING_MAX_DEPTH || (d & (d - 1)) != 0)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "gp_ring: depth %u is not allowed: the depth must be a power of two from %u to %u "
                "(a ring of depth d holds d - 1 payloads)",
                d, GP_RING_MIN_DEPTH, GP_RING_MAX_DEPTH);
    if (p->spin > GP_RING_MAX_SPIN)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring: spin %u is not allowed: at most %u retries before sleeping",
                p->spin, GP_RING_MAX_SPIN);
    return GP_OK;
}

gp_status gp_ring_create(const gp_ring_params *p, gp_ring **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_create: out is NULL");
    *out = NULL;
    gp_ring_params prm = p ? *p : gp_ring_default_params();
    GP_TRY(gp_ring_check_params(&prm));

    /* sizeof is a multiple of the 64-byte alignment, as aligned_alloc wants. */
    gp_ring *r = aligned_alloc(GP_CACHELINE, sizeof *r);
    if (!r)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_ring_create: out of memory");
    memset(r, 0, sizeof *r);
    r->slots = aligned_alloc(GP_CACHELINE, (size_t)prm.depth * sizeof *r->slots);
    r->occ_hist = calloc(prm.depth, sizeof *r->occ_hist);
    if (!r->slots || !r->occ_hist) {
        gp_ring_destroy(r);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_ring_create: out of memory for %u slots", prm.depth);
    }
    memset(r->slots, 0, (size_t)prm.depth * sizeof *r->slots);
    r->depth = prm.depth;
    r->spin = prm.spin;
    ck_ring_init(&r->ck, prm.depth);
    /* The handle reaches the producer and consumer threads through whatever
     * starts them (pthread_create, a queue), which orders these plain stores. */
    *out = r;
    return GP_OK;
}

void gp_ring_destroy(gp_ring *r)
{
    if (!r)
        return;
    free(r->slots);
    free(r->occ_hist);
    free(r);
}

unsigned gp_ring_capacity(const gp_ring *r) { return r ? r->depth - 1 : 0; }
unsigned gp_ring_depth(const gp_ring *r) { return r ? r->depth : 0; }
unsigned gp_ring_size(const gp_ring *r) { return r ? ck_ring_size(&r->ck) : 0; }

gp_status gp_ring_push_once(gp_ring *r, const gp_payload *p, unsigned *occ)
{
    /* Acquire pairs with the release in gp_ring_close. A push that read 0 here
     * and races with a close still lands, ordered before the close; when the
     * producer itself closes after its last push, the consumer drains it all. */
    if (atomic_load_explicit(&r->closed, memory_order_acquire))
        return GP_ERR_STATE;
    /* ck: reserve loads c_head, which the consumer stores only after copying
     * the slot out (ck's fence_store before that store), so the slot we get is
     * no longer being read. *occ = items in the ring as we found it. */
    gp_ring_slot *s = ck_ring_enqueue_reserve_spsc_size_gp_slot(&r->ck, r->slots, occ);
    if (!s)
        return GP_SOFT_FULL;
    s->p = *p;
    /* ck: fence_store, then store p_tail + 1: the slot's contents are visible
     * before the consumer can see the new p_tail (release). */
    ck_ring_enqueue_commit_spsc(&r->ck);
    /* StoreLoad: the p_tail store must be visible before we read the
     * consumer's waiting flag. Pairs with the fence in the consumer's sleep
     * path (store waiting, fence, re-read p_tail): with both fences at least
     * one side sees the other, so the consumer never sleeps on a payload. */
    ck_pr_fence_memory();
    if (atomic_load_explicit(&r->cons_wait.waiting, memory_order_relaxed))
        gp_ring_wake(&r->cons_wait, 0);
    return GP_OK;
}

gp_status gp_ring_pop_once(gp_ring *r, gp_payload *p)
{
    /* Read closed before the ring. Acquire pairs with the release in
     * gp_ring_close: if the producer closed after its last push, that push's
     * p_tail store is visible to the dequeue below, so "closed and empty"
     * really means drained. */
    int closed = atomic_load_explicit(&r->closed, memory_order_acquire);
    gp_ring_slot tmp;
    /* ck: load p_tail, fence_load, copy the slot, fence_store, store c_head
     * + 1: the copy completes before the producer may reuse the slot. */
    if (!ck_ring_dequeue_spsc_gp_slot(&r->ck, r->slots, &tmp))
        return closed ? GP_ERR_STATE : GP_SOFT_EMPTY;
    *p = tmp.p;
    /* StoreLoad: the c_head store before reading the producer's waiting flag;
     * pairs with the fence in the producer's sleep path (see push_once). */
    ck_pr_fence_memory();
    if (atomic_load_explicit(&r->prod_wait.waiting, memory_order_relaxed))
        gp_ring_wake(&r->prod_wait, 0);
    return GP_OK;
}

void gp_ring_record_push(gp_ring *r, unsigned occ)
{
    gp_ring_side_stats *st = &r->push_stats;
    assert(occ < r->depth); /* ck reports at most depth - 1 */
    gp_ring_stat_add(&st->ops, 1);
    gp_ring_stat_add(&st->occ_sum, occ);
    gp_ring_stat_add(&r->occ_hist[occ], 1);
    if (occ > atomic_load_explicit(&st->occ_max, memory_order_relaxed))
        atomic_store_explicit(&st->occ_max, occ, memory_order_relaxed);
}

gp_status gp_ring_try_push(gp_ring *r, const gp_payload *p)
{
    if (!r || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_try_push: %s is NULL", r ? "payload" : "ring");
    unsigned occ;
    gp_status s = gp_ring_push_once(r, p, &occ);
    if (s == GP_OK)
        gp_ring_record_push(r, occ);
    return s;
}

gp_status gp_ring_try_pop(gp_ring *r, gp_payload *p)
{
    if (!r || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_try_pop: %s is NULL", r ? "payload" : "ring");
    gp_status s = gp_ring_pop_once(r, p);
    if (s == GP_OK)
        gp_ring_stat_add(&r->pop_stats.ops, 1);
    return s;
}

void gp_ring_close(gp_ring *r)
{
    if (!r)
        return;
    /* Release: everything the closing thread did (the producer's last push)
     * is visible to a side that reads closed == 1 (acquire in *_once). */
    atomic_store_explicit(&r->closed, 1, memory_order_release);
    /* Wake unconditionally, not only when a waiting flag is set: the bump
     * changes each futex word, so a side that read the old word before
     * re-checking closed cannot go to sleep on it (see ring_wait.c). */
    gp_ring_wake(&r->cons_wait, 1);
    gp_ring_wake(&r->prod_wait, 1);
}

int gp_ring_is_closed(const gp_ring *r)
{
    /* Acquire, like the *_once checks: a caller that sees 1 also sees what
     * the closer did before closing. */
    return r ? atomic_load_explicit(&r->closed, memory_order_acquire) : 1;
}

void gp_ring_reopen(gp_ring *r)
{
    if (!r)
        return;
    /* Quiescent by contract: the caller's join/barrier orders these stores
     * with both sides' next calls, so relaxed stores and ck's plain init do. */
    ck_ring_init(&r->ck, r->depth);
    atomic_store_explicit(&r->cons_wait.waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&r->prod_wait.waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&r->closed, 0, memory_order_relaxed);
}

uint64_t gp_payload_bytes(const gp_payload *p)
{
    return gp_view_bytes(&p->x) + gp_view_bytes(&p->resid);
}
