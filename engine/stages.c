/* The stage entry points of a decode step: embedding, attention (norm, QKV,
 * RoPE + KV append, decode attention, O projection into the residual), FFN
 * (norm, gate/up, SwiGLU, down projection into the residual) and the head
 * (final norm, LM head, argmax). They follow the weight-group discipline of
 * DESIGN.md §1 and never synchronise. */
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

#define STEP(call, cls) do { st = (call); if (st == GP_OK) st = mark(e, sc, (cls)); if (st != GP_OK) goto out; } while (0)

static gp_status acquire(gp_engine *e, gp_group_kind kind, int layer, const gp_stage_ctx *sc,
                         gp_weight_group **g)
{
    *g = gp_device_weights_group(e->dw, kind, layer);
    if (!*g)
        return GP_ERR_INVALID_ARG;
    return gp_weight_group_acquire(*g, sc->stream);
}

gp_status gp_engine_embed_stage(gp_engine *e, int b0, int nb, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    gp_weight_group *g;
    gp_status st = acquire(e, GP_GROUP_HEAD, 0, sc, &g);
    if (st != GP_OK)
        return st;
    STEP(gp_embed(e->tok_d + b0, e->w->embed, e->resid + (size_t)b0 * c->hidden, nb, c->hidden,
                  c->vocab, sc->stream), GP_K_EMBED);
out:
    gp_weight_group_release(g);
    return st;
}

/* The three parts of a layer's attention: norm + QKV projection, RoPE + KV
 * append + decode attention, O projection into the residual. The stages
 * below compose them per placement: all three on one partition, or the two
 * projections beside the FFN (DESIGN.md §1, issue #6). */
static gp_status qkv_part(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const gp_layer_weights *lw = &e->w->layers[layer];
    const size_t H = (size_t)c->hidden, QKV = (size_t)gp_config_qkv_rows(c);
    gp_bf16 *h = e->h_attn + b0 * H, *qkv = e->qkv + b0 * QKV;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->resid + b0 * H, NULL, lw->attn_norm, h, nb, c->hidden, c->norm_eps,
                             sc->stream), GP_K_ATTN_NORM);
    STEP(gp_gemm_bf16(sc->gemm, nb, (int)QKV, c->hidden, h, lw->wqkv, qkv, GP_GEMM_OUT_BF16), GP_K_QKV);
out:
    return st;
}

static gp_status core_part(gp_engine *e, int layer, int b0, int nb, int max_len, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const size_t QKV = (size_t)gp_config_qkv_rows(c), QD = (size_t)c->n_heads * (size_t)c->head_dim;
    gp_kv_view all, kv;
    gp_status st = gp_kv_device_view(e->kv, layer, &all);
    if (st == GP_OK)
        st = gp_kv_view_rows(&all, b0, nb, &kv);
    if (st != GP_OK)
        return st;
    gp_bf16 *qkv = e->qkv + b0 * QKV, *q = e->q + b0 * QD, *attn = e->attn + b0 * QD;
    STEP(gp_rope_kv_append(&kv, nb, c->n_heads, qkv, e->inv_freq, q, sc->stream), GP_K_ROPE);
    STEP(gp_decode_attn(&kv, nb, c->n_heads, max_len, q, attn, sc->attn_ws, sc->attn_ws_bytes, &sc->ap,
                        sc->stream), GP_K_ATTN);
out:
    return st;
}

/* The O projection adds straight into the fp32 residual (beta = 1). */
static gp_status o_part(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, QD = (size_t)c->n_heads * (size_t)c->head_dim;
    gp_status st;
    STEP(gp_gemm_bf16(sc->gemm, nb, c->hidden, (int)QD, e->attn + b0 * QD, e->w->layers[layer].wo,
                      e->resid + b0 * H, GP_GEMM_OUT_F32_ACC), GP_K_O);
out:
    return st;
}

gp_status gp_engine_attn_stage(gp_engine *e, int layer, int b0, int nb, int max_len,
                               const gp_stage_ctx *sc)
{
    gp_weight_group *g;
    gp_status st = acquire(e, GP_GROUP_ATTN, layer, sc, &g);
    if (st != GP_OK)
        return st;
    if ((st = qkv_part(e, layer, b0, nb, sc)) == GP_OK && (st = core_part(e, layer, b0, nb, max_len, sc)) == GP_OK)
        st = o_part(e, layer, b0, nb, sc);
    gp_weight_group_release(g);
    return st;
}

typedef gp_status (*stage_part)(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc);

/* A stage of one part over one weight group of layer. */
static gp_status one_group_stage(gp_engine *e, gp_group_kind kind, stage_part part, int layer, int b0, int nb,
                                 const gp_stage_ctx *sc)
{
    gp_weight_group *g;
    gp_status st = acquire(e, kind, layer, sc, &g);
    if (st != GP_OK)
        return st;
    st = part(e, layer, b0, nb, sc);
    gp_weight_group_release(g);
    return st;
}

gp_status gp_engine_qkv_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    return one_group_stage(e, GP_GROUP_ATTN, qkv_part, layer, b0, nb, sc);
}

/* No weights: the KV cache and the RoPE table belong to the engine. */
gp_status gp_engine_attn_core_stage(gp_engine *e, int layer, int b0, int nb, int max_len,
                                    const gp_stage_ctx *sc)
{
    return core_part(e, layer, b0, nb, max_len, sc);
}

static gp_status ffn_part(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const gp_layer_weights *lw = &e->w->layers[layer];
    const size_t H = (size_t)c->hidden, F = (size_t)c->ffn;
    gp_bf16 *h = e->h_ffn + b0 * H, *gu = e->gu + b0 * 2 * F, *act = e->act + b0 * F;
    gp_status st;
    STEP(gp_rmsnorm_residual(e->resid + b0 * H, NULL, lw->ffn_norm, h, nb, c->hidden, c->norm_eps,
                             sc->stream), GP_K_FFN_NORM);
    STEP(gp_gemm_bf16(sc->gemm, nb, (int)(2 * F), c->hidden, h, lw->w_gate_up, gu, GP_GEMM_OUT_BF16),
         GP_K_GATE_UP);
    STEP(gp_swiglu(gu, act, nb, c->ffn, sc->stream), GP_K_SWIGLU);
    STEP(gp_gemm_bf16(sc->gemm, nb, c->hidden, c->ffn, act, lw->w_down, e->resid + b0 * H,
                      GP_GEMM_OUT_F32_ACC), GP_K_DOWN);
out:
    return st;
}

gp_status gp_engine_ffn_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    return one_group_stage(e, GP_GROUP_FFN, ffn_part, layer, b0, nb, sc);
}

gp_status gp_engine_o_ffn_qkv_stage(gp_engine *e, int layer, int b0, int nb, const gp_stage_ctx *sc)
{
    gp_weight_group *ga, *gf, *gn = NULL;
    gp_status st = acquire(e, GP_GROUP_ATTN, layer, sc, &ga);
    if (st != GP_OK)
        return st;
    if ((st = acquire(e, GP_GROUP_FFN, layer, sc, &gf)) != GP_OK)
        goto out_a;
    bool next = layer + 1 < e->cfg.n_layers;
    if (next && (st = acquire(e, GP_GROUP_ATTN, layer + 1, sc, &gn)) != GP_OK)
        goto out_f;
    if ((st = o_part(e, layer, b0, nb, sc)) == GP_OK && (st = ffn_part(e, layer, b0, nb, sc)) == GP_OK && next)
        st = qkv_part(e, layer + 1, b0, nb, sc);
    if (gn)
        gp_weight_group_release(gn);
out_f:
    gp_weight_group_release(gf);
out_a:
    gp_weight_group_release(ga);
    return st;
}

gp_status gp_engine_head_stage(gp_engine *e, int b0, int nb, const gp_stage_ctx *sc)
{
    const gp_config *c = &e->cfg;
    const size_t H = (size_t)c->hidden, V = (size_t)c->vocab;
    gp_weight_group *g;
    gp_status st = acquire(e, GP_GROUP_HEAD, 0, sc, &g);
    if (st != GP_OK)
        return st;
    gp_bf16 *h = e->h_attn + b0 * H;
    STEP(gp_rmsnorm_residual(e->resid + b0 * H, NULL, e->w->final_norm, h, nb, c->hidden, c->norm_eps,
                             sc->stream), GP_K_HEAD);
    STEP(gp_gemm_bf16(sc->gemm, nb, c->vocab, c->hidden, h, e->w->lm_head, e->logits + b0 * V,
                      GP_GEMM_OUT_F32), GP_K_HEAD);
    STEP(gp_argmax_rows(e->logits + b0 * V, e->next_d + b0, nb, c->vocab, sc->stream), GP_K_HEAD);
out:
    gp_weight_group_release(g);
    return st;
}
