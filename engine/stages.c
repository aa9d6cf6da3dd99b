/* The stage API of the CUDA engine: gp_stage_run checks a stage's views
 * and composes its parts (embedding; norm + QKV; RoPE + KV append +
 * prefill attention of the batch's prefill rows and decode attention of its
 * decode rows; O projection; FFN; head), each over exactly the views it was
 * handed and the rows of its batch, with the running lane's scratch, under
 * the weight-group discipline of docs/ARCHITECTURE.md section 4. Nothing
 * here synchronises. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* In breakdown mode, tag the kernel just launched with its class. */
static gp_status mark(gp_lane *lane, int cls)
{
    if (!lane->bd_ev || lane->bd_n >= lane->bd_cap)
        return GP_OK;
    cudaError_t err = cudaEventRecord(lane->bd_ev[lane->bd_n], lane->stream);
    if (err != cudaSuccess)
        return gp_cuda_fail(err, "cudaEventRecord (breakdown)", __FILE__, __LINE__);
    lane->bd_class[lane->bd_n++] = cls;
    return GP_OK;
}

#define STEP(call, cls) do { st = (call); if (st == GP_OK) st = mark(lane, (cls)); if (st != GP_OK) return st; } while (0)

static size_t q_dim(const gp_config *c)
{
    return (size_t)c->n_heads * (size_t)c->head_dim;
}

/* ------------------------------------------------------------ parts */

/* How o and down write the f32 residual: added into it (beta = 1); under
 * tensor parallelism only rank 0 adds, the others write their partial sums,
 * and the all-reduce after the projection (tp_sum) makes the next residual. */
static gp_gemm_out resid_out(const gp_engine *e)
{
    return e->tp_reduce && e->tp_rank != 0 ? GP_GEMM_OUT_F32 : GP_GEMM_OUT_F32_ACC;
}

static gp_status tp_sum(gp_lane *lane, int nb, const gp_tensor_view *resid)
{
    gp_engine *e = lane->e;
    if (!e->tp_reduce)
        return GP_OK;
    return e->tp_reduce(e->tp_ctx, (float *)resid->data, (size_t)nb * (size_t)e->cfg.hidden, lane->stream);
}

static gp_status embed_part(gp_lane *lane, const gp_stage_batch *b, const gp_group_tensors *w, int b0, int nb,
                            const gp_tensor_view *resid)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    const int rows = gp_config_vocab_rows(c);
    gp_status st;
    if (c->vocab_parts > 1 && e->tp != c->vocab_parts)
        GP_FAIL(GP_ERR_STATE, "embedding: the weights hold one of %d parts of the vocabulary, but the engine runs as "
                "rank %d of %d (gp_engine_set_tp)", c->vocab_parts, e->tp_rank, e->tp);
    STEP(gp_embed(e->dtype, b->tokens + b0, w->embed, resid->data, nb, c->hidden, c->vocab, e->tp_rank * rows, rows,
                  lane->stream),
         GP_K_EMBED);
    return tp_sum(lane, nb, resid); /* under tensor parallelism each rank embedded its part's tokens alone */
}

/* Attention norm of the residual rows into scratch, QKV projection into qkv. */
static gp_status qkv_part(gp_lane *lane, const gp_stage_batch *b, const gp_layer_weights *lw, int layer, int b0,
                          int nb, const gp_tensor_view *resid, const gp_tensor_view *qkv)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    uint16_t *h = lane->h_attn + (size_t)b0 * (size_t)c->hidden;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, lw->attn_norm, h, nb, c->hidden, c->norm_eps,
                             lane->stream),
         GP_K_ATTN_NORM);
    STEP(gp_engine_sparse_proj(e, lane, b, layer, GP_SPARSE_QKV, nb, h, lw->wqkv, qkv->data,
                               GP_GEMM_OUT_HALF),
         GP_K_QKV);
    return GP_OK;
}

/* The batch's prefill rows [0, P): RoPE at each token's position and K/V
 * into its sequence's blocks, then causal attention of every token over its
 * sequence's cache, these rows' K/V included. */
static gp_status prefill_rows_part(gp_lane *lane, const gp_stage_batch *b, int layer, const void *bqkv,
                                   const void *qkv, void *attn)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    gp_kv_view kv;
    gp_status st = gp_lane_kv_view(e, b, layer, &kv);
    if (st != GP_OK)
        return st;
    kv.positions = b->positions;
    kv.row_table = b->table_rows;
    kv.lens = NULL;
    kv.n_rows = b->prefill_rows;
    /* bqkv (NULL without q/k/v biases) is added in fp32 inside RoPE + KV append */
    STEP(gp_rope_kv_append(&kv, b->prefill_rows, c->n_heads, qkv, bqkv, e->inv_freq, lane->q,
                           lane->stream),
         GP_K_ROPE);
    STEP(gp_prefill_attn(&kv, c->n_heads, lane->q, attn, b->prefill_rows, b->seqs, b->n_seqs, b->max_q,
                         e->p.prefill_attn_kernel, lane->stream),
         GP_K_ATTN);
    return GP_OK;
}

/* Decode rows [d0, d0 + dn) of the batch: RoPE and KV append at each row's
 * position, then decode attention over its sequence's cache. */
static gp_status decode_rows_part(gp_lane *lane, const gp_stage_batch *b, const gp_stage_io *io, int d0, int dn,
                                  const void *bqkv, const void *qkv, void *attn)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    gp_kv_view all, kv;
    gp_status st = gp_lane_kv_view(e, b, io->layer, &all);
    if (st == GP_OK)
        st = gp_kv_view_rows(&all, b->decode_table0 + d0 - b->prefill_rows, dn, &kv);
    if (st != GP_OK)
        return st;
    uint16_t *q = lane->q + (size_t)d0 * q_dim(c);
    gp_decode_attn_params ap = lane->ap;
    ap.force_splits = io->attn_splits;
    STEP(gp_rope_kv_append(&kv, dn, c->n_heads, qkv, bqkv, e->inv_freq, q, lane->stream),
         GP_K_ROPE);
    STEP(gp_decode_attn(&kv, dn, c->n_heads, io->max_len, q, attn, lane->attn_ws, lane->attn_ws_bytes, &ap,
                        lane->stream),
         GP_K_ATTN);
    return GP_OK;
}

/* RoPE, KV append and attention of the rows (plus bqkv: the layer's q/k/v
 * bias or NULL): the prefill rows through the prefill attention, the decode
 * rows through the decode attention, between the KV memory's hooks. */
static gp_status core_part(gp_lane *lane, const gp_stage_batch *b, const gp_stage_io *io, const void *bqkv,
                           const gp_tensor_view *qkv, const gp_tensor_view *attn)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    const size_t QKV = (size_t)gp_config_qkv_rows(c), QD = q_dim(c);
    const int P = b->prefill_rows, d0 = io->b0 > P ? io->b0 : P, end = io->b0 + io->nb;
    GP_TRY(gp_kv_before_attn(b->km, io->layer, lane->stream));
    if (P > 0) /* the checks make a stage with prefill rows start at row 0 */
        GP_TRY(prefill_rows_part(lane, b, io->layer, bqkv, qkv->data, attn->data));
    if (end > d0)
        GP_TRY(decode_rows_part(lane, b, io, d0, end - d0, bqkv, (const uint16_t *)qkv->data + (size_t)(d0 - io->b0) * QKV,
                                (uint16_t *)attn->data + (size_t)(d0 - io->b0) * QD));
    return gp_kv_after_attn(b->km, io->layer, lane->stream);
}

static gp_status o_part(gp_lane *lane, const gp_stage_batch *b, const void *wo, int layer, int nb,
                        const gp_tensor_view *attn, const gp_tensor_view *resid)
{
    gp_engine *e = lane->e;
    gp_status st;
    STEP(gp_engine_sparse_proj(e, lane, b, layer, GP_SPARSE_O, nb, attn->data, wo,
                               resid->data, resid_out(e)),
         GP_K_O);
    return tp_sum(lane, nb, resid);
}

static gp_status ffn_part(gp_lane *lane, const gp_stage_batch *b, const gp_layer_weights *lw, int layer, int b0,
                          int nb, const gp_tensor_view *resid)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, F = (size_t)c->ffn;
    uint16_t *h = lane->h_ffn + b0 * H, *gu = lane->gu + b0 * 2 * F, *act = lane->act + b0 * F;
    const int sr = b->sparse_rows;
    gp_status st;
    /* the CPU-assisted FFN keeps its own copy of the norm: on streamed
     * weights its steps do not hold the layer's FFN group */
    const bool cpu_ffn = gp_engine_cpu_ffn_step(e, sr);
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, cpu_ffn ? gp_engine_cpu_ffn_norm(e, layer) : lw->ffn_norm,
                             h, nb, c->hidden, c->norm_eps, lane->stream),
         GP_K_FFN_NORM);
    if (cpu_ffn) { /* hot neurons here, cold ones on the CPU: one breakdown class */
        STEP(gp_engine_cpu_ffn_part(e, lane, layer, b0, nb, sr, h, resid->data), GP_K_DOWN);
        return GP_OK;
    }
    if (gp_engine_sparse_fused_swiglu(e, b, layer, nb)) { /* the SwiGLU inside the gate/up kernel's sum */
        STEP(gp_engine_sparse_gate_up_swiglu(e, lane, layer, nb, h, act), GP_K_GATE_UP);
    } else if (!e->p.split_swiglu && gp_gemm_is_skinny(lane->gemm, nb, 2 * c->ffn, c->hidden, h, lw->w_gate_up)) {
        /* dense on the skinny kernel: the SwiGLU in its epilogue (the gate/up rows never reach memory) */
        STEP(gp_gemm(lane->gemm, e->dtype, nb, 2 * c->ffn, c->hidden, h, lw->w_gate_up, act, GP_GEMM_OUT_SWIGLU),
             GP_K_GATE_UP);
    } else {
        STEP(gp_engine_sparse_proj(e, lane, b, layer, GP_SPARSE_GATE_UP, nb, h, lw->w_gate_up, gu,
                                   GP_GEMM_OUT_HALF),
             GP_K_GATE_UP);
        STEP(gp_swiglu(e->dtype, gu, act, nb, c->ffn, lane->stream), GP_K_SWIGLU);
    }
    STEP(gp_engine_sparse_proj(e, lane, b, layer, GP_SPARSE_DOWN, nb, act, lw->w_down, resid->data,
                               resid_out(e)),
         GP_K_DOWN);
    return tp_sum(lane, nb, resid);
}

static gp_status head_part(gp_lane *lane, const gp_stage_batch *b, const gp_group_tensors *w, int b0, int nb,
                           const gp_tensor_view *resid)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, V = (size_t)c->vocab;
    uint16_t *h = lane->h_attn + b0 * H;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, w->final_norm, h, nb, c->hidden, c->norm_eps,
                             lane->stream),
         GP_K_HEAD);
    /* lm_head == embed for tied embeddings: the one device copy serves both */
    if (e->tp_gather) { /* this rank's part of the head, then every rank's logits in vocabulary order */
        const size_t s = (size_t)gp_config_vocab_rows(c);
        const int n = gp_vocab_part_tokens(c->vocab, e->tp, e->tp_rank); /* the last part's tail rows are padding */
        STEP(gp_gemm(lane->gemm, e->dtype, nb, n, c->hidden, h, w->lm_head,
                     e->tp_head + (size_t)e->tp_rank * (size_t)nb * s, GP_GEMM_OUT_F32),
             GP_K_HEAD);
        STEP(e->tp_gather(e->tp_ctx, e->tp_head, (size_t)nb * s, lane->stream), GP_K_HEAD);
        STEP(gp_vocab_gather(e->tp_head, b->logits + b0 * V, nb, c->vocab, e->tp, lane->stream), GP_K_HEAD);
    } else {
        STEP(gp_gemm(lane->gemm, e->dtype, nb, c->vocab, c->hidden, h, w->lm_head, b->logits + b0 * V,
                     GP_GEMM_OUT_F32),
             GP_K_HEAD);
    }
    STEP(gp_argmax_rows(b->logits + b0 * V, b->next + b0, nb, c->vocab, lane->stream), GP_K_HEAD);
    return GP_OK;
}

/* ------------------------------------------------------------ views */

/* Which views a stage kind takes, and their widths. */
typedef struct stage_views {
    int x_cols, y_cols; /* 0: the view must be empty */
    bool resid;
} stage_views;

static stage_views views_of(const gp_config *c, gp_stage_kind kind, int layer)
{
    int QKV = gp_config_qkv_rows(c), QD = (int)q_dim(c);
    switch (kind) {
    case GP_STAGE_QKV: return (stage_views){0, QKV, true};
    case GP_STAGE_ATTN_CORE: return (stage_views){QKV, QD, false};
    case GP_STAGE_O_FFN_QKV: return (stage_views){QD, layer + 1 < c->n_layers ? QKV : 0, true};
    default: return (stage_views){0, 0, true}; /* EMBED, ATTN, FFN, HEAD */
    }
}

static gp_status check_view(const gp_engine *e, const gp_tensor_view *v, const char *who, const char *what, int nb,
                            int cols, gp_dtype dt)
{
    if (cols == 0) {
        if (v->rows != 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: takes no %s view, was handed one of %d rows", who, what, (int)v->rows);
        return GP_OK;
    }
    return gp_view_check(v, who, what, nb, cols, dt, e->device, true);
}

static gp_status check_views(const gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io, const char *who)
{
    const gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    const gp_stage_batch *b = gp_lane_batch_of(lane, io);
    bool layered = kind != GP_STAGE_EMBED && kind != GP_STAGE_HEAD;
    if (b->ffn_only && kind != GP_STAGE_FFN)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: a %s stage over rows opened for FFN stages alone (gp_engine_open_ffn_rows: "
                "the sequences live in another engine)", who, gp_stage_kind_name(kind));
    if (layered && (io->layer < 0 || io->layer >= c->n_layers))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: layer allowed 0..%d", who, c->n_layers - 1);
    if (io->b0 < 0 || io->nb < 1 || io->b0 + io->nb > lane->rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), allowed within [0, %d) (the lane's rows)", who, io->b0,
                io->b0 + io->nb, lane->rows);
    if (kind == GP_STAGE_HEAD) { /* the batch's logits and next tokens hold max_batch rows */
        if (io->b0 + io->nb > e->p.max_batch)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), the head's outputs hold [0, %d) (the engine's max "
                    "batch)", who, io->b0, io->b0 + io->nb, e->p.max_batch);
    } else {
        if (b->rows == 0)
            GP_FAIL(GP_ERR_STATE, "%s: no batch is open (a decode step's prepare, a prefill or a mixed batch "
                    "opens one)", who);
        if (io->b0 + io->nb > b->rows)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), the open batch has %d", who, io->b0, io->b0 + io->nb,
                    b->rows);
        if (b->prefill_rows > 0 && (io->b0 != 0 || io->nb != b->rows))
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), a batch with prefill rows runs whole [0, %d)", who,
                    io->b0, io->b0 + io->nb, b->rows);
    }
    if ((kind == GP_STAGE_ATTN || kind == GP_STAGE_ATTN_CORE) && b->rows > b->prefill_rows &&
        (io->max_len < 1 || io->attn_splits < 0))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_len %d (>= 1) and attn_splits %d (>= 0) for decode rows", who,
                io->max_len, io->attn_splits);
    stage_views v = views_of(c, kind, io->layer);
    GP_TRY(check_view(e, &io->x, who, "input (x)", io->nb, v.x_cols, e->dtype));
    GP_TRY(check_view(e, &io->y, who, "output (y)", io->nb, v.y_cols, e->dtype));
    return check_view(e, &io->resid, who, "residual", io->nb, v.resid ? c->hidden : 0, GP_DTYPE_F32);
}

/* The stage's name goes into the message only when a check fails: stages
 * are launched on every eager step. */
static gp_status check_io(const gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io)
{
    if (check_views(lane, kind, io, "stage") == GP_OK)
        return GP_OK;
    char who[64];
    snprintf(who, sizeof who, "%s stage of layer %d", gp_stage_kind_name(kind), io->layer);
    return check_views(lane, kind, io, who);
}

/* ------------------------------------------------------------ stages */

/* The groups a stage holds and the tensors their acquires granted: cur
 * the stage's layer (or the head), next layer + 1's attention (O_FFN_QKV). */
typedef struct held_groups {
    gp_weight_group *g[3];
    int n;
    gp_group_tensors cur, next;
} held_groups;

static gp_status hold(gp_engine *e, held_groups *h, gp_group_kind kind, int layer, cudaStream_t stream,
                      gp_group_tensors *into)
{
    gp_weight_group *g = gp_device_weights_group(e->dw, kind, layer);
    if (!g)
        GP_FAIL(GP_ERR_INVALID_ARG, "no weight group of kind %d for layer %d", (int)kind, layer);
    gp_group_tensors t;
    GP_TRY(gp_weight_group_acquire(g, stream, &t));
    h->g[h->n++] = g;
    if (kind == GP_GROUP_HEAD) {
        into->embed = t.embed, into->final_norm = t.final_norm, into->lm_head = t.lm_head;
    } else if (kind == GP_GROUP_ATTN) {
        into->layer.attn_norm = t.layer.attn_norm, into->layer.wqkv = t.layer.wqkv;
        into->layer.bqkv = t.layer.bqkv, into->layer.wo = t.layer.wo;
    } else {
        into->layer.ffn_norm = t.layer.ffn_norm, into->layer.w_gate_up = t.layer.w_gate_up;
        into->layer.w_down = t.layer.w_down;
    }
    return GP_OK;
}

/* The weight groups a stage reads. */
static gp_status hold_groups(gp_engine *e, gp_stage_kind kind, int layer, int sparse_rows, cudaStream_t s,
                             held_groups *h)
{
    switch (kind) {
    case GP_STAGE_EMBED:
    case GP_STAGE_HEAD: return hold(e, h, GP_GROUP_HEAD, 0, s, &h->cur);
    case GP_STAGE_ATTN:
    case GP_STAGE_QKV: return hold(e, h, GP_GROUP_ATTN, layer, s, &h->cur);
    case GP_STAGE_FFN: /* the CPU-assisted FFN reads its hot cache and host copy instead */
        return gp_engine_cpu_ffn_step(e, sparse_rows) ? GP_OK : hold(e, h, GP_GROUP_FFN, layer, s, &h->cur);
    case GP_STAGE_ATTN_CORE: /* the KV cache and the RoPE table belong to the engine; the q/k/v bias
                                added in RoPE + KV append is the layer's attention weights' */
        return e->cfg.qkv_bias ? hold(e, h, GP_GROUP_ATTN, layer, s, &h->cur) : GP_OK;
    case GP_STAGE_O_FFN_QKV:
        GP_TRY(hold(e, h, GP_GROUP_ATTN, layer, s, &h->cur));
        GP_TRY(hold(e, h, GP_GROUP_FFN, layer, s, &h->cur));
        return layer + 1 < e->cfg.n_layers ? hold(e, h, GP_GROUP_ATTN, layer + 1, s, &h->next) : GP_OK;
    default: GP_FAIL(GP_ERR_INVALID_ARG, "stage kind %d: allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    }
}

static gp_status run_parts(gp_lane *lane, const gp_stage_batch *b, gp_stage_kind kind, const gp_stage_io *io,
                           const held_groups *h)
{
    const int l = io->layer, b0 = io->b0, nb = io->nb;
    const gp_layer_weights *lw = &h->cur.layer;
    gp_tensor_view qkv, attn;
    switch (kind) {
    case GP_STAGE_EMBED: return embed_part(lane, b, &h->cur, b0, nb, &io->resid);
    case GP_STAGE_ATTN:
        /* the whole layer's attention on one lane: QKV and attention output in its scratch rows */
        GP_TRY(gp_lane_act_view(lane, GP_ACT_QKV, b0, nb, &qkv));
        GP_TRY(gp_lane_act_view(lane, GP_ACT_ATTN, b0, nb, &attn));
        GP_TRY(qkv_part(lane, b, lw, l, b0, nb, &io->resid, &qkv));
        GP_TRY(core_part(lane, b, io, lw->bqkv, &qkv, &attn));
        return o_part(lane, b, lw->wo, l, nb, &attn, &io->resid);
    case GP_STAGE_FFN: return ffn_part(lane, b, lw, l, b0, nb, &io->resid);
    case GP_STAGE_QKV: return qkv_part(lane, b, lw, l, b0, nb, &io->resid, &io->y);
    case GP_STAGE_ATTN_CORE: return core_part(lane, b, io, lw->bqkv, &io->x, &io->y);
    case GP_STAGE_O_FFN_QKV:
        GP_TRY(o_part(lane, b, lw->wo, l, nb, &io->x, &io->resid));
        GP_TRY(ffn_part(lane, b, lw, l, b0, nb, &io->resid));
        return l + 1 < lane->e->cfg.n_layers ? qkv_part(lane, b, &h->next.layer, l + 1, b0, nb, &io->resid, &io->y) : GP_OK;
    case GP_STAGE_HEAD: return head_part(lane, b, &h->cur, b0, nb, &io->resid);
    default: GP_FAIL(GP_ERR_INVALID_ARG, "stage kind %d: allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    }
}

gp_status gp_stage_run(gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io)
{
    if (!lane || !io)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stage_run: lane %p, io %p", (void *)lane, (const void *)io);
    if ((unsigned)kind >= GP_STAGE_COUNT)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stage_run: stage kind %d, allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    GP_TRY(check_io(lane, kind, io));
    const gp_stage_batch *b = gp_lane_batch_of(lane, io);
    held_groups h;
    memset(&h, 0, sizeof h); /* a group not held grants nothing (ATTN_CORE without q/k/v bias) */
    gp_status st = hold_groups(lane->e, kind, io->layer, b->sparse_rows, lane->stream, &h);
    if (st == GP_OK)
        st = run_parts(lane, b, kind, io, &h);
    /* on every exit path; the stream records the groups' last reader (streamed weights) */
    while (h.n > 0) {
        gp_status rs = gp_weight_group_release_on(h.g[--h.n], lane->stream);
        if (st == GP_OK)
            st = rs;
    }
    return st;
}

gp_status gp_stage_capture(gp_lane *lane, gp_stage_kind kind, const gp_stage_io *io, const char *what, void **exec)
{
    if (!lane || !exec)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stage_capture: lane %p, exec %p", (void *)lane, (void *)exec);
    cudaGraph_t graph = NULL;
    GP_CUDA_TRY(cudaStreamBeginCapture(lane->stream, cudaStreamCaptureModeThreadLocal));
    gp_status st = gp_stage_run(lane, kind, io);
    cudaError_t ce = cudaStreamEndCapture(lane->stream, &graph);
    if (st == GP_OK && ce != cudaSuccess)
        st = gp_cuda_fail(ce, what, __FILE__, __LINE__);
    if (st == GP_OK)
        st = gp_device_graph_instantiate((cudaGraphExec_t *)exec, graph, what);
    if (graph)
        cudaGraphDestroy(graph);
    return st;
}

int gp_engine_max_batch(const gp_engine *e)
{
    return e->p.max_batch;
}

int gp_engine_max_context(const gp_engine *e)
{
    return e->p.max_context;
}
