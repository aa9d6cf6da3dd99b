/* The sequential CUDA engine: owns the step's device buffers, runs a decode
 * step as embed → (attention, FFN) per layer → head on all SMs, eagerly or
 * as a CUDA graph replayed per (batch, attention splits) shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "engine_impl.h"

gp_engine_params gp_engine_default_params(void)
{
    return (gp_engine_params){.max_batch = 8, .max_context = 2048, .block_size = 16, .use_graphs = true,
                              .gemm_skinny_max_m = GP_GEMM_SKINNY_DEFAULT_MAX_M, .attn_kernel = GP_ATTN_KERNEL_AUTO, .attn_stream_warps_cap = 0,
                              .attn_kv_evict_first = true, .prefill_chunk = GP_ENGINE_DEFAULT_PREFILL_CHUNK};
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

static gp_decode_attn_params attn_params(const gp_engine_params *p);

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
    if (p->gemm_skinny_max_m < 0 || p->gemm_skinny_max_m > GP_GEMM_SKINNY_MAX_M)
        GP_FAIL(GP_ERR_INVALID_ARG, "gemm_skinny_max_m %d: allowed [0, %d] (0: cuBLASLt for every GEMM)",
                p->gemm_skinny_max_m, GP_GEMM_SKINNY_MAX_M);
    gp_decode_attn_params ap = attn_params(p);
    return gp_decode_attn_params_check(&ap);
}

/* The engine's decode-attention parameters on every SM of the device. */
static gp_decode_attn_params attn_params(const gp_engine_params *p)
{
    gp_decode_attn_params ap = gp_decode_attn_default_params();
    ap.kernel = p->attn_kernel;
    ap.stream_warps_cap = p->attn_stream_warps_cap;
    ap.kv_evict_first = p->attn_kv_evict_first;
    return ap;
}

static gp_status attn_ws_bytes(const gp_config *c, const gp_engine_params *p, size_t *bytes)
{
    gp_decode_attn_params ap = attn_params(p);
    return gp_decode_attn_workspace_max(p->max_batch, c->n_heads, c->n_kv_heads, c->head_dim,
                                        p->max_context, &ap, bytes);
}

uint64_t gp_engine_device_bytes(const gp_config *c, const gp_engine_params *p)
{
    if (check_params(c, p) != GP_OK)
        return 0;
    gp_kv_layout l = kv_layout(c, p);
    size_t ws = 0;
    if (attn_ws_bytes(c, p, &ws) != GP_OK)
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

static void free_graphs(gp_engine *e)
{
    for (int i = 0; i < e->n_graphs; i++)
        cudaGraphExecDestroy(e->graphs[i].exec);
    e->n_graphs = 0;
}

void gp_engine_destroy(gp_engine *e)
{
    if (!e)
        return;
    if (e->sc.stream)
        cudaStreamSynchronize(e->sc.stream);
    free_graphs(e);
    gp_engine_cpu_ffn_free(e);
    gp_engine_sparse_free(e);
    gp_engine_prefix_free(e);
    gp_kv_memory_destroy(e->km);
    gp_gemm_ctx_destroy(e->sc.gemm);
    gp_kv_device_destroy(e->kv);
    gp_kv_tables_destroy(e->tables);
    void *dev[] = {e->inv_freq, e->resid, e->h_attn, e->h_ffn, e->qkv, e->q, e->attn, e->gu, e->act,
                   e->logits, e->tok_d, e->next_d, e->sc.attn_ws, e->tune_x, e->tune_y, e->pf_d, e->head_rows};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gp_device_free(dev[i]);
    gp_pinned_free(e->tok_h);
    gp_pinned_free(e->next_h);
    for (int i = 0; i < 2; i++) {
        gp_pinned_free(e->pf_h[i]);
        if (e->pf_ev[i]) cudaEventDestroy(e->pf_ev[i]);
    }
    if (e->ev_pf_begin) cudaEventDestroy(e->ev_pf_begin);
    if (e->ev_pf_end) cudaEventDestroy(e->ev_pf_end);
    if (e->ev_begin) cudaEventDestroy(e->ev_begin);
    if (e->ev_end) cudaEventDestroy(e->ev_end);
    if (e->ev_done) cudaEventDestroy(e->ev_done);
    if (e->sc.stream)
        cudaStreamDestroy(e->sc.stream);
    free(e);
}

static gp_status alloc_buffers(gp_engine *e)
{
    const gp_config *c = &e->cfg;
    /* R: activation rows (decode rows or prefill tokens); S: sequences */
    size_t R = (size_t)e->rows, S = (size_t)e->p.max_batch, H = (size_t)c->hidden, QD = (size_t)c->n_heads * c->head_dim;
    size_t F = (size_t)c->ffn;
    /* Each through gp_device_alloc: an out-of-memory message names the buffer
     * and its bytes, and the caller's destroy frees those already made. */
    GP_TRY(gp_device_alloc((void **)&e->inv_freq, sizeof(float) * (size_t)c->head_dim / 2,
                           "engine inv_freq [head_dim/2] fp32"));
    GP_TRY(gp_device_alloc((void **)&e->resid, sizeof(float) * R * H, "engine residual [rows][hidden] fp32"));
    /* 16-bit activations (2 bytes in either engine dtype) */
    GP_TRY(gp_device_alloc((void **)&e->h_attn, 2 * R * H, "engine h_attn [rows][hidden] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->h_ffn, 2 * R * H, "engine h_ffn [rows][hidden] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->qkv, 2 * R * (size_t)gp_config_qkv_rows(c),
                           "engine qkv [rows][qkv_rows] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->q, 2 * R * QD, "engine q [rows][n_heads*head_dim] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->attn, 2 * R * QD, "engine attn [rows][n_heads*head_dim] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->gu, 2 * R * 2 * F, "engine gate_up [rows][2*ffn] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->act, 2 * R * F, "engine act [rows][ffn] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&e->logits, sizeof(float) * S * (size_t)c->vocab,
                           "engine logits [max_batch][vocab] fp32"));
    GP_TRY(gp_device_alloc((void **)&e->tok_d, sizeof(int32_t) * S, "engine tokens [max_batch]"));
    GP_TRY(gp_device_alloc((void **)&e->next_d, sizeof(int32_t) * S, "engine next tokens [max_batch]"));
    GP_TRY(gp_pinned_alloc((void **)&e->tok_h, sizeof(int32_t) * S, "engine pinned tokens [max_batch]"));
    GP_TRY(gp_pinned_alloc((void **)&e->next_h, sizeof(int32_t) * S, "engine pinned next tokens [max_batch]"));
    GP_TRY(gp_device_alloc((void **)&e->head_rows, sizeof(float) * S * H,
                           "engine prefill last rows [max_batch][hidden] fp32"));
    e->pf_words = 3 * R + S * sizeof(gp_prefill_seq_desc) / sizeof(int32_t);
    GP_TRY(gp_device_alloc((void **)&e->pf_d, sizeof(int32_t) * e->pf_words,
                           "engine prefill chunk inputs [3 x rows + 4 x max_batch] int32"));
    for (int i = 0; i < 2; i++) {
        GP_TRY(gp_pinned_alloc((void **)&e->pf_h[i], sizeof(int32_t) * e->pf_words,
                               "engine pinned prefill chunk inputs [3 x rows + 4 x max_batch] int32"));
        GP_TRY(gp_device_event_create(&e->pf_ev[i], cudaEventDisableTiming, "engine prefill upload event"));
    }
    GP_TRY(gp_device_event_create(&e->ev_pf_begin, cudaEventDefault, "engine event ev_pf_begin"));
    GP_TRY(gp_device_event_create(&e->ev_pf_end, cudaEventDefault, "engine event ev_pf_end"));
    GP_TRY(attn_ws_bytes(c, &e->p, &e->sc.attn_ws_bytes));
    if (e->sc.attn_ws_bytes)
        GP_TRY(gp_device_alloc(&e->sc.attn_ws, e->sc.attn_ws_bytes, "decode-attention split workspace"));
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
    e->rows = act_rows(p);
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
    if ((st = gp_device_stream_create(&e->sc.stream, "engine stream")) != GP_OK ||
        (st = gp_device_event_create(&e->ev_begin, cudaEventDefault, "engine event ev_begin")) != GP_OK ||
        (st = gp_device_event_create(&e->ev_end, cudaEventDefault, "engine event ev_end")) != GP_OK ||
        (st = gp_device_event_create(&e->ev_done, cudaEventDisableTiming, "engine event ev_done")) != GP_OK)
        goto fail;
    if ((st = gp_gemm_ctx_create(e->sc.stream, 0, &e->sc.gemm)) != GP_OK ||
        (st = gp_gemm_set_skinny_max_m(e->sc.gemm, p->gemm_skinny_max_m)) != GP_OK || (st = alloc_buffers(e)) != GP_OK)
        goto fail;
    e->sc.ap = attn_params(p);
    e->sc.ap.sm_count = e->sm_count;
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
