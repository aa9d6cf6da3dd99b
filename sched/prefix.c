/* Automatic prefix caching (vLLM v1's design): full KV blocks of running and
 * finished requests kept by a hash chain of their tokens, shared by
 * reference counts, attached to requests whose prompts start with them, and
 * evicted least recently used first when a block is needed. */
#include <stdlib.h>
#include <string.h>

#include "gp_kvstore.h"
#include "sched_impl.h"

static int blocks_for(const gp_sched *s, int len)
{
    return (len + s->cfg.block_size - 1) / s->cfg.block_size;
}

gp_status gp_sched_prefix_create(gp_sched *s)
{
    int total = s->cfg.total_blocks, bs = s->cfg.block_size, most = blocks_for(s, s->cfg.max_context);
    gp_sched_prefix *pc = calloc(1, sizeof(*pc));
    if (!pc)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_create: out of host memory for the prefix cache");
    s->pc = pc;
    pc->n_buckets = 1;
    while (pc->n_buckets < 2 * total)
        pc->n_buckets *= 2;
    pc->e = malloc(sizeof(*pc->e) * (size_t)total);
    pc->tokens = malloc(sizeof(int32_t) * (size_t)total * (size_t)bs);
    pc->bucket = malloc(sizeof(int) * (size_t)pc->n_buckets);
    pc->match = malloc(sizeof(int) * (size_t)most);
    pc->handles = malloc(sizeof(int) * (size_t)most);
    pc->keys = malloc(sizeof(uint64_t) * (size_t)most);
    if (!pc->e || !pc->tokens || !pc->bucket || !pc->match || !pc->handles || !pc->keys)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_create: out of host memory for a prefix cache of %d blocks of %d "
                "tokens", total, bs);
    for (int i = 0; i < pc->n_buckets; i++)
        pc->bucket[i] = -1;
    for (int i = 0; i < total; i++)
        pc->e[i].hnext = i + 1 < total ? i + 1 : -1;
    pc->free_head = 0;
    pc->lru_head = pc->lru_tail = -1;
    pc->next_serial = 1;
    pc->key_mask = ~0ull;
    return GP_OK;
}

static int *bucket_of(gp_sched_prefix *pc, uint64_t key)
{
    return &pc->bucket[key & pc->key_mask & (uint64_t)(pc->n_buckets - 1)];
}

static void lru_unlink(gp_sched_prefix *pc, int i)
{
    pc_entry *e = &pc->e[i];
    if (e->lprev >= 0)
        pc->e[e->lprev].lnext = e->lnext;
    else
        pc->lru_head = e->lnext;
    if (e->lnext >= 0)
        pc->e[e->lnext].lprev = e->lprev;
    else
        pc->lru_tail = e->lprev;
    pc->n_lru--;
}

static void lru_push_tail(gp_sched_prefix *pc, int i)
{
    pc_entry *e = &pc->e[i];
    e->lnext = -1;
    e->lprev = pc->lru_tail;
    if (pc->lru_tail >= 0)
        pc->e[pc->lru_tail].lnext = i;
    else
        pc->lru_head = i;
    pc->lru_tail = i;
    pc->n_lru++;
}

/* The least recently used entry leaves the cache (into the host tier, when
 * there is one); its block is free. */
static void evict(gp_sched *s)
{
    gp_sched_prefix *pc = s->pc;
    int i = pc->lru_head;
    lru_unlink(pc, i);
    if (s->ops.host_offload) {
        if (s->ops.host_offload(s->ops.ctx, pc->e[i].handle, pc->e[i].key,
                                pc->tokens + (size_t)i * (size_t)s->cfg.block_size) == GP_OK)
            s->stats.host_offloaded_blocks++;
        else
            s->stats.host_offload_failures++;
    }
    int *p = bucket_of(pc, pc->e[i].key);
    while (*p != i)
        p = &pc->e[*p].hnext;
    *p = pc->e[i].hnext;
    s->ops.drop_block(s->ops.ctx, pc->e[i].handle);
    pc->e[i].hnext = pc->free_head;
    pc->free_head = i;
    pc->n_entries--;
    s->free_blocks++;
}

void gp_sched_prefix_destroy(gp_sched *s)
{
    gp_sched_prefix *pc = s->pc;
    if (!pc)
        return;
    if (pc->n_entries) /* set only once every table is built */
        for (int b = 0; b < pc->n_buckets; b++)
            for (int i = pc->bucket[b]; i >= 0; i = pc->e[i].hnext)
                s->ops.drop_block(s->ops.ctx, pc->e[i].handle);
    free(pc->e);
    free(pc->tokens);
    free(pc->bucket);
    free(pc->match);
    free(pc->handles);
    free(pc->keys);
    free(pc);
    s->pc = NULL;
}

int gp_sched_blocks_avail(const gp_sched *s)
{
    return s->free_blocks + (s->pc ? s->pc->n_lru : 0);
}

void gp_sched_take_blocks(gp_sched *s, int n)
{
    while (s->free_blocks < n)
        evict(s);
    s->free_blocks -= n;
}

void gp_sched_evict_cached(gp_sched *s)
{
    while (s && s->pc && s->pc->n_lru)
        evict(s);
}

static const int32_t *tokens_of(const gp_sched_prefix *pc, int i, int bs)
{
    return pc->tokens + (size_t)i * (size_t)bs;
}

static uint64_t chain_key(const gp_sched *s, uint64_t parent_key, const int32_t *t)
{
    return gp_kvstore_next_key(parent_key, t, s->cfg.block_size);
}

/* The entry of a block with these tokens after the parent entry; a key
 * shared by other tokens or another chain is a miss. */
static int find(const gp_sched *s, uint64_t key, uint64_t parent, const int32_t *t)
{
    gp_sched_prefix *pc = s->pc;
    int bs = s->cfg.block_size;
    for (int i = *bucket_of(pc, key); i >= 0; i = pc->e[i].hnext)
        if (((pc->e[i].key ^ key) & pc->key_mask) == 0 && pc->e[i].parent == parent &&
            memcmp(tokens_of(pc, i, bs), t, sizeof(int32_t) * (size_t)bs) == 0)
            return i;
    return -1;
}

int gp_sched_prefix_match(gp_sched *s, const rq *r, int *lru_hits)
{
    gp_sched_prefix *pc = s->pc;
    int bs = s->cfg.block_size, most = (r->prefill_end - 1) / bs, n = 0;
    uint64_t key = s->cfg.chain_seed, serial = 0;
    *lru_hits = 0;
    for (; n < most; n++) {
        const int32_t *t = r->all + (size_t)n * (size_t)bs;
        key = chain_key(s, key, t);
        int i = find(s, key, serial, t);
        if (i < 0)
            break;
        pc->match[n] = i;
        serial = pc->e[i].serial;
        *lru_hits += pc->e[i].ref == 0;
    }
    return n;
}

int gp_sched_prefix_host_lookup(gp_sched *s, const rq *r, int hit, int max)
{
    gp_sched_prefix *pc = s->pc;
    int bs = s->cfg.block_size, most = (r->prefill_end - 1) / bs - hit, held = 0;
    if (most > max)
        most = max;
    if (most <= 0)
        return 0;
    uint64_t key = hit > 0 ? pc->e[pc->match[hit - 1]].key : s->cfg.chain_seed;
    for (int k = 0; k < most; k++)
        pc->keys[k] = key = chain_key(s, key, r->all + (size_t)(hit + k) * (size_t)bs);
    if (s->ops.host_lookup(s->ops.ctx, pc->keys, r->all + (size_t)hit * (size_t)bs, most, &held) != GP_OK)
        return 0; /* a tier that cannot look is a miss */
    return held < 0 ? 0 : held > most ? most : held;
}

gp_status gp_sched_prefix_host_load(gp_sched *s, rq *r, int hit, int n)
{
    GP_TRY(s->ops.host_load(s->ops.ctx, r->seq, n));
    r->nblk = hit + n;
    r->computed = (hit + n) * s->cfg.block_size;
    return GP_OK;
}

gp_status gp_sched_prefix_attach(gp_sched *s, rq *r, int seq, int n)
{
    gp_sched_prefix *pc = s->pc;
    for (int k = 0; k < n; k++)
        pc->handles[k] = pc->e[pc->match[k]].handle;
    GP_TRY(s->ops.attach_blocks(s->ops.ctx, seq, pc->handles, n));
    for (int k = 0; k < n; k++) {
        pc_entry *e = &pc->e[pc->match[k]];
        if (e->ref++ == 0)
            lru_unlink(pc, pc->match[k]);
        r->ent[k] = pc->match[k];
    }
    const pc_entry *last = &pc->e[pc->match[n - 1]];
    r->tail_key = last->key;
    r->tail_serial = last->serial;
    r->n_hashed = r->n_shared = r->nblk = n;
    r->computed = n * s->cfg.block_size;
    return GP_OK;
}

void gp_sched_prefix_register(gp_sched *s, rq *r)
{
    gp_sched_prefix *pc = s->pc;
    int bs = s->cfg.block_size;
    if (r->uncached)
        return;
    if (r->n_hashed == 0)
        r->tail_key = s->cfg.chain_seed, r->tail_serial = 0;
    for (; r->n_hashed < r->computed / bs; r->n_hashed++) {
        int b = r->n_hashed;
        const int32_t *t = r->all + (size_t)b * (size_t)bs;
        uint64_t key = chain_key(s, r->tail_key, t);
        int i = find(s, key, r->tail_serial, t);
        r->ent[b] = -1;
        if (i < 0) { /* a new entry: this block moves from private to the cache */
            int handle;
            if (s->ops.retain_block(s->ops.ctx, r->seq, b, &handle) != GP_OK) {
                r->uncached = true;
                return;
            }
            i = pc->free_head;
            pc->free_head = pc->e[i].hnext;
            pc->e[i] = (pc_entry){.key = key, .serial = pc->next_serial++, .parent = r->tail_serial,
                                  .handle = handle, .ref = 1, .lprev = -1, .lnext = -1};
            memcpy(pc->tokens + (size_t)i * (size_t)bs, t, sizeof(int32_t) * (size_t)bs);
            int *head = bucket_of(pc, key);
            pc->e[i].hnext = *head;
            *head = i;
            pc->n_entries++;
            r->ent[b] = i;
            r->n_shared++;
        }
        r->tail_key = key;
        r->tail_serial = pc->e[i].serial;
    }
}

void gp_sched_prefix_release(gp_sched *s, rq *r)
{
    gp_sched_prefix *pc = s->pc;
    /* Last block first: a chain's tail is evicted before the blocks that
     * lead to it, which are worth more (more prompts start with them). */
    for (int b = r->n_hashed - 1; b >= 0; b--)
        if (r->ent[b] >= 0 && --pc->e[r->ent[b]].ref == 0)
            lru_push_tail(pc, r->ent[b]);
    r->n_hashed = r->n_shared = 0;
    r->uncached = false;
}
