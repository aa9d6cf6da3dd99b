/* The relaying executor of relay_exec.h: every op goes to the inner
 * executor, except that ffn first moves the payload's views. */
#include "relay_exec.h"

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
    gp_exec_ops ops;
    relay_mem mem;
    int max_rows;
    relay_buf bufs[2]; /* [0] x, [1] resid */
    long relayed;
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

static gp_status relay_ffn(void *ctx, const gp_payload *in)
{
    relay_exec *r = ctx;
    gp_payload moved = *in;
    GP_TRY(relay_view(r, &r->bufs[0], in->tok_begin, &moved.x, in->event));
    GP_TRY(relay_view(r, &r->bufs[1], in->tok_begin, &moved.resid, in->event));
    r->relayed++;
    return r->inner.ops->ffn(r->inner.ctx, &moved);
}

#define FWD(name, params, args) \
    static gp_status fwd_##name params { relay_exec *r = ctx; return r->inner.ops->name args; }
FWD(step_begin, (void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens),
    (r->inner.ctx, plan, seq_ids, tokens))
FWD(attn, (void *ctx, int layer, int micro, gp_payload *out), (r->inner.ctx, layer, micro, out))
FWD(step_end, (void *ctx, int32_t *next, float *logits, gp_step_timing *t), (r->inner.ctx, next, logits, t))
FWD(sequential_step, (void *ctx, int B, const int *ids, const int32_t *tok, int32_t *next, float *lg, float *ms),
    (r->inner.ctx, B, ids, tok, next, lg, ms))
FWD(prefill, (void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *last, float *all),
    (r->inner.ctx, S, seqs, next, last, all))

FWD(select_split, (void *ctx, int index), (r->inner.ctx, index))

static int fwd_n_splits(void *ctx)
{
    relay_exec *r = ctx;
    return r->inner.ops->n_splits(r->inner.ctx);
}

static void fwd_split_info(void *ctx, int index, gp_split_info *out)
{
    relay_exec *r = ctx;
    r->inner.ops->split_info(r->inner.ctx, index, out);
}

static void fwd_abort(void *ctx)
{
    relay_exec *r = ctx;
    r->inner.ops->abort_step(r->inner.ctx);
}

static void fwd_reset_seq(void *ctx, int seq)
{
    relay_exec *r = ctx;
    r->inner.ops->reset_seq(r->inner.ctx, seq);
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
    relay_exec *r = calloc(1, sizeof *r);
    if (!r)
        GP_FAIL(GP_ERR_NO_MEMORY, "relay executor: out of memory");
    r->mem = mem ? *mem : relay_host_mem;
    r->inner = inner;
    r->max_rows = max_rows;
    r->ops = (gp_exec_ops){.name = "relay", .step_begin = fwd_step_begin, .attn = fwd_attn, .ffn = relay_ffn,
                           .step_end = fwd_step_end, .abort_step = fwd_abort,
                           .sequential_step = fwd_sequential_step,
                           .prefill = inner.ops->prefill ? fwd_prefill : NULL,
                           .reset_seq = inner.ops->reset_seq ? fwd_reset_seq : NULL, .n_splits = inner.ops->n_splits ? fwd_n_splits : NULL,
                           .select_split = inner.ops->select_split ? fwd_select_split : NULL,
                           .split_info = inner.ops->split_info ? fwd_split_info : NULL};
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
    free(r);
}

gp_exec relay_exec_get(relay_exec *r)
{
    return (gp_exec){&r->ops, r};
}

long relay_exec_relayed(const relay_exec *r)
{
    return r->relayed;
}
