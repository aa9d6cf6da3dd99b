/* Tensor parallelism's shards of a model: which heads and FFN neurons a rank
 * holds, and its host weights cut from the whole model's (the projections
 * whose outputs are split take row slices, those whose inputs are split
 * take column slices; norms, embeddings and the head whole). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"

gp_status gp_tp_check(const gp_config *cfg, int tp)
{
    if (!cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "tensor parallel: config is NULL");
    if (tp < 1 || tp > GP_TP_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "--tp %d: allowed 1..%d (GPUs of one group)", tp, GP_TP_MAX);
    const struct { const char *what; int v; } split[] = {
        {"query heads (num_attention_heads)", cfg->n_heads},
        {"key/value heads (num_key_value_heads)", cfg->n_kv_heads},
        {"FFN neurons (intermediate_size)", cfg->ffn},
    };
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (split[i].v % tp != 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "--tp %d: model %s has %d %s, not a multiple of %d: each GPU holds an equal "
                    "share of them", tp, cfg->name, split[i].v, split[i].what, tp);
    return GP_OK;
}

gp_status gp_tp_config(const gp_config *cfg, int tp, gp_config *out)
{
    GP_TRY(gp_tp_check(cfg, tp));
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tp_config: out is NULL");
    *out = *cfg;
    out->n_heads /= tp;
    out->n_kv_heads /= tp;
    out->ffn /= tp;
    return GP_OK;
}

/* Rows [r0, r0 + n) of a [.][cols] tensor to dst. */
static void *copy_rows(void *dst, const void *src, size_t r0, size_t n, size_t cols, size_t es)
{
    memcpy(dst, (const char *)src + r0 * cols * es, n * cols * es);
    return (char *)dst + n * cols * es;
}

/* Columns [c0, c0 + n) of every one of rows rows of a [rows][cols] tensor. */
static void copy_cols(void *dst, const void *src, size_t rows, size_t cols, size_t c0, size_t n, size_t es)
{
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * n * es, (const char *)src + (r * cols + c0) * es, n * es);
}

gp_status gp_host_weights_shard(const gp_host_weights *w, int tp, int rank, gp_host_weights *out)
{
    if (!w || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_weights_shard: weights or out is NULL");
    if (rank < 0 || rank >= tp)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_weights_shard: rank %d of --tp %d: allowed 0..%d", rank, tp, tp - 1);
    const gp_config *c = &w->cfg;
    gp_config sc;
    GP_TRY(gp_tp_config(c, tp, &sc));
    GP_TRY(gp_host_weights_alloc(&sc, w->dtype, out));
    const size_t es = gp_dtype_size(w->dtype), H = (size_t)c->hidden, hd = (size_t)c->head_dim;
    const size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd, F = (size_t)c->ffn;
    const size_t sq = qd / tp, sk = kd / tp, sf = F / tp, r = (size_t)rank;
    memcpy(out->embed, w->embed, (size_t)c->vocab * H * es);
    memcpy(out->final_norm, w->final_norm, H * es);
    if (!c->tied_embeddings)
        memcpy(out->lm_head, w->lm_head, (size_t)c->vocab * H * es);
    for (int l = 0; l < c->n_layers; l++) {
        const gp_layer_weights *a = &w->layers[l];
        gp_layer_weights *b = &out->layers[l];
        memcpy(b->attn_norm, a->attn_norm, H * es);
        memcpy(b->ffn_norm, a->ffn_norm, H * es);
        /* q, k, v: this rank's heads of each (column parallel: output rows) */
        void *d = copy_rows(b->wqkv, a->wqkv, r * sq, sq, H, es);
        d = copy_rows(d, a->wqkv, qd + r * sk, sk, H, es);
        (void)copy_rows(d, a->wqkv, qd + kd + r * sk, sk, H, es);
        if (c->qkv_bias) {
            d = copy_rows(b->bqkv, a->bqkv, r * sq, sq, 1, es);
            d = copy_rows(d, a->bqkv, qd + r * sk, sk, 1, es);
            (void)copy_rows(d, a->bqkv, qd + kd + r * sk, sk, 1, es);
        }
        /* o: the inputs of this rank's heads (row parallel: input columns) */
        copy_cols(b->wo, a->wo, H, qd, r * sq, sq, es);
        /* gate and up: this rank's neurons of each */
        d = copy_rows(b->w_gate_up, a->w_gate_up, r * sf, sf, H, es);
        (void)copy_rows(d, a->w_gate_up, F + r * sf, sf, H, es);
        /* down: those neurons' inputs */
        copy_cols(b->w_down, a->w_down, H, F, r * sf, sf, es);
    }
    snprintf(out->cfg.name, sizeof out->cfg.name, "%.40s tp%hhu.%hhu", c->name, (unsigned char)tp,
             (unsigned char)rank); /* tp <= GP_TP_MAX */
    return GP_OK;
}
