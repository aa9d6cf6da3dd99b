/* The CUDA engine's model state (weights view, KV tables and pools, the RoPE
 * table, the model-wide features) and its default lane on every SM: sizing,
 * parameter checks, creation and destruction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "engine_impl.h"

gp_engine_params gp_engine_default_params(void)
{
    return (gp_engine_params){.max_batch = 8, .max_context = 2048, .block_size = 16, .use_graphs = true,
                              .gemm_skinny_max_m = GP_GEMM_SKINNY_DEFAULT_MAX_M, .attn_kernel = GP_ATTN_KERNEL_AUTO, .attn_stream_warps_cap = 0,
                              .attn_kv_evict_first = true, .prefill_chunk = GP_ENGINE_DEFAULT_PREFILL_CHUNK,
                              .sparse_probe = 16};
}

static int blocks_per_seq(const gp_engine_params *p)
{
    return (p->max_context + p->block_size - 1) / p->block_size;
}

static gp_kv_layout kv_layout(const gp_config *c, const gp_engine_params *p)
{
    return (gp_kv_layout){.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                          .block_size = p->block_size, .n_blocks = p->max_batch * blocks_per_seq(p)};
}

/* Rows of the step's activation buffers: a decode step's sequences or a
 * prefill chunk's tokens. */
static int act_rows(const gp_engine_params *p)
{
    return p->max_batch > p->prefill_chunk ? p->max_batch : p->prefill_chunk;
}

/* Activation bytes per row (residual, normed inputs, QKV, q, attention
 * output, gate/up, SwiGLU output; prefill tokens, positions, table rows). */
static uint64_t row_bytes(const gp_config *c)
{
    uint64_t H = (uint64_t)c->hidden, QD = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    return 4 * H + 2 * 2 * H + 2 * (uint64_t)gp_config_qkv_rows(c) + 2 * 2 * QD + 2 * 3 * (uint64_t)c->ffn +
           4 * 3;
}

/* Bytes per sequence of the batch: logits, step tokens in and out, the
 * gathered last prefill rows and their descriptors. */
static uint64_t seq_bytes(const gp_config *c)
{
    return 4 * (uint64_t)c->vocab + 4 * 2 + 4 * (uint64_t)c->hidden + sizeof(gp_prefill_seq_desc);
}

static gp_status check_params(const gp_config *c, const gp_engine_params *p)
{
    if (p->max_batch < 1 || p->max_batch > 65536)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_batch %d: allowed [1, 65536]", p->max_batch);
    if (p->max_context < 1 || p->max_context > c->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_context %d: allowed [1, %d] (the model's max context)",
                p->max_context, c->max_context);
    if (p->block_size < 1 || p->block_size > 1024)
        GP_FAIL(GP_ERR_INVALID_ARG, "block_size %d: allowed [1, 1024]", p->block_size);
    if (p->gemm_tune < 0 || p->gemm_tune > GP_GEMM_TUNE_MAX_CANDIDATES)
        GP_FAIL(GP_ERR_INVALID_ARG, "gemm_tune %d: allowed [0, %d] (0: the heuristic's pick)",
                p->gemm_tune, GP_GEMM_TUNE_MAX_CANDIDATES);
    if (p->prefill_chunk < 1 || p->prefill_chunk > GP_ENGINE_MAX_PREFILL_CHUNK)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill_chunk %d: allowed [1, %d] (tokens per prefill forward)",
                p->prefill_chunk, GP_ENGINE_MAX_PREFILL_CHUNK);
    if (p->sparse_probe < 1 || p->sparse_probe > 1000000)
        GP_FAIL(GP_ERR_INVALID_ARG, "sparse_probe %d: allowed [1, 1000000] (steps a projection chosen dense runs "
                "before the sparse kernel measures its union again)", p->sparse_probe);
    if (p->gemm_skinny_max_m < 0 || p->gemm_skinny_max_m > GP_GEMM_SKINNY_MAX_M)
        GP_FAIL(GP_ERR_INVALID_ARG, "gemm_skinny_max_m %d: allowed [0, %d] (0: cuBLASLt for every GEMM)",
                p->gemm_skinny_max_m, GP_GEMM_SKINNY_MAX_M);
    gp_decode_attn_params ap = gp_engine_attn_params(p);
    return gp_decode_attn_params_check(&ap);
}

gp_decode_attn_params gp_engine_attn_params(const gp_engine_params *p)
{
    gp_decode_attn_params ap = gp_decode_attn_default_params();
    ap.kernel = p->attn_kernel;
    ap.stream_warps_cap = p->attn_stream_warps_cap;
    ap.kv_evict_first = p->attn_kv_evict_first;
    return ap;
}

gp_status gp_engine_attn_ws_bytes(const gp_config *c, const gp_engine_params *p, size_t *bytes)
{
    gp_decode_attn_params ap = gp_engine_attn_params(p);
    return gp_decode_attn_workspace_max(p->max_batch, c->n_heads, c->n_kv_heads, c->head_dim,
                                        p->max_context, &ap, bytes);
}

uint64_t gp_engine_device_bytes(const gp_config *c, const gp_engine_params *p)
{
    if (check_params(c, p) != GP_OK)
        return 0;
    gp_kv_layout l = kv_layout(c, p);
    size_t ws = 0;
    if (gp_engine_attn_ws_bytes(c, p, &ws) != GP_OK)
        return 0;
    /* the same bytes in either 16-bit dtype */
    uint64_t kv = gp_kv_device_bytes(&l, GP_DTYPE_BF16, p->max_batch, blocks_per_seq(p));
    gp_kv_offload_plan plan;
    if (p->kv_vram_budget) { /* the offloaded split's device blocks and windows instead of all blocks */
        if (gp_engine_kv_offload_plan(c, p, GP_DTYPE_BF16, &plan) != GP_OK)
            return 0;
        kv = kv - plan.full_bytes + plan.device_bytes;
    }
    return kv + row_bytes(c) * (uint64_t)act_rows(p) +
           seq_bytes(c) * (uint64_t)p->max_batch +
           (uint64_t)ws + GP_GEMM_WORKSPACE_BYTES + 4 * (uint64_t)c->head_dim;
}

const gp_config *gp_engine_config(const gp_engine *e)
{
    return &e->cfg;
}

gp_dtype gp_engine_dtype(const gp_engine *e)
{
    return e->dtype;
}

void gp_engine_destroy(gp_engine *e)
{
    if (!e)
        return;
    while (e->lanes) /* lanes the caller left: theirs before the state they run over */
        gp_lane_destroy(e->lanes);
    if (e->lane.stream)
        cudaStreamSynchronize(e->lane.stream);
    gp_engine_drop_graphs(e);
    gp_engine_cpu_ffn_free(e);
    gp_engine_sparse_free(e);
    gp_engine_prefix_free(e);
    gp_kv_memory_destroy(e->km);
    gp_lane_free(&e->lane);
    pthread_mutex_destroy(&e->kv_lock);
    gp_kv_device_destroy(e->kv);
    gp_kv_tables_destroy(e->tables);
    gp_device_free(e->inv_freq);
    gp_device_free(e->tp_head);
    free(e);
}

/* The RoPE table, shared by every lane. */
static gp_status alloc_inv_freq(gp_engine *e)
{
    const gp_config *c = &e->cfg;
    GP_TRY(gp_device_alloc((void **)&e->inv_freq, sizeof(float) * (size_t)c->head_dim / 2,
                           "engine inv_freq [head_dim/2] fp32"));
    float *inv = malloc(sizeof(float) * (size_t)c->head_dim / 2);
    if (!inv)
        GP_FAIL(GP_ERR_NO_MEMORY, "inv_freq: out of host memory");
    gp_rope_inv_freq(c, inv);
    cudaError_t ce = cudaMemcpy(e->inv_freq, inv, sizeof(float) * (size_t)c->head_dim / 2,
                                cudaMemcpyHostToDevice);
    free(inv);
    GP_CUDA_TRY(ce);
    return GP_OK;
}

gp_status gp_engine_create(gp_device_weights *dw, const gp_engine_params *p, gp_engine **out)
{
    *out = NULL;
    if (!dw || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_create: weights and params are required");
    const gp_host_weights *w = gp_device_weights_view(dw);
    const gp_dtype dt = gp_device_weights_dtype(dw);
    GP_TRY(gp_dtype_check_half(dt, "gp_engine_create (the device weights' dtype)"));
    GP_TRY(check_params(&w->cfg, p));
    GP_TRY(gp_pdl_check()); /* a bad $GP_PDL is refused here, not silently read as off */
    GP_TRY(gp_prefill_attn_kernel_check(p->prefill_attn_kernel, w->cfg.head_dim,
                                        "gp_engine_create (prefill_attn_kernel)"));
    /* the feature table decides what combines, and whether graphs can be used */
    const gp_feature_set f = {.cuda = true, .graphs = p->use_graphs,
                              .vram_budget = gp_device_weights_budget(dw), /* 0: resident */
                              .kv_vram_budget = p->kv_vram_budget};
    GP_TRY(gp_features_check(&f));
    const char *eager_why = NULL;
    if (p->use_graphs && !gp_features_graphs(&f, &eager_why))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_create: use_graphs: %s; set use_graphs = false (eager steps)",
                eager_why);
    uint64_t need = gp_engine_device_bytes(&w->cfg, p);
    /* streamed weights allocate their slots later, as groups are first copied */
    const uint64_t unheld = gp_device_weights_budget_unheld(dw);
    size_t free_b = 0, total_b = 0;
    GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (unheld && need + unheld > free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "engine for batch %d x context %d needs %llu bytes (%.2f GiB) of device memory "
                "beside the %llu bytes (%.2f GiB) of the VRAM budget the streamed weights will still take; the "
                "device has %zu bytes (%.2f GiB) free of %zu bytes: give a smaller --vram-budget or batch/context",
                p->max_batch, p->max_context, (unsigned long long)need, need / 1073741824.0,
                (unsigned long long)unheld, unheld / 1073741824.0, free_b, free_b / 1073741824.0, total_b);
    if (need > free_b) {
        gp_kv_layout l = kv_layout(&w->cfg, p);
        uint64_t kv = gp_kv_device_bytes(&l, dt, p->max_batch, blocks_per_seq(p));
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "engine for batch %d x context %d needs %llu bytes (%.2f GiB) of device "
                "memory (KV cache %llu bytes, %.2f GiB) beside the weights; the device has %zu bytes (%.2f GiB) "
                "free of %zu bytes (%.2f GiB)", p->max_batch, p->max_context, (unsigned long long)need,
                need / 1073741824.0, (unsigned long long)kv, kv / 1073741824.0, free_b, free_b / 1073741824.0,
                total_b, total_b / 1073741824.0);
    }
    gp_engine *e = calloc(1, sizeof *e);
    if (!e)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_create: out of host memory");
    e->cfg = w->cfg;
    e->dtype = dt;
    e->p = *p;
    e->dw = dw;
    e->w = w;
    e->max_blocks = blocks_per_seq(p);
    pthread_mutex_init(&e->kv_lock, NULL);
    gp_status st = GP_OK;
    cudaError_t ce = cudaGetDevice(&e->device);
    if (ce == cudaSuccess)
        ce = cudaDeviceGetAttribute(&e->sm_count, cudaDevAttrMultiProcessorCount, e->device);
    if (ce != cudaSuccess) {
        st = gp_cuda_fail(ce, "the current device's ordinal and SM count", __FILE__, __LINE__);
        goto fail;
    }
    gp_kv_layout l = kv_layout(&e->cfg, p);
    gp_kv_offload_plan plan = {0};
    if (p->kv_vram_budget && (st = gp_engine_kv_offload_plan(&e->cfg, p, e->dtype, &plan)) != GP_OK)
        goto fail;
    if (plan.n_host) { /* offloaded: the pool's ids are the device blocks and the staging window */
        l.n_blocks = plan.n_blocks;
        if ((st = gp_kv_tables_create(&l, p->max_batch, e->max_blocks, &e->tables)) != GP_OK ||
            (st = gp_kv_tables_set_host(e->tables, plan.n_device, plan.host_blocks_per_seq)) != GP_OK ||
            (st = gp_kv_device_create_offload(&l, e->dtype, p->max_batch, e->max_blocks, plan.n_device,
                                              &e->kv)) != GP_OK ||
            (st = gp_kv_memory_create_offload(e->kv, &plan, p->max_batch, e->cfg.n_layers, p->block_size,
                                              &e->km)) != GP_OK)
            goto fail;
    } else if ((st = gp_kv_tables_create(&l, p->max_batch, e->max_blocks, &e->tables)) != GP_OK ||
               (st = gp_kv_device_create(&l, e->dtype, p->max_batch, e->max_blocks, &e->kv)) != GP_OK ||
               (st = gp_kv_memory_create_resident(e->kv, p->max_batch, &e->km)) != GP_OK)
        goto fail;
    gp_lane *ln = &e->lane;
    ln->e = e;
    ln->own_stream = true;
    if ((st = gp_device_stream_create(&ln->stream, "engine stream")) != GP_OK ||
        (st = gp_lane_gemm_create(e, ln->stream, 0, &ln->gemm)) != GP_OK ||
        (st = gp_lane_alloc(ln, act_rows(p))) != GP_OK || (st = alloc_inv_freq(e)) != GP_OK)
        goto fail;
    ln->ap = gp_engine_attn_params(p);
    ln->ap.sm_count = e->sm_count;
    *out = e;
    return GP_OK;
fail:
    gp_engine_destroy(e);
    return st;
}

bool gp_engine_weights_streamed(const gp_engine *e)
{
    return e && gp_device_weights_is_streamed(e->dw);
}

gp_device_weights *gp_engine_weights(const gp_engine *e)
{
    return e ? e->dw : NULL;
}

gp_status gp_engine_set_tp(gp_engine *e, const gp_engine_tp *t)
{
    if (!e || !t)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_tp: engine or settings NULL");
    const int rank = t->rank, tp = t->tp;
    if (tp < 1 || tp > GP_TP_MAX || rank < 0 || rank >= tp || (tp > 1 && (!t->sum || !t->gather)))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_tp: rank %d of %d: allowed tp 1..%d, rank 0..tp-1, and sum and "
                "gather functions when tp > 1", rank, tp, GP_TP_MAX);
    if (tp > 1 && e->cf)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_engine_set_tp: the CPU-assisted FFN adds its cold neurons' output into the "
                "residual itself, outside the all-reduce of the ranks' partial sums");
    const int parts = gp_config_vocab_parts(&e->cfg), slice = gp_config_vocab_rows(&e->cfg);
    if (parts != tp)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_tp: rank %d of %d, but the weights' embedding and head are cut "
                "into %d part%s of the vocabulary: each rank needs its own shard of %d (gp_tp_config, "
                "gp_host_weights_shard)", rank, tp, parts, parts == 1 ? "" : "s", tp);
    gp_engine_drop_graphs(e); /* they baked how o and down write the residual, and the head */
    gp_device_free(e->tp_head);
    e->tp_head = NULL;
    if (tp > 1)
        GP_TRY(gp_device_alloc((void **)&e->tp_head, sizeof(float) * (size_t)tp * (size_t)e->p.max_batch * slice,
                               "tensor parallel head segments [tp][max_batch][vocab / tp] fp32"));
    e->tp_rank = rank;
    e->tp = tp;
    e->tp_reduce = tp > 1 ? t->sum : NULL;
    e->tp_gather = tp > 1 ? t->gather : NULL;
    e->tp_ctx = t->ctx;
    return GP_OK;
}
