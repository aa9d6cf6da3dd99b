/* Device weights held as groups (attn and ffn per layer, plus head), each one
 * allocation with a ready event and an in-use count; filled by the synthetic
 * kernel or uploaded from host weights. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "gp_model.h"

struct gp_weight_group {
    gp_group_kind kind;
    int layer;          /* 0 for the head group */
    void *mem;          /* one device allocation holding the group's tensors */
    size_t bytes;
    cudaEvent_t ready;  /* recorded after the group's tensors were written */
    int in_use;         /* stages between acquire and release; __atomic builtins only */
};

struct gp_device_weights {
    gp_host_weights view;     /* device pointers; view.layers is host memory [n_layers];
                                 view.arena is NULL (the memory is in the groups) */
    gp_weight_group *groups;  /* [2*n_layers + 1]: attn l at 2l, ffn l at 2l+1, head last */
    int n_groups;
};

/* Tensors inside a group start on 256-byte boundaries, as cudaMalloc's own. */
#define GP_DW_ALIGN 256u

static const gp_tensor_kind gp_attn_kinds[] = { GP_T_ATTN_NORM, GP_T_WQKV, GP_T_WO };
static const gp_tensor_kind gp_ffn_kinds[] = { GP_T_FFN_NORM, GP_T_W_GATE_UP, GP_T_W_DOWN };
static const gp_tensor_kind gp_head_kinds[] = { GP_T_EMBED, GP_T_FINAL_NORM, GP_T_LM_HEAD };

static const char *gp_group_name(gp_group_kind k)
{
    return k == GP_GROUP_ATTN ? "attn" : k == GP_GROUP_FFN ? "ffn" : "head";
}

/* Tensor kinds of a group; tied models have no separate lm_head. */
static int gp_group_kinds(const gp_config *c, gp_group_kind g, const gp_tensor_kind **kinds)
{
    if (g == GP_GROUP_ATTN)
        return *kinds = gp_attn_kinds, 3;
    if (g == GP_GROUP_FFN)
        return *kinds = gp_ffn_kinds, 3;
    *kinds = gp_head_kinds;
    return c->tied_embeddings ? 2 : 3;
}

/* Bytes of a group with each tensor aligned; 0 on overflow. */
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
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: %s", cudaGetErrorString(e));
    }
    if (n <= 0)
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: the driver reports no devices");
    return GP_OK;
}

/* Frees whatever part of dw exists; errors are ignored because the caller is
 * already failing or tearing down. */
static void gp_dw_free(gp_device_weights *dw)
{
    if (!dw)
        return;
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

/* Allocates every group and fills it on one stream, from src when given
 * (upload) or with the synthetic kernel for seed. */
static gp_status gp_dw_create(const gp_config *cfg, const gp_host_weights *src, uint64_t seed,
                              gp_device_weights **out)
{
    GP_TRY(gp_config_validate(cfg));
    if (cfg->qkv_bias) /* until the device side implements them */
        GP_FAIL(GP_ERR_UNSUPPORTED, "device weights for config %s: q/k/v projection biases are not "
                "implemented by the CUDA engine yet (the CPU reference has them)", cfg->name);
    GP_TRY(gp_cuda_available());

    uint64_t attn = gp_group_bytes(cfg, GP_GROUP_ATTN), ffn = gp_group_bytes(cfg, GP_GROUP_FFN);
    uint64_t head = gp_group_bytes(cfg, GP_GROUP_HEAD), per_layer, layers_bytes, need;
    if (!attn || !ffn || !head || !gp_add_u64(attn, ffn, &per_layer)
        || !gp_mul_u64(per_layer, (uint64_t)cfg->n_layers, &layers_bytes)
        || !gp_add_u64(layers_bytes, head, &need))
        GP_FAIL(GP_ERR_OVERFLOW, "device weights for config %s: size overflows 64 bits",
                cfg->name);
    size_t free_b = 0, total_b = 0;
    GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (need > free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "device weights for config %s need %llu bytes (%.2f GiB) "
                "but the device has %zu bytes (%.2f GiB) free of %zu", cfg->name,
                (unsigned long long)need, (double)need / 1073741824.0, free_b,
                (double)free_b / 1073741824.0, total_b);

    gp_status st = GP_OK;
    cudaStream_t stream = NULL;
    gp_device_weights *dw = (gp_device_weights *)calloc(1, sizeof *dw);
    if (dw) {
        dw->n_groups = 2 * cfg->n_layers + 1;
        dw->groups = (gp_weight_group *)calloc((size_t)dw->n_groups, sizeof *dw->groups);
        dw->view.layers = (gp_layer_weights *)calloc((size_t)cfg->n_layers,
                                                     sizeof *dw->view.layers);
    }
    if (!dw || !dw->groups || !dw->view.layers) {
        gp_dw_free(dw);
        GP_FAIL(GP_ERR_NO_MEMORY, "device weights for config %s: cannot allocate host tables for "
                "%d layers", cfg->name, cfg->n_layers);
    }
    dw->view.cfg = *cfg;
    dw->view.dtype = GP_DTYPE_BF16;
    dw->view.arena_bytes = (size_t)need;
    /* Non-blocking: generation must not serialise with unrelated legacy-stream work. */
    if ((st = gp_device_stream_create(&stream, "device weights upload stream")) != GP_OK)
        goto fail;

    for (int gi = 0; gi < dw->n_groups; gi++) {
        gp_weight_group *g = &dw->groups[gi];
        g->kind = gi == dw->n_groups - 1 ? GP_GROUP_HEAD : (gi % 2 ? GP_GROUP_FFN : GP_GROUP_ATTN);
        g->layer = g->kind == GP_GROUP_HEAD ? 0 : gi / 2;
        g->bytes = (size_t)gp_group_bytes(cfg, g->kind);
        char what[96];
        snprintf(what, sizeof what, "weights of group %s %d (config %s)", gp_group_name(g->kind),
                 g->layer, cfg->name);
        if ((st = gp_device_alloc(&g->mem, g->bytes, what)) != GP_OK)
            goto fail;
        snprintf(what, sizeof what, "ready event of weight group %s %d", gp_group_name(g->kind),
                 g->layer);
        if ((st = gp_device_event_create(&g->ready, cudaEventDisableTiming, what)) != GP_OK)
            goto fail;
        const gp_tensor_kind *kinds;
        int nk = gp_group_kinds(cfg, g->kind, &kinds);
        size_t off = 0;
        for (int t = 0; t < nk; t++) {
            gp_tensor_kind k = kinds[t];
            uint64_t numel = gp_synth_numel(cfg, k);
            gp_bf16 *dst = (gp_bf16 *)((char *)g->mem + off);
            *gp_view_slot(&dw->view, k, g->layer) = dst;
            if (src) {
                const gp_bf16 *from = (const gp_bf16 *)*gp_view_slot((gp_host_weights *)src, k, g->layer);
                GP_CUDA_GOTO(cudaMemcpyAsync(dst, from, numel * sizeof(gp_bf16),
                                             cudaMemcpyHostToDevice, stream), st, fail);
            } else {
                st = gp_synth_fill_device(dst, numel, seed, k, g->layer, gp_synth_scale(cfg, k),
                                          stream);
                if (st != GP_OK)
                    goto fail;
            }
            off = (off + (size_t)numel * sizeof(gp_bf16) + GP_DW_ALIGN - 1)
                  & ~(size_t)(GP_DW_ALIGN - 1);
        }
        GP_CUDA_GOTO(cudaEventRecord(g->ready, stream), st, fail);
    }
    if (cfg->tied_embeddings)
        dw->view.lm_head = dw->view.embed;
    /* A load-time wait, outside any step: it surfaces asynchronous kernel or
     * copy failures here instead of in the first stage that uses a group. */
    GP_CUDA_GOTO(cudaStreamSynchronize(stream), st, fail);
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
        gp_dw_free(dw);
        gp_set_error("%s", msg);
    }
    return st;
}

extern "C" gp_status gp_device_weights_synthetic(const gp_config *cfg, uint64_t seed,
                                                 gp_device_weights **out)
{
    if (!cfg || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_synthetic: cfg and out must not be NULL");
    *out = NULL;
    return gp_dw_create(cfg, NULL, seed, out);
}

extern "C" gp_status gp_device_weights_upload(const gp_host_weights *w, gp_device_weights **out)
{
    if (!w || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_upload: w and out must not be NULL");
    *out = NULL;
    if (!w->embed || !w->final_norm || !w->lm_head || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_device_weights_upload: host weights of config %s are not "
                "allocated (a NULL tensor pointer)", w->cfg.name);
    /* Until the device side converts at upload and implements biases. */
    if (w->dtype != GP_DTYPE_BF16)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_device_weights_upload: config %s: host weights are %s; the "
                "CUDA engine takes BF16 weights only for now", w->cfg.name, gp_dtype_name(w->dtype));
    return gp_dw_create(&w->cfg, w, 0, out);
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

extern "C" gp_status gp_weight_group_acquire(gp_weight_group *g, void *stream)
{
    if (!g)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_weight_group_acquire: group is NULL");
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
    return GP_OK;
}

extern "C" void gp_weight_group_release(gp_weight_group *g)
{
    if (!g)
        return;
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

extern "C" int gp_weight_group_in_use(const gp_weight_group *g)
{
    return g ? __atomic_load_n(&g->in_use, __ATOMIC_ACQUIRE) : 0;
}
