/* The host tier behind a scheduler's prefix cache: evicted blocks gathered
 * into the store, stored blocks appended to admitted sequences and
 * reloaded layer by layer with the next batch, one lag-2 reload for every
 * load waiting, as a provider on the KV memory's hooks. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_prefix_impl.h"

/* The store's blocks must be the cache's for a block to move between them. */
static gp_status tier_of(gp_engine *e, const char *what, gp_engine_prefix **out)
{
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "host tier %s: engine is NULL", what);
    if (!e->px)
        GP_FAIL(GP_ERR_STATE, "host tier %s: stored prefixes are off for this engine (--kv-store-size)", what);
    if (e->km->offload)
        GP_FAIL(GP_ERR_UNSUPPORTED, "host tier %s: the KV cache is offloaded; the tier moves blocks of a resident "
                "cache", what);
    if (e->px->p.block_tokens != e->p.block_size)
        GP_FAIL(GP_ERR_STATE, "host tier %s: stored blocks of %d tokens, KV blocks of %d; a block moves between "
                "the cache and the store only when they are equal", what, e->px->p.block_tokens, e->p.block_size);
    *out = e->px;
    return GP_OK;
}

/* Loads a batch enqueued let their pins go once their copies completed (at
 * the batch's end, or at the next call after a batch that failed). */
static gp_status settle(gp_engine_prefix *px)
{
    gp_prefix_tier *t = &px->tier;
    if (!t->enqueued)
        return GP_OK;
    GP_TRY(gp_device_event_wait(px->ev_done, "the host tier's reload"));
    gp_status st = gp_kvstore_release(px->store, t->keys, t->n_blocks);
    t->n_blocks = t->n_segs = 0;
    t->enqueued = false;
    return st;
}

static void release_looked(gp_engine_prefix *px, int from)
{
    gp_prefix_tier *t = &px->tier;
    if (t->n_looked > from)
        (void)gp_kvstore_release(px->store, t->looked + from, t->n_looked - from); /* pinned by the lookup */
    t->n_looked = 0;
}

uint64_t gp_engine_host_seed(const gp_engine *e)
{
    if (!e || !e->px)
        return 0;
    gp_kvstore_identity id = gp_engine_prefix_identity(e, e->px->model, e->px->p.block_tokens);
    return gp_kvstore_seed(&id);
}

typedef struct offload_fill {
    gp_engine *e;
    int block;
} offload_fill;

/* The block straight into the store's pinned slot: one strided copy. */
static gp_status fill_block(void *ctx, void *dst)
{
    offload_fill *f = ctx;
    gp_engine_prefix *px = f->e->px;
    GP_TRY(gp_kv_device_copy_block_out(f->e->kv, f->block, dst, px->write));
    GP_CUDA_TRY(cudaEventRecord(px->ev_stored[0], px->write));
    return gp_device_event_wait(px->ev_stored[0], "a block offloaded to the host tier");
}

gp_status gp_engine_host_offload(gp_engine *e, int handle, uint64_t key, const int32_t *tokens)
{
    gp_engine_prefix *px;
    GP_TRY(tier_of(e, "offload", &px));
    if (!tokens)
        GP_FAIL(GP_ERR_INVALID_ARG, "host tier offload of block %d: its tokens are NULL", handle);
    GP_TRY(settle(px));
    /* after whatever the compute stream still does with the block */
    GP_CUDA_TRY(cudaEventRecord(px->ev_start, e->lane.stream));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->write, px->ev_start, 0));
    offload_fill f = {.e = e, .block = handle};
    gp_status st = gp_kvstore_put_with(px->store, key, tokens, fill_block, &f);
    if (st != GP_OK && st != GP_SOFT_FULL)
        cudaStreamSynchronize(px->write);
    return st;
}

gp_status gp_engine_host_lookup(gp_engine *e, const uint64_t *keys, const int32_t *tokens, int n, int *held)
{
    gp_engine_prefix *px;
    GP_TRY(tier_of(e, "lookup", &px));
    if (!held || n < 0 || (n > 0 && (!keys || !tokens)))
        GP_FAIL(GP_ERR_INVALID_ARG, "host tier lookup of %d blocks: allowed n >= 0 with its keys, tokens and a "
                "count to fill", n);
    *held = 0;
    GP_TRY(settle(px));
    release_looked(px, 0);
    gp_prefix_tier *t = &px->tier;
    int room = px->max_prefix_blocks - t->n_blocks; /* one batch's reload stages at most this many */
    if (n > room)
        n = room;
    if (n <= 0)
        return GP_OK;
    int m = 0;
    GP_TRY(gp_kvstore_match(px->store, keys, tokens, n, &m));
    memcpy(t->looked, keys, sizeof *keys * (size_t)m);
    t->n_looked = m;
    *held = m;
    return GP_OK;
}

/* The provider's self is the tier, not px, so that it detaches apart from
 * a prompt's reload (gp_engine_prefill_prefix), whose self is px. */
static gp_engine_prefix *px_of(gp_prefix_tier *t)
{
    return (gp_engine_prefix *)((char *)t - offsetof(gp_engine_prefix, tier));
}

static gp_status reload_begin(void *self, const gp_kv_plan *plan, cudaStream_t s);
static gp_status reload_before_attn(void *self, int layer, cudaStream_t s);
static gp_status reload_end(void *self, cudaStream_t s);
static const gp_kv_hook_ops tier_hooks = {
    .begin_batch = reload_begin, .before_attn = reload_before_attn, .end_batch = reload_end};

static gp_status append(gp_engine *e, gp_engine_prefix *px, int seq, int n)
{
    gp_prefix_tier *t = &px->tier;
    const int bt = px->p.block_tokens, len = gp_kv_len(e->tables, seq);
    if (len % bt != 0)
        GP_FAIL(GP_ERR_STATE, "host tier load into sequence %d: it holds %d tokens, not whole blocks of %d", seq,
                len, bt);
    if (len + n * bt >= e->p.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "host tier load of %d blocks into sequence %d of %d tokens: past max_context "
                "%d less the token left to compute", n, seq, len, e->p.max_context);
    for (int i = 0; i < n; i++) /* pinned: present */
        GP_TRY(gp_kvstore_get(px->store, t->looked[i], &t->payloads[t->n_blocks + i]));
    if (!t->hooked) {
        GP_TRY(gp_kv_memory_attach(e->km, &tier_hooks, t));
        t->hooked = true;
    }
    GP_TRY(gp_engine_kv_reserve(e, seq, n * bt));
    GP_TRY(gp_engine_kv_advance(e, seq, n * bt));
    memcpy(t->keys + t->n_blocks, t->looked, sizeof *t->keys * (size_t)n);
    t->n_blocks += n;
    t->segs[t->n_segs++] = (gp_prefix_reload_seg){.seq = seq, .pos0 = len, .n_tokens = n * bt};
    return GP_OK;
}

gp_status gp_engine_host_load(gp_engine *e, int seq, int n)
{
    gp_engine_prefix *px;
    GP_TRY(tier_of(e, "load", &px));
    gp_prefix_tier *t = &px->tier;
    gp_status st = settle(px);
    if (st == GP_OK && (n < 0 || n > t->n_looked || (n > 0 && (seq < 0 || seq >= e->p.max_batch)))) {
        gp_set_error("host tier load of %d blocks into sequence %d: allowed 0..%d blocks (the last lookup's) into "
                     "a sequence in [0, %d)", n, seq, t->n_looked, e->p.max_batch);
        st = GP_ERR_INVALID_ARG;
    }
    for (int i = 0; st == GP_OK && n > 0 && i < t->n_segs; i++)
        if (t->segs[i].seq == seq) {
            gp_set_error("host tier load into sequence %d: a load into it still waits for its batch", seq);
            st = GP_ERR_STATE;
        }
    int kept = 0;
    if (st == GP_OK && n > 0 && (st = append(e, px, seq, n)) == GP_OK)
        kept = n;
    release_looked(px, kept); /* whatever happened, the lookup's other pins go */
    return st;
}

/* Its pending loads go: the sequence is emptied before the batch ran them.
 * Enqueued ones settle first (their copies still read their pins). */
void gp_engine_host_forget_seq(gp_engine *e, int seq)
{
    gp_prefix_tier *t = e->px ? &e->px->tier : NULL;
    if (!t || t->n_segs == 0)
        return;
    if (t->enqueued) {
        (void)settle(e->px);
        return;
    }
    int b = 0, w = 0, wb = 0;
    for (int i = 0; i < t->n_segs; i++) {
        int nb = t->segs[i].n_tokens / e->px->p.block_tokens;
        if (t->segs[i].seq == seq)
            (void)gp_kvstore_release(e->px->store, t->keys + b, nb);
        else {
            memmove(t->keys + wb, t->keys + b, sizeof *t->keys * (size_t)nb);
            memmove(t->payloads + wb, t->payloads + b, sizeof *t->payloads * (size_t)nb);
            t->segs[w++] = t->segs[i];
            wb += nb;
        }
        b += nb;
    }
    t->n_segs = w;
    t->n_blocks = wb;
}

void gp_engine_host_free(gp_engine *e)
{
    gp_engine_prefix *px = e->px;
    gp_prefix_tier *t = &px->tier;
    if (t->hooked)
        gp_kv_memory_detach(e->km, t);
    if (px->store) { /* the streams are quiet by now: nothing reads a pin */
        if (t->n_blocks)
            (void)gp_kvstore_release(px->store, t->keys, t->n_blocks);
        release_looked(px, 0);
    }
    free(t->looked);
    free(t->keys);
    free(t->payloads);
    free(t->segs);
    gp_device_free(t->d_tables);
    gp_pinned_free(t->h_tables);
    memset(t, 0, sizeof *t);
}

/* The waiting loads, after the call's own uploads on stream s: their
 * segments' tables, then the reload; a failure leaves them waiting. */
static gp_status reload_begin(void *self, const gp_kv_plan *plan, cudaStream_t s)
{
    gp_prefix_tier *t = self;
    gp_engine_prefix *px = px_of(t);
    gp_engine *e = px->e;
    (void)plan;
    t->active = false;
    if (t->n_segs == 0 || t->enqueued)
        return GP_OK;
    const size_t mb = (size_t)e->max_blocks;
    for (int i = 0; i < t->n_segs; i++) {
        memcpy(t->h_tables + i * mb, gp_kv_block_table(e->tables, t->segs[i].seq), sizeof(int32_t) * mb);
        t->segs[i].d_table = t->d_tables + i * mb;
    }
    GP_CUDA_TRY(cudaEventRecord(px->ev_start, s));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->copy, px->ev_start, 0));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->write, px->ev_start, 0));
    GP_CUDA_TRY(cudaMemcpyAsync(t->d_tables, t->h_tables, sizeof(int32_t) * mb * (size_t)t->n_segs,
                                cudaMemcpyHostToDevice, px->write));
    gp_status st = gp_engine_prefix_reload(e, t->segs, t->n_segs, t->payloads, t->n_blocks);
    if (st != GP_OK) {
        cudaStreamSynchronize(px->copy);
        cudaStreamSynchronize(px->write);
        return st;
    }
    t->enqueued = t->active = true;
    return GP_OK;
}

static gp_status reload_before_attn(void *self, int layer, cudaStream_t s)
{
    gp_prefix_tier *t = self;
    if (!t->active)
        return GP_OK;
    gp_engine_prefix *px = px_of(t);
    GP_CUDA_TRY(cudaStreamWaitEvent(s, px->ev_layer[layer], 0));
    return GP_OK;
}

/* The call's last layer waited for the reload's, so the host waits here
 * for nothing the device still does for long, and the pins go before the
 * batch returns. */
static gp_status reload_end(void *self, cudaStream_t s)
{
    gp_prefix_tier *t = self;
    (void)s;
    t->active = false;
    return settle(px_of(t));
}
