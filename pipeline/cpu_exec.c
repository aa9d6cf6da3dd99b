/* CPU executor: runs the pipeline's two-stage graph (attention -> FFN) on
 * the float32 reference, with a worker (thread pool) per stage standing in
 * for the two SM partitions, so the real scheduler runs end to end without
 * a GPU. Stages finish inside the
 * call, so "issued" is "done" and payloads carry no event. The residual rows
 * of each micro-batch follow the views: an FFN stage updates the rows its
 * payload hands it, and the next attention stage of that micro-batch reads
 * those rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

struct gp_cpu_exec {
    gp_cpu_model *model;   /* borrowed */
    gp_cpu_worker *w[2];   /* per stage, the "partitions": [0] attention, [1] FFN and the head */
    int threads[2];
    gp_step_plan plan;
    float *logits;         /* [max_seqs][vocab] when the caller wants none */
    uint64_t t0;           /* step start, host clock */
    gp_step_timing *dummy;
    float *times;          /* [2 stages][begin, end][n_layers][GP_PIPE_MAX_MICRO] stage times of the step */
    gp_tensor_view resid[GP_PIPE_MAX_MICRO]; /* where each micro-batch's residual rows are now */
    /* the prefill lane: its batch ran at launch, the poll reports it */
    bool lane_busy;
    gp_status lane_status;
    char lane_error[256]; /* the batch's message, which calls before the poll may overwrite */
};

static float ms_since(const gp_cpu_exec *x)
{
    return (float)((gp_now_ns() - x->t0) / 1e6);
}

/* which: 2 * stage + (0 begin, 1 end) */
static float *tslot(gp_cpu_exec *x, int which, int layer, int micro)
{
    int L = gp_cpu_model_config(x->model)->n_layers;
    return &x->times[((size_t)which * L + layer) * GP_PIPE_MAX_MICRO + micro];
}

static gp_status cx_step_begin(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens)
{
    gp_cpu_exec *x = ctx;
    x->t0 = gp_now_ns();
    x->plan = *plan;
    GP_TRY(gp_cpu_step_begin(x->model, plan->B, seq_ids, tokens));
    gp_status st = GP_OK;
    for (int m = 0; m < plan->M && st == GP_OK; m++)
        st = gp_cpu_resid_view(x->model, plan->b0[m], plan->nb[m], &x->resid[m]);
    if (st != GP_OK)
        gp_cpu_step_abort(x->model);
    return st;
}

static gp_status cx_attn(gp_cpu_exec *x, int layer, int micro, gp_payload *out)
{
    int b0 = x->plan.b0[micro], nb = x->plan.nb[micro];
    gp_stage_io io = {.layer = layer, .b0 = b0, .nb = nb, .resid = x->resid[micro]};
    *tslot(x, 0, layer, micro) = ms_since(x);
    GP_TRY(gp_cpu_stage(x->model, x->w[0], GP_STAGE_ATTN, &io));
    *tslot(x, 1, layer, micro) = ms_since(x);
    /* the FFN reads the f32 residual rows the attention stage added into */
    *out = (gp_payload){.tok_begin = b0, .tok_count = nb, .layer = layer, .micro = micro, .resid = io.resid};
    return GP_OK;
}

static gp_status cx_ffn(gp_cpu_exec *x, const gp_payload *in)
{
    gp_stage_io io = {.layer = in->layer, .b0 = in->tok_begin, .nb = in->tok_count, .resid = in->resid};
    *tslot(x, 2, in->layer, in->micro) = ms_since(x);
    GP_TRY(gp_cpu_stage(x->model, x->w[1], GP_STAGE_FFN, &io));
    *tslot(x, 3, in->layer, in->micro) = ms_since(x);
    /* ordered before attention(layer + 1, micro) by the runner */
    x->resid[in->micro] = in->resid;
    return GP_OK;
}

static gp_status cx_stage(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out)
{
    if (stage == 0)
        return cx_attn(ctx, layer, micro, out);
    return cx_ffn(ctx, in);
}

static gp_status cx_step_end(void *ctx, int32_t *next, float *logits, gp_step_timing *t)
{
    gp_cpu_exec *x = ctx;
    const gp_config *c = gp_cpu_model_config(x->model);
    float *lg = logits ? logits : x->logits;
    gp_tensor_view all;
    GP_TRY(gp_cpu_resid_view(x->model, 0, x->plan.B, &all));
    /* the head reads the B rows in batch order from one view: the model's
     * own rows, gathered there from wherever the last FFN stages left them */
    for (int m = 0; m < x->plan.M; m++) {
        const gp_tensor_view *r = &x->resid[m];
        gp_tensor_view dst = gp_view_rows(all, x->plan.b0[m], x->plan.nb[m]);
        if (r->data != dst.data || r->row_stride != dst.row_stride)
            for (int i = 0; i < r->rows; i++)
                memcpy((float *)dst.data + (size_t)i * dst.row_stride, (const float *)r->data + (size_t)i * r->row_stride,
                       sizeof(float) * (size_t)c->hidden);
    }
    GP_TRY(gp_cpu_step_end(x->model, x->w[1], &all, lg));
    for (int b = 0; b < x->plan.B; b++)
        next[b] = gp_argmax(lg + (size_t)b * c->vocab, c->vocab);
    t->step_ms = ms_since(x);
    int M = x->plan.M;
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < M; m++) {
            for (int k = 0; k < 2; k++) {
                t->begin[k][l * M + m] = *tslot(x, 2 * k, l, m);
                t->end[k][l * M + m] = *tslot(x, 2 * k + 1, l, m);
            }
        }
    return GP_OK;
}

static void cx_abort(void *ctx)
{
    gp_cpu_step_abort(((gp_cpu_exec *)ctx)->model);
}

static gp_status cx_sequential(void *ctx, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                               float *logits, float *step_ms)
{
    gp_cpu_exec *x = ctx;
    const gp_config *c = gp_cpu_model_config(x->model);
    float *lg = logits ? logits : x->logits;
    uint64_t t0 = gp_now_ns();
    GP_TRY(gp_cpu_decode_step(x->model, B, seq_ids, tokens, lg));
    for (int b = 0; b < B; b++)
        next[b] = gp_argmax(lg + (size_t)b * c->vocab, c->vocab);
    if (step_ms)
        *step_ms = (float)((gp_now_ns() - t0) / 1e6);
    return GP_OK;
}

static gp_status cx_prefill(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last_logits,
                            float *prompt_logits)
{
    gp_cpu_exec *x = ctx;
    const gp_config *c = gp_cpu_model_config(x->model);
    /* the greedy tokens are chosen from the last logits, kept or not; the
     * scratch holds max_seqs rows and the reference refuses S beyond that */
    float *last = last_logits ? last_logits : next ? x->logits : NULL;
    GP_TRY(gp_cpu_prefill_batch(x->model, S, seqs, last, prompt_logits));
    if (next)
        for (int s = 0; s < S; s++)
            next[s] = gp_argmax(last + (size_t)s * c->vocab, c->vocab);
    return GP_OK;
}

static void cx_reset_seq(void *ctx, int seq)
{
    gp_cpu_reset_seq(((gp_cpu_exec *)ctx)->model, seq);
}

static gp_status cx_retain_block(void *ctx, int seq, int index, int *handle)
{
    return gp_cpu_kv_retain_block(((gp_cpu_exec *)ctx)->model, seq, index, handle);
}

static void cx_drop_block(void *ctx, int handle)
{
    (void)gp_cpu_kv_drop_block(((gp_cpu_exec *)ctx)->model, handle); /* a handle it gave out */
}

static gp_status cx_attach_blocks(void *ctx, int seq, const int *handles, int n)
{
    return gp_cpu_kv_attach(((gp_cpu_exec *)ctx)->model, seq, handles, n);
}

static gp_status cx_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms)
{
    uint64_t t0 = gp_now_ns();
    GP_TRY(gp_cpu_run_batch(((gp_cpu_exec *)ctx)->model, b, next, logits));
    if (step_ms)
        *step_ms = (float)((gp_now_ns() - t0) / 1e6);
    return GP_OK;
}

/* One set of threads: the batch runs at once, in launch order with the
 * decode batches, and its poll finds it done. */
static gp_status cx_prefill_launch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_cpu_exec *x = ctx;
    if (x->lane_busy)
        GP_FAIL(GP_ERR_STATE, "CPU executor: prefill_launch while the last launched batch awaits its poll");
    x->lane_status = gp_cpu_run_batch(x->model, b, next, logits);
    if (x->lane_status != GP_OK)
        snprintf(x->lane_error, sizeof x->lane_error, "%s", gp_last_error());
    x->lane_busy = true;
    return GP_OK;
}

static gp_status cx_prefill_poll(void *ctx, bool wait, bool *done)
{
    (void)wait;
    gp_cpu_exec *x = ctx;
    if (!x->lane_busy)
        GP_FAIL(GP_ERR_STATE, "CPU executor: prefill_poll with no batch launched");
    x->lane_busy = false;
    *done = true;
    if (x->lane_status != GP_OK)
        gp_set_error("%s", x->lane_error);
    return x->lane_status;
}

static int cx_n_splits(void *ctx)
{
    return 1;
}

static gp_status cx_select(void *ctx, int index)
{
    if (index != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU executor: split %d, it has only split 0", index);
    return GP_OK;
}

static void cx_split_info(void *ctx, int index, gp_split_info *out)
{
    gp_cpu_exec *x = ctx;
    *out = (gp_split_info){.a_req = x->threads[0], .f_req = x->threads[1], .a_got = x->threads[0],
                           .f_got = x->threads[1], .partitioned = true, .unit = "threads"};
}

static const gp_step_ops cpu_step_ops = {
    .name = "cpu",
    .graph = {.n_stages = 2, .names = {"attention", "FFN"}},
    .step_begin = cx_step_begin,
    .stage = cx_stage,
    .step_end = cx_step_end,
    .abort_step = cx_abort,
};

static const gp_session_ops cpu_session_ops = {
    .name = "cpu",
    .sequential_step = cx_sequential,
    .prefill = cx_prefill,
    .reset_seq = cx_reset_seq,
    .run_batch = cx_run_batch,
    .retain_block = cx_retain_block,
    .drop_block = cx_drop_block,
    .attach_blocks = cx_attach_blocks,
    .prefill_launch = cx_prefill_launch,
    .prefill_poll = cx_prefill_poll,
    .n_splits = cx_n_splits,
    .select_split = cx_select,
    .split_info = cx_split_info,
};

void gp_cpu_exec_destroy(gp_cpu_exec *x)
{
    if (!x)
        return;
    for (int i = 0; i < 2; i++)
        gp_cpu_worker_destroy(x->w[i]);
    free(x->logits);
    free(x->times);
    free(x);
}

gp_status gp_cpu_exec_create(gp_cpu_model *model, int a_threads, int f_threads, gp_cpu_exec **out)
{
    *out = NULL;
    if (!model)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU executor: model is NULL");
    if (a_threads < 1 || f_threads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU executor: %d attention and %d FFN threads, each side needs at least 1",
                a_threads, f_threads);
    gp_cpu_exec *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "CPU executor: out of memory");
    x->model = model;
    x->threads[0] = a_threads;
    x->threads[1] = f_threads;
    const gp_config *c = gp_cpu_model_config(model);
    x->logits = malloc(sizeof(float) * (size_t)gp_cpu_model_max_seqs(model) * (size_t)c->vocab);
    x->times = calloc(4 * (size_t)c->n_layers * GP_PIPE_MAX_MICRO, sizeof(float));
    gp_status st = GP_OK;
    if (!x->logits || !x->times) {
        gp_set_error("CPU executor: out of memory");
        st = GP_ERR_NO_MEMORY;
    }
    for (int i = 0; i < 2 && st == GP_OK; i++)
        st = gp_cpu_worker_create(model, x->threads[i], &x->w[i]);
    if (st != GP_OK) {
        gp_cpu_exec_destroy(x);
        return st;
    }
    *out = x;
    return GP_OK;
}

gp_exec gp_cpu_exec_get(gp_cpu_exec *x)
{
    return (gp_exec){.step = &cpu_step_ops, .session = &cpu_session_ops, .ctx = x};
}
