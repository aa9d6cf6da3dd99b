/* A sequence's whole blocks into the store: each block the store lacks
 * gathered from the paged cache on the write stream, copied to the host
 * and put, two blocks in flight. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_prefix_impl.h"

/* Gather block blk of sequence px->seq, whose table is on the device, from
 * the KV memory into slot's device payload and copy it down, on the write
 * stream. */
static gp_status enqueue_gather(gp_engine *e, int blk, int slot)
{
    gp_engine_prefix *px = e->px;
    const int bt = px->p.block_tokens;
    gp_kvstore_identity id = gp_engine_prefix_identity(e, px->model, bt);
    for (int l = 0; l < e->cfg.n_layers; l++) {
        uint64_t ko = 0, vo = 0, bytes = 0;
        GP_TRY(gp_kvstore_part_range(&id, l, GP_KVSTORE_K, &ko, &bytes));
        GP_TRY(gp_kvstore_part_range(&id, l, GP_KVSTORE_V, &vo, &bytes));
        uint8_t *d = (uint8_t *)px->d_payload[slot];
        GP_TRY(gp_kv_copy_tokens_mem(e->km, l, px->seq, px->d_table, blk * bt, bt, d + ko, d + vo, GP_KV_FROM_CACHE,
                                     px->write));
    }
    GP_CUDA_TRY(cudaMemcpyAsync(px->h_payload[slot], px->d_payload[slot], px->block_bytes, cudaMemcpyDeviceToHost,
                                px->write));
    GP_CUDA_TRY(cudaEventRecord(px->ev_stored[slot], px->write));
    return GP_OK;
}

static gp_status put_block(gp_engine *e, const uint64_t *keys, const int32_t *tokens, int blk,
                           gp_prefix_store_stats *s)
{
    gp_engine_prefix *px = e->px;
    const int slot = blk % GP_PREFIX_STORE_SLOTS;
    GP_TRY(gp_device_event_wait(px->ev_stored[slot], "a stored block's copy"));
    s->bytes_stored += px->block_bytes;
    gp_status st = gp_kvstore_put(px->store, keys[blk], tokens + (size_t)blk * (size_t)px->p.block_tokens,
                                  px->h_payload[slot]);
    if (st == GP_SOFT_FULL) {
        s->blocks_refused++;
        return GP_OK;
    }
    GP_TRY(st);
    s->blocks_stored++;
    return GP_OK;
}

static gp_status store_blocks(gp_engine *e, const uint64_t *keys, const int32_t *tokens, int first, int nb,
                              gp_prefix_store_stats *s)
{
    for (int b = first; b < nb; b++) {
        GP_TRY(enqueue_gather(e, b, b % GP_PREFIX_STORE_SLOTS));
        if (b > first)
            GP_TRY(put_block(e, keys, tokens, b - 1, s));
    }
    if (nb > first)
        GP_TRY(put_block(e, keys, tokens, nb - 1, s));
    return GP_OK;
}

gp_status gp_engine_prefix_store_seq(gp_engine *e, int seq, int n, const int32_t *tokens,
                                     gp_prefix_store_stats *st)
{
    gp_prefix_store_stats s = {0};
    if (st)
        *st = s;
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_prefix_store_seq: engine is NULL");
    if (!e->px)
        GP_FAIL(GP_ERR_STATE, "storing a prefix: stored prefixes are off for this engine (gp_engine_prefix_enable)");
    if (seq < 0 || seq >= e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d: allowed [0, %d]", seq, e->p.max_batch - 1);
    if (n < 0 || (n > 0 && !tokens))
        GP_FAIL(GP_ERR_INVALID_ARG, "storing a prefix of %d tokens%s", n, tokens ? ": allowed n >= 0" : " (NULL)");
    if (gp_kv_len(e->tables, seq) < n)
        GP_FAIL(GP_ERR_STATE, "storing %d tokens of sequence %d, which holds %d", n, seq, gp_kv_len(e->tables, seq));
    const double t0 = gp_now_s();
    gp_engine_prefix *px = e->px;
    const int nb = n / px->p.block_tokens;
    s.blocks = nb;
    if (nb == 0) {
        if (st)
            *st = s;
        return GP_OK;
    }
    uint64_t *keys = malloc(sizeof *keys * (size_t)nb);
    if (!keys)
        GP_FAIL(GP_ERR_NO_MEMORY, "storing a prefix: out of host memory for %d keys", nb);
    gp_kvstore_identity id = gp_engine_prefix_identity(e, px->model, px->p.block_tokens);
    int present = 0;
    gp_status rc = gp_kvstore_chain(&id, tokens, nb * px->p.block_tokens, keys, NULL);
    if (rc == GP_OK) /* the held run is only touched: a match pins it, the release right after */
        rc = gp_kvstore_match(px->store, keys, tokens, nb, &present);
    if (rc == GP_OK && present > 0)
        rc = gp_kvstore_release(px->store, keys, present);
    s.blocks_present = present;
    if (rc == GP_OK && present < nb) {
        memcpy(px->h_table, gp_kv_block_table(e->tables, seq), sizeof(int32_t) * (size_t)e->max_blocks);
        px->seq = seq;
        if (cudaEventRecord(px->ev_start, e->lane.stream) != cudaSuccess ||
            cudaStreamWaitEvent(px->write, px->ev_start, 0) != cudaSuccess ||
            cudaMemcpyAsync(px->d_table, px->h_table, sizeof(int32_t) * (size_t)e->max_blocks,
                            cudaMemcpyHostToDevice, px->write) != cudaSuccess)
            rc = gp_cuda_fail(cudaGetLastError(), "enqueueing a prefix store", __FILE__, __LINE__);
        if (rc == GP_OK)
            rc = store_blocks(e, keys, tokens, present, nb, &s);
        if (rc != GP_OK)
            cudaStreamSynchronize(px->write);
    }
    free(keys);
    s.ms = (gp_now_s() - t0) * 1e3;
    if (st)
        *st = s;
    return rc;
}
