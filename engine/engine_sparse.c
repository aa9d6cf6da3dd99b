/* Activation sparsity in the engine: a calibration's thresholds, the four
 * projections of every layer transposed once on the device (so the sparse
 * kernel reads an active input's weights as one contiguous row), the split
 * workspaces, and the count of active inputs for the statistics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

static gp_status cuda_ok(cudaError_t e, const char *what)
{
    return e == cudaSuccess ? GP_OK : gp_cuda_fail(e, what, __FILE__, __LINE__);
}

static const void *proj_weights(const gp_layer_weights *lw, int p)
{
    switch (p) {
    case GP_SPARSE_QKV: return lw->wqkv;
    case GP_SPARSE_O: return lw->wo;
    case GP_SPARSE_GATE_UP: return lw->w_gate_up;
    default: return lw->w_down;
    }
}

void gp_engine_sparse_free(gp_engine *e)
{
    gp_engine_sparse *sp = e->sp;
    if (!sp)
        return;
    if (e->lane.stream)
        (void)cudaStreamSynchronize(e->lane.stream); /* no step still reads them */
    gp_device_free(sp->arena);
    gp_device_free(sp->active);
    gp_device_free(sp->ws[0]);
    gp_device_free(sp->ws[1]);
    free(sp->t);
    free(sp->wt);
    free(sp);
    e->sp = NULL;
}

gp_status gp_engine_set_sparsity(gp_engine *e, const float *thresholds)
{
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_sparsity: engine is NULL");
    const gp_config *c = &e->cfg;
    const int L = c->n_layers, P = GP_SPARSE_PROJ_COUNT;
    /* captured steps baked the projections they launched */
    gp_engine_drop_graphs(e);
    gp_engine_cpu_ffn_free(e); /* its masks were the old thresholds' */
    gp_engine_sparse_free(e);
    if (!thresholds)
        return GP_OK;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < P; p++) {
            float t = thresholds[l * P + p];
            if (!(t >= 0.0f) || t > 3.0e38f)
                GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_sparsity: layer %d %s threshold %g: allowed a finite "
                        "value >= 0", l, gp_sparse_proj_name((gp_sparse_proj)p), (double)t);
        }
    gp_engine_sparse *sp = calloc(1, sizeof *sp);
    if (!sp)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_set_sparsity: out of host memory");
    e->sp = sp;
    sp->t = malloc(sizeof(float) * (size_t)L * P);
    sp->wt = calloc((size_t)L * P, sizeof(void *));
    if (!sp->t || !sp->wt) {
        gp_engine_sparse_free(e);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_set_sparsity: out of host memory for %d layers", L);
    }
    memcpy(sp->t, thresholds, sizeof(float) * (size_t)L * P);
    /* Streamed weights have no room for a second copy: the thresholds serve
     * the CPU-assisted FFN (its own hot cache), the GPU projections run dense. */
    if (gp_engine_weights_streamed(e)) {
        sp->dense = true;
        return GP_OK;
    }
    /* one arena, each projection at a 256-byte boundary (16-byte loads of
     * every row); a projection whose thresholds are 0 in every layer runs the
     * dense GEMM and needs no copy */
    size_t off[GP_SPARSE_PROJ_COUNT], layer_bytes = 0, ws = 0;
    bool copy[GP_SPARSE_PROJ_COUNT];
    for (int p = 0; p < P; p++) {
        copy[p] = false;
        for (int l = 0; l < L; l++)
            copy[p] |= thresholds[l * P + p] > 0.0f;
        if (!copy[p])
            continue;
        int N, K;
        gp_sparse_proj_shape(c, (gp_sparse_proj)p, &N, &K);
        off[p] = layer_bytes;
        layer_bytes += ((size_t)N * K * 2 + 255) & ~(size_t)255;
        size_t w = gp_sparse_gemv_ws_bytes(GP_SPARSE_MAX_B, N, K, e->sm_count);
        ws = w > ws ? w : ws;
    }
    sp->arena_bytes = layer_bytes * (size_t)L;
    sp->ws_bytes = ws;
    size_t free_b = 0, total_b = 0;
    gp_status st = GP_OK;
    cudaError_t ce = cudaMemGetInfo(&free_b, &total_b);
    if (ce != cudaSuccess) {
        st = gp_cuda_fail(ce, "cudaMemGetInfo", __FILE__, __LINE__);
    } else if (sp->arena_bytes + 2 * ws > free_b) {
        gp_set_error("gp_engine_set_sparsity: the transposed projections of config %s need %zu bytes (%.2f GiB) "
                     "beside the dense weights; the device has %zu bytes (%.2f GiB) free", c->name,
                     sp->arena_bytes + 2 * ws, (sp->arena_bytes + 2 * ws) / 1073741824.0, free_b,
                     free_b / 1073741824.0);
        st = GP_ERR_DEVICE_MEMORY;
    }
    if (st == GP_OK)
        st = gp_device_alloc(&sp->arena, sp->arena_bytes, "transposed projections (sparsity)");
    if (st == GP_OK)
        st = gp_device_alloc((void **)&sp->active, sizeof(int) * (size_t)L * P, "active-input counters");
    for (int i = 0; i < 2 && st == GP_OK; i++)
        st = gp_device_alloc((void **)&sp->ws[i], ws, "sparse split partials");
    if (st == GP_OK)
        st = cuda_ok(cudaMemsetAsync(sp->active, 0, sizeof(int) * (size_t)L * P, e->lane.stream),
                             "cudaMemsetAsync (active-input counters)");
    /* the dense weights are read once, group by group, under their in-use marks */
    for (int l = 0; l < L && st == GP_OK; l++) {
        gp_weight_group *g[2] = {gp_device_weights_group(e->dw, GP_GROUP_ATTN, l),
                                 gp_device_weights_group(e->dw, GP_GROUP_FFN, l)};
        for (int k = 0; k < 2 && st == GP_OK; k++)
            st = gp_weight_group_acquire(g[k], e->lane.stream);
        for (int p = 0; p < P && st == GP_OK; p++) {
            if (!copy[p])
                continue;
            int N, K;
            gp_sparse_proj_shape(c, (gp_sparse_proj)p, &N, &K);
            void *dst = (char *)sp->arena + (size_t)l * layer_bytes + off[p];
            sp->wt[l * P + p] = dst;
            st = gp_sparse_transpose(proj_weights(&e->w->layers[l], p), dst, N, K, e->lane.stream);
        }
        for (int k = 0; k < 2; k++) {
            gp_status rs = gp_weight_group_release_on(g[k], e->lane.stream);
            if (st == GP_OK)
                st = rs;
        }
    }
    if (st == GP_OK)
        st = cuda_ok(cudaStreamSynchronize(e->lane.stream), "cudaStreamSynchronize (transposes)");
    if (st != GP_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", gp_last_error());
        gp_engine_sparse_free(e);
        gp_set_error("%s", why);
    }
    return st;
}

bool gp_engine_sparse_on(const gp_engine *e)
{
    return e && e->sp;
}

gp_status gp_engine_sparsity_stats(gp_engine *e, long *active, int reset)
{
    if (!e || !active)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_sparsity_stats: engine %p, active %p", (void *)e, (void *)active);
    if (!e->sp)
        GP_FAIL(GP_ERR_STATE, "gp_engine_sparsity_stats: no sparsity set (gp_engine_set_sparsity)");
    const size_t n = (size_t)e->cfg.n_layers * GP_SPARSE_PROJ_COUNT;
    if (e->sp->dense) { /* no sparse call ran */
        memset(active, 0, sizeof(long) * n);
        return GP_OK;
    }
    int *h = malloc(sizeof(int) * n);
    if (!h)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_sparsity_stats: out of host memory");
    gp_status st = cuda_ok(cudaStreamSynchronize(e->lane.stream), "cudaStreamSynchronize (statistics)");
    if (st == GP_OK)
        st = cuda_ok(cudaMemcpy(h, e->sp->active, sizeof(int) * n, cudaMemcpyDeviceToHost),
                             "cudaMemcpy (active-input counters)");
    if (st == GP_OK && reset)
        st = cuda_ok(cudaMemset(e->sp->active, 0, sizeof(int) * n), "cudaMemset (active-input counters)");
    for (size_t i = 0; st == GP_OK && i < n; i++) {
        int N, K;
        gp_sparse_proj_shape(&e->cfg, (gp_sparse_proj)(i % GP_SPARSE_PROJ_COUNT), &N, &K);
        active[i] = e->sp->t[i] > 0.0f ? h[i] : e->sp->served_steps * K; /* dense: every input */
    }
    if (st == GP_OK && reset)
        e->sp->served_steps = 0;
    free(h);
    return st;
}

bool gp_engine_sparse_serves(const gp_engine *e, int step_rows, int nb)
{
    return e->sp && !e->sp->dense && step_rows >= 1 && step_rows <= GP_SPARSE_MAX_B && nb <= GP_SPARSE_MAX_B;
}

bool gp_engine_sparse_fused_swiglu(const gp_engine *e, int step_rows, int layer, int nb)
{
    return gp_engine_sparse_serves(e, step_rows, nb) &&
           e->sp->t[layer * GP_SPARSE_PROJ_COUNT + GP_SPARSE_GATE_UP] > 0.0f;
}

gp_status gp_engine_sparse_gate_up_swiglu(gp_engine *e, const gp_lane *sc, int layer, int nb, const void *h,
                                          void *act)
{
    const int i = layer * GP_SPARSE_PROJ_COUNT + GP_SPARSE_GATE_UP;
    int N, K;
    gp_sparse_proj_shape(&e->cfg, GP_SPARSE_GATE_UP, &N, &K);
    return gp_sparse_gemv(e->dtype, nb, N, K, h, e->sp->wt[i], e->sp->t[i], act, GP_SPARSE_OUT_SWIGLU,
                          e->sp->ws[1], e->sp->ws_bytes, sc->ap.sm_count, e->sp->active + i, sc->stream);
}

gp_status gp_engine_sparse_proj(gp_engine *e, const gp_lane *sc, int step_rows, int layer, int p, int nb,
                                const void *x, const void *w, void *y, gp_gemm_out out)
{
    int N, K;
    gp_sparse_proj_shape(&e->cfg, (gp_sparse_proj)p, &N, &K);
    const int i = layer * GP_SPARSE_PROJ_COUNT + p;
    if (!gp_engine_sparse_serves(e, step_rows, nb) || !(e->sp->t[i] > 0.0f))
        return gp_gemm(sc->gemm, e->dtype, nb, N, K, x, w, y, out);
    const int side = p == GP_SPARSE_GATE_UP || p == GP_SPARSE_DOWN;
    return gp_sparse_gemv(e->dtype, nb, N, K, x, e->sp->wt[i], e->sp->t[i], y, (int)out, e->sp->ws[side],
                          e->sp->ws_bytes, sc->ap.sm_count, e->sp->active + i, sc->stream);
}
