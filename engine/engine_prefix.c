/* Stored prefixes on the CUDA engine: their params, the store
 * and its pinned pool of block slots, the streams, buffers and events the
 * reload (engine_prefix_reload.c) and the store of blocks
 * (engine_prefix_store.c) use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_prefix_impl.h"

gp_prefix_params gp_prefix_default_params(void)
{
    return (gp_prefix_params){.block_tokens = GP_PREFIX_DEFAULT_BLOCK_TOKENS, .n_buffers = 2, .overlap = true};
}

gp_kvstore_identity gp_engine_prefix_identity(const gp_engine *e, const char *model, int block_tokens)
{
    return (gp_kvstore_identity){.model = model, .n_layers = e->cfg.n_layers, .n_kv_heads = e->cfg.n_kv_heads,
                                 .head_dim = e->cfg.head_dim, .dtype_bytes = (int)gp_dtype_size(e->dtype),
                                 .block_size = block_tokens};
}

uint64_t gp_engine_prefix_block_bytes(const gp_engine *e, int block_tokens)
{
    uint64_t b = 0;
    if (!e || block_tokens < 1)
        return 0;
    gp_kvstore_identity id = gp_engine_prefix_identity(e, "x", block_tokens);
    return gp_kvstore_block_bytes(&id, &b) == GP_OK ? b : 0;
}

/* The store's allocator: the lowest free slot of the pinned pool. */
static void *slot_alloc(void *ctx, size_t bytes)
{
    gp_engine_prefix *px = ctx;
    if (bytes != px->block_bytes || px->n_free == 0)
        return NULL;
    for (int w = 0; w < (px->n_slots + 63) / 64; w++)
        if (~px->used[w]) {
            int bit = __builtin_ctzll(~px->used[w]), slot = w * 64 + bit;
            if (slot >= px->n_slots)
                break;
            px->used[w] |= 1ull << bit;
            px->n_free--;
            return px->pool + (size_t)slot * px->block_bytes;
        }
    return NULL;
}

static void slot_free(void *ctx, void *p)
{
    gp_engine_prefix *px = ctx;
    if (!p)
        return;
    size_t slot = (size_t)((uint8_t *)p - px->pool) / px->block_bytes;
    px->used[slot / 64] &= ~(1ull << (slot % 64));
    px->n_free++;
}

void gp_engine_prefix_free(gp_engine *e)
{
    gp_engine_prefix *px = e ? e->px : NULL;
    if (!px)
        return;
    if (px->copy)
        cudaStreamSynchronize(px->copy);
    if (px->write)
        cudaStreamSynchronize(px->write);
    gp_engine_host_free(e);
    gp_kvstore_destroy(px->store); /* returns every slot before the pool goes */
    gp_pinned_free(px->pool);
    free(px->used);
    free(px->payloads);
    gp_device_free(px->stage);
    gp_device_free(px->d_table);
    gp_pinned_free(px->h_table);
    for (int i = 0; i < GP_PREFIX_STORE_SLOTS; i++) {
        gp_device_free(px->d_payload[i]);
        gp_pinned_free(px->h_payload[i]);
        if (px->ev_stored[i])
            cudaEventDestroy(px->ev_stored[i]);
    }
    if (px->ev_layer)
        for (int l = 0; l < e->cfg.n_layers; l++)
            if (px->ev_layer[l])
                cudaEventDestroy(px->ev_layer[l]);
    free(px->ev_layer);
    if (px->tr)
        for (int i = 0; i < e->cfg.n_layers * GP_PREFIX_TR_COUNT; i++)
            if (px->tr[i])
                cudaEventDestroy(px->tr[i]);
    free(px->tr);
    if (px->ev_start)
        cudaEventDestroy(px->ev_start);
    if (px->ev_done)
        cudaEventDestroy(px->ev_done);
    if (px->copy)
        cudaStreamDestroy(px->copy);
    if (px->write)
        cudaStreamDestroy(px->write);
    gp_kv_memory_detach(e->km, px);
    free(px);
    e->px = NULL;
}

static gp_status check_params(const gp_engine *e, const gp_prefix_params *p)
{
    if (!p->model || !p->model[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "stored prefixes: model name is %s: give the checkpoint path or the preset and "
                "its seed, so blocks of other weights never match", p->model ? "empty" : "NULL");
    if (strlen(p->model) > 400)
        GP_FAIL(GP_ERR_INVALID_ARG, "stored prefixes: model name of %zu characters: allowed at most 400",
                strlen(p->model));
    if (p->block_tokens < 1 || p->block_tokens > 65536)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-block %d: allowed 1..65536 tokens", p->block_tokens);
    if (p->n_buffers < 2 || p->n_buffers > GP_KV_RELOAD_MAX_BUFFERS)
        GP_FAIL(GP_ERR_INVALID_ARG, "stored prefixes: %d staging buffers: allowed 2..%d", p->n_buffers,
                GP_KV_RELOAD_MAX_BUFFERS);
    if ((e->p.max_context - 1) / p->block_tokens < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-block %d: no prompt of the engine's max context (%d) can reuse a "
                "block; allowed at most %d", p->block_tokens, e->p.max_context, e->p.max_context - 1);
    uint64_t bb = gp_engine_prefix_block_bytes(e, p->block_tokens);
    if (bb == 0 || bb > SIZE_MAX / 2)
        GP_FAIL(GP_ERR_OVERFLOW, "stored prefixes: a block of %d tokens is too large", p->block_tokens);
    if (p->store_bytes < bb)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-size %llu bytes: less than one stored block (%llu bytes: %d tokens "
                "x %d layers x K and V)", (unsigned long long)p->store_bytes, (unsigned long long)bb,
                p->block_tokens, e->cfg.n_layers);
    return GP_OK;
}

static gp_status prefix_alloc(gp_engine *e, gp_engine_prefix *px)
{
    const gp_prefix_params *p = &px->p;
    const size_t row = (size_t)e->cfg.n_kv_heads * (size_t)e->cfg.head_dim;
    px->block_bytes = gp_engine_prefix_block_bytes(e, p->block_tokens);
    px->max_prefix_blocks = (e->p.max_context - 1) / p->block_tokens;
    uint64_t slots = p->store_bytes / px->block_bytes;
    if (slots > (uint64_t)INT32_MAX || slots > SIZE_MAX / px->block_bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-size %llu bytes: more than %d blocks of %llu bytes",
                (unsigned long long)p->store_bytes, INT32_MAX, (unsigned long long)px->block_bytes);
    px->n_slots = px->n_free = (int)slots;
    px->used = calloc(((size_t)px->n_slots + 63) / 64, sizeof *px->used);
    px->payloads = calloc((size_t)px->max_prefix_blocks, sizeof *px->payloads);
    px->ev_layer = calloc((size_t)e->cfg.n_layers, sizeof *px->ev_layer);
    px->tr = calloc((size_t)e->cfg.n_layers * GP_PREFIX_TR_COUNT, sizeof *px->tr);
    gp_prefix_tier *t = &px->tier;
    t->looked = calloc((size_t)px->max_prefix_blocks, sizeof *t->looked);
    t->keys = calloc((size_t)px->max_prefix_blocks, sizeof *t->keys);
    t->payloads = calloc((size_t)px->max_prefix_blocks, sizeof *t->payloads);
    t->segs = calloc((size_t)e->p.max_batch, sizeof *t->segs);
    if (!px->used || !px->payloads || !px->ev_layer || !px->tr || !t->looked || !t->keys || !t->payloads ||
        !t->segs)
        GP_FAIL(GP_ERR_NO_MEMORY, "stored prefixes: out of host memory for %d slots", px->n_slots);
    GP_TRY(gp_pinned_alloc((void **)&px->pool, (size_t)slots * px->block_bytes, "the stored-prefix pool"));
    px->stage_half = (size_t)px->max_prefix_blocks * (size_t)p->block_tokens * row;
    GP_TRY(gp_device_alloc((void **)&px->stage, px->stage_half * 2 * (size_t)p->n_buffers * sizeof(uint16_t),
                           "the prefix reload's staging buffers"));
    GP_TRY(gp_device_alloc((void **)&px->d_table, sizeof(int32_t) * (size_t)e->max_blocks, "a reload block table"));
    GP_TRY(gp_pinned_alloc((void **)&px->h_table, sizeof(int32_t) * (size_t)e->max_blocks, "a reload block table"));
    const size_t tables = sizeof(int32_t) * (size_t)e->max_blocks * (size_t)e->p.max_batch;
    GP_TRY(gp_device_alloc((void **)&t->d_tables, tables, "the host tier's block tables"));
    GP_TRY(gp_pinned_alloc((void **)&t->h_tables, tables, "the host tier's block tables"));
    for (int i = 0; i < GP_PREFIX_STORE_SLOTS; i++) {
        GP_TRY(gp_device_alloc((void **)&px->d_payload[i], px->block_bytes, "a stored block's gather"));
        GP_TRY(gp_pinned_alloc(&px->h_payload[i], px->block_bytes, "a stored block's copy"));
        GP_CUDA_TRY(cudaEventCreateWithFlags(&px->ev_stored[i], cudaEventDisableTiming));
    }
    for (int l = 0; l < e->cfg.n_layers; l++)
        GP_CUDA_TRY(cudaEventCreateWithFlags(&px->ev_layer[l], cudaEventDisableTiming));
    for (int i = 0; i < e->cfg.n_layers * GP_PREFIX_TR_COUNT; i++)
        GP_CUDA_TRY(cudaEventCreate(&px->tr[i]));
    GP_CUDA_TRY(cudaEventCreate(&px->ev_start));
    GP_CUDA_TRY(cudaEventCreate(&px->ev_done));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&px->copy, cudaStreamNonBlocking));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&px->write, cudaStreamNonBlocking));
    gp_kvstore_params sp = gp_kvstore_default_params();
    sp.id = gp_engine_prefix_identity(e, px->model, p->block_tokens);
    sp.capacity_bytes = (uint64_t)slots * px->block_bytes;
    sp.dir = p->dir;
    sp.alloc = slot_alloc;
    sp.free = slot_free;
    sp.alloc_ctx = px;
    return gp_kvstore_create(&sp, &px->store);
}

gp_status gp_engine_prefix_enable(gp_engine *e, const gp_prefix_params *p)
{
    if (!e || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_prefix_enable: NULL %s", e ? "params" : "engine");
    if (e->px)
        GP_FAIL(GP_ERR_STATE, "stored prefixes are already on for this engine");
    GP_TRY(check_params(e, p));
    gp_engine_prefix *px = calloc(1, sizeof *px);
    if (!px)
        GP_FAIL(GP_ERR_NO_MEMORY, "stored prefixes: out of host memory");
    px->p = *p;
    px->e = e;
    snprintf(px->model, sizeof px->model, "%s (%s)", p->model, gp_dtype_name(e->dtype));
    e->px = px;
    gp_status st = prefix_alloc(e, px);
    px->p.dir = NULL; /* the store keeps its own copy; the caller's strings are not kept */
    px->p.model = NULL;
    if (st != GP_OK)
        gp_engine_prefix_free(e);
    return st;
}

struct gp_kvstore *gp_engine_prefix_store(gp_engine *e)
{
    return e && e->px ? e->px->store : NULL;
}

float gp_engine_prefix_elapsed(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0f;
    }
    return ms;
}

