/* Device weights held as groups (attn and ffn per layer, plus head), each one
 * allocation with a ready event and an in-use count; filled by the synthetic
 * kernel or uploaded from host weights, in the device dtype (bf16 or fp16),
 * converting from the host's dtype (F32, BF16, F16) on the way. Weights
 * beyond VRAM: a pinned host copy laid out as the groups (filled from host
 * weights, a checkpoint or the synthetic kernel), streamed by a gp_streamer. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "gp_model.h"
#include "gp_streaming.h"
#include "gp_weights.h"

struct gp_weight_group {
    gp_group_kind kind;
    int layer;          /* 0 for the head group */
    void *mem;          /* one device allocation holding the group's tensors */
    size_t bytes;
    cudaEvent_t ready;  /* recorded after the group's tensors were written */
    int in_use;         /* stages between acquire and release; __atomic builtins only */
    int sidx;           /* streamed: the group's index in dw->streamer (== its index in groups);
                           -1: resident (mem and ready above) */
    gp_group_tensors t; /* resident (and the streamed head, pinned): what an acquire grants */
    gp_device_weights *owner;
};

struct gp_device_weights {
    gp_host_weights view;     /* device pointers, view.dtype the device dtype (BF16 or F16);
                                 view.layers is host memory [n_layers];
                                 view.arena is NULL (the memory is in the groups) */
    gp_weight_group *groups;  /* [2*n_layers + 1]: attn l at 2l, ffn l at 2l+1, head last */
    int n_groups;
    /* streamed weights (gp_device_weights_streamed); NULL / 0 when resident */
    gp_streamer *streamer;
    gp_stream_backend backend;
    void *host_pinned;        /* every group laid out as on the device, cudaHostAlloc */
    uint64_t host_bytes, budget;
    gp_weights_stream_params sp;
    gp_weights_part part;     /* the groups on the device: every one but for gp_device_weights_synthetic_part */
};

static bool gp_dw_holds(const gp_weights_part *p, gp_group_kind kind, int layer)
{
    return (p->groups & (1u << kind)) &&
           (kind == GP_GROUP_HEAD || (layer >= p->layer_begin && (p->layer_end == 0 || layer < p->layer_end)));
}

/* Tensors inside a group start on 256-byte boundaries, as cudaMalloc's own. */
#define GP_DW_ALIGN 256u

static const gp_tensor_kind gp_attn_kinds[] = { GP_T_ATTN_NORM, GP_T_WQKV, GP_T_WO, GP_T_BQKV };
static const gp_tensor_kind gp_ffn_kinds[] = { GP_T_FFN_NORM, GP_T_W_GATE_UP, GP_T_W_DOWN };
static const gp_tensor_kind gp_head_kinds[] = { GP_T_EMBED, GP_T_FINAL_NORM, GP_T_LM_HEAD };

static const char *gp_group_name(gp_group_kind k)
{
    return k == GP_GROUP_ATTN ? "attn" : k == GP_GROUP_FFN ? "ffn" : "head";
}

/* Tensor kinds of a group; tied models have no separate lm_head (one device
 * copy of the table serves both), models without q/k/v biases no bqkv. */
static int gp_group_kinds(const gp_config *c, gp_group_kind g, const gp_tensor_kind **kinds)
{
    if (g == GP_GROUP_ATTN)
        return *kinds = gp_attn_kinds, c->qkv_bias ? 4 : 3;
    if (g == GP_GROUP_FFN)
        return *kinds = gp_ffn_kinds, 3;
    *kinds = gp_head_kinds;
    return c->tied_embeddings ? 2 : 3;
}

/* Bytes of a group with each tensor aligned (16-bit elements in either
 * device dtype); 0 on overflow. */
static uint64_t gp_group_bytes(const gp_config *c, gp_group_kind g)
{
    const gp_tensor_kind *kinds;
    int n = gp_group_kinds(c, g, &kinds);
    uint64_t off = 0, b;
    for (int i = 0; i < n; i++) {
        if (!gp_mul_u64(gp_synth_numel(c, kinds[i]), sizeof(gp_bf16), &b)
            || !gp_add_u64(off, b + GP_DW_ALIGN - 1, &off))
            return 0;
        off &= ~(uint64_t)(GP_DW_ALIGN - 1);
    }
    return off;
}

/* Where tensor kind (layer) lives in the engine layout, host or device. */
static void **gp_view_slot(gp_host_weights *w, gp_tensor_kind k, int layer)
{
    switch (k) {
    case GP_T_EMBED: return &w->embed;
    case GP_T_FINAL_NORM: return &w->final_norm;
    case GP_T_LM_HEAD: return &w->lm_head;
    case GP_T_ATTN_NORM: return &w->layers[layer].attn_norm;
    case GP_T_WQKV: return &w->layers[layer].wqkv;
    case GP_T_WO: return &w->layers[layer].wo;
    case GP_T_FFN_NORM: return &w->layers[layer].ffn_norm;
    case GP_T_W_GATE_UP: return &w->layers[layer].w_gate_up;
    case GP_T_W_DOWN: return &w->layers[layer].w_down;
    case GP_T_BQKV: return &w->layers[layer].bqkv;
    }
    return NULL;
}

extern "C" gp_status gp_cuda_available(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0)
        e = cudaFree(0); /* creates the context: catches prohibited or broken devices */
    /* a dead context is a fault of this process, not a missing GPU */
    if (e != cudaSuccess && (gp_cuda_code_is_sticky((int)e) || gp_device_faulted()))
        return gp_cuda_fail(e, "cudaFree(0) (context check)", __FILE__, __LINE__);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: %s", gp_cuda_absent_reason(e));
    }
    if (n <= 0)
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: %s", gp_cuda_absent_reason(cudaErrorNoDevice));
    return GP_OK;
}

/* Frees whatever part of dw exists; errors are ignored because the caller is
 * already failing or tearing down. */
static void gp_dw_free(gp_device_weights *dw)
{
    if (!dw)
        return;
    /* the streamer waits for its copies and last readers before freeing slots */
    gp_streamer_destroy(dw->streamer);
    gp_stream_cuda_backend_destroy(&dw->backend);
    if (dw->host_pinned)
        (void)cudaFreeHost(dw->host_pinned);
    for (int i = 0; dw->groups && i < dw->n_groups; i++) {
        if (dw->groups[i].ready)
            (void)cudaEventDestroy(dw->groups[i].ready);
        gp_device_free(dw->groups[i].mem);
    }
    (void)cudaGetLastError();
    free(dw->groups);
    free(dw->view.layers);
    free(dw);
}

/* Elements converted per pinned staging buffer (two, used in turn). */
#define GP_DW_STAGE_ELEMS ((uint64_t)4 << 20)

typedef struct gp_dw_stage {
    uint16_t *buf[2];    /* pinned [GP_DW_STAGE_ELEMS] */
    cudaEvent_t done[2]; /* the copy out of buf[i] has completed */
    int next;
} gp_dw_stage;

static void gp_dw_stage_free(gp_dw_stage *sg)
{
    for (int i = 0; i < 2; i++) {
        if (sg->done[i]) {
            (void)cudaEventSynchronize(sg->done[i]);
            (void)cudaEventDestroy(sg->done[i]);
        }
        gp_pinned_free(sg->buf[i]);
        sg->buf[i] = NULL, sg->done[i] = NULL;
    }
}

/* Host tensor from (n elements of dtype from) into device dst of dtype to:
 * the same dtype is one copy; another is converted in bounded pinned chunks
 * (no second host copy of the weights), each chunk's copy overlapping the
 * next chunk's conversion. */
static gp_status gp_dw_upload_tensor(void *dst, gp_dtype to, const void *from_p, gp_dtype from,
                                     uint64_t n, const char *what, gp_dw_stage *sg,
                                     cudaStream_t stream)
{
    if (from == to) {
        GP_CUDA_TRY(cudaMemcpyAsync(dst, from_p, n * 2u, cudaMemcpyHostToDevice, stream));
        return GP_OK;
    }
    if (!sg->buf[0])
        for (int i = 0; i < 2; i++) {
            GP_TRY(gp_pinned_alloc((void **)&sg->buf[i], GP_DW_STAGE_ELEMS * 2u,
                                   "weight conversion staging buffer"));
            GP_TRY(gp_device_event_create(&sg->done[i], cudaEventDisableTiming,
                                          "weight conversion staging event"));
            GP_CUDA_TRY(cudaEventRecord(sg->done[i], stream));
        }
    const size_t esz = gp_dtype_size(from);
    for (uint64_t off = 0; off < n; off += GP_DW_STAGE_ELEMS) {
        const uint64_t m = n - off < GP_DW_STAGE_ELEMS ? n - off : GP_DW_STAGE_ELEMS;
        const int i = sg->next;
        sg->next ^= 1;
        GP_CUDA_TRY(cudaEventSynchronize(sg->done[i])); /* its previous chunk has left */
        GP_TRY(gp_weights_convert(sg->buf[i], to, (const char *)from_p + off * esz, from, m, what));
        GP_CUDA_TRY(cudaMemcpyAsync((uint16_t *)dst + off, sg->buf[i], m * 2u,
                                    cudaMemcpyHostToDevice, stream));
        GP_CUDA_TRY(cudaEventRecord(sg->done[i], stream));
    }
    return GP_OK;
}

/* The label of tensor k of group g in messages: "wqkv", "layer 3 wo". */
static void gp_dw_tensor_label(const gp_weight_group *g, gp_tensor_kind k, char *buf, size_t n)
{
    if (g->kind == GP_GROUP_HEAD)
        snprintf(buf, n, "%s", gp_tensor_kind_name(k));
    else
        snprintf(buf, n, "layer %d %s", g->layer, gp_tensor_kind_name(k));
}

/* Bytes of every group of cfg together (each group as laid out on the device). */
static gp_status gp_dw_total_bytes(const gp_config *cfg, uint64_t *need)
{
    uint64_t attn = gp_group_bytes(cfg, GP_GROUP_ATTN), ffn = gp_group_bytes(cfg, GP_GROUP_FFN);
    uint64_t head = gp_group_bytes(cfg, GP_GROUP_HEAD), per_layer, layers_bytes;
    if (!attn || !ffn || !head || !gp_add_u64(attn, ffn, &per_layer)
        || !gp_mul_u64(per_layer, (uint64_t)cfg->n_layers, &layers_bytes)
        || !gp_add_u64(layers_bytes, head, need) || *need > (uint64_t)SIZE_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "device weights for config %s: size overflows 64 bits (or the address space)",
                cfg->name);
    return GP_OK;
}

/* Group gi of n_groups: attn l at 2l, ffn l at 2l + 1, the head last (layer 0). */
static gp_group_kind gp_dw_group_kind(int gi, int n_groups, int *layer)
{
    gp_group_kind k = gi == n_groups - 1 ? GP_GROUP_HEAD : (gi % 2 ? GP_GROUP_FFN : GP_GROUP_ATTN);
    *layer = k == GP_GROUP_HEAD ? 0 : gi / 2;
    return k;
}

/* A group as the streamer sees it (host bytes are the caller's): the head
 * stays on the device, pinned, as every step begins and ends with it; the
 * ffn groups are on demand when sp says so. */
static gp_stream_group gp_dw_stream_desc(gp_group_kind kind, int layer, uint64_t bytes,
                                         const gp_weights_stream_params *sp)
{
    gp_stream_group d;
    memset(&d, 0, sizeof d);
    d.kind = (gp_stream_kind)kind;
    d.layer = kind == GP_GROUP_HEAD ? -1 : layer;
    d.bytes = bytes;
    d.pinned = kind == GP_GROUP_HEAD;
    d.on_demand = kind == GP_GROUP_FFN && sp->ffn_on_demand;
    return d;
}

/* The host tables of device weights for cfg in dtype: the groups (attn l at
 * 2l, ffn l at 2l+1, head last) with their kind, layer and bytes, and the
 * view's per-layer table; no device memory. NULL when out of memory. */
static gp_device_weights *gp_dw_shell(const gp_config *cfg, gp_dtype dtype, uint64_t need)
{
    gp_device_weights *dw = (gp_device_weights *)calloc(1, sizeof *dw);
    if (!dw)
        return NULL;
    dw->n_groups = 2 * cfg->n_layers + 1;
    dw->groups = (gp_weight_group *)calloc((size_t)dw->n_groups, sizeof *dw->groups);
    dw->view.layers = (gp_layer_weights *)calloc((size_t)cfg->n_layers, sizeof *dw->view.layers);
    if (!dw->groups || !dw->view.layers) {
        gp_dw_free(dw);
        return NULL;
    }
    dw->view.cfg = *cfg;
    dw->view.dtype = dtype;
    dw->view.arena_bytes = (size_t)need;
    dw->part = (gp_weights_part){.groups = GP_GROUPS_ALL};
    for (int gi = 0; gi < dw->n_groups; gi++) {
        gp_weight_group *g = &dw->groups[gi];
        g->kind = gp_dw_group_kind(gi, dw->n_groups, &g->layer);
        g->bytes = (size_t)gp_group_bytes(cfg, g->kind);
        g->sidx = -1;
        g->owner = dw;
    }
    return dw;
}

/* Where tensor kind lives among a group's granted tensors. */
static void **gp_tensors_slot(gp_group_tensors *t, gp_tensor_kind k)
{
    switch (k) {
    case GP_T_EMBED: return &t->embed;
    case GP_T_FINAL_NORM: return &t->final_norm;
    case GP_T_LM_HEAD: return &t->lm_head;
    case GP_T_ATTN_NORM: return &t->layer.attn_norm;
    case GP_T_WQKV: return &t->layer.wqkv;
    case GP_T_WO: return &t->layer.wo;
    case GP_T_FFN_NORM: return &t->layer.ffn_norm;
    case GP_T_W_GATE_UP: return &t->layer.w_gate_up;
    case GP_T_W_DOWN: return &t->layer.w_down;
    case GP_T_BQKV: return &t->layer.bqkv;
    }
    return NULL;
}

/* The tensors of a group of kind at base (a device slot laid out as
 * gp_dw_create lays out a group); the other groups' NULL. */
static void gp_dw_group_tensors(const gp_config *cfg, gp_group_kind kind, void *base, gp_group_tensors *out)
{
    memset(out, 0, sizeof *out);
    const gp_tensor_kind *kinds;
    int nk = gp_group_kinds(cfg, kind, &kinds);
    size_t off = 0;
    for (int t = 0; t < nk; t++) {
        uint64_t numel = gp_synth_numel(cfg, kinds[t]);
        *gp_tensors_slot(out, kinds[t]) = (char *)base + off;
        off = (off + (size_t)numel * 2u + GP_DW_ALIGN - 1) & ~(size_t)(GP_DW_ALIGN - 1);
    }
    if (kind == GP_GROUP_HEAD && cfg->tied_embeddings)
        out->lm_head = out->embed;
}

/* Group gi stays at base for good (resident, or the streamed head): its
 * tensors are granted by every acquire and named by the view. */
static void gp_dw_point_group(gp_device_weights *dw, int gi, void *base)
{
    const gp_config *cfg = &dw->view.cfg;
    gp_weight_group *g = &dw->groups[gi];
    gp_dw_group_tensors(cfg, g->kind, base, &g->t);
    const gp_tensor_kind *kinds;
    int nk = gp_group_kinds(cfg, g->kind, &kinds);
    for (int t = 0; t < nk; t++)
        *gp_view_slot(&dw->view, kinds[t], g->layer) = *gp_tensors_slot(&g->t, kinds[t]);
    if (g->kind == GP_GROUP_HEAD && cfg->tied_embeddings)
        dw->view.lm_head = dw->view.embed;
}

/* Allocates every group of the part held and fills it on one stream, in
 * dtype, from src when given (upload, converting src->dtype) or with the
 * synthetic kernel for seed. */
static gp_status gp_dw_create(const gp_config *cfg, gp_dtype dtype, const gp_host_weights *src,
                              uint64_t seed, const gp_weights_part *held, gp_device_weights **out)
{
    GP_TRY(gp_config_validate(cfg));
    if (!gp_dtype_is_half(dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "device weights for config %s: dtype %s, allowed bf16 (BF16) "
                "or fp16 (F16)", cfg->name, gp_dtype_name(dtype));
    GP_TRY(gp_cuda_available());

    uint64_t need;
    GP_TRY(gp_dw_total_bytes(cfg, &need));
    if (held) { /* a part: its groups' bytes (the whole's did not overflow) */
        need = gp_dw_holds(held, GP_GROUP_HEAD, 0) ? gp_group_bytes(cfg, GP_GROUP_HEAD) : 0;
        for (int l = 0; l < cfg->n_layers; l++)
            for (int k = GP_GROUP_ATTN; k <= GP_GROUP_FFN; k++)
                need += gp_dw_holds(held, (gp_group_kind)k, l) ? gp_group_bytes(cfg, (gp_group_kind)k) : 0;
    }
    size_t free_b = 0, total_b = 0;
    GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (need > free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "device weights for config %s need %llu bytes (%.2f GiB) "
                "but the device has %zu bytes (%.2f GiB) free of %zu", cfg->name,
                (unsigned long long)need, (double)need / 1073741824.0, free_b,
                (double)free_b / 1073741824.0, total_b);

    gp_status st = GP_OK;
    cudaStream_t stream = NULL;
    gp_dw_stage stage;
    memset(&stage, 0, sizeof stage);
    gp_device_weights *dw = gp_dw_shell(cfg, dtype, need);
    if (!dw)
        GP_FAIL(GP_ERR_NO_MEMORY, "device weights for config %s: cannot allocate host tables for "
                "%d layers", cfg->name, cfg->n_layers);
    /* Non-blocking: generation must not serialise with unrelated legacy-stream work. */
    if (held)
        dw->part = *held;
    if ((st = gp_device_stream_create(&stream, "device weights upload stream")) != GP_OK)
        goto fail;

    for (int gi = 0; gi < dw->n_groups; gi++) {
        gp_weight_group *g = &dw->groups[gi];
        if (!gp_dw_holds(&dw->part, g->kind, g->layer))
            continue; /* not on this device: its acquire says so */
        char what[96];
        snprintf(what, sizeof what, "weights of group %s %d (config %s)", gp_group_name(g->kind),
                 g->layer, cfg->name);
        if ((st = gp_device_alloc(&g->mem, g->bytes, what)) != GP_OK)
            goto fail;
        snprintf(what, sizeof what, "ready event of weight group %s %d", gp_group_name(g->kind),
                 g->layer);
        if ((st = gp_device_event_create(&g->ready, cudaEventDisableTiming, what)) != GP_OK)
            goto fail;
        gp_dw_point_group(dw, gi, g->mem);
        const gp_tensor_kind *kinds;
        int nk = gp_group_kinds(cfg, g->kind, &kinds);
        for (int t = 0; t < nk; t++) {
            gp_tensor_kind k = kinds[t];
            uint64_t numel = gp_synth_numel(cfg, k);
            void *dst = *gp_view_slot(&dw->view, k, g->layer);
            if (src) {
                const void *from = *gp_view_slot((gp_host_weights *)src, k, g->layer);
                char tname[64];
                gp_dw_tensor_label(g, k, tname, sizeof tname);
                st = gp_dw_upload_tensor(dst, dtype, from, src->dtype, numel, tname, &stage, stream);
            } else {
                st = gp_synth_fill_device(dst, dtype, numel, seed, k, g->layer,
                                                gp_synth_scale(cfg, k), stream);
            }
            if (st != GP_OK)
                goto fail;
        }
        GP_CUDA_GOTO(cudaEventRecord(g->ready, stream), st, fail);
    }
    /* A load-time wait, outside any step: it surfaces asynchronous kernel or
     * copy failures here instead of in the first stage that uses a group. */
    GP_CUDA_GOTO(cudaStreamSynchronize(stream), st, fail);
    gp_dw_stage_free(&stage);
    GP_CUDA_GOTO(cudaStreamDestroy(stream), st, fail_nostream);
    *out = dw;
    return GP_OK;
fail:
    if (stream) {
        (void)cudaStreamSynchronize(stream); /* kernels may still write the groups */
        (void)cudaStreamDestroy(stream);
    }
fail_nostream:
    {
        /* Keep the first failure's message through the cleanup. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        gp_dw_stage_free(&stage);
        gp_dw_free(dw);
        gp_set_error("%s", msg);
    }
    return st;
}

/* Host weights an upload can take: allocated, of F32, BF16 or F16, with the
 * q/k/v biases their config declares. who names the caller in messages. */
static gp_status gp_dw_check_host(const gp_host_weights *w, const char *who)
{
    if (!w)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: host weights are NULL", who);
    if (!w->embed || !w->final_norm || !w->lm_head || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: host weights of config %s are not allocated (a NULL tensor pointer)",
                who, w->cfg.name);
    if (w->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(w->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: config %s: host weights of dtype %s, allowed F32, BF16 or F16", who,
                w->cfg.name, gp_dtype_name(w->dtype));
    for (int l = 0; w->cfg.qkv_bias && l < w->cfg.n_layers; l++)
        if (!w->layers[l].bqkv)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: config %s has q/k/v biases but layer %d has no bqkv", who,
                    w->cfg.name, l);
    return GP_OK;
}

extern "C" gp_weights_stream_params gp_weights_stream_default_params(void)
{
    gp_weights_stream_params p;
    memset(&p, 0, sizeof p);
    p.prefetch_depth = 2;
    p.min_window = 3;
    p.keep_resident = 1;
    p.ffn_on_demand = 0;
    return p;
}

extern "C" int gp_weights_stream_window(const gp_config *cfg, int pipelined)
{
    if (!pipelined)
        return 1;
    return cfg && cfg->qkv_bias ? 4 : 3;
}

extern "C" gp_status gp_weights_stream_check(const gp_config *cfg, const gp_weights_stream_params *spp,
                                             uint64_t *min_bytes)
{
    if (min_bytes)
        *min_bytes = 0;
    if (!cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_weights_stream_check: cfg is NULL");
    if (!spp || spp->budget_bytes == 0 || spp->prefetch_depth < 0 || spp->min_window < 1 ||
        (spp->keep_resident != 0 && spp->keep_resident != 1) ||
        (spp->ffn_on_demand != 0 && spp->ffn_on_demand != 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "streamed device weights for config %s: params %s: budget %llu bytes (> 0), "
                "prefetch depth %d (>= 0), window %d (>= 1), keep_resident %d (0 or 1), ffn_on_demand %d "
                "(0 or 1)", cfg->name, spp ? "given" : "NULL", spp ? (unsigned long long)spp->budget_bytes : 0ull,
                spp ? spp->prefetch_depth : 0, spp ? spp->min_window : 0, spp ? spp->keep_resident : 0,
                spp ? spp->ffn_on_demand : 0);
    GP_TRY(gp_config_validate(cfg));
    uint64_t need;
    GP_TRY(gp_dw_total_bytes(cfg, &need));
    int n_groups = 2 * cfg->n_layers + 1;
    gp_stream_group *sg = (gp_stream_group *)calloc((size_t)n_groups, sizeof *sg);
    int *order = (int *)calloc((size_t)n_groups, sizeof *order);
    if (!sg || !order) {
        free(sg);
        free(order);
        GP_FAIL(GP_ERR_NO_MEMORY, "streamed device weights for config %s: cannot allocate host tables for "
                "%d layers", cfg->name, cfg->n_layers);
    }
    for (int gi = 0; gi < n_groups; gi++) {
        int layer;
        gp_group_kind k = gp_dw_group_kind(gi, n_groups, &layer);
        sg[gi] = gp_dw_stream_desc(k, layer, gp_group_bytes(cfg, k), spp);
        order[gi] = gi;
    }
    /* the streamer's own check, with the parameters gp_dw_stream_start gives it */
    gp_streamer_params sp = gp_streamer_default_params();
    sp.budget_bytes = spp->budget_bytes;
    sp.prefetch_depth = spp->prefetch_depth;
    sp.min_window = spp->min_window;
    sp.keep_resident = spp->keep_resident;
    sp.groups = sg;
    sp.n_groups = n_groups;
    sp.order = order;
    sp.n_order = n_groups;
    uint64_t least = 0;
    gp_status st = gp_streamer_min_budget(&sp, &least);
    if (st == GP_OK && min_bytes)
        *min_bytes = least;
    if (st == GP_OK && (st = gp_streamer_check_budget(&sp)) != GP_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", gp_last_error());
        gp_set_error("streaming the weights of config %s (%llu bytes in all, %.2f GiB) through a VRAM budget "
                     "of %llu bytes (%.2f GiB): %s", cfg->name, (unsigned long long)need, need / 1073741824.0,
                     (unsigned long long)spp->budget_bytes, spp->budget_bytes / 1073741824.0, why);
    }
    free(sg);
    free(order);
    if (st != GP_OK || gp_cuda_available() != GP_OK)
        return st; /* without a GPU the device side is checked where the weights are made */
    size_t free_b = 0, total_b = 0;
    GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (spp->budget_bytes > free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "VRAM budget of %llu bytes (%.2f GiB) for the weights of config %s is more "
                "than the device has free: %zu bytes (%.2f GiB) of %zu bytes (%.2f GiB); give a smaller budget",
                (unsigned long long)spp->budget_bytes, spp->budget_bytes / 1073741824.0, cfg->name, free_b,
                free_b / 1073741824.0, total_b, total_b / 1073741824.0);
    return GP_OK;
}

/* What every streamed create refuses alike, before any weight is read: the
 * dtype, then the params and the budget (gp_weights_stream_check). */
static gp_status gp_dw_check_streamed_args(const gp_config *cfg, gp_dtype dtype, const gp_weights_stream_params *spp)
{
    if (!gp_dtype_is_half(dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "streamed device weights for config %s: dtype %s, allowed bf16 (BF16) "
                "or fp16 (F16)", cfg->name, gp_dtype_name(dtype));
    return gp_weights_stream_check(cfg, spp, NULL);
}

/* "N bytes (x GiB) available" into buf (gp_host_mem_available: what the
 * kernel can hand out without swapping), or why that is unknown; for the
 * refusal of the pinned copy. */
static void gp_host_mem_text(char *buf, size_t cap)
{
    uint64_t bytes;
    const char *how = "";
    if (gp_host_mem_available(&bytes, &how) == GP_OK)
        snprintf(buf, cap, "%llu bytes (%.2f GiB) available (%s)", (unsigned long long)bytes,
                 (double)bytes / 1073741824.0, how);
    else
        snprintf(buf, cap, "%s", gp_last_error());
}

/* Fills one tensor of the pinned copy: numel elements of dtype (the device
 * dtype) at dst; label ("layer 3 wqkv") names it in messages. Whatever it
 * starts on the device has finished writing dst when it returns (unless the
 * device is hung), as a failure frees the copy at once. */
typedef gp_status (*gp_dw_fill_fn)(void *ctx, gp_tensor_kind k, int layer, void *dst, uint64_t numel,
                                   gp_dtype dtype, const char *label);

/* The first half of a streamed create, after gp_dw_check_streamed_args:
 * the host tables, and one pinned host copy of every group laid out as on
 * the device, filled tensor by tensor through fill; no device memory is
 * taken here (a filler may take its own). On failure nothing is left
 * allocated. */
static gp_status gp_dw_pinned_create(const gp_config *cfg, gp_dtype dtype, const gp_weights_stream_params *spp,
                                     gp_dw_fill_fn fill, void *ctx, gp_device_weights **out)
{
    const uint64_t budget_bytes = spp->budget_bytes; /* checked by gp_dw_check_streamed_args */
    GP_TRY(gp_cuda_available());
    uint64_t need;
    GP_TRY(gp_dw_total_bytes(cfg, &need));

    gp_status st = GP_OK;
    gp_device_weights *dw = gp_dw_shell(cfg, dtype, need);
    if (!dw)
        GP_FAIL(GP_ERR_NO_MEMORY, "streamed device weights for config %s: cannot allocate host tables for "
                "%d layers", cfg->name, cfg->n_layers);
    dw->host_bytes = need;
    dw->budget = budget_bytes;
    dw->sp = *spp;
    {
        cudaError_t ce = cudaHostAlloc(&dw->host_pinned, (size_t)need, cudaHostAllocDefault);
        if (ce != cudaSuccess) {
            dw->host_pinned = NULL;
            if (gp_cuda_code_is_sticky((int)ce)) {
                st = gp_cuda_fail(ce, "cudaHostAlloc (pinned weights)", __FILE__, __LINE__);
                goto fail;
            }
            (void)cudaGetLastError();
            char avail[160];
            gp_host_mem_text(avail, sizeof avail);
            gp_set_error("host memory too small for the pinned weights (needed %llu bytes, %.2f GiB, for the "
                         "weights of config %s in %s, laid out as on the device; %s): cudaHostAlloc: %s",
                         (unsigned long long)need, need / 1073741824.0, cfg->name, gp_dtype_name(dtype), avail,
                         cudaGetErrorString(ce));
            st = GP_ERR_NO_MEMORY;
            goto fail;
        }
    }
    {
        uint64_t hoff = 0;
        for (int gi = 0; gi < dw->n_groups; gi++) {
            gp_weight_group *g = &dw->groups[gi];
            char *base = (char *)dw->host_pinned + hoff;
            const gp_tensor_kind *kinds;
            int nk = gp_group_kinds(cfg, g->kind, &kinds);
            size_t off = 0;
            for (int t = 0; t < nk; t++) {
                gp_tensor_kind k = kinds[t];
                uint64_t numel = gp_synth_numel(cfg, k);
                char tname[64];
                gp_dw_tensor_label(g, k, tname, sizeof tname);
                /* the alignment padding stays zero, as the copy moves the whole group */
                size_t end = (off + (size_t)numel * 2u + GP_DW_ALIGN - 1) & ~(size_t)(GP_DW_ALIGN - 1);
                memset(base + off + (size_t)numel * 2u, 0, end - off - (size_t)numel * 2u);
                if ((st = fill(ctx, k, g->layer, base + off, numel, dtype, tname)) != GP_OK)
                    goto fail;
                off = end;
            }
            hoff += g->bytes;
        }
    }
    *out = dw;
    return GP_OK;
fail:
    {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        gp_dw_free(dw);
        gp_set_error("%s", msg);
    }
    return st;
}

/* The second half: the CUDA streaming backend and the streamer over dw's
 * pinned copy, the head group pinned in the budget (loaded here), the attn
 * and ffn groups in the order attn 0, ffn 0, attn 1, ... Frees dw on
 * failure. */
static gp_status gp_dw_stream_start(gp_device_weights *dw, gp_device_weights **out)
{
    const gp_config *cfg = &dw->view.cfg;
    const int n_groups = dw->n_groups;
    const uint64_t need = dw->host_bytes, budget_bytes = dw->budget;
    gp_status st = GP_OK;
    gp_stream_group *sg = (gp_stream_group *)calloc((size_t)n_groups, sizeof *sg);
    int *order = (int *)calloc((size_t)n_groups, sizeof *order);
    if (!sg || !order) {
        gp_dw_free(dw);
        free(sg);
        free(order);
        GP_FAIL(GP_ERR_NO_MEMORY, "streamed device weights for config %s: cannot allocate host tables for "
                "%d layers", cfg->name, cfg->n_layers);
    }
    {
        uint64_t hoff = 0;
        for (int gi = 0; gi < n_groups; gi++) {
            gp_weight_group *g = &dw->groups[gi];
            g->sidx = gi;
            sg[gi] = gp_dw_stream_desc(g->kind, g->layer, g->bytes, &dw->sp);
            sg[gi].host = (char *)dw->host_pinned + hoff;
            order[gi] = gi; /* attn 0, ffn 0, attn 1, ..., head (pinned: skipped) */
            hoff += g->bytes;
        }
    }
    {
        int device = 0;
        GP_CUDA_GOTO(cudaGetDevice(&device), st, fail);
        if ((st = gp_stream_cuda_backend_create(device, &dw->backend)) != GP_OK)
            goto fail;
        gp_streamer_params sp = gp_streamer_default_params();
        sp.budget_bytes = budget_bytes;
        sp.prefetch_depth = dw->sp.prefetch_depth;
        sp.min_window = dw->sp.min_window;
        sp.keep_resident = dw->sp.keep_resident;
        sp.groups = sg;
        sp.n_groups = n_groups;
        sp.order = order;
        sp.n_order = n_groups;
        sp.backend = dw->backend;
        if ((st = gp_streamer_create(&sp, &dw->streamer)) != GP_OK) {
            char why[768];
            snprintf(why, sizeof why, "%s", gp_last_error());
            gp_set_error("streaming the weights of config %s (%llu bytes in all, %.2f GiB) through a VRAM budget "
                         "of %llu bytes (%.2f GiB): %s", cfg->name, (unsigned long long)need,
                         need / 1073741824.0, (unsigned long long)budget_bytes, budget_bytes / 1073741824.0, why);
            goto fail;
        }
    }
    /* the head is pinned in the budget: loaded at create, never moves */
    gp_dw_point_group(dw, n_groups - 1, gp_streamer_slot(dw->streamer, n_groups - 1));
    free(sg);
    free(order);
    *out = dw;
    return GP_OK;
fail:
    {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        gp_dw_free(dw);
        free(sg);
        free(order);
        gp_set_error("%s", msg);
    }
    return st;
}

/* Host weights: converted as the upload converts them. */
static gp_status gp_dw_fill_host(void *ctx, gp_tensor_kind k, int layer, void *dst, uint64_t numel, gp_dtype dtype,
                                 const char *label)
{
    gp_host_weights *w = (gp_host_weights *)ctx;
    return gp_weights_convert(dst, dtype, *gp_view_slot(w, k, layer), w->dtype, numel, label);
}

/* A checkpoint, read from its mapping tensor by tensor (numel is the
 * config's, which the checkpoint's shapes were checked against). */
static gp_status gp_dw_fill_checkpoint(void *ctx, gp_tensor_kind k, int layer, void *dst, uint64_t numel,
                                       gp_dtype dtype, const char *label)
{
    (void)numel;
    return gp_checkpoint_fill_tensor((const gp_checkpoint *)ctx, k, layer, dst, dtype, label);
}

/* Synthetic weights: the resident path's generator kernel (the same seed
 * and scale, so the same values) into a device staging buffer the size of
 * the largest tensor, copied from there into the pinned copy. */
typedef struct gp_dw_synth_fill {
    const gp_config *cfg;
    uint64_t seed;
    void *staging;       /* device; taken at the first tensor, after the budget was checked */
    cudaStream_t stream;
    cudaEvent_t copied;  /* the last copy out of staging has completed */
} gp_dw_synth_fill;

static gp_status gp_dw_fill_synth(void *ctx, gp_tensor_kind k, int layer, void *dst, uint64_t numel, gp_dtype dtype,
                                  const char *label)
{
    gp_dw_synth_fill *sf = (gp_dw_synth_fill *)ctx;
    if (!sf->staging) {
        uint64_t most = 0;
        for (int t = GP_T_EMBED; t <= GP_T_BQKV; t++) {
            uint64_t n = gp_synth_numel(sf->cfg, (gp_tensor_kind)t);
            most = n > most ? n : most;
        }
        /* Non-blocking: the fill must not serialise with unrelated legacy-stream work. */
        GP_TRY(gp_device_stream_create(&sf->stream, "synthetic weights staging stream"));
        GP_TRY(gp_device_event_create(&sf->copied, cudaEventDisableTiming, "synthetic weights staging event"));
        GP_TRY(gp_device_alloc(&sf->staging, (size_t)most * 2u, "synthetic weights staging buffer (the largest "
                               "tensor)"));
    }
    gp_status st = gp_synth_fill_device(sf->staging, dtype, numel, sf->seed, k, layer, gp_synth_scale(sf->cfg, k),
                                        sf->stream);
    cudaError_t e = cudaSuccess;
    if (st == GP_OK && (e = cudaMemcpyAsync(dst, sf->staging, numel * 2u, cudaMemcpyDeviceToHost, sf->stream)) !=
                           cudaSuccess)
        st = gp_cuda_fail(e, "cudaMemcpyAsync (synthetic weights, staging to pinned)", __FILE__, __LINE__);
    if (st == GP_OK && (e = cudaEventRecord(sf->copied, sf->stream)) != cudaSuccess)
        st = gp_cuda_fail(e, "cudaEventRecord (synthetic weights copied)", __FILE__, __LINE__);
    if (st != GP_OK) {
        /* what was enqueued must not write the pinned copy after it is freed */
        (void)cudaStreamSynchronize(sf->stream);
        return st;
    }
    /* the staging buffer is the next tensor's: wait for this one to leave it */
    char what[128];
    snprintf(what, sizeof what, "the copy of synthetic weights %s into pinned memory", label);
    return gp_device_event_wait(sf->copied, what);
}

/* Frees what gp_dw_fill_synth took (errors ignored: a failure is being
 * reported already, or the next CUDA call reports it). */
static void gp_dw_synth_release(gp_dw_synth_fill *sf)
{
    if (sf->stream) {
        (void)cudaStreamSynchronize(sf->stream);
        (void)cudaStreamDestroy(sf->stream);
    }
    if (sf->copied)
        (void)cudaEventDestroy(sf->copied);
    gp_device_free(sf->staging);
    sf->stream = NULL, sf->copied = NULL, sf->staging = NULL;
}

extern "C" gp_status gp_device_weights_streamed(const gp_host_weights *w, gp_dtype dtype,
                                                const gp_weights_stream_params *spp, gp_device_weights **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_streamed: out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dw_check_host(w, "gp_device_weights_streamed"));
    GP_TRY(gp_dw_check_streamed_args(&w->cfg, dtype, spp));
    gp_device_weights *dw = NULL;
    GP_TRY(gp_dw_pinned_create(&w->cfg, dtype, spp, gp_dw_fill_host, (void *)w, &dw));
    return gp_dw_stream_start(dw, out);
}

extern "C" gp_status gp_device_weights_streamed_load(const gp_model_source *src, gp_dtype dtype,
                                                     const gp_weights_stream_params *spp, gp_device_weights **out)
{
    if (!src || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_streamed_load: src and out must not be NULL");
    *out = NULL;
    gp_device_weights *dw = NULL;
    gp_status st;
    if (src->synthetic) {
        if (dtype == GP_DTYPE_AUTO)
            dtype = GP_DTYPE_BF16;
        GP_TRY(gp_dw_check_streamed_args(&src->cfg, dtype, spp));
        gp_dw_synth_fill sf;
        memset(&sf, 0, sizeof sf);
        sf.cfg = &src->cfg;
        sf.seed = src->seed;
        st = gp_dw_pinned_create(&src->cfg, dtype, spp, gp_dw_fill_synth, &sf, &dw);
        /* before the streamer takes its slots: the staging buffer counts against no budget */
        gp_dw_synth_release(&sf);
    } else {
        gp_checkpoint *ck;
        GP_TRY(gp_checkpoint_open(src->path, &ck));
        const gp_config *cfg = gp_checkpoint_config(ck);
        st = gp_checkpoint_check(ck);
        if (st == GP_OK && dtype == GP_DTYPE_AUTO)
            st = gp_dtype_resolve_auto(gp_checkpoint_dtype(ck), &dtype);
        if (st == GP_OK)
            st = gp_dw_check_streamed_args(cfg, dtype, spp);
        if (st == GP_OK)
            st = gp_dw_pinned_create(cfg, dtype, spp, gp_dw_fill_checkpoint, ck, &dw);
        gp_checkpoint_close(ck); /* the pinned copy holds every value: the mapping goes */
    }
    if (st != GP_OK)
        return st;
    return gp_dw_stream_start(dw, out);
}

extern "C" int gp_device_weights_is_streamed(const gp_device_weights *dw)
{
    return dw && dw->streamer;
}

extern "C" uint64_t gp_device_weights_budget(const gp_device_weights *dw)
{
    return dw ? dw->budget : 0;
}

extern "C" gp_weights_stream_params gp_device_weights_stream_params(const gp_device_weights *dw)
{
    gp_weights_stream_params p;
    memset(&p, 0, sizeof p);
    return dw && dw->streamer ? dw->sp : p;
}

extern "C" uint64_t gp_device_weights_budget_unheld(const gp_device_weights *dw)
{
    if (!dw || !dw->streamer)
        return 0;
    uint64_t held = gp_streamer_device_bytes(dw->streamer);
    return held < dw->budget ? dw->budget - held : 0;
}

extern "C" gp_status gp_device_weights_stream_stats(gp_device_weights *dw, gp_streamer_stats *out, int reset)
{
    if (!dw || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_stream_stats: dw and out must not be NULL");
    if (!dw->streamer)
        GP_FAIL(GP_ERR_STATE, "gp_device_weights_stream_stats: the weights are resident, not streamed");
    return gp_streamer_stats_get(dw->streamer, out, reset);
}

extern "C" gp_status gp_device_weights_stream_copy_log(gp_device_weights *dw, void *ref_event,
                                                       gp_stream_copy *out, int cap, int *n)
{
    if (n)
        *n = 0;
    if (!dw)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_stream_copy_log: dw is NULL");
    if (!dw->streamer)
        GP_FAIL(GP_ERR_STATE, "gp_device_weights_stream_copy_log: the weights are resident, not streamed");
    return gp_streamer_copy_log(dw->streamer, ref_event, out, cap, n);
}

extern "C" gp_status gp_device_weights_synthetic(const gp_config *cfg, gp_dtype dtype,
                                                   uint64_t seed, gp_device_weights **out)
{
    if (!cfg || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_synthetic: cfg and out must not be NULL");
    *out = NULL;
    return gp_dw_create(cfg, dtype, NULL, seed, NULL, out);
}

/* A part of cfg's groups, checked. */
static gp_status gp_dw_check_part(const gp_config *cfg, const gp_weights_part *part, const char *who)
{
    const int L = cfg->n_layers, end = part->layer_end ? part->layer_end : L;
    if (part->groups == 0 || (part->groups & ~GP_GROUPS_ALL) || part->layer_begin < 0 || end > L ||
        part->layer_begin >= end)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: groups 0x%x, layers [%d, %d): allowed a nonzero set of bits of 0x%x (1 "
                "attention, 2 FFN, 4 embedding and head) and a nonempty range within [0, %d) (layer_end 0: to the "
                "last)", who, part->groups, part->layer_begin, part->layer_end, GP_GROUPS_ALL, L);
    return GP_OK;
}

extern "C" gp_status gp_device_weights_synthetic_part(const gp_config *cfg, gp_dtype dtype, uint64_t seed,
                                                      const gp_weights_part *part, gp_device_weights **out)
{
    if (!cfg || !out || !part)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_synthetic_part: cfg, part and out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dw_check_part(cfg, part, "gp_device_weights_synthetic_part"));
    return gp_dw_create(cfg, dtype, NULL, seed, part, out);
}

extern "C" gp_status gp_device_weights_upload_part(const gp_host_weights *w, gp_dtype dtype,
                                                   const gp_weights_part *part, gp_device_weights **out)
{
    if (!out || !part)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_upload_part: part and out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dw_check_host(w, "gp_device_weights_upload_part"));
    GP_TRY(gp_dw_check_part(&w->cfg, part, "gp_device_weights_upload_part"));
    return gp_dw_create(&w->cfg, dtype, w, 0, part, out);
}

extern "C" gp_status gp_device_weights_upload(const gp_host_weights *w, gp_dtype dtype,
                                                gp_device_weights **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_upload: out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dw_check_host(w, "gp_device_weights_upload"));
    return gp_dw_create(&w->cfg, dtype, w, 0, NULL, out);
}

extern "C" gp_status gp_device_weights_load(const gp_model_source *src, gp_dtype dtype,
                                            gp_device_weights **out)
{
    if (!src || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_load: src and out must not be NULL");
    *out = NULL;
    if (src->synthetic)
        return gp_device_weights_synthetic(&src->cfg, dtype == GP_DTYPE_AUTO ? GP_DTYPE_BF16 : dtype, src->seed,
                                           out);
    gp_host_weights w;
    GP_TRY(gp_model_source_load_host(src, &w));
    gp_status st = dtype == GP_DTYPE_AUTO ? gp_dtype_resolve_auto(w.dtype, &dtype) : GP_OK;
    if (st == GP_OK)
        st = gp_device_weights_upload(&w, dtype, out);
    gp_host_weights_free(&w);
    return st;
}

extern "C" gp_dtype gp_device_weights_dtype(const gp_device_weights *dw)
{
    return dw ? dw->view.dtype : GP_DTYPE_COUNT;
}

/* Refuses (leaks, with a message on stderr and in gp_last_error) while any
 * group is still in use: freeing memory a stage may still enqueue work on
 * would be a use-after-free on the GPU, which is worse than a leak. */
extern "C" void gp_device_weights_destroy(gp_device_weights *dw)
{
    if (!dw)
        return;
    for (int i = 0; i < dw->n_groups; i++) {
        int n = __atomic_load_n(&dw->groups[i].in_use, __ATOMIC_ACQUIRE);
        if (n != 0) {
            gp_set_error("gp_device_weights_destroy: group %s %d is still in use (%d acquires "
                         "not released); weights not freed", gp_group_name(dw->groups[i].kind),
                         dw->groups[i].layer, n);
            fprintf(stderr, "greenpipe: %s\n", gp_last_error());
            return;
        }
    }
    gp_dw_free(dw);
}

extern "C" const gp_host_weights *gp_device_weights_view(const gp_device_weights *dw)
{
    return dw ? &dw->view : NULL;
}

/* layer is ignored for GP_GROUP_HEAD. NULL (with a message) when out of range. */
extern "C" gp_weight_group *gp_device_weights_group(gp_device_weights *dw, gp_group_kind kind,
                                                    int layer)
{
    if (!dw) {
        gp_set_error("gp_device_weights_group: dw is NULL");
        return NULL;
    }
    if (kind == GP_GROUP_HEAD)
        return &dw->groups[dw->n_groups - 1];
    int n_layers = dw->view.cfg.n_layers;
    if ((kind != GP_GROUP_ATTN && kind != GP_GROUP_FFN) || layer < 0 || layer >= n_layers) {
        gp_set_error("gp_device_weights_group: kind = %d, layer = %d: kind must be attn (0), ffn "
                     "(1) or head (2) and layer in [0, %d)", (int)kind, layer, n_layers);
        return NULL;
    }
    return &dw->groups[2 * layer + (kind == GP_GROUP_FFN)];
}

/* A streamed group: the streamer makes stream wait for its copy, and the
 * caller is granted the tensors of the slot it is in now (the slot moves
 * only while no one holds the group, so nothing shared is re-pointed); then
 * the next groups of the order are prefetched. Not under capture: a graph
 * would bake this step's slot. */
static gp_status gp_dw_acquire_streamed(gp_weight_group *g, void *stream, gp_group_tensors *out)
{
    gp_device_weights *dw = g->owner;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cap);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "cudaStreamIsCapturing", __FILE__, __LINE__);
    if (cap != cudaStreamCaptureStatusNone)
        GP_FAIL(GP_ERR_STATE, "gp_weight_group_acquire: group %s %d is streamed: its device address changes "
                "from step to step, so it cannot be captured into a CUDA graph (run eager)",
                gp_group_name(g->kind), g->layer);
    __atomic_fetch_add(&g->in_use, 1, __ATOMIC_ACQ_REL);
    gp_status st = gp_streamer_acquire(dw->streamer, g->sidx, stream);
    if (st != GP_OK) {
        __atomic_fetch_sub(&g->in_use, 1, __ATOMIC_ACQ_REL);
        return st;
    }
    if (out) {
        if (g->kind == GP_GROUP_HEAD)
            *out = g->t;
        else
            gp_dw_group_tensors(&dw->view.cfg, g->kind, gp_streamer_slot(dw->streamer, g->sidx), out);
    }
    if (g->kind != GP_GROUP_HEAD) {
        st = gp_streamer_advance(dw->streamer, g->sidx); /* order position == group index */
        if (st == GP_SOFT_FULL)
            st = GP_OK; /* no room to prefetch now: a later demand copy brings it */
        if (st != GP_OK) {
            char why[768];
            snprintf(why, sizeof why, "%s", gp_last_error());
            (void)gp_streamer_unmark(dw->streamer, g->sidx, NULL);
            __atomic_fetch_sub(&g->in_use, 1, __ATOMIC_ACQ_REL);
            gp_set_error("%s", why);
            return st;
        }
    }
    return GP_OK;
}

extern "C" gp_status gp_weight_group_acquire(gp_weight_group *g, void *stream, gp_group_tensors *out)
{
    if (!g)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_weight_group_acquire: group is NULL");
    if (g->sidx >= 0)
        return gp_dw_acquire_streamed(g, stream, out);
    if (!gp_dw_holds(&g->owner->part, g->kind, g->layer))
        GP_FAIL(GP_ERR_STATE, "gp_weight_group_acquire: group %s %d is not on this device (these weights hold "
                "only some kinds of groups: gp_device_weights_synthetic_part)", gp_group_name(g->kind), g->layer);
    /* Counted before the wait is enqueued so an evictor that sees 0 knows no
     * stage holds or is about to hold the group; acq_rel pairs with release. */
    __atomic_fetch_add(&g->in_use, 1, __ATOMIC_ACQ_REL);
    /* Inside a CUDA-graph capture the ready event was recorded outside it, so
     * the wait must become an event-wait node (the flag is invalid outside
     * capture). */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cap);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent((cudaStream_t)stream, g->ready,
                                cap == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : 0);
    if (e != cudaSuccess) {
        __atomic_fetch_sub(&g->in_use, 1, __ATOMIC_ACQ_REL);
        gp_status st = gp_cuda_fail(e, "cudaStreamWaitEvent(stream, ready)", __FILE__, __LINE__);
        char why[768];
        snprintf(why, sizeof why, "%s", gp_last_error());
        gp_set_error("gp_weight_group_acquire: group %s %d: %s", gp_group_name(g->kind), g->layer,
                     why);
        return st;
    }
    if (out)
        *out = g->t;
    return GP_OK;
}

static void gp_dw_count_release(gp_weight_group *g)
{
    /* release: the stage's host-side use of the group happens before an
     * evictor's acquire-load sees the count drop. */
    int prev = __atomic_fetch_sub(&g->in_use, 1, __ATOMIC_ACQ_REL);
    if (prev <= 0) { /* a release without an acquire: a caller bug */
        __atomic_fetch_add(&g->in_use, 1, __ATOMIC_ACQ_REL);
        fprintf(stderr, "greenpipe: gp_weight_group_release: group %s %d released more often "
                "than acquired\n", gp_group_name(g->kind), g->layer);
        assert(prev > 0);
    }
}

extern "C" gp_status gp_weight_group_release_on(gp_weight_group *g, void *stream)
{
    if (!g)
        return GP_OK;
    if (g->sidx < 0) {
        gp_dw_count_release(g);
        return GP_OK;
    }
    /* the last-reader marker on stream: the slot is not reused before the
     * stage's kernels, already enqueued there, have read it */
    gp_status st = gp_streamer_release(g->owner->streamer, g->sidx, stream);
    gp_dw_count_release(g);
    return st;
}

extern "C" void gp_weight_group_release(gp_weight_group *g)
{
    if (!g)
        return;
    if (g->sidx >= 0) { /* no stream to record the last reader on: a caller bug */
        fprintf(stderr, "greenpipe: gp_weight_group_release: group %s %d is streamed; release it with "
                "gp_weight_group_release_on (the stream its readers ran on)\n", gp_group_name(g->kind), g->layer);
        (void)gp_streamer_unmark(g->owner->streamer, g->sidx, NULL);
    }
    gp_dw_count_release(g);
}

extern "C" int gp_weight_group_in_use(const gp_weight_group *g)
{
    return g ? __atomic_load_n(&g->in_use, __ATOMIC_ACQUIRE) : 0;
}
