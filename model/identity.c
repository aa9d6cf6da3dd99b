/* A model's identity by content, not by where it lies: the config, the
 * tensor table and a fixed sample of every tensor's bytes of a checkpoint,
 * or a preset's name, seed and dtype (synthetic weights are a function of
 * them). What a calibration records to be refused on other weights. */
#include <stdio.h>
#include <string.h>

#include "gp_model.h"

/* A tensor up to this size is hashed whole; a larger one in GP_ID_SLICES
 * slices of GP_ID_SLICE bytes spread evenly over it, the first at its start
 * and the last at its end: 64 KiB per tensor, about 19 MB of reads for an 8B
 * checkpoint's 291 tensors, where hashing every byte would read 16 GB. */
#define GP_ID_WHOLE ((uint64_t)64 << 10)
#define GP_ID_SLICES 16
#define GP_ID_SLICE ((uint64_t)4 << 10)

static uint64_t fnv_f32(uint64_t h, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return gp_fnv1a_u64(h, u);
}

/* A string with its length first: "ab"+"c" and "a"+"bc" hash apart. */
static uint64_t fnv_str(uint64_t h, const char *s)
{
    size_t n = strlen(s);
    return gp_fnv1a(gp_fnv1a_u64(h, n), s, n);
}

/* Every field that changes what the weights compute; not the name, which is
 * a folder's or a preset's and is hashed apart for presets. */
static uint64_t hash_config(uint64_t h, const gp_config *c)
{
    h = fnv_str(h, gp_config_arch(c)->model_type);
    const int ints[] = {c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
                        c->max_context, (int)c->rope_scaling.type, c->rope_scaling.original_max_pos,
                        c->tied_embeddings, c->qkv_bias};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        h = gp_fnv1a_u64(h, (uint64_t)(int64_t)ints[i]);
    const float fl[] = {c->norm_eps, c->rope_theta, c->rope_scaling.factor, c->rope_scaling.low_freq_factor,
                        c->rope_scaling.high_freq_factor};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        h = fnv_f32(h, fl[i]);
    return h;
}

static uint64_t hash_tensor(uint64_t h, const gp_st_tensor *t)
{
    h = fnv_str(h, t->name);
    h = gp_fnv1a_u64(h, (uint64_t)t->dtype);
    h = gp_fnv1a_u64(h, (uint64_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        h = gp_fnv1a_u64(h, (uint64_t)t->shape[d]);
    const uint64_t n = t->end - t->begin;
    h = gp_fnv1a_u64(h, n);
    if (n <= GP_ID_WHOLE)
        return gp_fnv1a(h, t->data, (size_t)n);
    for (uint64_t k = 0; k < GP_ID_SLICES; k++) {
        uint64_t at = (n - GP_ID_SLICE) / (GP_ID_SLICES - 1) * k;
        if (k == GP_ID_SLICES - 1)
            at = n - GP_ID_SLICE;
        h = gp_fnv1a(h, t->data + at, (size_t)GP_ID_SLICE);
    }
    return h;
}

void gp_config_summary(const gp_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %d layers, hidden %d, %d heads (%d kv) x %d, ffn %d, vocab %d, context %d%s%s",
             gp_config_arch(c)->model_type, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn,
             c->vocab, c->max_context, c->tied_embeddings ? ", tied embeddings" : "",
             c->qkv_bias ? ", q/k/v bias" : "");
}

gp_status gp_checkpoint_identity(const gp_checkpoint *ck, gp_model_identity *out)
{
    if (!ck || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_identity: checkpoint and out must not be NULL");
    memset(out, 0, sizeof *out);
    const gp_config *cfg = gp_checkpoint_config(ck);
    uint64_t h = fnv_str(GP_FNV1A_OFFSET, "greenpipe checkpoint identity 1");
    h = hash_config(h, cfg);
    /* sorted by name over all shards: the same tensors sharded otherwise
     * are the same weights */
    size_t n = gp_checkpoint_tensor_count(ck);
    h = gp_fnv1a_u64(h, n);
    for (size_t i = 0; i < n; i++)
        h = hash_tensor(h, gp_checkpoint_tensor(ck, i, NULL));
    snprintf(out->fingerprint, sizeof out->fingerprint, "%016llx", (unsigned long long)h);
    char sum[200];
    gp_config_summary(cfg, sum, sizeof sum);
    snprintf(out->summary, sizeof out->summary, "checkpoint (%s), %zu tensors", sum, n);
    return GP_OK;
}

gp_status gp_model_identity_of(const gp_model_source *src, gp_model_identity *out)
{
    if (!src || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_model_identity_of: src and out must not be NULL");
    memset(out, 0, sizeof *out);
    if (!src->synthetic) {
        gp_checkpoint *ck;
        GP_TRY(gp_checkpoint_open(src->path, &ck));
        gp_status st = gp_checkpoint_identity(ck, out);
        gp_checkpoint_close(ck);
        return st;
    }
    gp_dtype dt;
    GP_TRY(gp_model_source_host_dtype(src, &dt));
    uint64_t h = fnv_str(GP_FNV1A_OFFSET, "greenpipe preset identity 1");
    h = hash_config(h, &src->cfg);
    h = fnv_str(h, src->cfg.name);
    h = gp_fnv1a_u64(h, src->seed);
    h = fnv_str(h, gp_dtype_name(dt));
    snprintf(out->fingerprint, sizeof out->fingerprint, "%016llx", (unsigned long long)h);
    char sum[200];
    gp_config_summary(&src->cfg, sum, sizeof sum);
    snprintf(out->summary, sizeof out->summary, "preset %s, seed %llu, %s synthetic weights (%s)", src->cfg.name,
             (unsigned long long)src->seed, gp_dtype_flag_name(dt), sum);
    return GP_OK;
}
