/* Tests of the synthetic weights on the host (model/synth.c, synth_hash.h)
 * and of the host weight arena (model/weights.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"
#include "synth_hash.h"

typedef struct tensor_ref {
    gp_tensor_kind kind;
    int layer;
    const gp_bf16 *p;
} tensor_ref;

/* Every tensor of w in a fixed order; returns the count. */
static int list_tensors(const gp_host_weights *w, tensor_ref *out)
{
    int n = 0;
    out[n++] = (tensor_ref){ GP_T_EMBED, 0, w->embed };
    out[n++] = (tensor_ref){ GP_T_FINAL_NORM, 0, w->final_norm };
    out[n++] = (tensor_ref){ GP_T_LM_HEAD, 0, w->lm_head };
    for (int l = 0; l < w->cfg.n_layers; l++) {
        const gp_layer_weights *L = &w->layers[l];
        out[n++] = (tensor_ref){ GP_T_ATTN_NORM, l, L->attn_norm };
        out[n++] = (tensor_ref){ GP_T_WQKV, l, L->wqkv };
        out[n++] = (tensor_ref){ GP_T_WO, l, L->wo };
        out[n++] = (tensor_ref){ GP_T_FFN_NORM, l, L->ffn_norm };
        out[n++] = (tensor_ref){ GP_T_W_GATE_UP, l, L->w_gate_up };
        out[n++] = (tensor_ref){ GP_T_W_DOWN, l, L->w_down };
    }
    return n;
}

static int is_norm(gp_tensor_kind k)
{
    return k == GP_T_ATTN_NORM || k == GP_T_FFN_NORM || k == GP_T_FINAL_NORM;
}

static float bf16_round(float x)
{
    return gp_bf16_to_f32(gp_f32_to_bf16(x));
}

static void test_mix64_is_splitmix64(void **state)
{
    (void)state;
    /* splitmix64 seeded with 0: first outputs of the reference generator */
    assert_true(gp_synth_mix64(0x9e3779b97f4a7c15ull) == 0xe220a8397b1dcdafull);
    assert_true(gp_synth_mix64(2 * 0x9e3779b97f4a7c15ull) == 0x6e789e6aa1b965f4ull);
}

static void test_numel_and_scale(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("llama3-8b", &c), GP_OK);
    assert_true(gp_synth_numel(&c, GP_T_EMBED) == 128256ull * 4096);
    assert_true(gp_synth_numel(&c, GP_T_LM_HEAD) == 128256ull * 4096);
    assert_true(gp_synth_numel(&c, GP_T_FINAL_NORM) == 4096);
    assert_true(gp_synth_numel(&c, GP_T_ATTN_NORM) == 4096);
    assert_true(gp_synth_numel(&c, GP_T_FFN_NORM) == 4096);
    assert_true(gp_synth_numel(&c, GP_T_WQKV) == 6144ull * 4096);
    assert_true(gp_synth_numel(&c, GP_T_WO) == 4096ull * 4096);
    assert_true(gp_synth_numel(&c, GP_T_W_GATE_UP) == 2ull * 14336 * 4096);
    assert_true(gp_synth_numel(&c, GP_T_W_DOWN) == 14336ull * 4096);
    assert_true(gp_synth_numel(&c, (gp_tensor_kind)99) == 0);

    assert_true(gp_synth_scale(&c, GP_T_EMBED) == 1.0f);
    assert_true(gp_synth_scale(&c, GP_T_ATTN_NORM) == 0.1f);
    assert_true(gp_synth_scale(&c, GP_T_FINAL_NORM) == 0.1f);
    assert_true(gp_synth_scale(&c, GP_T_WQKV) == (float)sqrt(3.0 / 4096));
    assert_true(gp_synth_scale(&c, GP_T_W_GATE_UP) == (float)sqrt(3.0 / 4096));
    assert_true(gp_synth_scale(&c, GP_T_LM_HEAD) == (float)sqrt(3.0 / 4096));
    assert_true(gp_synth_scale(&c, GP_T_WO) == (float)sqrt(3.0 / (32 * 128)));
    assert_true(gp_synth_scale(&c, GP_T_W_DOWN) == (float)sqrt(3.0 / 14336));

    /* the sum over tensors is the parameter count */
    uint64_t sum = gp_synth_numel(&c, GP_T_EMBED) + gp_synth_numel(&c, GP_T_FINAL_NORM)
                   + gp_synth_numel(&c, GP_T_LM_HEAD);
    for (gp_tensor_kind k = GP_T_ATTN_NORM; k <= GP_T_W_DOWN; k++)
        sum += (uint64_t)c.n_layers * gp_synth_numel(&c, k);
    assert_true(sum == gp_config_param_count(&c));
}

static void test_alloc_layout(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    c.tied_embeddings = false;
    gp_host_weights w;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w), GP_OK);
    assert_non_null(w.arena);
    assert_int_equal(w.cfg.n_layers, 2);
    tensor_ref t[3 + 6 * 2];
    int n = list_tensors(&w, t);
    const uint8_t *lo = w.arena, *hi = lo + w.arena_bytes;
    assert_int_equal((uintptr_t)w.layers % 64, 0);
    for (int i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)t[i].p;
        uint64_t bytes = gp_synth_numel(&c, t[i].kind) * 2;
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        assert_true(p >= lo && p + bytes <= hi);
        for (int j = 0; j < i; j++) { /* disjoint */
            const uint8_t *q = (const uint8_t *)t[j].p;
            uint64_t qb = gp_synth_numel(&c, t[j].kind) * 2;
            assert_true(p + bytes <= q || q + qb <= p);
        }
    }
    gp_host_weights_free(&w);
    assert_null(w.arena);
    gp_host_weights_free(&w); /* twice is harmless */

    /* bad config: nothing allocated, message names the field */
    c.n_kv_heads = 3;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w), GP_ERR_INVALID_ARG);
    assert_null(w.arena);
    assert_non_null(strstr(gp_last_error(), "n_kv_heads = 3"));

    /* impossible size: an error naming the bytes, not a crash */
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    c.vocab = 1 << 30;
    c.hidden = 1 << 30;
    gp_status st = gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w);
    assert_true(st == GP_ERR_NO_MEMORY || st == GP_ERR_OVERFLOW);
    assert_non_null(strstr(gp_last_error(), "bytes"));
}

static void test_tied_alias(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    gp_host_weights w;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w), GP_OK);
    assert_ptr_equal(w.lm_head, w.embed);
    assert_int_equal(gp_synth_fill_host(&w, 7), GP_OK);
    uint64_t untied_bytes;
    c.tied_embeddings = false;
    gp_host_weights u;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &u), GP_OK);
    untied_bytes = u.arena_bytes;
    assert_true(untied_bytes >= w.arena_bytes + gp_synth_numel(&c, GP_T_LM_HEAD) * 2);
    assert_ptr_not_equal(u.lm_head, u.embed);
    assert_int_equal(gp_synth_fill_host(&u, 7), GP_OK);
    /* untied lm_head draws its own stream; embed is the same in both */
    uint64_t ne = gp_synth_numel(&c, GP_T_EMBED);
    assert_memory_equal(w.embed, u.embed, ne * 2);
    assert_memory_not_equal(u.lm_head, u.embed, ne * 2);
    gp_bf16 *want = malloc(ne * 2);
    gp_synth_fill_tensor_host(want, GP_DTYPE_BF16, ne, 7, GP_T_LM_HEAD, 0, gp_synth_scale(&c, GP_T_LM_HEAD));
    assert_memory_equal(u.lm_head, want, ne * 2);
    free(want);
    gp_host_weights_free(&w);
    gp_host_weights_free(&u);
}

static void test_deterministic(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    gp_host_weights a, b, d;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &a), GP_OK);
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &b), GP_OK);
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &d), GP_OK);
    assert_int_equal(gp_synth_fill_host(&a, 1234), GP_OK);
    assert_int_equal(gp_synth_fill_host(&b, 1234), GP_OK);
    assert_int_equal(gp_synth_fill_host(&d, 1235), GP_OK);
    tensor_ref ta[3 + 12], tb[3 + 12], td[3 + 12];
    int n = list_tensors(&a, ta);
    list_tensors(&b, tb);
    list_tensors(&d, td);
    for (int i = 0; i < n; i++) {
        uint64_t ne = gp_synth_numel(&c, ta[i].kind);
        assert_memory_equal(ta[i].p, tb[i].p, ne * 2);
        /* another seed: (almost) every value differs */
        uint64_t same = 0;
        for (uint64_t j = 0; j < ne; j++)
            same += ta[i].p[j] == td[i].p[j];
        if (same * 20 > ne)
            fail_msg("tensor %d (kind %d layer %d): %llu of %llu values equal across seeds", i,
                     ta[i].kind, ta[i].layer, (unsigned long long)same, (unsigned long long)ne);
        /* each tensor equals the single-tensor generator: order independent */
        gp_bf16 *want = malloc(ne * 2);
        gp_synth_fill_tensor_host(want, GP_DTYPE_BF16, ne, 1234, ta[i].kind, ta[i].layer,
                                  gp_synth_scale(&c, ta[i].kind));
        if (ta[i].kind != GP_T_LM_HEAD) /* tied: lm_head is embed */
            assert_memory_equal(ta[i].p, want, ne * 2);
        free(want);
    }
    /* layers draw from different streams */
    assert_memory_not_equal(a.layers[0].wqkv, a.layers[1].wqkv, gp_synth_numel(&c, GP_T_WQKV) * 2);
    gp_host_weights_free(&a);
    gp_host_weights_free(&b);
    gp_host_weights_free(&d);
}

static void test_range_and_moments(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    c.tied_embeddings = false;
    gp_host_weights w;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w), GP_OK);
    assert_int_equal(gp_synth_fill_host(&w, 99), GP_OK);
    tensor_ref t[15];
    int n = list_tensors(&w, t);
    for (int i = 0; i < n; i++) {
        uint64_t ne = gp_synth_numel(&c, t[i].kind);
        float s = gp_synth_scale(&c, t[i].kind);
        float center = is_norm(t[i].kind) ? 1.0f : 0.0f;
        /* |v| <= scale before rounding, so the bf16-rounded bounds hold */
        float lo = bf16_round(center - s), hi = bf16_round(center + s);
        double sum = 0, sq = 0;
        for (uint64_t j = 0; j < ne; j++) {
            float x = gp_bf16_to_f32(t[i].p[j]);
            if (!(x >= lo && x <= hi))
                fail_msg("kind %d layer %d [%llu] = %g outside [%g, %g]", t[i].kind, t[i].layer,
                         (unsigned long long)j, x, lo, hi);
            sum += x - center;
            sq += (double)(x - center) * (x - center);
        }
        double mean = sum / (double)ne, var = sq / (double)ne - mean * mean;
        double want_var = (double)s * s / 3.0; /* uniform on [-s, s] */
        /* 5 standard errors of the mean; variance within 10% (smallest is 64 values) */
        double tol_mean = 5.0 * sqrt(want_var / (double)ne);
        double tol_var = ne >= 4096 ? 0.05 : 0.35;
        if (fabs(mean) > tol_mean || fabs(var / want_var - 1.0) > tol_var)
            fail_msg("kind %d layer %d: mean %g (tol %g), var %g want %g", t[i].kind, t[i].layer,
                     mean, tol_mean, var, want_var);
    }
    gp_host_weights_free(&w);

    /* a big tensor filled by several threads: tight moments, and equal to a
     * plain serial loop over the value function */
    uint64_t big = (3u << 20) + 17;
    gp_bf16 *p = malloc(big * 2);
    assert_non_null(p);
    gp_synth_fill_tensor_host(p, GP_DTYPE_BF16, big, 5, GP_T_W_DOWN, 3, 0.5f);
    double sum = 0, sq = 0;
    for (uint64_t j = 0; j < big; j++) {
        assert_int_equal(p[j], gp_synth_bf16(5, GP_T_W_DOWN, 3, j, 0.5f));
        double x = gp_bf16_to_f32(p[j]);
        sum += x;
        sq += x * x;
    }
    double mean = sum / (double)big, var = sq / (double)big - mean * mean;
    assert_true(fabs(mean) < 5.0 * sqrt(0.25 / 3.0 / (double)big));
    assert_true(fabs(var / (0.25 / 3.0) - 1.0) < 0.01);
    free(p);
}

static void test_fill_host_bad_args(void **state)
{
    (void)state;
    gp_host_weights w;
    memset(&w, 0, sizeof w);
    assert_int_equal(gp_synth_fill_host(&w, 1), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_synth_fill_host(NULL, 1), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_host_weights_alloc(NULL, GP_DTYPE_BF16, &w), GP_ERR_INVALID_ARG);
    gp_synth_fill_tensor_host(NULL, GP_DTYPE_BF16, 10, 1, GP_T_WO, 0, 1.0f); /* no-op, no crash */
}

/* BF16 synthetic weights are bit-identical to the generator before weights
 * had a dtype: FNV-1a over every bf16 value of the untied tiny preset, seed
 * 1234, in list_tensors order, computed with synth_hash.h of commit 32bd1f1
 * (the device kernel still writes those values). */
static void test_bf16_values_unchanged(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    c.tied_embeddings = false;
    gp_host_weights w;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_BF16, &w), GP_OK);
    assert_int_equal(gp_synth_fill_host(&w, 1234), GP_OK);
    tensor_ref t[3 + 6 * 2];
    int n = list_tensors(&w, t);
    /* the golden order: kind-major (embed, final_norm, lm_head, then each layer kind over layers) */
    static const gp_tensor_kind order[] = { GP_T_EMBED, GP_T_FINAL_NORM, GP_T_LM_HEAD, GP_T_ATTN_NORM,
                                            GP_T_WQKV, GP_T_WO, GP_T_FFN_NORM, GP_T_W_GATE_UP, GP_T_W_DOWN };
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        for (int l = 0; l < (k < 3 ? 1 : c.n_layers); l++)
            for (int i = 0; i < n; i++) {
                if (t[i].kind != order[k] || t[i].layer != l)
                    continue;
                for (uint64_t j = 0; j < gp_synth_numel(&c, t[i].kind); j++) {
                    gp_bf16 v = t[i].p[j];
                    h = (h ^ (v & 0xffu)) * 1099511628211ull;
                    h = (h ^ (v >> 8)) * 1099511628211ull;
                }
            }
    assert_true(h == 0x2b03c5dae2f6fb83ull);
    gp_host_weights_free(&w);
}

/* Host weights in each dtype: element sizes, bqkv only with qkv_bias, F32
 * the generator's floats, F16 and BF16 those rounded (round to nearest even). */
static void test_alloc_and_fill_dtypes(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    c.tied_embeddings = false;
    const gp_dtype dts[] = { GP_DTYPE_F32, GP_DTYPE_F16, GP_DTYPE_BF16 };
    for (int bias = 0; bias < 2; bias++) {
        c.qkv_bias = bias;
        gp_host_weights w[3];
        for (int d = 0; d < 3; d++) {
            assert_int_equal(gp_host_weights_alloc(&c, dts[d], &w[d]), GP_OK);
            assert_int_equal(w[d].dtype, dts[d]);
            assert_true(bias ? w[d].layers[1].bqkv != NULL : w[d].layers[1].bqkv == NULL);
            assert_int_equal(gp_synth_fill_host(&w[d], 42), GP_OK);
        }
        /* the arena grows with the element size */
        assert_true(w[0].arena_bytes > w[1].arena_bytes);
        assert_true(w[1].arena_bytes == w[2].arena_bytes);
        uint64_t n = gp_synth_numel(&c, GP_T_W_DOWN);
        float sc = gp_synth_scale(&c, GP_T_W_DOWN);
        const float *f = w[0].layers[1].w_down;
        const uint16_t *h = w[1].layers[1].w_down, *b = w[2].layers[1].w_down;
        for (uint64_t j = 0; j < n; j++) {
            float v = gp_synth_f32(42, GP_T_W_DOWN, 1, j, sc);
            assert_true(f[j] == v);
            assert_int_equal(h[j], gp_f32_to_f16(v));
            assert_int_equal(b[j], gp_f32_to_bf16(v));
        }
        const float *fn = w[0].final_norm; /* norms: 1 + v */
        assert_true(fn[3] == gp_synth_f32(42, GP_T_FINAL_NORM, 0, 3, gp_synth_scale(&c, GP_T_FINAL_NORM)));
        assert_true(fabsf(fn[3] - 1.0f) <= 0.1f);
        if (bias) {
            const float *bq = w[0].layers[0].bqkv;
            uint64_t nb = gp_synth_numel(&c, GP_T_BQKV);
            assert_int_equal(nb, (uint64_t)gp_config_qkv_rows(&c));
            for (uint64_t j = 0; j < nb; j++)
                assert_true(bq[j] == gp_synth_f32(42, GP_T_BQKV, 0, j, gp_synth_scale(&c, GP_T_BQKV)));
        }
        for (int d = 0; d < 3; d++)
            gp_host_weights_free(&w[d]);
    }
    /* only F32, F16 and BF16 */
    gp_host_weights w;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_I32, &w), GP_ERR_INVALID_ARG);
    assert_null(w.arena);
    assert_non_null(strstr(gp_last_error(), "I32"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mix64_is_splitmix64),
        cmocka_unit_test(test_numel_and_scale),
        cmocka_unit_test(test_alloc_layout),
        cmocka_unit_test(test_tied_alias),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_range_and_moments),
        cmocka_unit_test(test_fill_host_bad_args),
        cmocka_unit_test(test_bf16_values_unchanged),
        cmocka_unit_test(test_alloc_and_fill_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
