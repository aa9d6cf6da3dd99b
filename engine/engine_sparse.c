/* Activation sparsity in the engine: a calibration's thresholds, the four
 * projections of every layer transposed once on the device (so the sparse
 * kernel reads an active input's weights as one contiguous row; beside
 * resident or streamed weights alike), the split workspaces, and the count
 * of active inputs for the statistics. */
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

/* The FFN projections of streamed weights whose FFN groups are on demand
 * are served by the CPU-assisted FFN's own hot cache: they get no copy. */
static bool ffn_elsewhere(const gp_engine *e)
{
    return gp_engine_weights_streamed(e) && gp_device_weights_stream_params(e->dw).ffn_on_demand;
}

/* Which projections get a transposed copy (a threshold above 0 in some
 * layer), each at a 256-byte boundary of a layer's slice (16-byte loads of
 * every row), and the larger split workspace of their shapes. */
typedef struct sparse_plan {
    bool copy[GP_SPARSE_PROJ_COUNT];
    size_t off[GP_SPARSE_PROJ_COUNT];
    size_t layer_bytes, ws;
} sparse_plan;

static void plan(const gp_config *c, const float *t, bool ffn_skip, int sm_count, sparse_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
        const bool ffn = p == GP_SPARSE_GATE_UP || p == GP_SPARSE_DOWN;
        for (int l = 0; l < c->n_layers && !(ffn && ffn_skip); l++)
            pl->copy[p] |= t[l * GP_SPARSE_PROJ_COUNT + p] > 0.0f;
        if (!pl->copy[p])
            continue;
        int N, K;
        gp_sparse_proj_shape(c, (gp_sparse_proj)p, &N, &K);
        pl->off[p] = pl->layer_bytes;
        pl->layer_bytes += ((size_t)N * K * 2 + 255) & ~(size_t)255;
        size_t w = gp_sparse_gemv_ws_bytes(GP_SPARSE_MAX_B, N, K, sm_count);
        pl->ws = w > pl->ws ? w : pl->ws;
    }
}

uint64_t gp_engine_sparse_device_bytes(const gp_config *c, const float *thresholds, bool ffn_on_demand, int sm_count)
{
    if (!c || !thresholds || sm_count < 1)
        return 0;
    sparse_plan pl;
    plan(c, thresholds, ffn_on_demand, sm_count, &pl);
    return (uint64_t)pl.layer_bytes * (uint64_t)c->n_layers + 2 * (uint64_t)pl.ws;
}

void gp_engine_sparse_free(gp_engine *e)
{
    gp_engine_sparse *sp = e->sp;
    if (!sp)
        return;
    if (e->lane.stream)
        (void)cudaStreamSynchronize(e->lane.stream); /* no step still reads them */
    gp_engine_sparse_choice_free(e);
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
    sparse_plan pl;
    plan(c, thresholds, ffn_elsewhere(e), e->sm_count, &pl);
    sp->arena_bytes = pl.layer_bytes * (size_t)L;
    sp->ws_bytes = pl.ws;
    for (int p = 0; p < P; p++)
        sp->copied |= pl.copy[p] ? 1u << p : 0u;
    /* the copies are device memory beyond the weights' own (as the CPU-assisted
     * FFN's hot cache): beside resident weights, or beside the part of a
     * streaming budget whose slots are not allocated yet */
    const size_t need = sp->arena_bytes + 2 * pl.ws;
    const uint64_t unheld = gp_device_weights_budget_unheld(e->dw);
    size_t free_b = 0, total_b = 0;
    gp_status st = GP_OK;
    cudaError_t ce = cudaMemGetInfo(&free_b, &total_b);
    if (ce != cudaSuccess) {
        st = gp_cuda_fail(ce, "cudaMemGetInfo", __FILE__, __LINE__);
    } else if ((uint64_t)need + unheld > (uint64_t)free_b) {
        gp_set_error("gp_engine_set_sparsity: the transposed projections of config %s need %zu bytes (%.2f GiB) "
                     "beside the %s weights; the device has %zu bytes (%.2f GiB) free%s%llu%s", c->name, need,
                     need / 1073741824.0, gp_engine_weights_streamed(e) ? "streamed" : "dense", free_b,
                     free_b / 1073741824.0, unheld ? ", of which " : "", (unsigned long long)unheld,
                     unheld ? " bytes are the streaming budget's slots still to be allocated" : "");
        st = GP_ERR_DEVICE_MEMORY;
    }
    if (st == GP_OK && sp->arena_bytes)
        st = gp_device_alloc(&sp->arena, sp->arena_bytes, "transposed projections (sparsity)");
    if (st == GP_OK)
        st = gp_device_alloc((void **)&sp->active, sizeof(int) * (size_t)L * P, "active-input counters");
    for (int i = 0; i < 2 && st == GP_OK && pl.ws; i++)
        st = gp_device_alloc((void **)&sp->ws[i], pl.ws, "sparse split partials");
    if (st == GP_OK)
        st = cuda_ok(cudaMemsetAsync(sp->active, 0, sizeof(int) * (size_t)L * P, e->lane.stream),
                             "cudaMemsetAsync (active-input counters)");
    /* the dense weights are read once, group by group, under their in-use
     * marks (streamed groups are copied in for it) */
    for (int l = 0; l < L && st == GP_OK && sp->arena_bytes; l++) {
        gp_weight_group *g[2] = {gp_device_weights_group(e->dw, GP_GROUP_ATTN, l),
                                 gp_device_weights_group(e->dw, GP_GROUP_FFN, l)};
        const bool use[2] = {pl.copy[GP_SPARSE_QKV] || pl.copy[GP_SPARSE_O],
                             pl.copy[GP_SPARSE_GATE_UP] || pl.copy[GP_SPARSE_DOWN]};
        bool held[2] = {false, false};
        gp_group_tensors t[2];
        memset(t, 0, sizeof t);
        for (int k = 0; k < 2 && st == GP_OK; k++)
            if (use[k] && (st = gp_weight_group_acquire(g[k], e->lane.stream, &t[k])) == GP_OK)
                held[k] = true;
        const gp_layer_weights lw = {t[0].layer.attn_norm, t[0].layer.wqkv, t[0].layer.bqkv, t[0].layer.wo,
                                     t[1].layer.ffn_norm, t[1].layer.w_gate_up, t[1].layer.w_down};
        for (int p = 0; p < P && st == GP_OK; p++) {
            if (!pl.copy[p])
                continue;
            int N, K;
            gp_sparse_proj_shape(c, (gp_sparse_proj)p, &N, &K);
            void *dst = (char *)sp->arena + (size_t)l * pl.layer_bytes + pl.off[p];
            sp->wt[l * P + p] = dst;
            st = gp_sparse_transpose(proj_weights(&lw, p), dst, N, K, e->lane.stream);
        }
        for (int k = 0; k < 2; k++) {
            gp_status rs = held[k] ? gp_weight_group_release_on(g[k], e->lane.stream) : GP_OK;
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
        /* threshold 0 (dense): every input once per served step; else what the sparse kernel counted
         * (0 for the FFN projections the CPU-assisted FFN serves on streamed weights), and every input
         * of the steps that chose the dense GEMM */
        const int p = (int)(i % GP_SPARSE_PROJ_COUNT);
        active[i] = e->sp->t[i] > 0.0f ? h[i] + (e->sp->wt[i] ? gp_engine_sparse_dense_steps(e, p) * K : 0)
                                       : e->sp->served_steps * K;
    }
    if (st == GP_OK && reset) {
        e->sp->served_steps = 0;
        gp_engine_sparse_choice_reset(e);
    }
    free(h);
    return st;
}

bool gp_engine_sparse_serves(const gp_engine *e, int step_rows, int nb)
{
    return e->sp && step_rows >= 1 && step_rows <= GP_SPARSE_MAX_B && nb <= GP_SPARSE_MAX_B;
}

/* Does the sparse kernel run projection p of layer for this call? */
static bool runs_sparse(const gp_engine *e, const gp_stage_batch *b, int layer, int p, int nb)
{
    const int i = layer * GP_SPARSE_PROJ_COUNT + p;
    return gp_engine_sparse_serves(e, b->sparse_rows, nb) && (b->sparse_mask >> p & 1u) && e->sp->t[i] > 0.0f &&
           e->sp->wt[i];
}

bool gp_engine_sparse_fused_swiglu(const gp_engine *e, const gp_stage_batch *b, int layer, int nb)
{
    return runs_sparse(e, b, layer, GP_SPARSE_GATE_UP, nb);
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

gp_status gp_engine_sparse_proj(gp_engine *e, const gp_lane *sc, const gp_stage_batch *b, int layer, int p,
                                int nb, const void *x, const void *w, void *y, gp_gemm_out out)
{
    int N, K;
    gp_sparse_proj_shape(&e->cfg, (gp_sparse_proj)p, &N, &K);
    const int i = layer * GP_SPARSE_PROJ_COUNT + p;
    if (!runs_sparse(e, b, layer, p, nb))
        return gp_gemm(sc->gemm, e->dtype, nb, N, K, x, w, y, out);
    const int side = p == GP_SPARSE_GATE_UP || p == GP_SPARSE_DOWN;
    return gp_sparse_gemv(e->dtype, nb, N, K, x, e->sp->wt[i], e->sp->t[i], y, (int)out, e->sp->ws[side],
                          e->sp->ws_bytes, sc->ap.sm_count, e->sp->active + i, sc->stream);
}
