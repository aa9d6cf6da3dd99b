/* The per-step choice of each sparse projection's kernel: both kernels timed
 * on the lane at the first step of each batch size, the union density each
 * sparse step measures read back after it, and the mask of the projections
 * the next step runs sparse (gp_sparse_crossover, gp_sparse_pick). */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"
#include "kernels.h"

#define P GP_SPARSE_PROJ_COUNT
#define TIME_REPS 3
/* The probe interval doubles at most this many times (16 x sparse_probe):
 * a batch whose union changes is noticed within that many steps. */
#define GP_SPARSE_PROBE_BACKOFF 4

struct gp_sparse_choice {
    bool timed[GP_SPARSE_MAX_B + 1];
    float cross[GP_SPARSE_MAX_B + 1][P];  /* the crossover density per batch size */
    float dens[GP_SPARSE_MAX_B + 1][P];   /* the last measured union density; < 0: none */
    int since[GP_SPARSE_MAX_B + 1][P];    /* dense steps since it was measured */
    int backoff[GP_SPARSE_MAX_B + 1][P];  /* the probe interval is sparse_probe << this */
    int B;                                /* the step in flight (0: none to observe) */
    unsigned mask;                        /* its sparse projections */
    int *snap;                            /* pinned [L][P]: the counters at its end */
    int *prev;                            /* host [L][P]: the counters at the previous end */
    long n_sparse[P], n_dense[P];
    void *x;                              /* device: [GP_SPARSE_MAX_B][max K] ones, then per projection
                                             [GP_SPARSE_MAX_B][its K] of the half pattern */
    size_t part_off[P];                   /* elements into x */
    float *y;                             /* device [GP_SPARSE_MAX_B][max N] */
    float part_density[P];                /* the half pattern's density over each projection's K */
};

/* Input k of the half pattern is active (the same inputs in every row, so
 * the union is this share whatever the rows). */
static bool half_active(size_t k)
{
    uint64_t z = (uint64_t)k * 0x9e3779b97f4a7c15ull;
    z ^= z >> 31;
    z *= 0xbf58476d1ce4e5b9ull;
    return ((z ^ (z >> 29)) & 1u) != 0;
}

/* Layer l runs projection p's sparse kernel where chosen: a threshold above
 * 0 and a transposed copy. */
static bool copied(const gp_engine *e, int l, int p)
{
    return e->sp->t[l * P + p] > 0.0f && e->sp->wt[l * P + p];
}

static bool has_copy(const gp_engine *e, int p)
{
    return e->sp->copied >> p & 1u;
}

/* The FFN projections of a step with the CPU-assisted FFN are its own. */
static bool chosen_elsewhere(const gp_engine *e, int p)
{
    return e->cf && (p == GP_SPARSE_GATE_UP || p == GP_SPARSE_DOWN);
}

void gp_engine_sparse_choice_free(gp_engine *e)
{
    gp_sparse_choice *c = e->sp ? e->sp->choice : NULL;
    if (!c)
        return;
    gp_pinned_free(c->snap);
    gp_device_free(c->x);
    gp_device_free(c->y);
    free(c->prev);
    free(c);
    e->sp->choice = NULL;
}

static gp_status choice_create(gp_engine *e, gp_lane *lane)
{
    const gp_config *cfg = &e->cfg;
    const size_t LP = (size_t)cfg->n_layers * P;
    gp_sparse_choice *c = calloc(1, sizeof *c);
    if (!c || !(c->prev = calloc(LP, sizeof(int)))) {
        free(c);
        GP_FAIL(GP_ERR_NO_MEMORY, "sparse choice: out of host memory");
    }
    e->sp->choice = c;
    for (int b = 0; b <= GP_SPARSE_MAX_B; b++)
        for (int p = 0; p < P; p++)
            c->dens[b][p] = -1.0f;
    size_t max_n = 0, max_k = 0, xn = 0;
    int Ks[P];
    for (int p = 0; p < P; p++) {
        int N;
        gp_sparse_proj_shape(cfg, (gp_sparse_proj)p, &N, &Ks[p]);
        max_k = (size_t)Ks[p] > max_k ? (size_t)Ks[p] : max_k;
        max_n = (size_t)N > max_n ? (size_t)N : max_n;
    }
    xn = (size_t)GP_SPARSE_MAX_B * max_k;
    for (int p = 0; p < P; p++) {
        c->part_off[p] = xn;
        xn += (size_t)GP_SPARSE_MAX_B * (size_t)Ks[p];
    }
    uint16_t *h = malloc(sizeof(uint16_t) * xn);
    gp_status st = h ? GP_OK : GP_ERR_NO_MEMORY;
    if (!h)
        gp_set_error("sparse choice: out of host memory");
    const uint16_t one = gp_f32_to_half(1.0f, e->dtype);
    for (size_t i = 0; h && i < c->part_off[0]; i++)
        h[i] = one;
    for (int p = 0; h && p < P; p++) {
        size_t on = 0;
        for (int k = 0; k < Ks[p]; k++)
            on += half_active((size_t)k);
        c->part_density[p] = (float)on / (float)Ks[p];
        for (int b = 0; b < GP_SPARSE_MAX_B; b++)
            for (int k = 0; k < Ks[p]; k++)
                h[c->part_off[p] + (size_t)b * Ks[p] + k] = half_active((size_t)k) ? one : 0;
    }
    if (st == GP_OK)
        st = gp_pinned_alloc((void **)&c->snap, sizeof(int) * LP, "sparse choice counters");
    if (st == GP_OK)
        st = gp_device_alloc(&c->x, sizeof(uint16_t) * xn, "sparse choice timing inputs");
    if (st == GP_OK)
        st = gp_device_alloc((void **)&c->y, sizeof(float) * (size_t)GP_SPARSE_MAX_B * max_n,
                             "sparse choice timing outputs");
    if (st == GP_OK) {
        cudaError_t ce = cudaMemcpyAsync(c->x, h, sizeof(uint16_t) * xn, cudaMemcpyHostToDevice, lane->stream);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(lane->stream); /* h is freed below */
        if (ce != cudaSuccess)
            st = gp_cuda_fail(ce, "the sparse choice's timing inputs", __FILE__, __LINE__);
    }
    free(h);
    if (st != GP_OK)
        gp_engine_sparse_choice_free(e);
    return st;
}

/* One kernel path of projection p at B rows, as the step would run it:
 * sparse (x of `part` selects the half pattern) or dense. */
static gp_status run_path(gp_engine *e, gp_lane *lane, int p, int layer, int B, bool sparse, bool part)
{
    gp_sparse_choice *c = e->sp->choice;
    int N, K;
    gp_sparse_proj_shape(&e->cfg, (gp_sparse_proj)p, &N, &K);
    const int i = layer * P + p;
    const void *wt = e->sp->wt[i]; /* as the dense weight too: the same bytes, read as [N][K] */
    const void *x = (const uint16_t *)c->x + (part ? c->part_off[p] : 0);
    const bool ffn = p == GP_SPARSE_GATE_UP || p == GP_SPARSE_DOWN;
    const gp_gemm_out out = p == GP_SPARSE_QKV || p == GP_SPARSE_GATE_UP ? GP_GEMM_OUT_HALF : GP_GEMM_OUT_F32_ACC;
    void *y = c->y, *act = (char *)c->y + sizeof(uint16_t) * (size_t)B * (size_t)N;
    if (sparse) {
        const bool swiglu = p == GP_SPARSE_GATE_UP;
        return gp_sparse_gemv(e->dtype, B, N, K, x, wt, 0.0f, swiglu ? act : y,
                              swiglu ? GP_SPARSE_OUT_SWIGLU : (int)out, e->sp->ws[ffn], e->sp->ws_bytes,
                              lane->ap.sm_count, NULL, lane->stream);
    }
    GP_TRY(gp_gemm(lane->gemm, e->dtype, B, N, K, x, wt, y, out));
    if (p == GP_SPARSE_GATE_UP)
        GP_TRY(gp_swiglu(e->dtype, y, act, B, N / 2, lane->stream));
    return GP_OK;
}

/* One sample is the path over every layer with a copy, as a step runs it:
 * each layer's weights differ, so the sample streams them from HBM (one
 * layer's, timed again and again, would come from L2: QKV's and O's fit). */
static gp_status time_path(gp_engine *e, gp_lane *lane, int p, int B, bool sparse, bool part, cudaEvent_t ev[2],
                           float *ms)
{
    float t[TIME_REPS];
    int layers = 0;
    for (int l = 0; l < e->cfg.n_layers; l++)
        if (copied(e, l, p)) {
            GP_TRY(run_path(e, lane, p, l, B, sparse, part)); /* warm-up */
            layers++;
        }
    for (int r = 0; r < TIME_REPS; r++) {
        GP_CUDA_TRY(cudaEventRecord(ev[0], lane->stream));
        for (int l = 0; l < e->cfg.n_layers; l++)
            if (copied(e, l, p))
                GP_TRY(run_path(e, lane, p, l, B, sparse, part));
        GP_CUDA_TRY(cudaEventRecord(ev[1], lane->stream));
        GP_TRY(gp_device_event_wait(ev[1], "the sparse choice's timing"));
        GP_CUDA_TRY(cudaEventElapsedTime(&t[r], ev[0], ev[1]));
        t[r] /= (float)layers;
    }
    *ms = gp_median_f(t, TIME_REPS);
    return GP_OK;
}

/* Both kernels of every choosable projection at B rows, on the lane (its
 * SMs, its GEMM context): the crossover per projection. */
static gp_status time_batch(gp_engine *e, gp_lane *lane, int B)
{
    gp_sparse_choice *c = e->sp->choice;
    cudaEvent_t ev[2] = {NULL, NULL};
    GP_CUDA_TRY(cudaEventCreate(&ev[0]));
    gp_status st = GP_OK;
    cudaError_t ce = cudaEventCreate(&ev[1]);
    if (ce != cudaSuccess)
        st = gp_cuda_fail(ce, "cudaEventCreate (sparse choice)", __FILE__, __LINE__);
    for (int p = 0; p < P && st == GP_OK; p++) {
        c->cross[B][p] = 1.0f;
        if (chosen_elsewhere(e, p) || !has_copy(e, p))
            continue;
        float dense = 0, full = 0, part = 0;
        st = time_path(e, lane, p, B, false, false, ev, &dense);
        if (st == GP_OK)
            st = time_path(e, lane, p, B, true, false, ev, &full);
        if (st == GP_OK)
            st = time_path(e, lane, p, B, true, true, ev, &part);
        if (st == GP_OK)
            c->cross[B][p] = gp_sparse_crossover(dense, full, part, c->part_density[p]);
    }
    cudaEventDestroy(ev[0]);
    if (ev[1])
        cudaEventDestroy(ev[1]);
    if (st == GP_OK)
        c->timed[B] = true;
    return st;
}

gp_status gp_engine_sparse_plan(gp_engine *e, gp_lane *lane, int B, bool choose, unsigned *mask)
{
    unsigned m = e->sp ? e->sp->copied : 0u;
    *mask = m;
    if (!e->sp || B < 1 || B > GP_SPARSE_MAX_B)
        return GP_OK;
    if (!e->sp->choice)
        GP_TRY(choice_create(e, lane));
    gp_sparse_choice *c = e->sp->choice;
    c->B = 0;
    if (choose && !e->p.sparse_always) {
        if (!c->timed[B])
            GP_TRY(time_batch(e, lane, B));
        for (int p = 0; p < P; p++)
            if ((m >> p & 1u) && !chosen_elsewhere(e, p) &&
                !gp_sparse_pick(c->cross[B][p], c->dens[B][p], c->since[B][p],
                                e->p.sparse_probe << c->backoff[B][p]))
                m &= ~(1u << p);
        c->B = B;
        c->mask = m;
    }
    for (int p = 0; p < P; p++) {
        if (m >> p & 1u)
            c->n_sparse[p]++;
        else
            c->n_dense[p]++;
    }
    *mask = m;
    return GP_OK;
}

gp_status gp_engine_sparse_snapshot(gp_engine *e, cudaStream_t s)
{
    gp_sparse_choice *c = e->sp ? e->sp->choice : NULL;
    if (!c || !c->B)
        return GP_OK;
    GP_CUDA_TRY(cudaMemcpyAsync(c->snap, e->sp->active, sizeof(int) * (size_t)e->cfg.n_layers * P,
                                cudaMemcpyDeviceToHost, s));
    return GP_OK;
}

void gp_engine_sparse_observe(gp_engine *e)
{
    gp_sparse_choice *c = e->sp ? e->sp->choice : NULL;
    if (!c || !c->B)
        return;
    const int L = e->cfg.n_layers, B = c->B;
    for (int p = 0; p < P; p++) {
        if (chosen_elsewhere(e, p))
            continue;
        if (!(c->mask >> p & 1u)) {
            c->since[B][p]++;
            continue;
        }
        int N, K;
        gp_sparse_proj_shape(&e->cfg, (gp_sparse_proj)p, &N, &K);
        long long on = 0, all = 0;
        for (int l = 0; l < L; l++)
            if (copied(e, l, p)) {
                on += (long long)c->snap[l * P + p] - c->prev[l * P + p];
                all += K;
            }
        if (all > 0) {
            const float d = (float)((double)on / (double)all);
            /* a measurement that confirms dense waits twice as long for the next one */
            int *bo = &c->backoff[B][p];
            if (d < c->cross[B][p])
                *bo = 0;
            else if (c->dens[B][p] >= 0 && *bo < GP_SPARSE_PROBE_BACKOFF)
                (*bo)++;
            c->dens[B][p] = d;
            c->since[B][p] = 0;
        }
    }
    memcpy(c->prev, c->snap, sizeof(int) * (size_t)L * P);
    c->B = 0;
}

void gp_engine_sparse_choice_reset(gp_engine *e)
{
    gp_sparse_choice *c = e->sp ? e->sp->choice : NULL;
    if (!c)
        return;
    memset(c->prev, 0, sizeof(int) * (size_t)e->cfg.n_layers * P);
    memset(c->n_sparse, 0, sizeof c->n_sparse);
    memset(c->n_dense, 0, sizeof c->n_dense);
}

gp_status gp_engine_sparse_steps(const gp_engine *e, long sparse[4], long dense[4])
{
    if (!e || !sparse || !dense)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_sparse_steps: engine %p, sparse %p, dense %p", (void *)e,
                (void *)sparse, (void *)dense);
    if (!e->sp)
        GP_FAIL(GP_ERR_STATE, "gp_engine_sparse_steps: no sparsity set (gp_engine_set_sparsity)");
    const gp_sparse_choice *c = e->sp->choice;
    for (int p = 0; p < P; p++) {
        sparse[p] = c ? c->n_sparse[p] : 0;
        dense[p] = c ? c->n_dense[p] : 0;
    }
    return GP_OK;
}

long gp_engine_sparse_dense_steps(const gp_engine *e, int p)
{
    const gp_sparse_choice *c = e->sp ? e->sp->choice : NULL;
    return c && has_copy(e, p) ? c->n_dense[p] : 0;
}
