/* Host weights in the engine layout: one 64-byte-aligned arena holding the
 * layer table and every tensor, elements of one dtype (F32, BF16 or F16),
 * and the conversion of weights into a 16-bit device dtype. */
#include "gp_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GP_ARENA_ALIGN 64u

/* Reserves bytes at *off (aligned) and advances it; 0 on overflow. */
static int gp_arena_take(uint64_t *off, uint64_t bytes, uint64_t *at)
{
    uint64_t a;
    if (!gp_add_u64(*off, GP_ARENA_ALIGN - 1, &a))
        return 0;
    a &= ~(uint64_t)(GP_ARENA_ALIGN - 1);
    *at = a;
    return gp_add_u64(a, bytes, off);
}

static int gp_tensor_bytes(const gp_config *c, gp_tensor_kind k, size_t esize, uint64_t *bytes)
{
    return gp_mul_u64(gp_synth_numel(c, k), esize, bytes);
}

gp_status gp_host_weights_alloc(const gp_config *cfg, gp_dtype dtype, gp_host_weights *w)
{
    if (!cfg || !w)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_weights_alloc: cfg and w must not be NULL");
    memset(w, 0, sizeof *w);
    if (dtype != GP_DTYPE_F32 && !gp_dtype_is_half(dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_weights_alloc: config %s: weights dtype %s; allowed "
                "F32, BF16 or F16", cfg->name, gp_dtype_name(dtype));
    GP_TRY(gp_config_validate(cfg));
    const size_t es = gp_dtype_size(dtype);

    /* Pass 0 computes offsets and the total; pass 1 assigns pointers. */
    const gp_tensor_kind *layer_kinds;
    const int n_kinds = gp_host_layer_kinds(cfg, &layer_kinds);
    uint8_t *base = NULL;
    uint64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t off = 0, at, bytes;
        int ok = gp_mul_u64((uint64_t)cfg->n_layers, sizeof(gp_layer_weights), &bytes)
                 && gp_arena_take(&off, bytes, &at);
        if (pass)
            w->layers = (gp_layer_weights *)(base + at);
        ok = ok && gp_tensor_bytes(cfg, GP_T_EMBED, es, &bytes) && gp_arena_take(&off, bytes, &at);
        if (pass)
            w->embed = (void *)(base + at);
        ok = ok && gp_tensor_bytes(cfg, GP_T_FINAL_NORM, es, &bytes) && gp_arena_take(&off, bytes, &at);
        if (pass)
            w->final_norm = (void *)(base + at);
        if (cfg->tied_embeddings) {
            if (pass)
                w->lm_head = w->embed;
        } else {
            ok = ok && gp_tensor_bytes(cfg, GP_T_LM_HEAD, es, &bytes) && gp_arena_take(&off, bytes, &at);
            if (pass)
                w->lm_head = (void *)(base + at);
        }
        for (int l = 0; ok && l < cfg->n_layers; l++) {
            void *p[7] = {NULL};
            for (int k = 0; ok && k < n_kinds; k++) {
                ok = gp_tensor_bytes(cfg, layer_kinds[k], es, &bytes) && gp_arena_take(&off, bytes, &at);
                p[k] = pass ? (void *)(base + at) : NULL;
            }
            if (pass) {
                gp_layer_weights *L = &w->layers[l];
                L->attn_norm = p[0], L->wqkv = p[1], L->wo = p[2];
                L->ffn_norm = p[3], L->w_gate_up = p[4], L->w_down = p[5];
                L->bqkv = p[6];
            }
        }
        /* aligned_alloc wants a multiple of the alignment */
        ok = ok && gp_add_u64(off, GP_ARENA_ALIGN - 1, &total)
             && (uint64_t)(size_t)total == total;
        if (!ok)
            GP_FAIL(GP_ERR_OVERFLOW, "gp_host_weights_alloc: config %s: weight size overflows "
                    "64-bit arithmetic", cfg->name);
        total &= ~(uint64_t)(GP_ARENA_ALIGN - 1);
        if (pass == 0) {
            base = aligned_alloc(GP_ARENA_ALIGN, (size_t)total);
            if (!base)
                GP_FAIL(GP_ERR_NO_MEMORY, "gp_host_weights_alloc: config %s: cannot allocate "
                        "%llu bytes (%.2f GiB) of host memory for weights", cfg->name,
                        (unsigned long long)total, (double)total / (1024.0 * 1024.0 * 1024.0));
        }
    }
    w->cfg = *cfg;
    w->dtype = dtype;
    w->arena = base;
    w->arena_bytes = (size_t)total;
    return GP_OK;
}

int gp_host_layer_kinds(const gp_config *cfg, const gp_tensor_kind **kinds)
{
    static const gp_tensor_kind layer_kinds[7] = {GP_T_ATTN_NORM, GP_T_WQKV, GP_T_WO, GP_T_FFN_NORM,
                                                  GP_T_W_GATE_UP, GP_T_W_DOWN, GP_T_BQKV};
    *kinds = layer_kinds;
    return cfg->qkv_bias ? 7 : 6; /* the bias last, only when the config has one */
}

uint64_t gp_host_weights_bytes(const gp_config *cfg, gp_dtype dtype)
{
    if (!cfg)
        return 0;
    const gp_tensor_kind *layer_kinds;
    const int n_kinds = gp_host_layer_kinds(cfg, &layer_kinds);
    uint64_t n = gp_synth_numel(cfg, GP_T_EMBED) + gp_synth_numel(cfg, GP_T_FINAL_NORM) +
                 (cfg->tied_embeddings ? 0 : gp_synth_numel(cfg, GP_T_LM_HEAD));
    for (int k = 0; k < n_kinds; k++)
        n += gp_synth_numel(cfg, layer_kinds[k]) * (uint64_t)cfg->n_layers;
    return n * gp_dtype_size(dtype);
}

void gp_host_weights_free(gp_host_weights *w)
{
    if (!w)
        return;
    free(w->arena);
    memset(w, 0, sizeof *w);
}

gp_status gp_weights_convert(void *dst, gp_dtype to, const void *src, gp_dtype from, uint64_t n,
                             const char *what)
{
    if (!gp_dtype_is_half(to) || (from != GP_DTYPE_F32 && !gp_dtype_is_half(from)))
        GP_FAIL(GP_ERR_INVALID_ARG, "converting weights %s from %s to %s: allowed from F32, BF16 "
                "or F16 to BF16 or F16", what ? what : "", gp_dtype_name(from), gp_dtype_name(to));
    if (n == 0)
        return GP_OK;
    if (!dst || !src)
        GP_FAIL(GP_ERR_INVALID_ARG, "converting weights %s: NULL buffer", what ? what : "");
    uint16_t *d = dst;
    if (from == to) {
        memcpy(d, src, n * sizeof *d);
        return GP_OK;
    }
    /* src may be a checkpoint's mapping, whose tensors need not be aligned
     * to their element size: each element is read with memcpy */
    const uint8_t *s = src;
    for (uint64_t i = 0; i < n; i++) {
        float v;
        if (from == GP_DTYPE_F32) {
            memcpy(&v, s + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            v = gp_half_to_f32(h, from);
        }
        uint16_t r = gp_f32_to_half(v, to);
        /* fp16's largest finite value is 65504; a finite value that rounds
         * to inf (|v| >= 65520) is refused rather than run as inf */
        if (to == GP_DTYPE_F16 && (r & 0x7fffu) == 0x7c00u && isfinite(v))
            GP_FAIL(GP_ERR_UNSUPPORTED, "weights %s: element %llu is %g, beyond fp16's range "
                    "(largest finite 65504): it would become inf in fp16; run this checkpoint "
                    "with --dtype bf16", what ? what : "", (unsigned long long)i, (double)v);
        d[i] = r;
    }
    return GP_OK;
}
