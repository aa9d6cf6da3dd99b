/* The relaying executor of relay_exec.h: the inner executor's stages with a
 * relay stage inserted before its last one, which moves the payload's views;
 * every stage call is checked against the runner's ordering first. */
#include "relay_exec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Two buffers per view kind (x, resid), used in turn, so a copy never lands
 * on the rows it is copied from. */
typedef struct relay_buf {
    char *mem[2];
    int cols;
    gp_dtype dtype;
} relay_buf;

struct relay_exec {
    gp_exec inner;
    gp_step_ops step;
    gp_session_ops session;
    int relay_stage;   /* index of the relay stage: the inner graph's last stage index */
    relay_mem mem;
    int max_rows;
    relay_buf bufs[2]; /* [0] x, [1] resid */
    long relayed;
    /* ordering check: per stage, the (layer x M + micro) index it issued
     * last, and per (stage, layer, micro) whether it was issued; stored with
     * release by the stage's thread, loaded with acquire by the next one, so
     * ThreadSanitizer sees the check itself ordered */
    gp_step_plan plan;
    int n_flags;            /* layers the flags hold */
    atomic_int *issued;     /* [GP_PIPE_MAX_STAGES][n_flags][GP_PIPE_MAX_MICRO] */
    int last_index[GP_PIPE_MAX_STAGES];
    /* fault injection */
    int fail_stage, fail_layer, fail_micro;
};

static size_t row_bytes(const relay_exec *r, const relay_buf *b)
{
    return (size_t)(b->cols + r->mem.row_pad) * gp_dtype_size(b->dtype);
}

static bool inside(const relay_exec *r, const relay_buf *b, int i, const void *p)
{
    const char *c = p;
    return b->mem[i] && c >= b->mem[i] && c < b->mem[i] + (size_t)r->max_rows * row_bytes(r, b);
}

/* Copies the rows of v to rows [b0, b0 + rows) of the buffer it does not lie in. */
static gp_status relay_view(relay_exec *r, relay_buf *b, int b0, gp_tensor_view *v, void *event)
{
    if (v->rows == 0)
        return GP_OK;
    if (v->device != r->mem.device)
        GP_FAIL(GP_ERR_UNSUPPORTED, "relay executor: views on device %d, got one on %d", r->mem.device,
                (int)v->device);
    if (!b->mem[0]) {
        b->cols = v->cols;
        b->dtype = v->dtype;
        for (int i = 0; i < 2; i++)
            if (!(b->mem[i] = r->mem.alloc((size_t)r->max_rows * row_bytes(r, b))))
                GP_FAIL(GP_ERR_NO_MEMORY, "relay executor: out of memory");
    }
    if (v->cols != b->cols || v->dtype != b->dtype || b0 + v->rows > r->max_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "relay executor: view [%d][%d] %s at row %d does not fit its buffer [%d][%d] %s",
                (int)v->rows, (int)v->cols, gp_dtype_name(v->dtype), b0, r->max_rows, b->cols,
                gp_dtype_name(b->dtype));
    int to = inside(r, b, 0, v->data) ? 1 : 0;
    size_t es = gp_dtype_size(v->dtype);
    gp_tensor_view dst = {b->mem[to] + (size_t)b0 * row_bytes(r, b), v->rows, v->cols, b->cols + r->mem.row_pad,
                          v->dtype, v->device};
    GP_TRY(r->mem.copy_poison(dst.data, (size_t)dst.row_stride * es, v->data, (size_t)v->row_stride * es,
                              (size_t)v->cols * es, v->rows, event));
    *v = dst;
    return GP_OK;
}

static atomic_int *flag(relay_exec *r, int stage, int layer, int micro)
{
    return &r->issued[((size_t)stage * r->n_flags + layer) * GP_PIPE_MAX_MICRO + micro];
}

/* The runner's ordering, checked before stage `stage` of (layer, micro) runs:
 * each stage in (layer, micro-batch) order, after its predecessor of the same
 * (layer, micro); stage 0 after the last stage of the layer before. */
static gp_status check_order(relay_exec *r, int stage, int layer, int micro)
{
    const gp_step_plan *pn = &r->plan;
    const char *name = r->step.graph.names[stage];
    const int last = r->step.graph.n_stages - 1;
    if (layer < 0 || layer >= pn->n_layers || micro < 0 || micro >= pn->M)
        GP_FAIL(GP_ERR_INVALID_ARG, "relay executor: %s stage of layer %d micro-batch %d: the step has %d layers "
                "and %d micro-batches", name, layer, micro, pn->n_layers, pn->M);
    int index = layer * pn->M + micro;
    if (index != r->last_index[stage] + 1)
        GP_FAIL(GP_ERR_STATE, "relay executor: %s stage of layer %d micro-batch %d issued after index %d, out of "
                "order", name, layer, micro, r->last_index[stage]);
    if (stage > 0 && !atomic_load_explicit(flag(r, stage - 1, layer, micro), memory_order_acquire))
        GP_FAIL(GP_ERR_STATE, "relay executor: %s stage of layer %d micro-batch %d before its %s stage", name,
                layer, micro, r->step.graph.names[stage - 1]);
    if (stage == 0 && layer > 0 && !atomic_load_explicit(flag(r, last, layer - 1, micro), memory_order_acquire))
        GP_FAIL(GP_ERR_STATE, "relay executor: %s stage of layer %d micro-batch %d before the %s stage of layer %d",
                name, layer, micro, r->step.graph.names[last], layer - 1);
    if (stage == r->fail_stage && layer == r->fail_layer && micro == r->fail_micro)
        GP_FAIL(GP_ERR_CUDA, "injected %s failure at layer %d micro-batch %d", name, layer, micro);
    r->last_index[stage] = index;
    return GP_OK;
}

static gp_status relay_run_stage(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out)
{
    relay_exec *r = ctx;
    GP_TRY(check_order(r, stage, layer, micro));
    if (stage < r->relay_stage) {
        GP_TRY(r->inner.step->stage(r->inner.ctx, stage, layer, micro, in, out));
    } else if (stage == r->relay_stage) {
        /* the copy is done when it returns: the payload's event stays the one
         * the inner stage recorded, already passed */
        *out = *in;
        GP_TRY(relay_view(r, &r->bufs[0], in->tok_begin, &out->x, in->event));
        GP_TRY(relay_view(r, &r->bufs[1], in->tok_begin, &out->resid, in->event));
        r->relayed++;
    } else {
        GP_TRY(r->inner.step->stage(r->inner.ctx, stage - 1, layer, micro, in, out));
    }
    atomic_store_explicit(flag(r, stage, layer, micro), 1, memory_order_release);
    return GP_OK;
}

static gp_status relay_step_begin(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens)
{
    relay_exec *r = ctx;
    if (plan->n_layers > r->n_flags) {
        atomic_int *f = realloc(r->issued, sizeof *f * GP_PIPE_MAX_STAGES * (size_t)plan->n_layers *
                                               GP_PIPE_MAX_MICRO);
        if (!f)
            GP_FAIL(GP_ERR_NO_MEMORY, "relay executor: out of memory");
        r->issued = f;
        r->n_flags = plan->n_layers;
    }
    /* relaxed: the runner's start handshake (a mutex) publishes these */
    for (size_t i = 0; i < (size_t)GP_PIPE_MAX_STAGES * r->n_flags * GP_PIPE_MAX_MICRO; i++)
        atomic_store_explicit(&r->issued[i], 0, memory_order_relaxed);
    for (int i = 0; i < GP_PIPE_MAX_STAGES; i++)
        r->last_index[i] = -1;
    r->plan = *plan;
    return r->inner.step->step_begin(r->inner.ctx, plan, seq_ids, tokens);
}

#define FWD(ops, name, params, args) \
    static gp_status fwd_##name params { relay_exec *r = ctx; return r->inner.ops->name args; }
FWD(step, step_end, (void *ctx, int32_t *next, float *logits, gp_step_timing *t), (r->inner.ctx, next, logits, t))
FWD(session, sequential_step,
    (void *ctx, int B, const int *ids, const int32_t *tok, int32_t *next, float *lg, float *ms),
    (r->inner.ctx, B, ids, tok, next, lg, ms))
FWD(session, prefill, (void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last, float *all),
    (r->inner.ctx, S, seqs, next, last, all))
FWD(session, select_split, (void *ctx, int index), (r->inner.ctx, index))

/* The relay stage's times are not measured: it takes the inner executor's
 * timing, whose last stage is the graph's last. */
static gp_status relay_step_end(void *ctx, int32_t *next, float *logits, gp_step_timing *t)
{
    relay_exec *r = ctx;
    gp_step_timing in = {.step_ms = 0};
    for (int i = 0; i < r->relay_stage; i++)
        in.begin[i] = t->begin[i], in.end[i] = t->end[i];
    in.begin[r->relay_stage] = t->begin[r->relay_stage + 1];
    in.end[r->relay_stage] = t->end[r->relay_stage + 1];
    GP_TRY(fwd_step_end(ctx, next, logits, &in));
    t->step_ms = in.step_ms;
    /* the relay stage ran between its neighbours: from the end of one to the start of the next */
    const int n = r->plan.n_layers * r->plan.M;
    for (int k = 0; k < n; k++) {
        t->begin[r->relay_stage][k] = t->end[r->relay_stage - 1][k];
        t->end[r->relay_stage][k] = t->begin[r->relay_stage + 1][k];
    }
    return GP_OK;
}

static int fwd_n_splits(void *ctx)
{
    relay_exec *r = ctx;
    return r->inner.session->n_splits(r->inner.ctx);
}

static void fwd_split_info(void *ctx, int index, gp_split_info *out)
{
    relay_exec *r = ctx;
    r->inner.session->split_info(r->inner.ctx, index, out);
}

static void fwd_abort(void *ctx)
{
    relay_exec *r = ctx;
    r->inner.step->abort_step(r->inner.ctx);
}

static void fwd_reset_seq(void *ctx, int seq)
{
    relay_exec *r = ctx;
    r->inner.session->reset_seq(r->inner.ctx, seq);
}

static gp_status host_copy_poison(void *dst, size_t dpitch, void *src, size_t spitch, size_t width, int rows,
                                  void *event)
{
    (void)event; /* host stages finish inside their call */
    for (int i = 0; i < rows; i++) {
        memcpy((char *)dst + (size_t)i * dpitch, (const char *)src + (size_t)i * spitch, width);
        memset((char *)src + (size_t)i * spitch, 0xff, width);
    }
    return GP_OK;
}

const relay_mem relay_host_mem = {.device = GP_DEVICE_HOST, .row_pad = 3, .alloc = malloc, .free = free,
                                  .copy_poison = host_copy_poison};

gp_status relay_exec_create(gp_exec inner, int max_rows, const relay_mem *mem, relay_exec **out)
{
    const gp_step_ops *is = inner.step;
    if (!is || !inner.session || is->graph.n_stages < 2 || is->graph.n_stages >= GP_PIPE_MAX_STAGES)
        GP_FAIL(GP_ERR_INVALID_ARG, "relay executor: the inner executor needs step ops of 2..%d stages and "
                "session ops", GP_PIPE_MAX_STAGES - 1);
    relay_exec *r = calloc(1, sizeof *r);
    if (!r)
        GP_FAIL(GP_ERR_NO_MEMORY, "relay executor: out of memory");
    r->mem = mem ? *mem : relay_host_mem;
    r->inner = inner;
    r->max_rows = max_rows;
    r->fail_stage = -1;
    const gp_session_ops *io = inner.session;
    const int n_in = is->graph.n_stages;
    r->relay_stage = n_in - 1;
    r->step = (gp_step_ops){.name = "relay", .step_begin = relay_step_begin, .stage = relay_run_stage,
                            .step_end = relay_step_end, .abort_step = fwd_abort};
    r->step.graph.n_stages = n_in + 1;
    for (int i = 0; i < n_in - 1; i++)
        r->step.graph.names[i] = is->graph.names[i];
    r->step.graph.names[n_in - 1] = "relay";
    r->step.graph.names[n_in] = is->graph.names[n_in - 1];
    r->session = (gp_session_ops){.name = "relay", .sequential_step = fwd_sequential_step,
                                  .prefill = io->prefill ? fwd_prefill : NULL,
                                  .reset_seq = io->reset_seq ? fwd_reset_seq : NULL,
                                  .n_splits = io->n_splits ? fwd_n_splits : NULL,
                                  .select_split = io->select_split ? fwd_select_split : NULL,
                                  .split_info = io->split_info ? fwd_split_info : NULL};
    *out = r;
    return GP_OK;
}

void relay_exec_destroy(relay_exec *r)
{
    if (!r)
        return;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++)
            if (r->bufs[k].mem[i])
                r->mem.free(r->bufs[k].mem[i]);
    free(r->issued);
    free(r);
}

gp_exec relay_exec_get(relay_exec *r)
{
    return (gp_exec){.step = &r->step, .session = &r->session, .ctx = r};
}

long relay_exec_relayed(const relay_exec *r)
{
    return r->relayed;
}

void relay_exec_fail_at(relay_exec *r, int stage, int layer, int micro)
{
    r->fail_stage = stage;
    r->fail_layer = layer;
    r->fail_micro = micro;
}
