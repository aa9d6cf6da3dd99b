/* Reading and resetting a ring's push/pop statistics from outside the two
 * sides (between steps, or live with per-counter consistency only). */
#include "gp_ring_impl.h"

#include <string.h>

/* Relaxed loads throughout: each counter has one writer and is read whole;
 * no ordering between counters is promised while the sides run. */
#define GP_LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void gp_ring_stats_get(const gp_ring *r, gp_ring_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!r)
        return;
    out->pushes = GP_LOAD(r->push_stats.ops);
    out->push_wait_ns = GP_LOAD(r->push_stats.wait_ns);
    out->push_waits = GP_LOAD(r->push_stats.waits);
    out->push_sleeps = GP_LOAD(r->push_stats.sleeps);
    out->occupancy_sum = GP_LOAD(r->push_stats.occ_sum);
    out->occupancy_max = GP_LOAD(r->push_stats.occ_max);
    out->pops = GP_LOAD(r->pop_stats.ops);
    out->pop_wait_ns = GP_LOAD(r->pop_stats.wait_ns);
    out->pop_waits = GP_LOAD(r->pop_stats.waits);
    out->pop_sleeps = GP_LOAD(r->pop_stats.sleeps);
    out->capacity = r->depth - 1;
    for (unsigned i = 0; i < r->depth; i++)
        out->occupancy_hist[i] = GP_LOAD(r->occ_hist[i]);
}

void gp_ring_stats_reset(gp_ring *r)
{
    if (!r)
        return;
    /* Relaxed: the caller's own synchronization with both (idle) sides
     * orders these stores before their next updates. */
    gp_ring_side_stats *sides[2] = { &r->push_stats, &r->pop_stats };
    for (int k = 0; k < 2; k++) {
        atomic_store_explicit(&sides[k]->ops, 0, memory_order_relaxed);
        atomic_store_explicit(&sides[k]->wait_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&sides[k]->waits, 0, memory_order_relaxed);
        atomic_store_explicit(&sides[k]->sleeps, 0, memory_order_relaxed);
        atomic_store_explicit(&sides[k]->occ_sum, 0, memory_order_relaxed);
        atomic_store_explicit(&sides[k]->occ_max, 0, memory_order_relaxed);
    }
    for (unsigned i = 0; i < r->depth; i++)
        atomic_store_explicit(&r->occ_hist[i], 0, memory_order_relaxed);
}
