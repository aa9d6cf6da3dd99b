/* Tensor parallelism's shards of a model: which heads, FFN neurons and
 * tokens a rank holds, and its host weights cut from the whole model's (the
 * projections whose outputs are split take row slices, those whose inputs
 * are split take column slices, the embedding and head the rows of the
 * rank's tokens; norms whole). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"

gp_status gp_tp_check(const gp_config *cfg, int tp)
{
    if (!cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "tensor parallel: config is NULL");
    if (cfg->vocab_parts > 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "tensor parallel: config %s is already one of %d parts of a model, not a whole "
                "model", cfg->name, cfg->vocab_parts);
    if (tp < 1 || tp > GP_TP_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "--tp %d: allowed 1..%d (GPUs of one group)", tp, GP_TP_MAX);
    const struct { const char *what; int v; } split[] = {
        {"query heads (num_attention_heads)", cfg->n_heads},
        {"key/value heads (num_key_value_heads)", cfg->n_kv_heads},
        {"FFN neurons (intermediate_size)", cfg->ffn},
    };
    if (gp_vocab_part_tokens(cfg->vocab, tp, tp - 1) == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "--tp %d: model %s's vocabulary of %d tokens cut in parts of %d leaves the last "
                "GPU none", tp, cfg->name, cfg->vocab, gp_vocab_part_rows(cfg->vocab, tp));
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
    out->vocab_parts = tp > 1 ? tp : 0;
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

/* Whether rank shards of kind differ from the whole tensor. */
static bool is_cut(gp_tensor_kind kind)
{
    return kind == GP_T_WQKV || kind == GP_T_BQKV || kind == GP_T_WO || kind == GP_T_W_GATE_UP ||
           kind == GP_T_W_DOWN || kind == GP_T_EMBED || kind == GP_T_LM_HEAD;
}

/* Rank r's part of one tensor of the whole model c (full) into dst: q/k/v
 * and gate/up by output rows, o and down by input columns, the embedding
 * and head by token rows (the last rank's tail zero), the others whole. */
static void cut(const gp_config *c, int tp, int rank, gp_tensor_kind kind, const void *full, void *dst, size_t es)
{
    const size_t H = (size_t)c->hidden, hd = (size_t)c->head_dim, r = (size_t)rank;
    const size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd, F = (size_t)c->ffn;
    const size_t sq = qd / tp, sk = kd / tp, sf = F / tp;
    void *d;
    switch (kind) {
    case GP_T_WQKV: /* this rank's heads of each of q, k and v */
    case GP_T_BQKV: {
        const size_t cols = kind == GP_T_WQKV ? H : 1;
        d = copy_rows(dst, full, r * sq, sq, cols, es);
        d = copy_rows(d, full, qd + r * sk, sk, cols, es);
        (void)copy_rows(d, full, qd + kd + r * sk, sk, cols, es);
        return;
    }
    case GP_T_WO: /* the inputs of this rank's heads */
        copy_cols(dst, full, H, qd, r * sq, sq, es);
        return;
    case GP_T_W_GATE_UP: /* this rank's neurons of each of gate and up */
        d = copy_rows(dst, full, r * sf, sf, H, es);
        (void)copy_rows(d, full, F + r * sf, sf, H, es);
        return;
    case GP_T_W_DOWN: /* those neurons' inputs */
        copy_cols(dst, full, H, F, r * sf, sf, es);
        return;
    case GP_T_EMBED: /* this rank's tokens */
    case GP_T_LM_HEAD: {
        const size_t sv = (size_t)gp_vocab_part_rows(c->vocab, tp), n = (size_t)gp_vocab_part_tokens(c->vocab, tp, rank);
        d = copy_rows(dst, full, r * sv, n, H, es);
        memset(d, 0, (sv - n) * H * es);
        return;
    }
    default:
        memcpy(dst, full, gp_synth_numel(c, kind) * es);
    }
}

/* The tensors of weights w, each with the kind and layer it is. */
typedef struct tensor_ref {
    void *p;
    gp_tensor_kind kind;
    int layer;
} tensor_ref;

/* Every tensor of w in load order (a tied head once): into t, the count. */
static int tensors_of(const gp_host_weights *w, tensor_ref *t)
{
    int n = 0;
    t[n++] = (tensor_ref){w->embed, GP_T_EMBED, 0};
    t[n++] = (tensor_ref){w->final_norm, GP_T_FINAL_NORM, 0};
    if (!w->cfg.tied_embeddings)
        t[n++] = (tensor_ref){w->lm_head, GP_T_LM_HEAD, 0};
    const gp_tensor_kind *kinds;
    const int nk = gp_host_layer_kinds(&w->cfg, &kinds);
    for (int l = 0; l < w->cfg.n_layers; l++) {
        const gp_layer_weights *L = &w->layers[l];
        void *p[] = {L->attn_norm, L->wqkv, L->wo, L->ffn_norm, L->w_gate_up, L->w_down, L->bqkv};
        for (int k = 0; k < nk; k++)
            t[n++] = (tensor_ref){p[k], kinds[k], l};
    }
    return n;
}

static gp_status shard_alloc(const gp_config *c, int tp, int rank, gp_dtype dt, gp_host_weights *out,
                             tensor_ref **refs, int *n)
{
    if (rank < 0 || rank >= tp)
        GP_FAIL(GP_ERR_INVALID_ARG, "tensor parallel shard: rank %d of --tp %d: allowed 0..%d", rank, tp, tp - 1);
    gp_config sc;
    GP_TRY(gp_tp_config(c, tp, &sc));
    *refs = malloc(sizeof **refs * (3 + 7 * (size_t)c->n_layers));
    if (!*refs)
        GP_FAIL(GP_ERR_NO_MEMORY, "tensor parallel shard: out of host memory");
    gp_status st = gp_host_weights_alloc(&sc, dt, out);
    if (st != GP_OK) {
        free(*refs);
        return st;
    }
    snprintf(out->cfg.name, sizeof out->cfg.name, "%.40s tp%hhu.%hhu", c->name, (unsigned char)tp,
             (unsigned char)rank); /* tp <= GP_TP_MAX */
    *n = tensors_of(out, *refs);
    return GP_OK;
}

gp_status gp_host_weights_shard(const gp_host_weights *w, int tp, int rank, gp_host_weights *out)
{
    if (!w || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_weights_shard: weights or out is NULL");
    tensor_ref *dst, *src = malloc(sizeof *src * (3 + 7 * (size_t)w->cfg.n_layers));
    int n = 0;
    if (!src)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_host_weights_shard: out of host memory");
    gp_status st = shard_alloc(&w->cfg, tp, rank, w->dtype, out, &dst, &n);
    if (st == GP_OK) {
        (void)tensors_of(w, src);
        for (int i = 0; i < n; i++)
            cut(&w->cfg, tp, rank, dst[i].kind, src[i].p, dst[i].p, gp_dtype_size(w->dtype));
        free(dst);
    }
    free(src);
    return st;
}

gp_status gp_model_source_load_host_shard(const gp_model_source *src, int tp, int rank, gp_host_weights *out,
                                          const gp_progress_cb *progress)
{
    if (!src || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_model_source_load_host_shard: source or out is NULL");
    const gp_config *c = &src->cfg;
    gp_checkpoint *ck = NULL;
    if (!src->synthetic) {
        GP_TRY(gp_checkpoint_open(src->path, &ck));
        gp_status st = gp_checkpoint_check(ck);
        if (st != GP_OK) {
            gp_checkpoint_close(ck);
            return st;
        }
    }
    gp_dtype dt;
    gp_status st = gp_model_source_host_dtype(src, &dt);
    tensor_ref *dst = NULL;
    int n = 0;
    if (st == GP_OK)
        st = shard_alloc(c, tp, rank, dt, out, &dst, &n);
    /* one whole tensor at a time: the largest of those that are cut */
    const size_t es = gp_dtype_size(dt);
    const gp_tensor_kind cuts[] = {GP_T_WQKV, GP_T_WO, GP_T_W_GATE_UP, GP_T_W_DOWN, GP_T_EMBED};
    size_t most = 0;
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        most = gp_synth_numel(c, cuts[k]) > most ? gp_synth_numel(c, cuts[k]) : most;
    void *full = st == GP_OK ? malloc(most * es) : NULL;
    if (st == GP_OK && !full) {
        gp_set_error("gp_model_source_load_host_shard: out of host memory for one tensor (%zu bytes)", most * es);
        st = GP_ERR_NO_MEMORY;
    }
    gp_progress_run pr;
    uint64_t done = 0;
    gp_progress_begin(&pr, progress, "loading this rank's weights", "B", st == GP_OK ? out->arena_bytes : 0);
    for (int i = 0; i < n && st == GP_OK; i++) {
        const tensor_ref *t = &dst[i];
        void *into = is_cut(t->kind) ? full : t->p;
        if (src->synthetic)
            gp_synth_fill_tensor_host(into, dt, gp_synth_numel(c, t->kind), src->seed, t->kind, t->layer,
                                      gp_synth_scale(c, t->kind));
        else
            st = gp_checkpoint_fill_tensor(ck, t->kind, t->layer, into, dt, NULL);
        if (st == GP_OK && is_cut(t->kind))
            cut(c, tp, rank, t->kind, full, t->p, es);
        done += gp_synth_numel(&out->cfg, t->kind) * es;
        gp_progress_update(&pr, done);
    }
    gp_progress_end(&pr, done);
    free(full);
    free(dst);
    gp_checkpoint_close(ck);
    if (st != GP_OK && out->arena)
        gp_host_weights_free(out);
    return st;
}

void gp_vocab_in_order(const float *parts, float *logits, int B, int V, int tp)
{
    if (!parts || !logits || B <= 0 || V <= 0 || tp < 1)
        return;
    const size_t s = (size_t)gp_vocab_part_rows(V, tp);
    for (int r = 0; r < tp; r++) {
        const size_t n = (size_t)gp_vocab_part_tokens(V, tp, r);
        for (int b = 0; b < B; b++)
            memcpy(logits + (size_t)b * V + (size_t)r * s, parts + (size_t)r * B * s + (size_t)b * n, sizeof *parts * n);
    }
}
