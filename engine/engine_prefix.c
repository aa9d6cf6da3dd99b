/* Stored prefixes on the CUDA engine (issue #18): the store's pinned pool,
 * the layer-wise reload of a matched prefix (gp_kv_reload_run's lag-2
 * schedule on a copy stream and a write stream) ahead of the suffix
 * prefill, and the gather that stores a sequence's whole blocks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"
#include "gp_kvstore.h"

/* Two gathers in flight while storing: one block is copied down while the
 * one before it is put. */
#define GP_PREFIX_STORE_SLOTS 2

/* A layer's trace events: its copies' start and end (copy stream), its
 * scatter's (write stream), and the suffix passing its wait for the layer. */
enum { TR_LOAD0, TR_LOAD1, TR_WRITE0, TR_WRITE1, TR_SUFFIX, TR_COUNT };

typedef struct gp_engine_prefix {
    gp_prefix_params p;
    char model[512];          /* the identity's name: the caller's, the dtype added */
    gp_kvstore *store;
    uint64_t block_bytes;     /* payload of one stored block */
    int max_prefix_blocks;    /* the longest prefix a prompt of max_context can reuse */
    /* the pool: slots of block_bytes, handed out through the store's
     * allocator lowest first, so that a prompt's blocks, put in order, tend
     * to lie in consecutive slots: the reload copies such a run of blocks
     * with one strided copy per layer and part instead of one per block */
    uint8_t *pool;
    int n_slots, n_free;
    uint64_t *used;           /* [ceil(n_slots / 64)] bit per slot */
    /* reload */
    cudaStream_t copy, write; /* LOAD; PROCESS and WRITE */
    uint16_t *stage;          /* device [n_buffers][2][max_prefix_blocks * block_tokens][row] */
    size_t stage_half;        /* elements of one buffer's K (or V) */
    int32_t *d_table, *h_table; /* the sequence's block table: device and pinned [max_blocks] */
    cudaEvent_t ev_start, ev_done, *ev_layer; /* timing; ev_layer [n_layers] without */
    cudaEvent_t *tr;          /* [n_layers][TR_COUNT] timing events of the last reload (gp_engine_prefix_trace) */
    bool traced;              /* the last prefill_prefix reloaded, so tr holds its times */
    /* the reload in progress */
    const void **payloads;    /* [max_prefix_blocks]: the matched blocks' host payloads */
    int n_matched;
    /* store */
    uint16_t *d_payload[GP_PREFIX_STORE_SLOTS]; /* device, block_bytes each */
    void *h_payload[GP_PREFIX_STORE_SLOTS];     /* pinned, block_bytes each */
    cudaEvent_t ev_stored[GP_PREFIX_STORE_SLOTS];
} gp_engine_prefix;

gp_prefix_params gp_prefix_default_params(void)
{
    return (gp_prefix_params){.block_tokens = GP_PREFIX_DEFAULT_BLOCK_TOKENS, .n_buffers = 2, .overlap = true};
}

static gp_kvstore_identity identity(const gp_engine *e, const char *model, int block_tokens)
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
    gp_kvstore_identity id = identity(e, "x", block_tokens);
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
        for (int i = 0; i < e->cfg.n_layers * TR_COUNT; i++)
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
    free(px);
    e->px = NULL;
    e->pf_layer_wait = NULL;
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
    px->tr = calloc((size_t)e->cfg.n_layers * TR_COUNT, sizeof *px->tr);
    if (!px->used || !px->payloads || !px->ev_layer || !px->tr)
        GP_FAIL(GP_ERR_NO_MEMORY, "stored prefixes: out of host memory for %d slots", px->n_slots);
    GP_TRY(gp_pinned_alloc((void **)&px->pool, (size_t)slots * px->block_bytes, "the stored-prefix pool"));
    px->stage_half = (size_t)px->max_prefix_blocks * (size_t)p->block_tokens * row;
    GP_TRY(gp_device_alloc((void **)&px->stage, px->stage_half * 2 * (size_t)p->n_buffers * sizeof(uint16_t),
                           "the prefix reload's staging buffers"));
    GP_TRY(gp_device_alloc((void **)&px->d_table, sizeof(int32_t) * (size_t)e->max_blocks, "a reload block table"));
    GP_TRY(gp_pinned_alloc((void **)&px->h_table, sizeof(int32_t) * (size_t)e->max_blocks, "a reload block table"));
    for (int i = 0; i < GP_PREFIX_STORE_SLOTS; i++) {
        GP_TRY(gp_device_alloc((void **)&px->d_payload[i], px->block_bytes, "a stored block's gather"));
        GP_TRY(gp_pinned_alloc(&px->h_payload[i], px->block_bytes, "a stored block's copy"));
        GP_CUDA_TRY(cudaEventCreateWithFlags(&px->ev_stored[i], cudaEventDisableTiming));
    }
    for (int l = 0; l < e->cfg.n_layers; l++)
        GP_CUDA_TRY(cudaEventCreateWithFlags(&px->ev_layer[l], cudaEventDisableTiming));
    for (int i = 0; i < e->cfg.n_layers * TR_COUNT; i++)
        GP_CUDA_TRY(cudaEventCreate(&px->tr[i]));
    GP_CUDA_TRY(cudaEventCreate(&px->ev_start));
    GP_CUDA_TRY(cudaEventCreate(&px->ev_done));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&px->copy, cudaStreamNonBlocking));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&px->write, cudaStreamNonBlocking));
    gp_kvstore_params sp = gp_kvstore_default_params();
    sp.id = identity(e, px->model, p->block_tokens);
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
    if (e->ko)
        GP_FAIL(GP_ERR_UNSUPPORTED, "stored prefixes with an offloaded KV cache (--kv-vram-budget): the reload "
                "writes the cache's device blocks only; not supported together");
    GP_TRY(check_params(e, p));
    gp_engine_prefix *px = calloc(1, sizeof *px);
    if (!px)
        GP_FAIL(GP_ERR_NO_MEMORY, "stored prefixes: out of host memory");
    px->p = *p;
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

/* ------------------------------------------------------------- reload */

typedef struct reload_be {
    gp_engine *e;
    gp_engine_prefix *px;
    int n_tokens; /* matched tokens */
} reload_be;

static cudaStream_t stage_stream(const gp_engine_prefix *px, gp_kv_reload_stage s)
{
    return s == GP_KV_RELOAD_LOAD ? px->copy : px->write;
}

static uint16_t *stage_buf(const gp_engine_prefix *px, int buf, gp_kvstore_part part)
{
    return px->stage + ((size_t)buf * 2 + (size_t)part) * px->stage_half;
}

/* Layer's K and V of every matched block into buffer buf, in token order:
 * per part one strided copy for each run of blocks in consecutive slots
 * (a piece of block_tokens x row elements per block, payloads block_bytes
 * apart), since a copy per piece costs the link a quarter of its rate
 * (docs/PERFORMANCE.md, issue #18). */
static gp_status be_load(void *ctx, int layer, int buf)
{
    reload_be *b = ctx;
    gp_engine_prefix *px = b->px;
    gp_kvstore_identity id = identity(b->e, px->model, px->p.block_tokens);
    const uint8_t *const *pl = (const uint8_t *const *)px->payloads;
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * TR_COUNT + TR_LOAD0], px->copy));
    for (int part = 0; part < 2; part++) {
        uint64_t off = 0, bytes = 0;
        GP_TRY(gp_kvstore_part_range(&id, layer, (gp_kvstore_part)part, &off, &bytes));
        uint8_t *dst = (uint8_t *)stage_buf(px, buf, (gp_kvstore_part)part);
        for (int i = 0, run; i < px->n_matched; i += run) {
            for (run = 1; i + run < px->n_matched && pl[i + run] == pl[i + run - 1] + px->block_bytes; run++)
                ;
            GP_CUDA_TRY(cudaMemcpy2DAsync(dst + (size_t)i * bytes, bytes, pl[i] + off, px->block_bytes, bytes,
                                          (size_t)run, cudaMemcpyHostToDevice, px->copy));
        }
    }
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * TR_COUNT + TR_LOAD1], px->copy));
    return GP_OK;
}

/* The stored layout is the cache's (gp_kvstore.h): nothing to convert. */
static gp_status be_process(void *ctx, int layer, int buf)
{
    (void)ctx, (void)layer, (void)buf;
    return GP_OK;
}

static gp_status be_write(void *ctx, int layer, int buf)
{
    reload_be *b = ctx;
    gp_engine_prefix *px = b->px;
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * TR_COUNT + TR_WRITE0], px->write));
    GP_TRY(gp_kv_copy_tokens(gp_kv_device_layout(b->e->kv), gp_kv_device_k(b->e->kv, layer),
                             gp_kv_device_v(b->e->kv, layer), px->d_table, 0, b->n_tokens,
                             stage_buf(px, buf, GP_KVSTORE_K), stage_buf(px, buf, GP_KVSTORE_V), GP_KV_TO_CACHE,
                             px->write));
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * TR_COUNT + TR_WRITE1], px->write));
    return GP_OK;
}

static gp_status be_record(void *ctx, gp_kv_reload_stage s, void *marker)
{
    reload_be *b = ctx;
    GP_CUDA_TRY(cudaEventRecord((cudaEvent_t)marker, stage_stream(b->px, s)));
    return GP_OK;
}

static gp_status be_wait(void *ctx, gp_kv_reload_stage s, void *marker)
{
    reload_be *b = ctx;
    GP_CUDA_TRY(cudaStreamWaitEvent(stage_stream(b->px, s), (cudaEvent_t)marker, 0));
    return GP_OK;
}

static gp_status be_marker_create(void *ctx, void **marker)
{
    (void)ctx;
    cudaEvent_t ev = NULL;
    GP_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *marker = ev;
    return GP_OK;
}

static void be_marker_destroy(void *ctx, void *marker)
{
    (void)ctx;
    if (marker)
        cudaEventDestroy((cudaEvent_t)marker);
}

/* Layer written: its own event, which the suffix prefill's layer waits for. */
static gp_status be_layer_ready(void *ctx, int layer, void *written)
{
    reload_be *b = ctx;
    (void)written;
    GP_CUDA_TRY(cudaEventRecord(b->px->ev_layer[layer], b->px->write));
    return GP_OK;
}

static const gp_kv_reload_ops reload_ops = {
    .load = be_load, .process = be_process, .write = be_write, .record = be_record, .wait = be_wait,
    .marker_create = be_marker_create, .marker_destroy = be_marker_destroy, .layer_ready = be_layer_ready};

/* Reserve the prefix's blocks in seq and order the reload's streams after
 * the engine stream's work so far (a block may have served a sequence whose
 * steps are still in flight). No copy yet. */
static gp_status begin_reload(gp_engine *e, int seq, int n_tokens)
{
    gp_engine_prefix *px = e->px;
    GP_TRY(gp_kv_reserve(e->tables, seq, n_tokens));
    memcpy(px->h_table, gp_kv_block_table(e->tables, seq), sizeof(int32_t) * (size_t)e->max_blocks);
    GP_CUDA_TRY(cudaEventRecord(px->ev_start, e->sc.stream));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->copy, px->ev_start, 0));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->write, px->ev_start, 0));
    return GP_OK;
}

/* The reload's copies and scatters: the table, then the lag-2 schedule. */
static gp_status enqueue_reload(gp_engine *e)
{
    gp_engine_prefix *px = e->px;
    GP_CUDA_TRY(cudaMemcpyAsync(px->d_table, px->h_table, sizeof(int32_t) * (size_t)e->max_blocks,
                                cudaMemcpyHostToDevice, px->write));
    reload_be be = {.e = e, .px = px, .n_tokens = px->n_matched * px->p.block_tokens};
    gp_kv_reload_params rp = gp_kv_reload_default_params();
    rp.n_layers = e->cfg.n_layers;
    rp.n_buffers = px->p.n_buffers;
    rp.ops = &reload_ops;
    rp.be = &be;
    rp.done = px->ev_done;
    GP_TRY(gp_kv_reload_run(&rp, NULL));
    if (!px->p.overlap)
        GP_CUDA_TRY(cudaStreamWaitEvent(e->sc.stream, px->ev_done, 0));
    return GP_OK;
}

/* The prefill's hook (engine_impl.h): the suffix's inputs are uploaded, so
 * the reload's gigabytes queue behind them on the copy engine, not before. */
static gp_status reload_hook(gp_engine *e)
{
    e->pf_hook = NULL;
    return enqueue_reload(e);
}

/* What can be checked before the store is touched. */
static gp_status check_prompt(const gp_engine *e, int seq, int n, const int32_t *prompt)
{
    if (seq < 0 || seq >= e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d: allowed [0, %d]", seq, e->p.max_batch - 1);
    if (n < 1 || !prompt)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill of sequence %d: prompt length %d, need at least 1 token%s", seq, n,
                prompt ? "" : " (and tokens, which are NULL)");
    if (n > e->p.max_context)
        GP_FAIL(GP_ERR_STATE, "prompt of %d tokens does not fit sequence %d: the engine's max context is %d", n,
                seq, e->p.max_context);
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= e->cfg.vocab)
            GP_FAIL(GP_ERR_INVALID_ARG, "token %d at prompt position %d of sequence %d: allowed [0, %d]", prompt[i],
                    i, seq, e->cfg.vocab - 1);
    if (gp_kv_len(e->tables, seq) != 0)
        GP_FAIL(GP_ERR_STATE, "prefill with a stored prefix: sequence %d holds %d tokens; it must be empty", seq,
                gp_kv_len(e->tables, seq));
    return GP_OK;
}

static float elapsed(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0f;
    }
    return ms;
}

gp_status gp_engine_prefill_prefix(gp_engine *e, int seq, int n, const int32_t *prompt, int32_t *next,
                                   float *last_logits, gp_prefix_stats *st)
{
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_prefill_prefix: engine is NULL");
    const double t0 = gp_now_s();
    gp_prefix_stats s = {.prompt_tokens = n};
    if (st)
        *st = s;
    GP_TRY(check_prompt(e, seq, n, prompt));
    gp_engine_prefix *px = e->px;
    const int bt = px ? px->p.block_tokens : 1;
    int want = px ? (n - 1) / bt : 0, matched = 0;
    uint64_t *keys = NULL;
    if (want > 0) {
        keys = malloc(sizeof *keys * (size_t)want);
        if (!keys)
            GP_FAIL(GP_ERR_NO_MEMORY, "prefill with a stored prefix: out of host memory for %d keys", want);
        gp_kvstore_identity id = identity(e, px->model, bt);
        gp_status cs = gp_kvstore_chain(&id, prompt, want * bt, keys, NULL);
        if (cs == GP_OK)
            cs = gp_kvstore_match(px->store, keys, prompt, want, &matched);
        if (cs != GP_OK) {
            free(keys);
            return cs;
        }
    }
    gp_status rc = GP_OK;
    if (matched > 0) {
        for (int i = 0; i < matched && rc == GP_OK; i++)
            rc = gp_kvstore_get(px->store, keys[i], &px->payloads[i]);
        px->n_matched = matched;
        const int P = matched * bt;
        if (rc == GP_OK)
            rc = gp_device_step_gate(e->sc.stream);
        if (rc == GP_OK)
            rc = begin_reload(e, seq, P);
        if (rc == GP_OK)
            rc = gp_kv_advance(e->tables, seq, P);
        if (rc == GP_OK) {
            /* a prefill through decode steps (a head size the prefill attention does not serve) has no
               hooks: the reload goes first and it waits for all of it */
            if (!gp_prefill_attn_supports(e->cfg.head_dim)) {
                rc = enqueue_reload(e);
                if (rc == GP_OK && px->p.overlap &&
                    cudaStreamWaitEvent(e->sc.stream, px->ev_done, 0) != cudaSuccess)
                    rc = gp_cuda_fail(cudaGetLastError(), "cudaStreamWaitEvent(the reload)", __FILE__, __LINE__);
            } else {
                e->pf_hook = reload_hook;
                e->pf_layer_wait = px->p.overlap ? px->ev_layer : NULL;
                e->pf_layer_mark = px->tr + TR_SUFFIX;
                e->pf_layer_mark_stride = TR_COUNT;
            }
        }
        if (rc == GP_OK)
            rc = gp_engine_prefill(e, seq, n - P, prompt + P, next, last_logits);
        if (rc == GP_OK && e->pf_hook) /* the prefill must have run it */
            rc = GP_ERR_STATE, gp_set_error("prefill with a stored prefix: the reload was never enqueued");
        e->pf_hook = NULL;
        e->pf_layer_wait = NULL;
        e->pf_layer_mark = NULL;
        px->traced = rc == GP_OK && gp_prefill_attn_supports(e->cfg.head_dim);
        /* the pins go only once every copy has read its host block */
        gp_status ws = rc == GP_OK ? gp_device_event_wait(px->ev_done, "the prefix reload") : GP_OK;
        if (rc != GP_OK) {
            cudaStreamSynchronize(px->copy);
            cudaStreamSynchronize(px->write);
            gp_kv_release(e->tables, seq);
        }
        gp_status rs = gp_kvstore_release(px->store, keys, matched);
        px->n_matched = 0;
        if (rc == GP_OK)
            rc = ws != GP_OK ? ws : rs;
        if (rc == GP_OK) {
            s.matched_tokens = P;
            s.bytes_loaded = (uint64_t)P * (uint64_t)e->cfg.n_kv_heads * (uint64_t)e->cfg.head_dim * 2u *
                             (uint64_t)gp_dtype_size(e->dtype) * (uint64_t)e->cfg.n_layers;
            s.reload_ms = elapsed(px->ev_start, px->ev_done);
            s.suffix_ms = gp_engine_last_prefill_ms(e);
            s.ttft_ms = elapsed(px->ev_start, e->ev_pf_end);
        }
    } else {
        rc = gp_engine_prefill(e, seq, n, prompt, next, last_logits);
        if (rc == GP_OK)
            s.suffix_ms = s.ttft_ms = gp_engine_last_prefill_ms(e);
    }
    free(keys);
    if (rc != GP_OK)
        return rc;
    s.reload_gbps = s.reload_ms > 0.0f ? (double)s.bytes_loaded / (s.reload_ms * 1e6) : 0.0;
    s.wall_ms = (gp_now_s() - t0) * 1e3;
    if (st)
        *st = s;
    return GP_OK;
}

gp_status gp_engine_prefix_trace(gp_engine *e, gp_prefix_trace_layer *layers, float *first_token)
{
    gp_engine_prefix *px = e ? e->px : NULL;
    if (!px || !px->traced)
        GP_FAIL(GP_ERR_STATE, "prefix trace: no prefill with a reload since stored prefixes were enabled (or the "
                "last one failed, or ran through decode steps)");
    for (int l = 0; l < e->cfg.n_layers; l++) {
        cudaEvent_t *t = px->tr + (size_t)l * TR_COUNT;
        layers[l] = (gp_prefix_trace_layer){elapsed(px->ev_start, t[TR_LOAD0]), elapsed(px->ev_start, t[TR_LOAD1]),
                                            elapsed(px->ev_start, t[TR_WRITE0]), elapsed(px->ev_start, t[TR_WRITE1]),
                                            elapsed(px->ev_start, t[TR_SUFFIX])};
    }
    *first_token = elapsed(px->ev_start, e->ev_pf_end);
    return GP_OK;
}

/* -------------------------------------------------------------- store */

/* Gather block blk of the sequence whose table is on the device into
 * slot's device payload and copy it down, on the write stream. */
static gp_status enqueue_gather(gp_engine *e, int blk, int slot)
{
    gp_engine_prefix *px = e->px;
    const int bt = px->p.block_tokens;
    gp_kvstore_identity id = identity(e, px->model, bt);
    for (int l = 0; l < e->cfg.n_layers; l++) {
        uint64_t ko = 0, vo = 0, bytes = 0;
        GP_TRY(gp_kvstore_part_range(&id, l, GP_KVSTORE_K, &ko, &bytes));
        GP_TRY(gp_kvstore_part_range(&id, l, GP_KVSTORE_V, &vo, &bytes));
        uint8_t *d = (uint8_t *)px->d_payload[slot];
        GP_TRY(gp_kv_copy_tokens(gp_kv_device_layout(e->kv), gp_kv_device_k(e->kv, l), gp_kv_device_v(e->kv, l),
                                 px->d_table, blk * bt, bt, d + ko, d + vo, GP_KV_FROM_CACHE, px->write));
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
    gp_kvstore_identity id = identity(e, px->model, px->p.block_tokens);
    int present = 0;
    gp_status rc = gp_kvstore_chain(&id, tokens, nb * px->p.block_tokens, keys, NULL);
    if (rc == GP_OK) /* the held run is only touched: a match pins it, the release right after */
        rc = gp_kvstore_match(px->store, keys, tokens, nb, &present);
    if (rc == GP_OK && present > 0)
        rc = gp_kvstore_release(px->store, keys, present);
    s.blocks_present = present;
    if (rc == GP_OK && present < nb) {
        memcpy(px->h_table, gp_kv_block_table(e->tables, seq), sizeof(int32_t) * (size_t)e->max_blocks);
        if (cudaEventRecord(px->ev_start, e->sc.stream) != cudaSuccess ||
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
