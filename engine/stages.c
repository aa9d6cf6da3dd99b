/* The stage API of the CUDA engine: gp_engine_stage checks a stage's views
 * and composes its parts (embedding; norm + QKV; RoPE + KV append + decode
 * attention; O projection; FFN; head), each over exactly the views it was
 * handed, under the weight-group discipline of docs/ARCHITECTURE.md
 * section 4. Nothing here synchronises. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* In breakdown mode, tag the kernel just launched with its class. */
static gp_status mark(gp_engine *e, const gp_stage_ctx *sc, int cls)
{
    if (!e->bd_ev || e->bd_n >= e->bd_cap)
        return GP_OK;
    cudaError_t err = cudaEventRecord(e->bd_ev[e->bd_n], sc->stream);
    if (err != cudaSuccess)
        return gp_cuda_fail(err, "cudaEventRecord (breakdown)", __FILE__, __LINE__);
    e->bd_class[e->bd_n++] = cls;
    return GP_OK;
}

#define STEP(call, cls) do { st = (call); if (st == GP_OK) st = mark(e, sc, (cls)); if (st != GP_OK) return st; } while (0)

static size_t q_dim(const gp_config *c)
{
    return (size_t)c->n_heads * (size_t)c->head_dim;
}

/* ------------------------------------------------------------ parts */

static gp_status embed_part(gp_engine *e, const gp_group_tensors *w, int b0, int nb, bool prefill,
                            const gp_tensor_view *resid, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    gp_status st;
    STEP(gp_embed(e->dtype, prefill ? e->pf_d + b0 : e->tok_d + b0, w->embed, resid->data, nb, c->hidden, c->vocab,
                  sc->stream),
         GP_K_EMBED);
    return GP_OK;
}

/* Attention norm of the residual rows into scratch, QKV projection into qkv. */
static gp_status qkv_part(gp_engine *e, const gp_layer_weights *lw, int layer, int b0, int nb, bool prefill,
                          const gp_tensor_view *resid, const gp_tensor_view *qkv, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    uint16_t *h = e->h_attn + (size_t)b0 * (size_t)c->hidden;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, lw->attn_norm, h, nb, c->hidden, c->norm_eps,
                             sc->stream),
         GP_K_ATTN_NORM);
    STEP(gp_engine_sparse_proj(e, sc, prefill, layer, GP_SPARSE_QKV, nb, h, lw->wqkv, qkv->data, GP_GEMM_OUT_HALF),
         GP_K_QKV);
    return GP_OK;
}

/* The prefill chunk's tokens: RoPE at each token's position and K/V into its
 * sequence's blocks, then causal attention of every token over its
 * sequence's cache, this chunk's K/V included. */
static gp_status prefill_core_part(gp_engine *e, const gp_stage_io *io, const void *bqkv, const gp_tensor_view *qkv,
                                   const gp_tensor_view *attn, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    gp_kv_view kv;
    gp_status st = gp_kv_device_view(e->kv, io->layer, &kv);
    if (st != GP_OK)
        return st;
    kv.positions = e->pf_d + e->rows;
    kv.row_table = e->pf_d + 2 * (size_t)e->rows;
    kv.lens = NULL;
    kv.n_rows = io->nb;
    const gp_prefill_seq_desc *seqs = (const gp_prefill_seq_desc *)(e->pf_d + 3 * (size_t)e->rows);
    GP_TRY(gp_kv_before_attn(e->km, io->layer, sc->stream));
    /* bqkv (NULL without q/k/v biases) is added in fp32 inside RoPE + KV append */
    STEP(gp_rope_kv_append(&kv, io->nb, c->n_heads, qkv->data, bqkv, e->inv_freq, e->q,
                           sc->stream),
         GP_K_ROPE);
    STEP(gp_prefill_attn(&kv, c->n_heads, e->q, attn->data, io->nb, seqs, e->pf_seqs, e->pf_max_q, sc->stream),
         GP_K_ATTN);
    return gp_kv_after_attn(e->km, io->layer, sc->stream);
}

/* RoPE and KV append of the rows' QKV (plus bqkv: the layer's q/k/v bias
 * or NULL), then decode attention into attn. */
static gp_status core_part(gp_engine *e, const gp_stage_io *io, const void *bqkv, const gp_tensor_view *qkv,
                           const gp_tensor_view *attn, const gp_stage_ctx *sc)
{
    if (io->prefill)
        return prefill_core_part(e, io, bqkv, qkv, attn, sc);
    const gp_config *c = &e->cfg;
    gp_kv_view all, kv;
    gp_status st = gp_kv_device_view(e->kv, io->layer, &all);
    if (st == GP_OK)
        st = gp_kv_view_rows(&all, io->b0, io->nb, &kv);
    if (st != GP_OK)
        return st;
    uint16_t *q = e->q + (size_t)io->b0 * q_dim(c);
    gp_decode_attn_params ap = sc->ap;
    ap.force_splits = io->attn_splits;
    GP_TRY(gp_kv_before_attn(e->km, io->layer, sc->stream));
    STEP(gp_rope_kv_append(&kv, io->nb, c->n_heads, qkv->data, bqkv, e->inv_freq, q,
                           sc->stream),
         GP_K_ROPE);
    STEP(gp_decode_attn(&kv, io->nb, c->n_heads, io->max_len, q, attn->data, sc->attn_ws, sc->attn_ws_bytes, &ap,
                        sc->stream),
         GP_K_ATTN);
    return gp_kv_after_attn(e->km, io->layer, sc->stream);
}

/* The O projection adds straight into the f32 residual (beta = 1). */
static gp_status o_part(gp_engine *e, const void *wo, int layer, int nb, bool prefill, const gp_tensor_view *attn,
                        const gp_tensor_view *resid, const gp_stage_ctx *sc)
{
    gp_status st;
    STEP(gp_engine_sparse_proj(e, sc, prefill, layer, GP_SPARSE_O, nb, attn->data, wo,
                               resid->data, GP_GEMM_OUT_F32_ACC),
         GP_K_O);
    return GP_OK;
}

static gp_status ffn_part(gp_engine *e, const gp_layer_weights *lw, int layer, int b0, int nb, bool prefill,
                          const gp_tensor_view *resid, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, F = (size_t)c->ffn;
    uint16_t *h = e->h_ffn + b0 * H, *gu = e->gu + b0 * 2 * F, *act = e->act + b0 * F;
    gp_status st;
    /* the CPU-assisted FFN keeps its own copy of the norm: on streamed
     * weights its steps do not hold the layer's FFN group */
    const bool cpu_ffn = gp_engine_cpu_ffn_step(e, prefill);
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, cpu_ffn ? gp_engine_cpu_ffn_norm(e, layer) : lw->ffn_norm,
                             h, nb, c->hidden, c->norm_eps, sc->stream),
         GP_K_FFN_NORM);
    if (cpu_ffn) { /* hot neurons here, cold ones on the CPU: one breakdown class */
        STEP(gp_engine_cpu_ffn_part(e, sc, layer, b0, nb, h, resid->data), GP_K_DOWN);
        return GP_OK;
    }
    if (gp_engine_sparse_fused_swiglu(e, prefill, layer, nb)) { /* the SwiGLU inside the gate/up kernel's sum */
        STEP(gp_engine_sparse_gate_up_swiglu(e, sc, layer, nb, h, act), GP_K_GATE_UP);
    } else {
        STEP(gp_engine_sparse_proj(e, sc, prefill, layer, GP_SPARSE_GATE_UP, nb, h, lw->w_gate_up, gu,
                                   GP_GEMM_OUT_HALF),
             GP_K_GATE_UP);
        STEP(gp_swiglu(e->dtype, gu, act, nb, c->ffn, sc->stream), GP_K_SWIGLU);
    }
    STEP(gp_engine_sparse_proj(e, sc, prefill, layer, GP_SPARSE_DOWN, nb, act, lw->w_down, resid->data,
                               GP_GEMM_OUT_F32_ACC),
         GP_K_DOWN);
    return GP_OK;
}

static gp_status head_part(gp_engine *e, const gp_group_tensors *w, int b0, int nb, const gp_tensor_view *resid,
                           const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, V = (size_t)c->vocab;
    uint16_t *h = e->h_attn + b0 * H;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->dtype, resid->data, NULL, w->final_norm, h, nb, c->hidden, c->norm_eps,
                             sc->stream),
         GP_K_HEAD);
    /* lm_head == embed for tied embeddings: the one device copy serves both */
    STEP(gp_gemm(sc->gemm, e->dtype, nb, c->vocab, c->hidden, h, w->lm_head, e->logits + b0 * V,
                 GP_GEMM_OUT_F32),
         GP_K_HEAD);
    STEP(gp_argmax_rows(e->logits + b0 * V, e->next_d + b0, nb, c->vocab, sc->stream), GP_K_HEAD);
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

static gp_status check_views(const gp_engine *e, gp_stage_kind kind, const gp_stage_io *io, const char *who)
{
    const gp_config *c = &e->cfg;
    bool layered = kind != GP_STAGE_EMBED && kind != GP_STAGE_HEAD;
    if (layered && (io->layer < 0 || io->layer >= c->n_layers))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: layer allowed 0..%d", who, c->n_layers - 1);
    if (io->prefill) {
        if (kind == GP_STAGE_HEAD)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: the head takes decode rows, not a prefill chunk's tokens", who);
        if (e->pf_rows == 0)
            GP_FAIL(GP_ERR_STATE, "%s: prefill rows, but no prefill chunk is set up (gp_engine_prefill_batch)", who);
        if (io->b0 != 0 || io->nb != e->pf_rows)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), a prefill stage takes the whole chunk [0, %d)", who,
                    io->b0, io->b0 + io->nb, e->pf_rows);
    } else if (io->b0 < 0 || io->nb < 1 || io->b0 + io->nb > e->p.max_batch) {
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows [%d, %d), allowed within [0, %d) (the engine's max batch)", who, io->b0,
                io->b0 + io->nb, e->p.max_batch);
    }
    if ((kind == GP_STAGE_ATTN || kind == GP_STAGE_ATTN_CORE) && !io->prefill &&
        (io->max_len < 1 || io->attn_splits < 0))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_len %d (>= 1) and attn_splits %d (>= 0)", who, io->max_len,
                io->attn_splits);
    stage_views v = views_of(c, kind, io->layer);
    GP_TRY(check_view(e, &io->x, who, "input (x)", io->nb, v.x_cols, e->dtype));
    GP_TRY(check_view(e, &io->y, who, "output (y)", io->nb, v.y_cols, e->dtype));
    return check_view(e, &io->resid, who, "residual", io->nb, v.resid ? c->hidden : 0, GP_DTYPE_F32);
}

/* The stage's name goes into the message only when a check fails: stages
 * are launched on every eager step. */
static gp_status check_io(const gp_engine *e, gp_stage_kind kind, const gp_stage_io *io, const gp_stage_ctx *sc)
{
    if (sc && check_views(e, kind, io, "stage") == GP_OK)
        return GP_OK;
    char who[64];
    snprintf(who, sizeof who, "%s stage of layer %d", gp_stage_kind_name(kind), io->layer);
    if (!sc)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: no stage context", who);
    return check_views(e, kind, io, who);
}

/* ------------------------------------------------------------ stages */

/* The groups a stage holds and the tensors they granted: cur the layer's
 * (attention, FFN, or the head's), next layer + 1's attention. */
typedef struct held_groups {
    gp_weight_group *g[3];
    int n;
    gp_group_tensors cur, next;
} held_groups;

static gp_status hold(gp_engine *e, held_groups *h, gp_group_kind kind, int layer, const gp_stage_ctx *sc,
                      gp_group_tensors *into)
{
    gp_weight_group *g = gp_device_weights_group(e->dw, kind, layer);
    if (!g)
        GP_FAIL(GP_ERR_INVALID_ARG, "no weight group of kind %d for layer %d", (int)kind, layer);
    gp_group_tensors t;
    GP_TRY(gp_weight_group_acquire(g, sc->stream, &t));
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
static gp_status hold_groups(gp_engine *e, gp_stage_kind kind, int layer, bool prefill, const gp_stage_ctx *sc,
                             held_groups *h)
{
    switch (kind) {
    case GP_STAGE_EMBED:
    case GP_STAGE_HEAD: return hold(e, h, GP_GROUP_HEAD, 0, sc, &h->cur);
    case GP_STAGE_ATTN:
    case GP_STAGE_QKV: return hold(e, h, GP_GROUP_ATTN, layer, sc, &h->cur);
    case GP_STAGE_FFN: /* the CPU-assisted FFN reads its hot cache and host copy instead */
        return gp_engine_cpu_ffn_step(e, prefill) ? GP_OK : hold(e, h, GP_GROUP_FFN, layer, sc, &h->cur);
    case GP_STAGE_ATTN_CORE: /* the KV cache and the RoPE table belong to the engine; the q/k/v bias
                                added in RoPE + KV append is the layer's attention weights' */
        return e->cfg.qkv_bias ? hold(e, h, GP_GROUP_ATTN, layer, sc, &h->cur) : GP_OK;
    case GP_STAGE_O_FFN_QKV:
        GP_TRY(hold(e, h, GP_GROUP_ATTN, layer, sc, &h->cur));
        GP_TRY(hold(e, h, GP_GROUP_FFN, layer, sc, &h->cur));
        return layer + 1 < e->cfg.n_layers ? hold(e, h, GP_GROUP_ATTN, layer + 1, sc, &h->next) : GP_OK;
    default: GP_FAIL(GP_ERR_INVALID_ARG, "stage kind %d: allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    }
}

static gp_status run_parts(gp_engine *e, gp_stage_kind kind, const gp_stage_io *io, const gp_stage_ctx *sc,
                           const held_groups *h)
{
    const int l = io->layer, b0 = io->b0, nb = io->nb;
    const gp_layer_weights *lw = &h->cur.layer;
    gp_tensor_view qkv, attn;
    switch (kind) {
    case GP_STAGE_EMBED: return embed_part(e, &h->cur, b0, nb, io->prefill, &io->resid, sc);
    case GP_STAGE_ATTN:
        /* the whole layer's attention on one context: QKV and attention output in scratch rows */
        GP_TRY(gp_engine_act_view(e, GP_ACT_QKV, b0, nb, &qkv));
        GP_TRY(gp_engine_act_view(e, GP_ACT_ATTN, b0, nb, &attn));
        GP_TRY(qkv_part(e, lw, l, b0, nb, io->prefill, &io->resid, &qkv, sc));
        GP_TRY(core_part(e, io, lw->bqkv, &qkv, &attn, sc));
        return o_part(e, lw->wo, l, nb, io->prefill, &attn, &io->resid, sc);
    case GP_STAGE_FFN: return ffn_part(e, lw, l, b0, nb, io->prefill, &io->resid, sc);
    case GP_STAGE_QKV: return qkv_part(e, lw, l, b0, nb, io->prefill, &io->resid, &io->y, sc);
    case GP_STAGE_ATTN_CORE: return core_part(e, io, lw->bqkv, &io->x, &io->y, sc);
    case GP_STAGE_O_FFN_QKV:
        GP_TRY(o_part(e, lw->wo, l, nb, io->prefill, &io->x, &io->resid, sc));
        GP_TRY(ffn_part(e, lw, l, b0, nb, io->prefill, &io->resid, sc));
        return l + 1 < e->cfg.n_layers
                   ? qkv_part(e, &h->next.layer, l + 1, b0, nb, io->prefill, &io->resid, &io->y, sc)
                   : GP_OK;
    case GP_STAGE_HEAD: return head_part(e, &h->cur, b0, nb, &io->resid, sc);
    default: GP_FAIL(GP_ERR_INVALID_ARG, "stage kind %d: allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    }
}

gp_status gp_engine_stage(gp_engine *e, gp_stage_kind kind, const gp_stage_io *io, gp_stage_ctx *sc)
{
    if (!e || !io)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_stage: engine %p, io %p", (void *)e, (const void *)io);
    if ((unsigned)kind >= GP_STAGE_COUNT)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_stage: stage kind %d, allowed 0..%d", (int)kind, GP_STAGE_COUNT - 1);
    GP_TRY(check_io(e, kind, io, sc));
    held_groups h;
    h.n = 0;
    memset(&h.cur, 0, sizeof h.cur); /* a group not held grants nothing (ATTN_CORE without q/k/v bias) */
    gp_status st = hold_groups(e, kind, io->layer, io->prefill, sc, &h);
    if (st == GP_OK)
        st = run_parts(e, kind, io, sc, &h);
    /* on every exit path; the stream records the groups' last reader (streamed weights) */
    while (h.n > 0) {
        gp_status rs = gp_weight_group_release_on(h.g[--h.n], sc->stream);
        if (st == GP_OK)
            st = rs;
    }
    return st;
}

/* ------------------------------------------------------------ contexts and views */

gp_status gp_engine_stage_ctx_create(gp_engine *e, void *stream, int sm_count, gp_stage_ctx **out)
{
    *out = NULL;
    if (!e || sm_count < 0 || sm_count > e->sm_count)
        GP_FAIL(GP_ERR_INVALID_ARG, "stage context: engine %p, %d SMs (allowed 0..%d, 0: the whole device)",
                (void *)e, sm_count, e ? e->sm_count : 0);
    gp_stage_ctx *sc = calloc(1, sizeof *sc);
    if (!sc)
        GP_FAIL(GP_ERR_NO_MEMORY, "stage context: out of host memory");
    *sc = e->sc; /* the engine's attention workspace and parameters */
    sc->stream = (cudaStream_t)stream;
    sc->ap.sm_count = sm_count ? sm_count : e->sm_count;
    sc->gemm = NULL;
    gp_status st = gp_gemm_ctx_create(stream, sm_count, &sc->gemm);
    if (st == GP_OK)
        st = gp_gemm_set_skinny_max_m(sc->gemm, e->p.gemm_skinny_max_m);
    if (st != GP_OK) {
        gp_stage_ctx_destroy(sc);
        return st;
    }
    *out = sc;
    return GP_OK;
}

void gp_stage_ctx_destroy(gp_stage_ctx *sc)
{
    if (!sc)
        return;
    gp_gemm_ctx_destroy(sc->gemm);
    free(sc);
}

gp_stage_ctx *gp_engine_whole_ctx(gp_engine *e)
{
    return &e->sc;
}

void *gp_stage_ctx_stream(const gp_stage_ctx *sc)
{
    return sc->stream;
}

gp_status gp_engine_act_view(const gp_engine *e, gp_act which, int b0, int nb, gp_tensor_view *out)
{
    const gp_config *c = &e->cfg;
    if (b0 < 0 || nb < 0 || b0 + nb > e->rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "engine activation view: rows [%d, %d), allowed within [0, %d)", b0, b0 + nb,
                e->rows);
    gp_tensor_view all;
    switch (which) {
    case GP_ACT_RESID: all = gp_view_make(e->resid, e->rows, c->hidden, GP_DTYPE_F32, e->device); break;
    case GP_ACT_QKV:
        all = gp_view_make(e->qkv, e->rows, gp_config_qkv_rows(c), e->dtype, e->device);
        break;
    case GP_ACT_ATTN: all = gp_view_make(e->attn, e->rows, (int)q_dim(c), e->dtype, e->device); break;
    default: GP_FAIL(GP_ERR_INVALID_ARG, "engine activation %d: allowed 0..2", (int)which);
    }
    *out = gp_view_rows(all, b0, nb);
    return GP_OK;
}

gp_status gp_engine_attn_splits(const gp_engine *e, const gp_stage_ctx *sc, int rows, int max_len, int *out)
{
    const gp_config *c = &e->cfg;
    gp_decode_attn_params ap = sc->ap;
    ap.force_splits = 0;
    return gp_decode_attn_splits(rows, c->n_heads, c->n_kv_heads, c->head_dim, max_len, &ap, out);
}

gp_status gp_engine_attn_kernel(const gp_engine *e, const gp_stage_ctx *sc, int rows, int max_len,
                                gp_attn_kernel *out)
{
    const gp_config *c = &e->cfg;
    return gp_decode_attn_kernel(rows, c->n_heads, c->n_kv_heads, c->head_dim, max_len, &sc->ap, out);
}

int gp_engine_max_batch(const gp_engine *e)
{
    return e->p.max_batch;
}
