/* The scheduler's invariants checked whole, for tests: the block accounting
 * (every block free, private to one running request, or a cache entry), the
 * entries' reference counts, the LRU and hash lists, and the lists of
 * requests. O(blocks + requests): never called by a step. */
#include <stdlib.h>

#include "sched_impl.h"

#define BROKEN(...) GP_FAIL(GP_ERR_STATE, "gp_sched_check: " __VA_ARGS__)

static gp_status check_requests(const gp_sched *s, int *private_blocks, int *refs)
{
    int bs = s->cfg.block_size, n_run = 0, n_wait = 0;
    *private_blocks = 0;
    for (int q = 0; q < s->n_reqs; q++) {
        const rq *r = s->reqs[q];
        unsigned long long id = (unsigned long long)r->id;
        n_run += r->state == RQ_RUNNING;
        n_wait += r->state == RQ_WAITING;
        if (r->state != RQ_RUNNING) {
            if (r->seq != -1 || r->nblk || r->n_shared || r->n_hashed)
                BROKEN("request %llu not running holds seq %d, %d blocks (%d shared, %d hashed)", id, r->seq,
                       r->nblk, r->n_shared, r->n_hashed);
            continue;
        }
        if (r->seq < 0 || r->seq >= s->cfg.max_seqs || s->slot[r->seq] != r)
            BROKEN("running request %llu: seq %d is not its slot", id, r->seq);
        if (r->nblk != (r->computed + r->pending + bs - 1) / bs)
            BROKEN("request %llu holds %d blocks for %d tokens (%d of them on the prefill lane) of blocks of %d", id,
                   r->nblk, r->computed + r->pending, r->pending, bs);
        int shared = 0;
        if (r->n_hashed > r->computed / bs)
            BROKEN("request %llu: %d blocks hashed of %d full", id, r->n_hashed, r->computed / bs);
        for (int b = 0; b < r->n_hashed; b++)
            if (r->ent[b] >= 0) {
                if (!s->pc || r->ent[b] >= s->cfg.total_blocks)
                    BROKEN("request %llu: block %d names entry %d", id, b, r->ent[b]);
                refs[r->ent[b]]++;
                shared++;
            }
        if (shared != r->n_shared)
            BROKEN("request %llu shares %d blocks, counts %d", id, shared, r->n_shared);
        *private_blocks += r->nblk - r->n_shared;
    }
    if (n_run != s->running.n || n_wait != s->waiting.n)
        BROKEN("%d running and %d waiting requests, lists of %d and %d", n_run, n_wait, s->running.n,
               s->waiting.n);
    return GP_OK;
}

static gp_status check_cache(const gp_sched *s, const int *refs, int *entries)
{
    const gp_sched_prefix *pc = s->pc;
    int n = 0, lru = 0, unused = 0;
    for (int b = 0; b < pc->n_buckets; b++)
        for (int i = pc->bucket[b]; i >= 0; i = pc->e[i].hnext, n++) {
            const pc_entry *e = &pc->e[i];
            if (n >= s->cfg.total_blocks || (e->key & pc->key_mask & (uint64_t)(pc->n_buckets - 1)) != (uint64_t)b)
                BROKEN("hash bucket %d holds entry %d of another bucket or loops", b, i);
            if (e->ref != refs[i])
                BROKEN("entry %d counts %d references, %d requests share it", i, e->ref, refs[i]);
            unused += e->ref == 0;
        }
    if (n != pc->n_entries)
        BROKEN("%d entries hashed, %d counted", n, pc->n_entries);
    for (int i = pc->lru_head, prev = -1; i >= 0; prev = i, i = pc->e[i].lnext, lru++)
        if (lru >= n || pc->e[i].ref != 0 || pc->e[i].lprev != prev)
            BROKEN("LRU list at entry %d (references %d) is broken", i, pc->e[i].ref);
    if (lru != pc->n_lru || lru != unused)
        BROKEN("%d entries on the LRU list, %d counted, %d unused", lru, pc->n_lru, unused);
    *entries = n;
    return GP_OK;
}

gp_status gp_sched_check(const gp_sched *s)
{
    int *refs = calloc((size_t)s->cfg.total_blocks, sizeof(int));
    if (!refs)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_check: out of host memory");
    int private_blocks = 0, entries = 0;
    gp_status st = check_requests(s, &private_blocks, refs);
    if (st == GP_OK && s->pc)
        st = check_cache(s, refs, &entries);
    free(refs);
    GP_TRY(st);
    if (s->free_blocks < 0 || s->free_blocks + private_blocks + entries != s->cfg.total_blocks)
        BROKEN("%d free + %d private + %d cached blocks != %d in all", s->free_blocks, private_blocks, entries,
               s->cfg.total_blocks);
    return GP_OK;
}
