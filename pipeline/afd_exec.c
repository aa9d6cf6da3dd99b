/* Attention and FFN on two GPUs of this process (attention-FFN
 * disaggregation): the attention engine's lane on GPU A runs the embedding,
 * every attention stage over the KV cache it holds, and the head; the FFN
 * engine's lane on GPU F runs every FFN stage. Between them each
 * micro-batch's fp32 residual rows cross by peer copy, A -> F before its FFN
 * stage and F -> A after it, on two copy streams of F's, so a copy overlaps
 * the other micro-batch's stages; everything is ordered by device events
 * (A_done -> in -> FFN -> out -> the next layer's attention). With M
 * micro-batches the runner's order makes the two GPUs ping-pong. Stages are
 * replayed from per-stage graphs captured over each engine's own rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "cuda_util.cuh"
#include "gp_engine.h"
#include "gp_pipeline.h"
#include "gp_stage.h"

enum { EV_A_BEGIN, EV_A_DONE, EV_IN, EV_F_BEGIN, EV_F_DONE, EV_OUT, EV_KINDS };

struct gp_afd_exec {
    gp_engine *ea, *ef; /* borrowed: attention (and KV, embedding, head) on dev_a; FFN on dev_f */
    int dev_a, dev_f, L;
    bool use_graphs;
    cudaStream_t s_in, s_out; /* on dev_f: the copies A -> F and F -> A */
    cudaEvent_t *ev;          /* [EV_KINDS][L][GP_PIPE_MAX_MICRO]; A's on dev_a, the others on dev_f */
    cudaEvent_t ev_begin_a, ev_begin_f, ev_end;
    /* the stage graphs of one step shape: [2 sides][L][GP_PIPE_MAX_MICRO] */
    cudaGraphExec_t *graphs;
    bool have_graphs;
    int g_B, g_M, g_nb[GP_PIPE_MAX_MICRO], g_splits[GP_PIPE_MAX_MICRO];
    /* the step in progress */
    gp_step_plan plan;
    int *seq_ids;
    int max_len, splits[GP_PIPE_MAX_MICRO];
    gp_tensor_view ra[GP_PIPE_MAX_MICRO], rf[GP_PIPE_MAX_MICRO]; /* residual rows on A's engine and F's */
};

static cudaEvent_t *evp(gp_afd_exec *x, int kind, int layer, int m)
{
    return &x->ev[((size_t)kind * (size_t)x->L + (size_t)layer) * GP_PIPE_MAX_MICRO + (size_t)m];
}

static cudaGraphExec_t *gslot(gp_afd_exec *x, int ffn, int layer, int m)
{
    return &x->graphs[((size_t)ffn * (size_t)x->L + (size_t)layer) * GP_PIPE_MAX_MICRO + (size_t)m];
}

static gp_lane *lane_of(gp_afd_exec *x, int ffn)
{
    return gp_engine_lane(ffn ? x->ef : x->ea);
}

static gp_status use_dev(int dev)
{
    GP_CUDA_TRY(cudaSetDevice(dev));
    return GP_OK;
}

static void stage_io(const gp_afd_exec *x, int ffn, int layer, int m, gp_stage_io *io)
{
    *io = (gp_stage_io){.layer = layer, .b0 = x->plan.b0[m], .nb = x->plan.nb[m], .max_len = x->max_len,
                        .attn_splits = x->splits[m], .resid = ffn ? x->rf[m] : x->ra[m]};
}

static void drop_graphs(gp_afd_exec *x)
{
    for (size_t i = 0; x->graphs && i < 2 * (size_t)x->L * GP_PIPE_MAX_MICRO; i++)
        if (x->graphs[i]) {
            cudaGraphExecDestroy(x->graphs[i]);
            x->graphs[i] = NULL;
        }
    x->have_graphs = false;
}

static gp_status capture(gp_afd_exec *x, int ffn, int layer, int m)
{
    GP_TRY(use_dev(ffn ? x->dev_f : x->dev_a));
    gp_stage_io io;
    stage_io(x, ffn, layer, m, &io);
    char what[96];
    snprintf(what, sizeof what, "the %s stage graph of layer %d micro-batch %d (GPU %d)", ffn ? "FFN" : "attention",
             layer, m, ffn ? x->dev_f : x->dev_a);
    return gp_stage_capture(lane_of(x, ffn), ffn ? GP_STAGE_FFN : GP_STAGE_ATTN, &io, what,
                            (void **)gslot(x, ffn, layer, m));
}

/* The graphs of this step's shape: kept, or captured before the runner's
 * threads launch anything. */
static gp_status graphs_for_step(gp_afd_exec *x)
{
    const gp_step_plan *pn = &x->plan;
    if (x->have_graphs && x->g_B == pn->B && x->g_M == pn->M && !memcmp(x->g_nb, pn->nb, sizeof x->g_nb) &&
        !memcmp(x->g_splits, x->splits, sizeof x->g_splits))
        return GP_OK;
    drop_graphs(x);
    for (int m = 0; m < pn->M; m++) {
        GP_TRY(use_dev(x->dev_a));
        GP_TRY(gp_lane_tune_gemms(lane_of(x, 0), pn->nb[m]));
        GP_TRY(use_dev(x->dev_f));
        GP_TRY(gp_lane_tune_gemms(lane_of(x, 1), pn->nb[m]));
    }
    for (int l = 0; l < x->L; l++)
        for (int m = 0; m < pn->M; m++)
            for (int ffn = 0; ffn < 2; ffn++)
                GP_TRY(capture(x, ffn, l, m));
    x->g_B = pn->B;
    x->g_M = pn->M;
    memcpy(x->g_nb, pn->nb, sizeof x->g_nb);
    memcpy(x->g_splits, x->splits, sizeof x->g_splits);
    x->have_graphs = true;
    return GP_OK;
}

static gp_status afd_step_begin(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens)
{
    gp_afd_exec *x = ctx;
    x->plan = *plan;
    memcpy(x->seq_ids, seq_ids, sizeof(int) * (size_t)plan->B);
    GP_TRY(use_dev(x->dev_a));
    gp_lane *la = lane_of(x, 0);
    cudaStream_t sa = gp_lane_stream(la);
    GP_TRY(gp_engine_step_prepare(x->ea, plan->B, seq_ids, tokens, sa, &x->max_len));
    memset(x->splits, 0, sizeof x->splits);
    for (int m = 0; m < plan->M; m++) {
        GP_TRY(gp_lane_attn_splits(la, plan->nb[m], x->max_len, &x->splits[m]));
        GP_TRY(gp_engine_act_view(x->ea, GP_ACT_RESID, plan->b0[m], plan->nb[m], &x->ra[m]));
        GP_TRY(gp_engine_act_view(x->ef, GP_ACT_RESID, plan->b0[m], plan->nb[m], &x->rf[m]));
    }
    GP_TRY(use_dev(x->dev_f));
    GP_TRY(gp_engine_open_ffn_rows(x->ef, plan->B));
    if (x->use_graphs)
        GP_TRY(graphs_for_step(x));
    GP_TRY(use_dev(x->dev_a));
    GP_CUDA_TRY(cudaEventRecord(x->ev_begin_a, sa));
    gp_stage_io io = {.b0 = 0, .nb = plan->B};
    GP_TRY(gp_engine_act_view(x->ea, GP_ACT_RESID, 0, plan->B, &io.resid));
    GP_TRY(gp_stage_run(la, GP_STAGE_EMBED, &io));
    /* F's clock: its stage times count from when it saw A's step begin */
    GP_TRY(use_dev(x->dev_f));
    cudaStream_t sf = gp_lane_stream(lane_of(x, 1));
    GP_CUDA_TRY(cudaStreamWaitEvent(sf, x->ev_begin_a, 0));
    GP_CUDA_TRY(cudaEventRecord(x->ev_begin_f, sf));
    return use_dev(x->dev_a);
}

static gp_status launch(gp_afd_exec *x, int ffn, int layer, int m)
{
    char name[32];
    snprintf(name, sizeof name, "%s L%d m%d", ffn ? "ffn" : "attn", layer, m);
    nvtxRangePushA(name);
    gp_status st = GP_OK;
    gp_lane *lane = lane_of(x, ffn);
    if (x->have_graphs) {
        cudaError_t ce = cudaGraphLaunch(*gslot(x, ffn, layer, m), gp_lane_stream(lane));
        if (ce != cudaSuccess)
            st = gp_cuda_fail(ce, ffn ? "launching an FFN stage graph" : "launching an attention stage graph",
                              __FILE__, __LINE__);
    } else {
        gp_stage_io io;
        stage_io(x, ffn, layer, m, &io);
        st = gp_stage_run(lane, ffn ? GP_STAGE_FFN : GP_STAGE_ATTN, &io);
    }
    nvtxRangePop();
    return st;
}

static gp_status afd_attn(gp_afd_exec *x, int layer, int m, gp_payload *out)
{
    GP_TRY(use_dev(x->dev_a));
    cudaStream_t s = gp_lane_stream(lane_of(x, 0));
    if (layer > 0) /* the residual rows are back from the previous FFN */
        GP_CUDA_TRY(cudaStreamWaitEvent(s, *evp(x, EV_OUT, layer - 1, m), 0));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_A_BEGIN, layer, m), s));
    GP_TRY(launch(x, 0, layer, m));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_A_DONE, layer, m), s));
    *out = (gp_payload){.tok_begin = x->plan.b0[m], .tok_count = x->plan.nb[m], .layer = layer, .micro = m,
                        .resid = x->ra[m], .event = *evp(x, EV_A_DONE, layer, m)};
    return GP_OK;
}

static gp_status afd_ffn(gp_afd_exec *x, const gp_payload *in)
{
    const int l = in->layer, m = in->micro;
    const size_t bytes = sizeof(float) * (size_t)x->rf[m].rows * (size_t)x->rf[m].cols;
    GP_TRY(use_dev(x->dev_f));
    cudaStream_t s = gp_lane_stream(lane_of(x, 1));
    GP_CUDA_TRY(cudaStreamWaitEvent(x->s_in, (cudaEvent_t)in->event, 0));
    GP_CUDA_TRY(cudaMemcpyPeerAsync(x->rf[m].data, x->dev_f, in->resid.data, x->dev_a, bytes, x->s_in));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_IN, l, m), x->s_in));
    GP_CUDA_TRY(cudaStreamWaitEvent(s, *evp(x, EV_IN, l, m), 0));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_F_BEGIN, l, m), s));
    GP_TRY(launch(x, 1, l, m));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_F_DONE, l, m), s));
    GP_CUDA_TRY(cudaStreamWaitEvent(x->s_out, *evp(x, EV_F_DONE, l, m), 0));
    GP_CUDA_TRY(cudaMemcpyPeerAsync(x->ra[m].data, x->dev_a, x->rf[m].data, x->dev_f, bytes, x->s_out));
    GP_CUDA_TRY(cudaEventRecord(*evp(x, EV_OUT, l, m), x->s_out));
    return GP_OK;
}

static gp_status afd_stage(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out)
{
    gp_afd_exec *x = ctx;
    return stage == 0 ? afd_attn(x, layer, micro, out) : afd_ffn(x, in);
}

/* ms from the step's begin on the side of ev (A's events count from A's
 * begin, the others from F's) */
static gp_status elapsed(gp_afd_exec *x, int kind, int l, int m, float *ms)
{
    const bool on_a = kind == EV_A_BEGIN || kind == EV_A_DONE;
    GP_CUDA_TRY(cudaEventElapsedTime(ms, on_a ? x->ev_begin_a : x->ev_begin_f, *evp(x, kind, l, m)));
    return GP_OK;
}

static gp_status afd_step_end(void *ctx, int32_t *next, float *logits, gp_step_timing *t)
{
    gp_afd_exec *x = ctx;
    const int M = x->plan.M;
    GP_TRY(use_dev(x->dev_a));
    gp_lane *la = lane_of(x, 0);
    cudaStream_t sa = gp_lane_stream(la);
    for (int m = 0; m < M; m++) /* every micro-batch's rows back from its last FFN */
        GP_CUDA_TRY(cudaStreamWaitEvent(sa, *evp(x, EV_OUT, x->L - 1, m), 0));
    gp_stage_io io = {.b0 = 0, .nb = x->plan.B};
    GP_TRY(gp_engine_act_view(x->ea, GP_ACT_RESID, 0, x->plan.B, &io.resid));
    GP_TRY(gp_stage_run(la, GP_STAGE_HEAD, &io));
    GP_CUDA_TRY(cudaEventRecord(x->ev_end, sa));
    GP_TRY(gp_engine_step_finish(x->ea, x->plan.B, x->seq_ids, next, logits, sa));
    GP_CUDA_TRY(cudaEventElapsedTime(&t->step_ms, x->ev_begin_a, x->ev_end));
    for (int l = 0; l < x->L; l++)
        for (int m = 0; m < M; m++) {
            GP_TRY(elapsed(x, EV_A_BEGIN, l, m, &t->begin[0][l * M + m]));
            GP_TRY(elapsed(x, EV_A_DONE, l, m, &t->end[0][l * M + m]));
            GP_TRY(elapsed(x, EV_F_BEGIN, l, m, &t->begin[1][l * M + m]));
            GP_TRY(elapsed(x, EV_F_DONE, l, m, &t->end[1][l * M + m]));
        }
    return GP_OK;
}

static void afd_abort(void *ctx)
{
    gp_afd_exec *x = ctx;
    const int devs[2] = {x->dev_f, x->dev_a};
    for (int i = 0; i < 2; i++)
        if (cudaSetDevice(devs[i]) == cudaSuccess)
            (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
}

static gp_status afd_sequential(void *ctx, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                                float *logits, float *step_ms)
{
    gp_afd_exec *x = ctx;
    GP_TRY(use_dev(x->dev_a));
    GP_TRY(gp_engine_decode_step(x->ea, B, seq_ids, tokens, next, logits));
    if (step_ms)
        *step_ms = gp_engine_last_step_ms(x->ea);
    return GP_OK;
}

static gp_status afd_prefill(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last_logits,
                             float *prompt_logits)
{
    gp_afd_exec *x = ctx;
    GP_TRY(use_dev(x->dev_a));
    return gp_engine_prefill_batch(x->ea, S, seqs, next, last_logits, prompt_logits);
}

static void afd_reset_seq(void *ctx, int seq)
{
    gp_afd_exec *x = ctx;
    if (use_dev(x->dev_a) == GP_OK)
        gp_engine_reset_seq(x->ea, seq);
}

static const gp_step_ops afd_step_ops = {
    .name = "afd",
    .graph = {.n_stages = 2, .names = {"attention", "FFN"}},
    .step_begin = afd_step_begin,
    .stage = afd_stage,
    .step_end = afd_step_end,
    .abort_step = afd_abort,
};

static const gp_session_ops afd_session_ops = {
    .name = "afd",
    .sequential_step = afd_sequential,
    .prefill = afd_prefill,
    .reset_seq = afd_reset_seq,
};

void gp_afd_exec_destroy(gp_afd_exec *x)
{
    if (!x)
        return;
    afd_abort(x);
    drop_graphs(x);
    for (size_t i = 0; x->ev && i < EV_KINDS * (size_t)x->L * GP_PIPE_MAX_MICRO; i++)
        if (x->ev[i])
            cudaEventDestroy(x->ev[i]);
    cudaEvent_t one[] = {x->ev_begin_a, x->ev_begin_f, x->ev_end};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i])
            cudaEventDestroy(one[i]);
    if (x->s_in)
        cudaStreamDestroy(x->s_in);
    if (x->s_out)
        cudaStreamDestroy(x->s_out);
    free(x->ev);
    free(x->graphs);
    free(x->seq_ids);
    free(x);
}

/* The engines must be the same model, in one dtype, F's rows at least A's. */
static gp_status check_pair(gp_engine *ea, int dev_a, gp_engine *ef, int dev_f)
{
    if (!ea || !ef || dev_a < 0 || dev_f < 0 || dev_a == dev_f)
        GP_FAIL(GP_ERR_INVALID_ARG, "AFD executor: two engines on two distinct devices (got devices %d and %d)",
                dev_a, dev_f);
    const gp_config *a = gp_engine_config(ea), *f = gp_engine_config(ef);
    if (a->n_layers != f->n_layers || a->hidden != f->hidden || a->ffn != f->ffn ||
        gp_engine_dtype(ea) != gp_engine_dtype(ef))
        GP_FAIL(GP_ERR_INVALID_ARG, "AFD executor: the attention engine (%s) and the FFN engine (%s) must be one "
                "model in one dtype", a->name, f->name);
    if (gp_engine_max_batch(ef) < gp_engine_max_batch(ea))
        GP_FAIL(GP_ERR_INVALID_ARG, "AFD executor: the FFN engine holds %d rows, the attention engine's batches "
                "up to %d", gp_engine_max_batch(ef), gp_engine_max_batch(ea));
    int ok_af = 0, ok_fa = 0;
    GP_CUDA_TRY(cudaDeviceCanAccessPeer(&ok_af, dev_a, dev_f));
    GP_CUDA_TRY(cudaDeviceCanAccessPeer(&ok_fa, dev_f, dev_a));
    if (!ok_af || !ok_fa)
        GP_FAIL(GP_ERR_UNSUPPORTED, "AFD executor: GPUs %d and %d cannot access each other's memory (no peer "
                "access: the residual rows would cross through host memory)", dev_a, dev_f);
    return GP_OK;
}

/* Peer access both ways, once per pair of devices in the process (asking
 * again is an error CUDA reports, though harmless). */
static gp_status enable_peers(int dev_a, int dev_f)
{
    static unsigned long long enabled; /* bit 8 from + to, devices below 8 */
    const int from[2] = {dev_a, dev_f}, to[2] = {dev_f, dev_a};
    for (int i = 0; i < 2; i++) {
        const unsigned long long bit = from[i] < 8 && to[i] < 8 ? 1ull << (8 * from[i] + to[i]) : 0;
        if (bit && (__atomic_load_n(&enabled, __ATOMIC_ACQUIRE) & bit))
            continue;
        GP_TRY(use_dev(from[i]));
        cudaError_t ce = cudaDeviceEnablePeerAccess(to[i], 0);
        if (ce == cudaErrorPeerAccessAlreadyEnabled)
            (void)cudaGetLastError();
        else if (ce != cudaSuccess)
            return gp_cuda_fail(ce, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
        __atomic_fetch_or(&enabled, bit, __ATOMIC_ACQ_REL);
    }
    return GP_OK;
}

gp_status gp_afd_exec_create(gp_engine *ea, int dev_a, gp_engine *ef, int dev_f, bool use_graphs,
                             gp_afd_exec **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "AFD executor: out is NULL");
    *out = NULL;
    GP_TRY(check_pair(ea, dev_a, ef, dev_f));
    GP_TRY(enable_peers(dev_a, dev_f));
    gp_afd_exec *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "AFD executor: out of memory");
    *x = (gp_afd_exec){.ea = ea, .ef = ef, .dev_a = dev_a, .dev_f = dev_f, .use_graphs = use_graphs,
                       .L = gp_engine_config(ea)->n_layers};
    const size_t per = (size_t)x->L * GP_PIPE_MAX_MICRO;
    x->ev = calloc(EV_KINDS * per, sizeof *x->ev);
    x->graphs = calloc(2 * per, sizeof *x->graphs);
    x->seq_ids = calloc((size_t)gp_engine_max_batch(ea), sizeof(int));
    gp_status st = x->ev && x->graphs && x->seq_ids ? GP_OK : GP_ERR_NO_MEMORY;
    if (st != GP_OK)
        gp_set_error("AFD executor: out of memory");
    for (int k = 0; k < EV_KINDS && st == GP_OK; k++) {
        st = use_dev(k == EV_A_BEGIN || k == EV_A_DONE ? dev_a : dev_f);
        for (size_t i = 0; i < per && st == GP_OK; i++)
            st = gp_device_event_create(&x->ev[k * per + i], cudaEventDefault, "AFD executor: stage event");
    }
    if (st == GP_OK && (st = use_dev(dev_a)) == GP_OK &&
        (st = gp_device_event_create(&x->ev_begin_a, cudaEventDefault, "AFD executor: step-begin event")) == GP_OK)
        st = gp_device_event_create(&x->ev_end, cudaEventDefault, "AFD executor: step-end event");
    if (st == GP_OK && (st = use_dev(dev_f)) == GP_OK &&
        (st = gp_device_event_create(&x->ev_begin_f, cudaEventDefault, "AFD executor: F's step-begin event")) ==
            GP_OK &&
        (st = gp_device_stream_create(&x->s_in, "AFD executor: copy stream A -> F")) == GP_OK)
        st = gp_device_stream_create(&x->s_out, "AFD executor: copy stream F -> A");
    if (st == GP_OK)
        st = use_dev(dev_a);
    if (st != GP_OK) {
        gp_afd_exec_destroy(x);
        return st;
    }
    *out = x;
    return GP_OK;
}

gp_exec gp_afd_exec_get(gp_afd_exec *x)
{
    return (gp_exec){.step = &afd_step_ops, .session = &afd_session_ops, .ctx = x};
}
