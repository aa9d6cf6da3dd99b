/* The CPU-assisted FFN (gp_engine_set_cpu_ffn): per layer a
 * device cache of the hot neurons' weights, the cold neurons on CPU threads
 * fed through a side stream and a host callback, and the hot-set tracker
 * fed with each step's activity and reloaded between steps.
 *
 * A qualifying step's FFN stage, layer l, after the norm into h:
 *   stage stream: record fork | mask h -> hm | GEMM hm . Wh^T -> gu_h | SwiGLU
 *                 -> act_h | sparse GEMV act_h . Dh added into resid | act_h
 *                 -> pinned act[l] | wait join | resid += y_d
 *   side stream:  wait fork | h -> pinned x | callback: cold FFN x -> pinned y
 *                 | y -> y_d | record join
 * The device and pinned scratch is one set for all layers: layer l + 1's
 * fork is recorded after layer l's join was waited for and y_d added, and
 * the side stream runs its layers in order, so no buffer is reused early.
 * Only act[l] (read by the host after the step) and the cold flags are per
 * layer.
 *
 * A reload's copies run on a copy stream from the pinned packs, enqueued
 * after the step that decided it: layer l of the next step waits only for
 * layer l's copies, so they overlap the layers before it. The steps it
 * serves read no FFN weight group, so on streamed weights those groups are
 * on demand and a copy of each layer's FFN norm lives here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ffn_kernels.h"
#include "cuda_util.cuh"
#include "engine_impl.h"

typedef struct gp_engine_cpu_ffn gp_engine_cpu_ffn;

/* One layer's callback argument, written when its FFN stage is enqueued and
 * read by the callback: the previous step's callback of that layer has
 * finished by then (the host waited for the step). */
typedef struct cold_arg {
    gp_engine_cpu_ffn *cf;
    int layer, B;
    float t_gate_up, t_down;
} cold_arg;

struct gp_engine_cpu_ffn {
    gp_cpu_ffn_params p;
    int L, F, Hd, H, n_cold, max_b;
    gp_dtype dt;
    gp_hotset *hs;
    gp_hotset_plan plan;
    gp_cold_ffn *cold;
    gp_cold_pack **pack;   /* [L]: every neuron of the layer, in the engine dtype */
    unsigned char *pinned; /* [L]: pack registered with CUDA (reloads copy from it asynchronously) */
    int all_pinned;
    int *cold_list;        /* [L][F - H]: each layer's cold neurons, ascending */
    uint8_t *cold_flags;   /* [L][F - H]: the last step's cold activity, per listed neuron */
    uint8_t *active;       /* [F] scratch of the observation */
    cold_arg *args;        /* [L] */

    void *arena;           /* device, per layer [2H][hidden] gate then up rows, then [H][hidden] down^T rows */
    void *norm;            /* device [L][hidden]: the layers' FFN norm weights */
    size_t layer_elems;    /* 3 H hidden */
    uint16_t *hm, *gu, *act; /* device [max_b][hidden], [max_b][2H], [max_b][H] */
    float *y_d;            /* device [max_b][hidden] */
    float *ws;             /* sparse GEMV partials */
    size_t ws_bytes;
    uint16_t *x_h;         /* pinned [max_b][hidden] */
    float *y_h;            /* pinned [max_b][hidden] */
    uint16_t *act_h;       /* pinned [L][max_b][H] */
    cudaStream_t side;
    cudaEvent_t fork, join;
    cudaStream_t copy;     /* reloads */
    cudaEvent_t step_end;  /* the engine stream when a reload is enqueued */
    cudaEvent_t *reload_ev;/* [L]: layer's reload copies done */
    unsigned char *reload_pending; /* [L]: the next FFN part of the layer waits for reload_ev */

    unsigned char *ran;    /* [L]: layer's part enqueued in the step being run */
    int step_b;            /* rows of that step */

    /* written by the callbacks (one at a time: the side stream orders them), read after a host wait */
    gp_status cb_status;
    char cb_error[512];
    double cpu_ms;
    uint64_t cpu_bytes;
    long steps;
};

static uint16_t *layer_wh(const gp_engine_cpu_ffn *cf, int l)
{
    return (uint16_t *)cf->arena + (size_t)l * cf->layer_elems;
}

static uint16_t *layer_dh(const gp_engine_cpu_ffn *cf, int l)
{
    return layer_wh(cf, l) + (size_t)2 * cf->H * cf->Hd;
}

gp_cpu_ffn_params gp_cpu_ffn_default_params(void)
{
    gp_hotset_params hp = gp_hotset_default_params();
    gp_cold_ffn_params cp = gp_cold_ffn_default_params();
    return (gp_cpu_ffn_params){.hot_per_layer = 0, .reload_window = hp.reload_window, .decay = hp.decay,
                               .margin = hp.margin, .max_swaps = hp.max_swaps, .n_threads = cp.n_threads,
                               .chunks = cp.chunks};
}

void gp_engine_cpu_ffn_free(gp_engine *e)
{
    gp_engine_cpu_ffn *cf = e->cf;
    if (!cf)
        return;
    /* no step or callback still uses them */
    if (e->lane.stream)
        (void)cudaStreamSynchronize(e->lane.stream);
    if (cf->side) {
        (void)cudaStreamSynchronize(cf->side);
        cudaStreamDestroy(cf->side);
    }
    if (cf->copy) {
        (void)cudaStreamSynchronize(cf->copy);
        cudaStreamDestroy(cf->copy);
    }
    if (cf->fork)
        cudaEventDestroy(cf->fork);
    if (cf->join)
        cudaEventDestroy(cf->join);
    if (cf->step_end)
        cudaEventDestroy(cf->step_end);
    for (int l = 0; cf->reload_ev && l < cf->L; l++)
        if (cf->reload_ev[l])
            cudaEventDestroy(cf->reload_ev[l]);
    free(cf->reload_ev);
    free(cf->reload_pending);
    gp_device_free(cf->arena);
    gp_device_free(cf->norm);
    gp_device_free(cf->hm);
    gp_device_free(cf->gu);
    gp_device_free(cf->act);
    gp_device_free(cf->y_d);
    gp_device_free(cf->ws);
    gp_pinned_free(cf->x_h);
    gp_pinned_free(cf->y_h);
    gp_pinned_free(cf->act_h);
    for (int l = 0; cf->pack && l < cf->L; l++) {
        if (cf->pinned && cf->pinned[l])
            (void)cudaHostUnregister(gp_cold_pack_data(cf->pack[l]));
        gp_cold_pack_destroy(cf->pack[l]);
    }
    free(cf->pack);
    free(cf->pinned);
    gp_cold_ffn_destroy(cf->cold);
    gp_hotset_plan_free(&cf->plan);
    gp_hotset_destroy(cf->hs);
    free(cf->cold_list);
    free(cf->cold_flags);
    free(cf->active);
    free(cf->args);
    free(cf->ran);
    free(cf);
    e->cf = NULL;
}

static gp_status refresh_cold_lists(gp_engine_cpu_ffn *cf)
{
    for (int l = 0; l < cf->L; l++) {
        int n = 0;
        GP_TRY(gp_hotset_cold_list(cf->hs, l, cf->cold_list + (size_t)l * cf->n_cold, &n));
        if (n != cf->n_cold)
            GP_FAIL(GP_ERR_STATE, "cpu-ffn: layer %d has %d cold neurons, expected %d", l, n, cf->n_cold);
    }
    return GP_OK;
}

/* Every layer's hot cache from the packs, in the tracker's slot order: one
 * pinned staging layer at a time. */
static gp_status fill_cache(gp_engine *e, gp_engine_cpu_ffn *cf)
{
    const size_t row = (size_t)cf->Hd;
    uint16_t *stage = NULL;
    GP_TRY(gp_pinned_alloc((void **)&stage, cf->layer_elems * 2, "cpu-ffn hot-cache staging"));
    gp_status st = GP_OK;
    for (int l = 0; l < cf->L && st == GP_OK; l++) {
        const int *slots = gp_hotset_slots(cf->hs, l);
        for (int s = 0; s < cf->H; s++) {
            const uint16_t *nw = gp_cold_pack_neuron(cf->pack[l], slots[s]);
            memcpy(stage + (size_t)s * row, nw, row * 2);
            memcpy(stage + ((size_t)cf->H + s) * row, nw + row, row * 2);
            memcpy(stage + ((size_t)2 * cf->H + s) * row, nw + 2 * row, row * 2);
        }
        cudaError_t ce = cudaMemcpyAsync(layer_wh(cf, l), stage, cf->layer_elems * 2, cudaMemcpyHostToDevice,
                                         e->lane.stream);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(e->lane.stream); /* before the staging is refilled */
        if (ce != cudaSuccess)
            st = gp_cuda_fail(ce, "cudaMemcpyAsync (cpu-ffn hot cache)", __FILE__, __LINE__);
    }
    gp_pinned_free(stage);
    return st;
}

/* Page-locks the packs so reload copies are asynchronous. Failing that (a
 * locked-memory limit) reloads fall back to pageable copies waited for
 * between steps: slower, not wrong, and the statistics say which. */
static void pin_packs(gp_engine_cpu_ffn *cf)
{
    cf->all_pinned = 1;
    for (int l = 0; l < cf->L; l++) {
        cudaError_t ce = cudaHostRegister(gp_cold_pack_data(cf->pack[l]), gp_cold_pack_bytes(cf->pack[l]),
                                          cudaHostRegisterDefault);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            cf->all_pinned = 0;
            break;
        }
        cf->pinned[l] = 1;
    }
}

/* Each layer's FFN norm in the engine dtype, from the host weights. */
static gp_status upload_norms(gp_engine *e, gp_engine_cpu_ffn *cf, const gp_host_weights *w)
{
    const size_t n = (size_t)cf->Hd;
    for (int l = 0; l < cf->L; l++)
        if (!w->layers[l].ffn_norm)
            GP_FAIL(GP_ERR_INVALID_ARG, "cpu-ffn: the host weights' layer %d has no ffn_norm", l);
    uint16_t *h = malloc(n * 2 * (size_t)cf->L);
    if (!h)
        GP_FAIL(GP_ERR_NO_MEMORY, "cpu-ffn: out of host memory for the FFN norms");
    gp_status st = GP_OK;
    for (int l = 0; l < cf->L && st == GP_OK; l++) {
        char what[48];
        snprintf(what, sizeof what, "layer %d ffn_norm", l);
        st = gp_weights_convert(h + (size_t)l * n, e->dtype, w->layers[l].ffn_norm, w->dtype, n, what);
    }
    if (st == GP_OK)
        st = gp_device_alloc(&cf->norm, n * 2 * (size_t)cf->L, "cpu-ffn FFN norms");
    if (st == GP_OK) {
        cudaError_t ce = cudaMemcpy(cf->norm, h, n * 2 * (size_t)cf->L, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess)
            st = gp_cuda_fail(ce, "cudaMemcpy (cpu-ffn FFN norms)", __FILE__, __LINE__);
    }
    free(h);
    return st;
}

const void *gp_engine_cpu_ffn_norm(const gp_engine *e, int layer)
{
    return (const uint16_t *)e->cf->norm + (size_t)layer * e->cf->Hd;
}

static gp_status setup(gp_engine *e, gp_engine_cpu_ffn *cf, const gp_host_weights *w, const gp_sparsity *calib)
{
    const gp_config *c = &e->cfg;
    gp_hotset_params hp = gp_hotset_default_params();
    hp.decay = cf->p.decay;
    hp.reload_window = cf->p.reload_window;
    hp.margin = cf->p.margin;
    hp.max_swaps = cf->p.max_swaps;
    hp.hot_per_layer = cf->p.hot_per_layer;
    hp.dtype = e->dtype;
    GP_TRY(gp_hotset_create(c, &hp, calib, &cf->hs));
    GP_TRY(gp_hotset_plan_alloc(cf->hs, &cf->plan));
    gp_cold_ffn_params cp = gp_cold_ffn_default_params();
    cp.n_threads = cf->p.n_threads;
    cp.chunks = cf->p.chunks;
    GP_TRY(gp_cold_ffn_create(&cp, &cf->cold));

    const int L = cf->L, F = cf->F, H = cf->H;
    const size_t nc = (size_t)L * (size_t)(F - H);
    cf->pack = calloc((size_t)L, sizeof *cf->pack);
    cf->cold_list = malloc(sizeof(int) * (nc ? nc : 1));
    cf->cold_flags = calloc(nc ? nc : 1, 1);
    cf->active = malloc((size_t)F);
    cf->args = calloc((size_t)L, sizeof *cf->args);
    cf->ran = calloc((size_t)L, 1);
    cf->pinned = calloc((size_t)L, 1);
    cf->reload_ev = calloc((size_t)L, sizeof *cf->reload_ev);
    cf->reload_pending = calloc((size_t)L, 1);
    if (!cf->pack || !cf->cold_list || !cf->cold_flags || !cf->active || !cf->args || !cf->ran || !cf->pinned ||
        !cf->reload_ev || !cf->reload_pending)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_set_cpu_ffn: out of host memory for %d layers", L);
    for (int l = 0; l < L; l++) {
        GP_TRY(gp_cold_pack_create(w, l, e->dtype, NULL, 0, &cf->pack[l]));
        cf->args[l] = (cold_arg){.cf = cf, .layer = l};
    }
    GP_TRY(refresh_cold_lists(cf));

    const size_t Hd = (size_t)cf->Hd, MB = (size_t)cf->max_b;
    cf->layer_elems = (size_t)3 * H * Hd;
    cf->ws_bytes = gp_sparse_gemv_ws_bytes(GP_SPARSE_MAX_B, cf->Hd, H, e->sm_count);
    GP_TRY(gp_device_alloc(&cf->arena, cf->layer_elems * 2 * (size_t)L, "cpu-ffn hot cache"));
    GP_TRY(gp_device_alloc((void **)&cf->hm, MB * Hd * 2, "cpu-ffn masked FFN input"));
    GP_TRY(gp_device_alloc((void **)&cf->gu, MB * 2 * (size_t)H * 2, "cpu-ffn hot gate/up"));
    GP_TRY(gp_device_alloc((void **)&cf->act, MB * (size_t)H * 2, "cpu-ffn hot SwiGLU output"));
    GP_TRY(gp_device_alloc((void **)&cf->y_d, MB * Hd * 4, "cpu-ffn CPU partial sum"));
    GP_TRY(gp_device_alloc((void **)&cf->ws, cf->ws_bytes, "cpu-ffn sparse partials"));
    GP_TRY(gp_pinned_alloc((void **)&cf->x_h, MB * Hd * 2, "cpu-ffn host FFN input"));
    GP_TRY(gp_pinned_alloc((void **)&cf->y_h, MB * Hd * 4, "cpu-ffn host partial sum"));
    GP_TRY(gp_pinned_alloc((void **)&cf->act_h, (size_t)L * MB * (size_t)H * 2, "cpu-ffn hot activity"));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&cf->side, cudaStreamNonBlocking));
    GP_TRY(gp_device_event_create(&cf->fork, cudaEventDisableTiming, "cpu-ffn fork event"));
    GP_TRY(gp_device_event_create(&cf->join, cudaEventDisableTiming, "cpu-ffn join event"));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&cf->copy, cudaStreamNonBlocking));
    GP_TRY(gp_device_event_create(&cf->step_end, cudaEventDisableTiming, "cpu-ffn step-end event"));
    for (int l = 0; l < L; l++)
        GP_TRY(gp_device_event_create(&cf->reload_ev[l], cudaEventDisableTiming, "cpu-ffn reload event"));
    pin_packs(cf);
    GP_TRY(upload_norms(e, cf, w));
    return fill_cache(e, cf);
}

gp_status gp_engine_set_cpu_ffn(gp_engine *e, const gp_host_weights *w, const gp_sparsity *calib,
                                const gp_cpu_ffn_params *p)
{
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_cpu_ffn: engine is NULL");
    gp_engine_cpu_ffn_free(e);
    if (!w)
        return GP_OK;
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_cpu_ffn: params are NULL");
    if (e->tp_reduce)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_engine_set_cpu_ffn: the engine is a tensor-parallel rank; the CPU-assisted "
                "FFN adds its cold neurons' output into the residual itself, outside the ranks' all-reduce");
    if (!e->sp)
        GP_FAIL(GP_ERR_STATE, "gp_engine_set_cpu_ffn: no sparsity set (gp_engine_set_sparsity first: the cold "
                "and hot neurons are masked by its gate/up and down thresholds)");
    const gp_config *c = &e->cfg;
    if (w->cfg.n_layers != c->n_layers || w->cfg.hidden != c->hidden || w->cfg.ffn != c->ffn)
        GP_FAIL(GP_ERR_SHAPE, "gp_engine_set_cpu_ffn: host weights of %d layers, hidden %d, ffn %d; the engine's "
                "model has %d, %d, %d", w->cfg.n_layers, w->cfg.hidden, w->cfg.ffn, c->n_layers, c->hidden, c->ffn);
    if (c->hidden % 8 != 0)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_engine_set_cpu_ffn: hidden %d is not a multiple of 8 (the sparse down "
                "kernel's vector)", c->hidden);
    if (gp_engine_weights_streamed(e) && !gp_device_weights_stream_params(e->dw).ffn_on_demand)
        GP_FAIL(GP_ERR_STATE, "gp_engine_set_cpu_ffn: the weights are streamed with their FFN groups kept or "
                "prefetched, though no step it serves reads them; create them with "
                "gp_weights_stream_params.ffn_on_demand = 1");
    const int H = p->hot_per_layer;
    if (H < 1 || H > c->ffn || (H != c->ffn && H % GP_HOTSET_ALIGN != 0))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_set_cpu_ffn: hot_per_layer %d (allowed: a multiple of %d in 1..%d, "
                "or ffn = %d; gp_hotset_capacity derives it from a byte budget)", H, GP_HOTSET_ALIGN, c->ffn,
                c->ffn);
    gp_engine_cpu_ffn *cf = calloc(1, sizeof *cf);
    if (!cf)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_engine_set_cpu_ffn: out of host memory");
    e->cf = cf;
    cf->p = *p;
    cf->L = c->n_layers, cf->F = c->ffn, cf->Hd = c->hidden, cf->H = H, cf->n_cold = c->ffn - H;
    cf->max_b = e->p.max_batch < GP_SPARSE_MAX_B ? e->p.max_batch : GP_SPARSE_MAX_B;
    cf->dt = e->dtype;
    gp_status st = setup(e, cf, w, calib);
    if (st != GP_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", gp_last_error());
        gp_engine_cpu_ffn_free(e);
        gp_set_error("%s", why);
    }
    return st;
}

bool gp_engine_cpu_ffn_on(const gp_engine *e)
{
    return e && e->cf;
}

bool gp_engine_cpu_ffn_step(const gp_engine *e, int step_rows)
{
    return e->cf && e->sp && step_rows >= 1 && step_rows <= e->cf->max_b;
}

/* The cold neurons of one layer on the CPU. A host callback: no CUDA calls;
 * a failure is kept for the step's end and its y made NaN so the step's
 * result cannot pass for a good one. */
static void CUDART_CB cold_callback(void *arg)
{
    cold_arg *a = arg;
    gp_engine_cpu_ffn *cf = a->cf;
    const int l = a->layer;
    const double t0 = gp_now_s();
    gp_cold_ffn_stats s = {0};
    gp_status st = gp_cold_ffn_run_ex(cf->cold, cf->pack[l], a->B, cf->x_h, a->t_gate_up, a->t_down,
                                      cf->cold_list + (size_t)l * cf->n_cold, cf->n_cold, cf->y_h,
                                      cf->cold_flags + (size_t)l * cf->n_cold, &s);
    if (st != GP_OK) {
        if (cf->cb_status == GP_OK) {
            cf->cb_status = st;
            snprintf(cf->cb_error, sizeof cf->cb_error, "cpu-ffn layer %d: %s", l, gp_last_error());
        }
        for (size_t i = 0; i < (size_t)a->B * cf->Hd; i++)
            cf->y_h[i] = NAN;
    }
    cf->cpu_ms += (gp_now_s() - t0) * 1e3;
    cf->cpu_bytes += s.bytes;
}

gp_status gp_engine_cpu_ffn_part(gp_engine *e, const gp_lane *sc, int layer, int b0, int nb, int step_rows,
                                 const void *h, float *resid)
{
    gp_engine_cpu_ffn *cf = e->cf;
    cudaStream_t s = sc->stream;
    if (b0 != 0 || nb != step_rows)
        GP_FAIL(GP_ERR_UNSUPPORTED, "cpu-ffn: the FFN of rows [%d, %d) of a %d-row step; the CPU share and the "
                "activity are per step, so micro-batches (the pipelined engine) are not supported", b0, b0 + nb,
                step_rows);
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    GP_CUDA_TRY(cudaStreamIsCapturing(s, &cs));
    if (cs != cudaStreamCaptureStatusNone)
        GP_FAIL(GP_ERR_UNSUPPORTED, "cpu-ffn: the FFN stage is being captured into a graph; steps with the CPU "
                "share run eager (host callbacks and copies)");
    const int B = nb, H = cf->H, Hd = cf->Hd;
    const float t_gu = e->sp->t[layer * GP_SPARSE_PROJ_COUNT + GP_SPARSE_GATE_UP];
    const float t_down = e->sp->t[layer * GP_SPARSE_PROJ_COUNT + GP_SPARSE_DOWN];
    const size_t xbytes = (size_t)B * Hd * 2, ybytes = (size_t)B * Hd * 4;
    if (cf->n_cold > 0) {
        cf->args[layer].B = B;
        cf->args[layer].t_gate_up = t_gu;
        cf->args[layer].t_down = t_down;
        GP_CUDA_TRY(cudaEventRecord(cf->fork, s));
        GP_CUDA_TRY(cudaStreamWaitEvent(cf->side, cf->fork, 0));
        GP_CUDA_TRY(cudaMemcpyAsync(cf->x_h, h, xbytes, cudaMemcpyDeviceToHost, cf->side));
        GP_CUDA_TRY(cudaLaunchHostFunc(cf->side, cold_callback, &cf->args[layer]));
        GP_CUDA_TRY(cudaMemcpyAsync(cf->y_d, cf->y_h, ybytes, cudaMemcpyHostToDevice, cf->side));
        GP_CUDA_TRY(cudaEventRecord(cf->join, cf->side));
    }
    if (cf->reload_pending[layer]) {
        GP_CUDA_TRY(cudaStreamWaitEvent(s, cf->reload_ev[layer], 0));
        cf->reload_pending[layer] = 0;
    }
    GP_TRY(gp_cpu_ffn_mask(cf->dt, h, t_gu, cf->hm, B * Hd, s));
    GP_TRY(gp_gemm(sc->gemm, cf->dt, B, 2 * H, Hd, cf->hm, layer_wh(cf, layer), cf->gu, GP_GEMM_OUT_HALF));
    GP_TRY(gp_swiglu(cf->dt, cf->gu, cf->act, B, H, s));
    GP_TRY(gp_sparse_gemv(cf->dt, B, Hd, H, cf->act, layer_dh(cf, layer), t_down, resid, GP_SPARSE_OUT_F32_ACC,
                          cf->ws, cf->ws_bytes, sc->ap.sm_count, NULL, s));
    uint16_t *act_h = cf->act_h + (size_t)layer * cf->max_b * H;
    GP_CUDA_TRY(cudaMemcpyAsync(act_h, cf->act, (size_t)B * H * 2, cudaMemcpyDeviceToHost, s));
    if (cf->n_cold > 0) {
        GP_CUDA_TRY(cudaStreamWaitEvent(s, cf->join, 0));
        GP_TRY(gp_cpu_ffn_add(resid, cf->y_d, B * Hd, s));
    }
    cf->ran[layer] = 1;
    cf->step_b = B;
    return GP_OK;
}

void gp_engine_cpu_ffn_begin(gp_engine *e)
{
    for (int l = 0; e->cf && l < e->cf->L; l++)
        e->cf->ran[l] = 0;
}

/* Copies the swapped-in neurons' rows into their slots: the pack holds a
 * neuron's gate row, up row and down column contiguously. From pinned
 * packs on the copy stream, each layer's last copy marked for that layer's
 * next FFN part; from pageable ones on the engine stream, waited for. */
static gp_status apply_swaps(gp_engine *e, gp_engine_cpu_ffn *cf)
{
    const size_t row = (size_t)cf->Hd * 2;
    cudaStream_t s = cf->all_pinned ? cf->copy : e->lane.stream;
    if (cf->all_pinned) { /* the cache's last readers: the step just waited for */
        GP_CUDA_TRY(cudaEventRecord(cf->step_end, e->lane.stream));
        GP_CUDA_TRY(cudaStreamWaitEvent(s, cf->step_end, 0));
    }
    for (int l = 0; l < cf->L; l++) {
        for (int i = 0; i < cf->plan.n_swaps[l]; i++) {
            const gp_hotset_swap *sw = &cf->plan.swaps[(size_t)l * cf->plan.cap + i];
            const char *nw = gp_cold_pack_neuron(cf->pack[l], sw->in);
            char *wh = (char *)layer_wh(cf, l), *dh = (char *)layer_dh(cf, l);
            GP_CUDA_TRY(cudaMemcpyAsync(wh + (size_t)sw->slot * row, nw, row, cudaMemcpyHostToDevice, s));
            GP_CUDA_TRY(cudaMemcpyAsync(wh + ((size_t)cf->H + sw->slot) * row, nw + row, row,
                                        cudaMemcpyHostToDevice, s));
            GP_CUDA_TRY(cudaMemcpyAsync(dh + (size_t)sw->slot * row, nw + 2 * row, row, cudaMemcpyHostToDevice, s));
        }
        if (cf->all_pinned && cf->plan.n_swaps[l] > 0) {
            GP_CUDA_TRY(cudaEventRecord(cf->reload_ev[l], s));
            cf->reload_pending[l] = 1;
        }
    }
    if (!cf->all_pinned)
        GP_CUDA_TRY(cudaStreamSynchronize(s));
    return GP_OK;
}

gp_status gp_engine_cpu_ffn_end(gp_engine *e)
{
    gp_engine_cpu_ffn *cf = e->cf;
    if (!cf)
        return GP_OK;
    int ran = 0;
    for (int l = 0; l < cf->L; l++) {
        ran += cf->ran[l];
        cf->ran[l] = 0;
    }
    if (ran == 0)
        return GP_OK;
    if (cf->cb_status != GP_OK) {
        gp_status st = cf->cb_status;
        cf->cb_status = GP_OK;
        GP_FAIL(st, "%s", cf->cb_error);
    }
    if (ran != cf->L)
        GP_FAIL(GP_ERR_STATE, "cpu-ffn: %d of %d layers ran the CPU-assisted FFN in one step", ran, cf->L);
    const int B = cf->step_b, H = cf->H;
    for (int l = 0; l < cf->L; l++) {
        const float t_down = e->sp->t[l * GP_SPARSE_PROJ_COUNT + GP_SPARSE_DOWN];
        gp_cpu_ffn_activity(cf->dt, cf->act_h + (size_t)l * cf->max_b * H, B, H, gp_hotset_slots(cf->hs, l), t_down,
                            cf->cold_list + (size_t)l * cf->n_cold, cf->cold_flags + (size_t)l * cf->n_cold,
                            cf->n_cold, cf->F, cf->active);
        GP_TRY(gp_hotset_observe(cf->hs, l, cf->active));
    }
    int due = 0;
    GP_TRY(gp_hotset_end_step(cf->hs, &due));
    cf->steps++;
    if (!due || cf->n_cold == 0)
        return GP_OK;
    GP_TRY(gp_hotset_plan_make(cf->hs, &cf->plan));
    GP_TRY(gp_hotset_plan_commit(cf->hs, &cf->plan));
    if (cf->plan.total == 0)
        return GP_OK;
    GP_TRY(apply_swaps(e, cf));
    return refresh_cold_lists(cf);
}

gp_status gp_engine_cpu_ffn_stats(gp_engine *e, gp_cpu_ffn_stats *out, int reset)
{
    if (!e || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_cpu_ffn_stats: engine %p, out %p", (void *)e, (void *)out);
    gp_engine_cpu_ffn *cf = e->cf;
    if (!cf)
        GP_FAIL(GP_ERR_STATE, "gp_engine_cpu_ffn_stats: the CPU-assisted FFN is off (gp_engine_set_cpu_ffn)");
    gp_hotset_stats hs;
    gp_hotset_get_stats(cf->hs, &hs, reset);
    memset(out, 0, sizeof *out);
    out->hot_per_layer = cf->H;
    out->steps = cf->steps;
    out->active = hs.active;
    out->hits = hs.hits;
    out->hit_rate = hs.hit_rate;
    out->reloads = hs.reloads;
    out->swaps = hs.swaps;
    out->swap_bytes = hs.bytes;
    out->cpu_ms = cf->cpu_ms;
    out->cpu_bytes = cf->cpu_bytes;
    out->cpu_ms_per_step = cf->steps ? cf->cpu_ms / cf->steps : 0.0;
    out->cpu_bytes_per_step = cf->steps ? (double)cf->cpu_bytes / cf->steps : 0.0;
    out->hot_bytes = cf->layer_elems * 2 * (uint64_t)cf->L;
    out->reload_async = cf->all_pinned;
    for (int l = 0; l < cf->L; l++)
        out->host_bytes += gp_cold_pack_bytes(cf->pack[l]);
    if (reset) {
        cf->steps = 0;
        cf->cpu_ms = 0.0;
        cf->cpu_bytes = 0;
    }
    return GP_OK;
}
