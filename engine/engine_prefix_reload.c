/* A stored prefix reloaded layer by layer (gp_kv_reload_run's lag-2
 * schedule: copies on a copy stream into staging buffers, scatters into the
 * paged cache on a write stream) beside the prefill of the rest of the
 * prompt, whose layer l waits for layer l only; its trace. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_prefix_impl.h"

typedef struct reload_be {
    gp_engine *e;
    gp_engine_prefix *px;
    const gp_prefix_reload_seg *segs; /* where the staged tokens go, in staging order */
    int n_segs;
    const void *const *payloads;      /* [n_blocks]: the host blocks, in staging order */
    int n_blocks;
} reload_be;

static cudaStream_t stage_stream(const gp_engine_prefix *px, gp_kv_reload_stage s)
{
    return s == GP_KV_RELOAD_LOAD ? px->copy : px->write;
}

static uint16_t *stage_buf(const gp_engine_prefix *px, int buf, gp_kvstore_part part)
{
    return px->stage + ((size_t)buf * 2 + (size_t)part) * px->stage_half;
}

/* Layer's K and V of every block into buffer buf, in staging order:
 * per part one strided copy for each run of blocks in consecutive slots
 * (a piece of block_tokens x row elements per block, payloads block_bytes
 * apart), since a copy per piece costs the link a quarter of its rate
 * (docs/PERFORMANCE.md). */
static gp_status be_load(void *ctx, int layer, int buf)
{
    reload_be *b = ctx;
    gp_engine_prefix *px = b->px;
    gp_kvstore_identity id = gp_engine_prefix_identity(b->e, px->model, px->p.block_tokens);
    const uint8_t *const *pl = (const uint8_t *const *)b->payloads;
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * GP_PREFIX_TR_COUNT + GP_PREFIX_TR_LOAD0], px->copy));
    for (int part = 0; part < 2; part++) {
        uint64_t off = 0, bytes = 0;
        GP_TRY(gp_kvstore_part_range(&id, layer, (gp_kvstore_part)part, &off, &bytes));
        uint8_t *dst = (uint8_t *)stage_buf(px, buf, (gp_kvstore_part)part);
        for (int i = 0, run; i < b->n_blocks; i += run) {
            for (run = 1; i + run < b->n_blocks && pl[i + run] == pl[i + run - 1] + px->block_bytes; run++)
                ;
            GP_CUDA_TRY(cudaMemcpy2DAsync(dst + (size_t)i * bytes, bytes, pl[i] + off, px->block_bytes, bytes,
                                          (size_t)run, cudaMemcpyHostToDevice, px->copy));
        }
    }
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * GP_PREFIX_TR_COUNT + GP_PREFIX_TR_LOAD1], px->copy));
    return GP_OK;
}

/* The stored layout is the cache's (gp_kvstore.h): nothing to convert. */
static gp_status be_process(void *ctx, int layer, int buf)
{
    (void)ctx, (void)layer, (void)buf;
    return GP_OK;
}

/* Layer's reloaded tokens from buffer buf into the KV memory, each segment
 * at its sequence's positions: a resident cache's device blocks, or an
 * offloaded one's host blocks for positions below its host quota (what it
 * copies into its window before attention). */
static gp_status be_write(void *ctx, int layer, int buf)
{
    reload_be *b = ctx;
    gp_engine_prefix *px = b->px;
    const size_t row = (size_t)b->e->cfg.n_kv_heads * (size_t)b->e->cfg.head_dim;
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * GP_PREFIX_TR_COUNT + GP_PREFIX_TR_WRITE0], px->write));
    size_t off = 0;
    for (int i = 0; i < b->n_segs; i++) {
        const gp_prefix_reload_seg *g = &b->segs[i];
        GP_TRY(gp_kv_copy_tokens_mem(b->e->km, layer, g->seq, g->d_table, g->pos0, g->n_tokens,
                                     stage_buf(px, buf, GP_KVSTORE_K) + off * row,
                                     stage_buf(px, buf, GP_KVSTORE_V) + off * row, GP_KV_TO_CACHE, px->write));
        off += (size_t)g->n_tokens;
    }
    GP_CUDA_TRY(cudaEventRecord(px->tr[layer * GP_PREFIX_TR_COUNT + GP_PREFIX_TR_WRITE1], px->write));
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
    px->seq = seq;
    memcpy(px->h_table, gp_kv_block_table(e->tables, seq), sizeof(int32_t) * (size_t)e->max_blocks);
    GP_CUDA_TRY(cudaEventRecord(px->ev_start, e->lane.stream));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->copy, px->ev_start, 0));
    GP_CUDA_TRY(cudaStreamWaitEvent(px->write, px->ev_start, 0));
    return GP_OK;
}

gp_status gp_engine_prefix_reload(gp_engine *e, const gp_prefix_reload_seg *segs, int n_segs,
                                  const void *const *payloads, int n_blocks)
{
    gp_engine_prefix *px = e->px;
    reload_be be = {.e = e, .px = px, .segs = segs, .n_segs = n_segs, .payloads = payloads, .n_blocks = n_blocks};
    gp_kv_reload_params rp = gp_kv_reload_default_params();
    rp.n_layers = e->cfg.n_layers;
    rp.n_buffers = px->p.n_buffers;
    rp.ops = &reload_ops;
    rp.be = &be;
    rp.done = px->ev_done;
    return gp_kv_reload_run(&rp, NULL);
}

/* The reload's copies and scatters: the table, then the lag-2 schedule;
 * without the per-layer overlap, stream s waits for all of it. */
static gp_status enqueue_reload(gp_engine *e, cudaStream_t s)
{
    gp_engine_prefix *px = e->px;
    GP_CUDA_TRY(cudaMemcpyAsync(px->d_table, px->h_table, sizeof(int32_t) * (size_t)e->max_blocks,
                                cudaMemcpyHostToDevice, px->write));
    const gp_prefix_reload_seg seg = {.seq = px->seq, .d_table = px->d_table, .pos0 = 0,
                                      .n_tokens = px->n_matched * px->p.block_tokens};
    GP_TRY(gp_engine_prefix_reload(e, &seg, 1, px->payloads, px->n_matched));
    if (!px->p.overlap)
        GP_CUDA_TRY(cudaStreamWaitEvent(s, px->ev_done, 0));
    return GP_OK;
}

/* The reload as a provider on the KV memory's hooks (start loading, wait
 * for layer l, finish). The next call's inputs are uploaded when its
 * begin_batch runs, so the reload's gigabytes queue behind them on the copy
 * engine, not before. */
static gp_status reload_begin(void *self, const gp_kv_plan *plan, cudaStream_t s)
{
    gp_engine_prefix *px = self;
    (void)plan;
    if (!px->armed)
        return GP_OK;
    px->armed = false;
    px->active = true;
    return enqueue_reload(px->e, s);
}

/* Layer l of the call waits for layer l of the reload only; the trace marks
 * when it passes. */
static gp_status reload_before_attn(void *self, int layer, cudaStream_t s)
{
    gp_engine_prefix *px = self;
    if (!px->active)
        return GP_OK;
    if (px->p.overlap)
        GP_CUDA_TRY(cudaStreamWaitEvent(s, px->ev_layer[layer], 0));
    GP_CUDA_TRY(cudaEventRecord(px->tr[(size_t)layer * GP_PREFIX_TR_COUNT + GP_PREFIX_TR_SUFFIX], s));
    return GP_OK;
}

/* Later calls (chunks, steps) follow the first in stream order. */
static gp_status reload_end(void *self, cudaStream_t s)
{
    gp_engine_prefix *px = self;
    (void)s;
    px->active = false;
    return GP_OK;
}

static const gp_kv_hook_ops reload_hooks = {
    .begin_batch = reload_begin, .before_attn = reload_before_attn, .end_batch = reload_end};

static int seq_len(const void *ctx, int seq)
{
    return gp_kv_len((const gp_kv_tables *)ctx, seq);
}

/* What can be checked before the store is touched: the one input check of
 * a prefill, and an empty sequence. */
static gp_status check_prompt(const gp_engine *e, int seq, int n, const int32_t *prompt)
{
    const gp_batch_part part = {.seq = seq, .kind = GP_BATCH_PREFILL, .n = n, .tokens = prompt};
    const gp_batch b = {.n_parts = 1, .parts = &part};
    const gp_batch_limits lim = {.max_seqs = e->p.max_batch, .vocab = e->cfg.vocab,
                                 .max_context = e->p.max_context, .seq_len = seq_len, .ctx = e->tables};
    GP_TRY(gp_batch_check(&b, &lim, "prefill with a stored prefix", NULL, NULL));
    if (gp_kv_len(e->tables, seq) != 0)
        GP_FAIL(GP_ERR_STATE, "prefill with a stored prefix: sequence %d holds %d tokens; it must be empty", seq,
                gp_kv_len(e->tables, seq));
    return GP_OK;
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
    if (px && (px->tier.n_segs || px->tier.n_looked || px->tier.enqueued))
        GP_FAIL(GP_ERR_STATE, "prefill with a stored prefix: the host tier's loads are in progress on the same "
                "staging buffers; run the batch that takes them first");
    const int bt = px ? px->p.block_tokens : 1;
    int want = px ? (n - 1) / bt : 0, matched = 0;
    uint64_t *keys = NULL;
    if (want > 0) {
        keys = malloc(sizeof *keys * (size_t)want);
        if (!keys)
            GP_FAIL(GP_ERR_NO_MEMORY, "prefill with a stored prefix: out of host memory for %d keys", want);
        gp_kvstore_identity id = gp_engine_prefix_identity(e, px->model, bt);
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
            rc = gp_device_step_gate(e->lane.stream);
        if (rc == GP_OK)
            rc = begin_reload(e, seq, P);
        if (rc == GP_OK)
            rc = gp_kv_advance(e->tables, seq, P);
        bool attached = false;
        if (rc == GP_OK) { /* the prefill's first call (a chunk, or a decode step) enqueues the reload */
            px->armed = true;
            rc = gp_kv_memory_attach(e->km, &reload_hooks, px);
            attached = rc == GP_OK;
        }
        if (rc == GP_OK)
            rc = gp_engine_prefill(e, seq, n - P, prompt + P, next, last_logits);
        if (rc == GP_OK && px->armed) /* the prefill must have run it */
            rc = GP_ERR_STATE, gp_set_error("prefill with a stored prefix: the reload was never enqueued");
        if (attached)
            gp_kv_memory_detach(e->km, px);
        px->armed = px->active = false;
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
            s.reload_ms = gp_engine_prefix_elapsed(px->ev_start, px->ev_done);
            s.suffix_ms = gp_engine_last_prefill_ms(e);
            s.ttft_ms = gp_engine_prefix_elapsed(px->ev_start, e->lane.ev_pf_end);
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
        cudaEvent_t *t = px->tr + (size_t)l * GP_PREFIX_TR_COUNT;
        layers[l] = (gp_prefix_trace_layer){gp_engine_prefix_elapsed(px->ev_start, t[GP_PREFIX_TR_LOAD0]), gp_engine_prefix_elapsed(px->ev_start, t[GP_PREFIX_TR_LOAD1]),
                                            gp_engine_prefix_elapsed(px->ev_start, t[GP_PREFIX_TR_WRITE0]), gp_engine_prefix_elapsed(px->ev_start, t[GP_PREFIX_TR_WRITE1]),
                                            gp_engine_prefix_elapsed(px->ev_start, t[GP_PREFIX_TR_SUFFIX])};
    }
    *first_token = gp_engine_prefix_elapsed(px->ev_start, e->lane.ev_pf_end);
    return GP_OK;
}

