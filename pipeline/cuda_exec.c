/* CUDA executor: attention stages on partition A's stream, FFN stages on
 * partition F's stream of one green-context pair, ordered by device events
 * only (A_done(L,m) before FFN(L,m), F_done(L-1,m) before attention(L,m)),
 * each stage replayed from a CUDA graph captured on its partition. The fill
 * and the drain, which nothing overlaps, may run on the whole GPU instead.
 * Stages see only gp_engine.h: each gets the views its payload hands it, and
 * a micro-batch's residual rows stay where its last FFN stage left them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "cuda_util.cuh"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "gp_stage.h"
#include "gp_weights.h"

/* Stage graphs of one step shape on one pair: [2 kinds][n_layers][M]. */
typedef struct cx_graphs {
    int pair, B, M, max_len_splits[GP_PIPE_MAX_MICRO], whole_splits;
    gp_fill_drain fill_drain;
    int b0[GP_PIPE_MAX_MICRO], nb[GP_PIPE_MAX_MICRO];
    cudaGraphExec_t *exec; /* [2][n_layers][GP_PIPE_MAX_MICRO], NULL until captured */
    unsigned long used;    /* LRU stamp */
} cx_graphs;
#define CX_GRAPH_SETS 6

typedef struct cx_pair {
    gp_lane *a, *f;        /* lanes on the pool's streams, GEMM contexts with the obtained SM targets */
    gp_split_info info;
} cx_pair;

struct gp_cuda_exec {
    gp_engine *e;          /* borrowed */
    gp_green_pool *pool;   /* borrowed */
    bool use_graphs;
    gp_placement place;
    gp_fill_drain fill_drain;
    int L;
    int n_pairs, cur;
    cx_pair *pairs;
    cudaEvent_t *ev;       /* [4][n_layers][GP_PIPE_MAX_MICRO]: A begin, A done, F begin, F done */
    cudaEvent_t ev_step_begin, ev_step_end;
    cx_graphs sets[CX_GRAPH_SETS];
    cx_graphs *g;          /* the current step's set, or NULL (eager) */
    unsigned long stamp;
    /* the step in progress */
    gp_step_plan plan;
    int *seq_ids;          /* [max_batch] */
    int max_len;
    int splits[GP_PIPE_MAX_MICRO]; /* decode-attention context splits per micro-batch */
    int whole_splits;      /* the same for the first attention stage on the whole GPU */
    /* the engine's own rows of each micro-batch, which the graphs are captured over */
    gp_tensor_view home_resid[GP_PIPE_MAX_MICRO], home_qkv[GP_PIPE_MAX_MICRO], home_attn[GP_PIPE_MAX_MICRO];
    /* where each micro-batch's residual rows are now: written by the FFN
     * stage's call, read by the attention of the next layer (ordered by the
     * runner), and by the head */
    gp_tensor_view resid[GP_PIPE_MAX_MICRO];
};

enum { EV_A_BEGIN, EV_A_DONE, EV_F_BEGIN, EV_F_DONE };

static cudaEvent_t *evp(gp_cuda_exec *x, int kind, int layer, int micro)
{
    return &x->ev[((size_t)kind * x->L + layer) * GP_PIPE_MAX_MICRO + micro];
}

static cudaGraphExec_t *gslot(gp_cuda_exec *x, cx_graphs *g, int ffn, int layer, int micro)
{
    return &g->exec[((size_t)ffn * x->L + layer) * GP_PIPE_MAX_MICRO + micro];
}

static void free_set(gp_cuda_exec *x, cx_graphs *g)
{
    if (!g->exec)
        return;
    for (size_t i = 0; i < 2 * (size_t)x->L * GP_PIPE_MAX_MICRO; i++)
        if (g->exec[i])
            cudaGraphExecDestroy(g->exec[i]);
    memset(g->exec, 0, sizeof(cudaGraphExec_t) * 2 * (size_t)x->L * GP_PIPE_MAX_MICRO);
    g->B = 0;
}

/* The first attention stage and the last FFN stage of a step have nothing
 * to overlap: the other side is idle while they run (GP_FILL_DRAIN_WHOLE
 * gives them every SM). */
static bool on_whole(const gp_cuda_exec *x, int ffn, int layer, int m)
{
    if (x->fill_drain != GP_FILL_DRAIN_WHOLE)
        return false;
    return ffn ? layer == x->L - 1 && m == x->plan.M - 1 : layer == 0 && m == 0;
}

/* Where a stage runs: its partition, or the whole GPU (the engine's own
 * context) for the fill's and the drain's stages. */
static gp_lane *stage_ctx(gp_cuda_exec *x, int ffn, int layer, int m)
{
    cx_pair *p = &x->pairs[x->cur];
    if (on_whole(x, ffn, layer, m))
        return gp_engine_lane(x->e);
    return ffn ? p->f : p->a;
}

/* The stage of (ffn, layer, m) over the views it is handed: hx, the
 * activation rows an FFN stage's payload hands it, and hresid, the
 * micro-batch's residual rows where they are now (with QKVO_A, the ones its
 * payload hands an FFN stage). */
static gp_stage_kind stage_io(const gp_cuda_exec *x, int ffn, int layer, int m, const gp_tensor_view *hx,
                              const gp_tensor_view *hresid, gp_stage_io *io)
{
    const gp_config *c = gp_engine_config(x->e);
    *io = (gp_stage_io){.layer = layer, .b0 = x->plan.b0[m], .nb = x->plan.nb[m], .max_len = x->max_len,
                        .attn_splits = on_whole(x, 0, layer, m) ? x->whole_splits : x->splits[m]};
    if (x->place == GP_PLACE_QKVO_A) {
        io->resid = *hresid;
        return ffn ? GP_STAGE_FFN : GP_STAGE_ATTN;
    }
    if (!ffn) { /* QKV rows from F's previous stage (or the fill), attention output for F */
        io->x = x->home_qkv[m];
        io->y = x->home_attn[m];
        return GP_STAGE_ATTN_CORE;
    }
    /* the residual stays on F: it is the F side's state in this placement */
    io->x = *hx;
    io->resid = *hresid;
    if (layer + 1 < c->n_layers)
        io->y = x->home_qkv[m];
    return GP_STAGE_O_FFN_QKV;
}

/* The stage as captured: over the engine's own rows. */
static gp_stage_kind home_io(const gp_cuda_exec *x, int ffn, int layer, int m, gp_stage_io *io)
{
    return stage_io(x, ffn, layer, m, &x->home_attn[m], &x->home_resid[m], io);
}

static bool io_same(const gp_stage_io *a, const gp_stage_io *b)
{
    return gp_view_same(&a->x, &b->x) && gp_view_same(&a->resid, &b->resid) && gp_view_same(&a->y, &b->y);
}

/* Launches the stage of (ffn, layer, m) over io on its stream (eager). */
static gp_status run_stage(gp_cuda_exec *x, int ffn, int layer, int m, gp_stage_kind kind, const gp_stage_io *io)
{
    return gp_stage_run(stage_ctx(x, ffn, layer, m), kind, io);
}

static gp_status capture_stage(gp_cuda_exec *x, int ffn, int layer, int m, cudaGraphExec_t *out)
{
    gp_stage_io io;
    gp_stage_kind kind = home_io(x, ffn, layer, m, &io);
    char what[96];
    snprintf(what, sizeof what, "the %s stage graph of layer %d micro-batch %d", ffn ? "FFN" : "attention", layer,
             m);
    return gp_stage_capture(stage_ctx(x, ffn, layer, m), kind, &io, what, (void **)out);
}

/* The graph set for this step's shape: found, or captured (evicting the
 * least recently used) before the threads start, so no capture runs while
 * stages are being launched. */
static gp_status graphs_for_step(gp_cuda_exec *x)
{
    const gp_step_plan *pn = &x->plan;
    cx_graphs *hit = NULL, *victim = &x->sets[0];
    for (int i = 0; i < CX_GRAPH_SETS && !hit; i++) {
        cx_graphs *g = &x->sets[i];
        if (g->B == pn->B && g->M == pn->M && g->pair == x->cur && g->fill_drain == x->fill_drain &&
            g->whole_splits == x->whole_splits && !memcmp(g->nb, pn->nb, sizeof g->nb) &&
            !memcmp(g->max_len_splits, x->splits, sizeof x->splits))
            hit = g;
        if (g->used < victim->used)
            victim = g;
    }
    if (!hit) {
        hit = victim;
        free_set(x, hit);
        /* opt-in (engine params gemm_tune): each side's algorithms timed on
         * its own partition, before the capture fixes them */
        const cx_pair *p = &x->pairs[x->cur];
        for (int m = 0; m < pn->M; m++) {
            GP_TRY(gp_lane_tune_gemms(p->a, pn->nb[m]));
            GP_TRY(gp_lane_tune_gemms(p->f, pn->nb[m]));
        }
        if (x->fill_drain == GP_FILL_DRAIN_WHOLE) { /* A(0, 0), the last FFN, QKVO_F's QKV(0) */
            const int rows[3] = {pn->nb[0], pn->nb[pn->M - 1], pn->B};
            for (int i = 0; i < 3; i++)
                GP_TRY(gp_lane_tune_gemms(gp_engine_lane(x->e), rows[i]));
        }
        for (int l = 0; l < x->L; l++)
            for (int m = 0; m < pn->M; m++)
                for (int ffn = 0; ffn < 2; ffn++)
                    GP_TRY(capture_stage(x, ffn, l, m, gslot(x, hit, ffn, l, m)));
        hit->pair = x->cur;
        hit->B = pn->B;
        hit->M = pn->M;
        memcpy(hit->nb, pn->nb, sizeof hit->nb);
        memcpy(hit->b0, pn->b0, sizeof hit->b0);
        memcpy(hit->max_len_splits, x->splits, sizeof x->splits);
        hit->whole_splits = x->whole_splits;
        hit->fill_drain = x->fill_drain;
    }
    hit->used = ++x->stamp;
    x->g = hit;
    return GP_OK;
}

static gp_status cx_step_begin(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens)
{
    gp_cuda_exec *x = ctx;
    if (x->n_pairs == 0)
        GP_FAIL(GP_ERR_STATE, "CUDA executor made without a pool of partition pairs: it serves sequential steps "
                "only");
    cx_pair *p = &x->pairs[x->cur];
    x->plan = *plan;
    /* the fill: uploads and embedding where A(0, 0) runs, which follows them */
    gp_lane *fill = stage_ctx(x, 0, 0, 0);
    void *fs = gp_lane_stream(fill);
    memcpy(x->seq_ids, seq_ids, sizeof(int) * (size_t)plan->B);
    GP_TRY(gp_engine_step_prepare(x->e, plan->B, seq_ids, tokens, fs, &x->max_len));
    for (int m = 0; m < GP_PIPE_MAX_MICRO; m++) {
        x->splits[m] = 0;
        if (m >= plan->M)
            continue;
        GP_TRY(gp_lane_attn_splits(p->a, plan->nb[m], x->max_len, &x->splits[m]));
        GP_TRY(gp_engine_act_view(x->e, GP_ACT_RESID, plan->b0[m], plan->nb[m], &x->home_resid[m]));
        GP_TRY(gp_engine_act_view(x->e, GP_ACT_QKV, plan->b0[m], plan->nb[m], &x->home_qkv[m]));
        GP_TRY(gp_engine_act_view(x->e, GP_ACT_ATTN, plan->b0[m], plan->nb[m], &x->home_attn[m]));
        x->resid[m] = x->home_resid[m];
    }
    GP_TRY(gp_lane_attn_splits(gp_engine_lane(x->e), plan->nb[0], x->max_len, &x->whole_splits));
    x->g = NULL;
    if (x->use_graphs)
        GP_TRY(graphs_for_step(x));
    GP_CUDA_TRY(cudaEventRecord(x->ev_step_begin, (cudaStream_t)fs));
    gp_stage_io io = {.b0 = 0, .nb = plan->B};
    GP_TRY(gp_engine_act_view(x->e, GP_ACT_RESID, 0, plan->B, &io.resid));
    GP_TRY(gp_stage_run(fill, GP_STAGE_EMBED, &io));
    /* QKVO_F: layer 0's projection has no FFN stage before it; it runs once
     * for the whole batch here, where the first attention stage runs (F has
     * nothing to overlap it with yet). */
    if (x->place == GP_PLACE_QKVO_F) {
        GP_TRY(gp_engine_act_view(x->e, GP_ACT_QKV, 0, plan->B, &io.y));
        GP_TRY(gp_stage_run(fill, GP_STAGE_QKV, &io));
    }
    return GP_OK;
}

/* One stage, in an NVTX range on the launching thread (Nsight Systems shows
 * the producer's and the consumer's launches against the GPU timeline):
 * its graph when it is handed the views the graph was captured over, else
 * launched eagerly over the views it is handed. */
static gp_status launch(gp_cuda_exec *x, int ffn, int layer, int m, gp_stage_kind kind, const gp_stage_io *io)
{
    char name[32];
    snprintf(name, sizeof name, "%s L%d m%d", ffn ? "ffn" : "attn", layer, m);
    nvtxRangePushA(name);
    gp_status st = GP_OK;
    gp_stage_io home;
    home_io(x, ffn, layer, m, &home);
    if (!x->g || !io_same(io, &home))
        st = run_stage(x, ffn, layer, m, kind, io);
    else {
        cudaStream_t s = gp_lane_stream(stage_ctx(x, ffn, layer, m));
        cudaError_t ce = cudaGraphLaunch(*gslot(x, x->g, ffn, layer, m), s);
        if (ce != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "launching the %s stage graph of layer %d micro-batch %d",
                     ffn ? "FFN" : "attention", layer, m);
            st = gp_cuda_fail(ce, what, __FILE__, __LINE__);
        }
    }
    nvtxRangePop();
    return st;
}

static gp_status cx_attn(void *ctx, int layer, int m, gp_payload *out)
{
    gp_cuda_exec *x = ctx;
    cudaStream_t s = gp_lane_stream(stage_ctx(x, 0, layer, m));
    if (layer > 0) /* the residual rows are the previous FFN's output */
        GP_CUDA_TRY(cudaStreamWaitEvent(s, *evp(x, EV_F_DONE, layer - 1, m), 0));
    else if (m == 1 && on_whole(x, 0, 0, 0)) /* after the fill: uploads, embedding, A(0, 0) */
        GP_CUDA_TRY(cudaStreamWaitEvent(s, *evp(x, EV_A_DONE, 0, 0), 0));
    gp_stage_io io;
    gp_stage_kind kind = stage_io(x, 0, layer, m, NULL, &x->resid[m], &io);
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_A_BEGIN, layer, m), s));
    GP_TRY(launch(x, 0, layer, m, kind, &io));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_A_DONE, layer, m), s));
    /* QKVO_A: the O projection added the attention output into the residual
     * rows, which the FFN reads. QKVO_F: the FFN side reads the attention
     * output (its O projection adds it to the residual it keeps). */
    *out = (gp_payload){.tok_begin = io.b0, .tok_count = io.nb, .layer = layer, .micro = m,
                        .event = *evp(x, EV_A_DONE, layer, m)};
    if (kind == GP_STAGE_ATTN)
        out->resid = io.resid;
    else
        out->x = io.y;
    return GP_OK;
}

static gp_status cx_ffn(void *ctx, const gp_payload *in)
{
    gp_cuda_exec *x = ctx;
    int l = in->layer, m = in->micro;
    cudaStream_t s = gp_lane_stream(stage_ctx(x, 1, l, m));
    GP_CUDA_TRY(cudaStreamWaitEvent(s, (cudaEvent_t)in->event, 0));
    /* the drain leaves F's stream: it follows the FFN stage issued before it,
     * so the two never share SMs (and the head sees every row) */
    if (on_whole(x, 1, l, m) && (m > 0 || l > 0))
        GP_CUDA_TRY(cudaStreamWaitEvent(s, m > 0 ? *evp(x, EV_F_DONE, l, m - 1)
                                                 : *evp(x, EV_F_DONE, l - 1, x->plan.M - 1), 0));
    gp_stage_io io;
    gp_stage_kind kind = stage_io(x, 1, l, m, &in->x, x->place == GP_PLACE_QKVO_A ? &in->resid : &x->resid[m], &io);
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_F_BEGIN, l, m), s));
    GP_TRY(launch(x, 1, l, m, kind, &io));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_F_DONE, l, m), s));
    x->resid[m] = io.resid; /* updated in place: the next layer's attention reads it there */
    return GP_OK;
}

/* The head over the step's residual rows: one launch when they lie in batch
 * order in one buffer (always, unless stages were handed other buffers),
 * else one per micro-batch. */
static gp_status head(gp_cuda_exec *x, gp_lane *sc)
{
    const gp_step_plan *pn = &x->plan;
    bool one = true;
    for (int m = 1; m < pn->M; m++) {
        gp_tensor_view next = gp_view_rows(x->resid[m - 1], x->resid[m - 1].rows, x->resid[m].rows);
        one = one && gp_view_same(&next, &x->resid[m]);
    }
    if (one) {
        gp_stage_io io = {.b0 = 0, .nb = pn->B, .resid = x->resid[0]};
        io.resid.rows = pn->B;
        return gp_stage_run(sc, GP_STAGE_HEAD, &io);
    }
    for (int m = 0; m < pn->M; m++) {
        gp_stage_io io = {.b0 = pn->b0[m], .nb = pn->nb[m], .resid = x->resid[m]};
        GP_TRY(gp_stage_run(sc, GP_STAGE_HEAD, &io));
    }
    return GP_OK;
}

static gp_status elapsed(gp_cuda_exec *x, cudaEvent_t ev, float *ms)
{
    GP_CUDA_TRY(cudaEventElapsedTime(ms, x->ev_step_begin, ev));
    return GP_OK;
}

static gp_status cx_step_end(void *ctx, int32_t *next, float *logits, gp_step_timing *t)
{
    gp_cuda_exec *x = ctx;
    /* the head follows the last FFN stage on its stream (F ran them in order;
     * the drain's stage waited for F's last one) */
    gp_lane *sc = stage_ctx(x, 1, x->L - 1, x->plan.M - 1);
    cudaStream_t s = gp_lane_stream(sc);
    GP_TRY(head(x, sc));
    GP_CUDA_TRY(cudaEventRecord(x->ev_step_end, s));
    GP_TRY(gp_engine_step_finish(x->e, x->plan.B, x->seq_ids, next, logits, s));
    GP_TRY(elapsed(x, x->ev_step_end, &t->step_ms));
    int M = x->plan.M;
    for (int l = 0; l < x->L; l++)
        for (int m = 0; m < M; m++) {
            GP_TRY(elapsed(x, *evp(x, EV_A_BEGIN, l, m), &t->begin[0][l * M + m]));
            GP_TRY(elapsed(x, *evp(x, EV_A_DONE, l, m), &t->end[0][l * M + m]));
            GP_TRY(elapsed(x, *evp(x, EV_F_BEGIN, l, m), &t->begin[1][l * M + m]));
            GP_TRY(elapsed(x, *evp(x, EV_F_DONE, l, m), &t->end[1][l * M + m]));
        }
    return GP_OK;
}

/* A stage failed: let what was launched finish so the buffers are quiet for
 * the next step; the sequences keep their length (nothing was advanced). */
static void cx_abort(void *ctx)
{
    gp_cuda_exec *x = ctx;
    if (x->n_pairs > 0) {
        cx_pair *p = &x->pairs[x->cur];
        (void)cudaStreamSynchronize(gp_lane_stream(p->a));
        (void)cudaStreamSynchronize(gp_lane_stream(p->f));
    }
    (void)cudaStreamSynchronize(gp_lane_stream(gp_engine_lane(x->e)));
    (void)cudaGetLastError();
}

static gp_status cx_sequential(void *ctx, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                               float *logits, float *step_ms)
{
    gp_cuda_exec *x = ctx;
    GP_TRY(gp_engine_decode_step(x->e, B, seq_ids, tokens, next, logits));
    if (step_ms)
        *step_ms = gp_engine_last_step_ms(x->e);
    return GP_OK;
}

static gp_status cx_prefill(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last_logits,
                            float *prompt_logits)
{
    return gp_engine_prefill_batch(((gp_cuda_exec *)ctx)->e, S, seqs, next, last_logits, prompt_logits);
}

static void cx_reset_seq(void *ctx, int seq)
{
    gp_engine_reset_seq(((gp_cuda_exec *)ctx)->e, seq);
}

static gp_status cx_retain_block(void *ctx, int seq, int index, int *handle)
{
    return gp_engine_kv_retain_block(((gp_cuda_exec *)ctx)->e, seq, index, handle);
}

static void cx_drop_block(void *ctx, int handle)
{
    gp_engine_kv_drop_block(((gp_cuda_exec *)ctx)->e, handle);
}

static gp_status cx_attach_blocks(void *ctx, int seq, const int *handles, int n)
{
    return gp_engine_kv_attach(((gp_cuda_exec *)ctx)->e, seq, handles, n);
}

static uint64_t cx_host_seed(void *ctx)
{
    return gp_engine_host_seed(((gp_cuda_exec *)ctx)->e);
}

static gp_status cx_host_offload(void *ctx, int handle, uint64_t key, const int32_t *tokens)
{
    return gp_engine_host_offload(((gp_cuda_exec *)ctx)->e, handle, key, tokens);
}

static gp_status cx_host_lookup(void *ctx, const uint64_t *keys, const int32_t *tokens, int n, int *held)
{
    return gp_engine_host_lookup(((gp_cuda_exec *)ctx)->e, keys, tokens, n, held);
}

static gp_status cx_host_load(void *ctx, int seq, int n)
{
    return gp_engine_host_load(((gp_cuda_exec *)ctx)->e, seq, n);
}

static gp_status cx_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms)
{
    gp_cuda_exec *x = ctx;
    GP_TRY(gp_lane_run_batch(gp_engine_lane(x->e), b, next, logits));
    if (step_ms)
        *step_ms = gp_engine_last_step_ms(x->e);
    return GP_OK;
}

static int cx_n_splits(void *ctx)
{
    return ((gp_cuda_exec *)ctx)->n_pairs;
}

static gp_status cx_select(void *ctx, int index)
{
    gp_cuda_exec *x = ctx;
    if (index < 0 || index >= x->n_pairs)
        GP_FAIL(GP_ERR_INVALID_ARG, "split index %d: the pool holds %d pairs (0..%d)", index, x->n_pairs,
                x->n_pairs - 1);
    x->cur = index;
    return GP_OK;
}

static void cx_split_info(void *ctx, int index, gp_split_info *out)
{
    gp_cuda_exec *x = ctx;
    if (x->n_pairs == 0) { /* no pool: everything on every SM */
        *out = (gp_split_info){.unit = "SMs"};
        return;
    }
    *out = x->pairs[index < 0 ? x->cur : index].info;
}

gp_status gp_cuda_exec_attn_kernel(gp_cuda_exec *x, int pair, int rows, int max_len, const char **name)
{
    if (!x || pair < -1 || pair >= x->n_pairs || x->n_pairs == 0 || !name)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cuda_exec_attn_kernel: pair %d of %d", pair, x ? x->n_pairs : 0);
    gp_attn_kernel k;
    GP_TRY(gp_lane_attn_kernel(x->pairs[pair < 0 ? x->cur : pair].a, rows, max_len, &k));
    *name = gp_attn_kernel_name(k);
    return GP_OK;
}

gp_status gp_cuda_exec_set_placement(gp_cuda_exec *x, gp_placement p)
{
    if (!x || (p != GP_PLACE_QKVO_A && p != GP_PLACE_QKVO_F))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cuda_exec_set_placement: executor %p, placement %d (allowed 0, 1)",
                (void *)x, (int)p);
    if (p != x->place)
        for (int i = 0; i < CX_GRAPH_SETS; i++)
            free_set(x, &x->sets[i]);
    x->place = p;
    return GP_OK;
}

gp_status gp_cuda_exec_set_fill_drain(gp_cuda_exec *x, gp_fill_drain f)
{
    if (!x || (f != GP_FILL_DRAIN_WHOLE && f != GP_FILL_DRAIN_PARTITION))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cuda_exec_set_fill_drain: executor %p, mode %d (allowed 0, 1)",
                (void *)x, (int)f);
    x->fill_drain = f; /* graph sets are keyed by it */
    return GP_OK;
}

/* The graph attention (partition A) -> FFN (partition F). */
static gp_status cx_stage(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out)
{
    if (stage == 0)
        return cx_attn(ctx, layer, micro, out);
    return cx_ffn(ctx, in);
}

static const gp_step_ops cuda_step_ops = {
    .name = "cuda",
    .graph = {.n_stages = 2, .names = {"attention", "FFN"}},
    .step_begin = cx_step_begin,
    .stage = cx_stage,
    .step_end = cx_step_end,
    .abort_step = cx_abort,
};

static const gp_session_ops cuda_session_ops = {
    .name = "cuda",
    .sequential_step = cx_sequential,
    .prefill = cx_prefill,
    .reset_seq = cx_reset_seq,
    .run_batch = cx_run_batch,
    .retain_block = cx_retain_block,
    .drop_block = cx_drop_block,
    .attach_blocks = cx_attach_blocks,
    .host_seed = cx_host_seed,
    .host_offload = cx_host_offload,
    .host_lookup = cx_host_lookup,
    .host_load = cx_host_load,
    .n_splits = cx_n_splits,
    .select_split = cx_select,
    .split_info = cx_split_info,
};

void gp_cuda_exec_destroy(gp_cuda_exec *x)
{
    if (!x)
        return;
    for (int i = 0; i < x->n_pairs && x->pairs; i++) {
        if (x->pairs[i].a)
            cudaStreamSynchronize(gp_lane_stream(x->pairs[i].a));
        if (x->pairs[i].f)
            cudaStreamSynchronize(gp_lane_stream(x->pairs[i].f));
    }
    for (int i = 0; i < CX_GRAPH_SETS; i++) {
        free_set(x, &x->sets[i]);
        free(x->sets[i].exec);
    }
    for (int i = 0; i < x->n_pairs && x->pairs; i++) {
        gp_lane_destroy(x->pairs[i].a);
        gp_lane_destroy(x->pairs[i].f);
    }
    for (size_t i = 0; x->ev && i < 4 * (size_t)x->L * GP_PIPE_MAX_MICRO; i++)
        if (x->ev[i])
            cudaEventDestroy(x->ev[i]);
    if (x->ev_step_begin)
        cudaEventDestroy(x->ev_step_begin);
    if (x->ev_step_end)
        cudaEventDestroy(x->ev_step_end);
    free(x->ev);
    free(x->pairs);
    free(x->seq_ids);
    free(x);
}

static gp_status make_pair(gp_cuda_exec *x, const gp_green_pair *gp, cx_pair *p)
{
    int a_sms = gp->partitioned ? gp->attn_sms : 0, f_sms = gp->partitioned ? gp->ffn_sms : 0;
    GP_TRY(gp_lane_create(x->e, gp->attn_stream, a_sms, 0, &p->a));
    GP_TRY(gp_lane_create(x->e, gp->ffn_stream, f_sms, 0, &p->f));
    p->info = (gp_split_info){.a_req = gp->plan.attn_sms, .f_req = gp->plan.ffn_sms, .a_got = gp->attn_sms,
                              .f_got = gp->ffn_sms, .partitioned = gp->partitioned != 0, .unit = "SMs"};
    return GP_OK;
}

gp_status gp_cuda_exec_create(gp_engine *e, gp_green_pool *pool, bool use_graphs, gp_cuda_exec **out)
{
    *out = NULL;
    if (!e || (pool && gp_green_pool_size(pool) < 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "CUDA executor: an engine is required, and a pool holds at least one pair");
    if (pool && gp_engine_weights_streamed(e)) {
        /* the A and F sides hold groups at once: the budget must have been sized for that */
        const gp_config *cfg = gp_engine_config(e);
        int have = gp_device_weights_stream_params(gp_engine_weights(e)).min_window;
        int need = gp_weights_stream_window(cfg, 1);
        if (have < need)
            GP_FAIL(GP_ERR_INVALID_ARG, "CUDA executor: the streamed weights were made for %d layer group%s held "
                    "at once; pipelined steps hold up to %d (gp_weights_stream_window): make them with "
                    "min_window %d", have, have == 1 ? "" : "s", need, need);
    }
    if (use_graphs && gp_engine_weights_streamed(e))
        GP_FAIL(GP_ERR_INVALID_ARG, "CUDA executor: CUDA graphs over streamed weights (a VRAM budget) would bake "
                "one step's weight addresses; use_graphs must be off");
    gp_cuda_exec *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "CUDA executor: out of memory");
    x->e = e;
    x->pool = pool;
    x->use_graphs = use_graphs;
    x->L = gp_engine_config(e)->n_layers;
    x->n_pairs = pool ? gp_green_pool_size(pool) : 0;
    size_t n_ev = 4 * (size_t)x->L * GP_PIPE_MAX_MICRO;
    x->pairs = calloc((size_t)(x->n_pairs ? x->n_pairs : 1), sizeof *x->pairs);
    x->ev = calloc(n_ev, sizeof *x->ev);
    x->seq_ids = calloc((size_t)gp_engine_max_batch(e), sizeof(int));
    gp_status st = GP_OK;
    if (!x->pairs || !x->ev || !x->seq_ids) {
        gp_set_error("CUDA executor: out of memory");
        st = GP_ERR_NO_MEMORY;
    }
    for (int i = 0; i < CX_GRAPH_SETS && st == GP_OK; i++)
        if (!(x->sets[i].exec = calloc(2 * (size_t)x->L * GP_PIPE_MAX_MICRO, sizeof(cudaGraphExec_t)))) {
            gp_set_error("CUDA executor: out of memory");
            st = GP_ERR_NO_MEMORY;
        }
    for (size_t i = 0; i < n_ev && st == GP_OK; i++)
        st = gp_device_event_create(&x->ev[i], cudaEventDefault, "CUDA executor: stage event");
    if (st == GP_OK)
        st = gp_device_event_create(&x->ev_step_begin, cudaEventDefault, "CUDA executor: step-begin event");
    if (st == GP_OK)
        st = gp_device_event_create(&x->ev_step_end, cudaEventDefault, "CUDA executor: step-end event");
    for (int i = 0; i < x->n_pairs && st == GP_OK; i++)
        st = make_pair(x, gp_green_pool_pair(pool, i), &x->pairs[i]);
    if (st != GP_OK) {
        gp_cuda_exec_destroy(x);
        return st;
    }
    *out = x;
    return GP_OK;
}

gp_exec gp_cuda_exec_get(gp_cuda_exec *x)
{
    return (gp_exec){.step = &cuda_step_ops, .session = &cuda_session_ops, .ctx = x};
}

void *gp_cuda_exec_step_event(const gp_cuda_exec *x)
{
    return x ? (void *)x->ev_step_begin : NULL;
}
