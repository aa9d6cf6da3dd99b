/* GPU test of the synthetic generator and device weights, in both device
 * dtypes (bf16, fp16): the kernel's bits must equal the host generator's of
 * the same dtype; uploads copy (same dtype) or round to nearest even (fp32
 * host weights), biases and tied embeddings included; fp16 refuses a value
 * it cannot hold; groups count acquires and releases. Exits 77 (skipped)
 * when no GPU is usable. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_model.h"
#include "gp_test_cuda.h"
#include "gp_weights.h"

static const gp_dtype dtypes[2] = { GP_DTYPE_BF16, GP_DTYPE_F16 };

/* Reports the first few differing elements (16-bit values of dt), then fails. */
static void compare_half(const uint16_t *got, const uint16_t *want, uint64_t n, gp_dtype dt,
                         const char *what)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            if (bad < 5)
                print_error("%s %s [%llu]: device 0x%04x (%g) host 0x%04x (%g)\n",
                            gp_dtype_flag_name(dt), what, (unsigned long long)i, got[i],
                            gp_half_to_f32(got[i], dt), want[i], gp_half_to_f32(want[i], dt));
            bad++;
        }
    }
    if (bad)
        fail_msg("%s %s: %llu of %llu values differ", gp_dtype_flag_name(dt), what, (unsigned long long)bad,
                 (unsigned long long)n);
}

static void test_kernel_matches_host(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("llama3-8b", &c), GP_OK);
    const struct { gp_tensor_kind kind; int layer; uint64_t n; } cases[] = {
        { GP_T_EMBED, 0, 1 },           { GP_T_FINAL_NORM, 0, 4096 },
        { GP_T_ATTN_NORM, 7, 4097 },    { GP_T_FFN_NORM, 31, 333 },
        { GP_T_WQKV, 0, 1000003 },      { GP_T_WO, 5, 65537 },
        { GP_T_W_GATE_UP, 30, 255 },    { GP_T_W_DOWN, 2, 257 },
        { GP_T_BQKV, 3, 6144 },
        /* past 64K blocks of 256 threads: the grid-stride loop runs */
        { GP_T_LM_HEAD, 0, (65536ull * 256) * 2 + 3 },
    };
    const uint64_t guard = 64;
    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreate(&s));
    for (size_t di = 0; di < 2 * (sizeof cases / sizeof cases[0]); di++) {
        const gp_dtype dt = dtypes[di % 2];
        const size_t i = di / 2;
        uint64_t n = cases[i].n;
        float scale = gp_synth_scale(&c, cases[i].kind);
        uint16_t *d = NULL;
        GP_CHECK_CUDA(cudaMalloc((void **)&d, (n + guard) * 2));
        GP_CHECK_CUDA(cudaMemset(d, 0xFF, (n + guard) * 2)); /* poison: 0xFFFF is a NaN */
        assert_int_equal(gp_synth_fill_device(d, dt, n, 2024, cases[i].kind, cases[i].layer,
                                                    scale, s), GP_OK);
        uint16_t *got = malloc((n + guard) * 2), *want = malloc(n * 2);
        assert_non_null(got);
        assert_non_null(want);
        GP_CHECK_CUDA(cudaMemcpyAsync(got, d, (n + guard) * 2, cudaMemcpyDeviceToHost, s));
        GP_CHECK_CUDA(cudaStreamSynchronize(s));
        gp_synth_fill_tensor_host(want, dt, n, 2024, cases[i].kind, cases[i].layer, scale);
        char what[64];
        snprintf(what, sizeof what, "kind %d layer %d n %llu", cases[i].kind, cases[i].layer,
                 (unsigned long long)n);
        compare_half(got, want, n, dt, what);
        for (uint64_t j = n; j < n + guard; j++)
            assert_int_equal(got[j], 0xFFFF); /* nothing written past n */
        free(got);
        free(want);
        GP_CHECK_CUDA(cudaFree(d));
    }
    {   /* the bf16 entry point is the BF16 instance, bit for bit */
        const uint64_t n = 70001;
        uint16_t *d = NULL, *a = malloc(n * 2), *b = malloc(n * 2);
        assert_non_null(a);
        assert_non_null(b);
        GP_CHECK_CUDA(cudaMalloc((void **)&d, n * 2));
        assert_int_equal(gp_synth_fill_device(d, GP_DTYPE_BF16, n, 5, GP_T_WO, 1, 0.3f, s), GP_OK);
        GP_CHECK_CUDA(cudaMemcpyAsync(a, d, n * 2, cudaMemcpyDeviceToHost, s));
        GP_CHECK_CUDA(cudaStreamSynchronize(s));
        assert_int_equal(gp_synth_fill_device(d, GP_DTYPE_BF16, n, 5, GP_T_WO, 1, 0.3f, s), GP_OK);
        GP_CHECK_CUDA(cudaMemcpyAsync(b, d, n * 2, cudaMemcpyDeviceToHost, s));
        GP_CHECK_CUDA(cudaStreamSynchronize(s));
        compare_half(b, a, n, GP_DTYPE_BF16, "bf16 entry point");
        GP_CHECK_CUDA(cudaFree(d));
        free(a), free(b);
    }
    assert_int_equal(gp_synth_fill_device((uint16_t *)8, GP_DTYPE_F32, 5, 1, GP_T_WO, 0, 1.0f, s),
                     GP_ERR_INVALID_ARG);
    /* bad arguments are refused without a launch */
    assert_int_equal(gp_synth_fill_device(NULL, GP_DTYPE_BF16, 5, 1, GP_T_WO, 0, 1.0f, s), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_synth_fill_device(NULL, GP_DTYPE_BF16, 0, 1, GP_T_WO, 0, 1.0f, s), GP_OK);
    assert_int_equal(gp_synth_fill_device((gp_bf16 *)8, GP_DTYPE_BF16, 5, 1, (gp_tensor_kind)42, 0, 1.0f, s),
                     GP_ERR_INVALID_ARG);
    GP_CHECK_CUDA(cudaStreamDestroy(s));
}

/* Every tensor of the device view (dtype dt) against want, host weights of
 * the same dtype. */
static void compare_weights(const gp_host_weights *dev_view, const gp_host_weights *host)
{
    const gp_config *c = &host->cfg;
    const gp_dtype dt = host->dtype;
    assert_int_equal(dev_view->dtype, dt);
    struct pair { gp_tensor_kind k; int layer; const void *d, *h; } t[3 + 7 * 8];
    int n = 0;
    t[n++] = (struct pair){ GP_T_EMBED, 0, dev_view->embed, host->embed };
    t[n++] = (struct pair){ GP_T_FINAL_NORM, 0, dev_view->final_norm, host->final_norm };
    t[n++] = (struct pair){ GP_T_LM_HEAD, 0, dev_view->lm_head, host->lm_head };
    for (int l = 0; l < c->n_layers && l < 8; l++) {
        const gp_layer_weights *D = &dev_view->layers[l], *H = &host->layers[l];
        t[n++] = (struct pair){ GP_T_ATTN_NORM, l, D->attn_norm, H->attn_norm };
        t[n++] = (struct pair){ GP_T_WQKV, l, D->wqkv, H->wqkv };
        t[n++] = (struct pair){ GP_T_WO, l, D->wo, H->wo };
        t[n++] = (struct pair){ GP_T_FFN_NORM, l, D->ffn_norm, H->ffn_norm };
        t[n++] = (struct pair){ GP_T_W_GATE_UP, l, D->w_gate_up, H->w_gate_up };
        t[n++] = (struct pair){ GP_T_W_DOWN, l, D->w_down, H->w_down };
        if (c->qkv_bias)
            t[n++] = (struct pair){ GP_T_BQKV, l, D->bqkv, H->bqkv };
        else
            assert_null(D->bqkv);
    }
    for (int i = 0; i < n; i++) {
        uint64_t ne = gp_synth_numel(c, t[i].k);
        uint16_t *got = malloc(ne * 2);
        assert_non_null(got);
        assert_non_null(t[i].d);
        GP_CHECK_CUDA(cudaMemcpy(got, t[i].d, ne * 2, cudaMemcpyDeviceToHost));
        char what[64];
        snprintf(what, sizeof what, "tensor kind %d layer %d", t[i].k, t[i].layer);
        compare_half(got, t[i].h, ne, dt, what);
        free(got);
    }
}

static void test_device_weights_synthetic(void **state)
{
    (void)state;
    for (int k = 0; k < 8; k++) {
        const int tied = k & 1, bias = (k >> 1) & 1;
        const gp_dtype dt = dtypes[k >> 2];
        gp_config c;
        assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
        c.tied_embeddings = tied;
        c.qkv_bias = bias;
        gp_host_weights h, h32;
        assert_int_equal(gp_host_weights_alloc(&c, dt, &h), GP_OK);
        assert_int_equal(gp_synth_fill_host(&h, 77), GP_OK);
        assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_F32, &h32), GP_OK);
        assert_int_equal(gp_synth_fill_host(&h32, 77), GP_OK);

        gp_device_weights *dw = NULL;
        assert_int_equal(gp_device_weights_synthetic(&c, dt, 77, &dw), GP_OK);
        assert_int_equal(gp_device_weights_dtype(dw), dt);
        const gp_host_weights *v = gp_device_weights_view(dw);
        assert_non_null(v);
        assert_int_equal(v->cfg.n_layers, 2);
        if (tied)
            assert_ptr_equal(v->lm_head, v->embed);
        else
            assert_ptr_not_equal(v->lm_head, v->embed);
        compare_weights(v, &h);

        /* upload of the same dtype gives the same bytes */
        gp_device_weights *up = NULL;
        assert_int_equal(gp_device_weights_upload(&h, dt, &up), GP_OK);
        compare_weights(gp_device_weights_view(up), &h);
        if (tied)
            assert_ptr_equal(gp_device_weights_view(up)->lm_head, gp_device_weights_view(up)->embed);
        gp_device_weights_destroy(up);
        /* fp32 host weights, converted in pinned chunks: each value the
         * generator's float rounded to dt, which is what the dt host filler
         * wrote (the embedding table spans several chunks) */
        assert_int_equal(gp_device_weights_upload(&h32, dt, &up), GP_OK);
        compare_weights(gp_device_weights_view(up), &h);
        gp_device_weights_destroy(up);

        gp_device_weights_destroy(dw);
        gp_host_weights_free(&h);
        gp_host_weights_free(&h32);
    }
}

/* bf16 -> fp16 and fp16 -> bf16 uploads round each value as gp_weights_convert
 * does; fp16 refuses a value beyond its range, naming the tensor, and bf16
 * takes the same weights. */
static void test_upload_convert(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    for (int d = 0; d < 2; d++) {
        const gp_dtype from = dtypes[d], to = dtypes[1 - d];
        gp_host_weights h, want;
        assert_int_equal(gp_host_weights_alloc(&c, from, &h), GP_OK);
        assert_int_equal(gp_synth_fill_host(&h, 9), GP_OK);
        assert_int_equal(gp_host_weights_alloc(&c, to, &want), GP_OK);
        const uint64_t ne = gp_synth_numel(&c, GP_T_W_DOWN);
        for (int l = 0; l < c.n_layers; l++) /* every tensor goes through the same path; check one kind */
            assert_int_equal(gp_weights_convert(want.layers[l].w_down, to, h.layers[l].w_down, from, ne, "w_down"),
                             GP_OK);
        gp_device_weights *up = NULL;
        assert_int_equal(gp_device_weights_upload(&h, to, &up), GP_OK);
        const gp_host_weights *v = gp_device_weights_view(up);
        uint16_t *got = malloc(ne * 2);
        assert_non_null(got);
        for (int l = 0; l < c.n_layers; l++) {
            GP_CHECK_CUDA(cudaMemcpy(got, v->layers[l].w_down, ne * 2, cudaMemcpyDeviceToHost));
            compare_half(got, want.layers[l].w_down, ne, to, "converted w_down");
        }
        free(got);
        gp_device_weights_destroy(up);
        gp_host_weights_free(&h);
        gp_host_weights_free(&want);
    }
    gp_host_weights h32;
    assert_int_equal(gp_host_weights_alloc(&c, GP_DTYPE_F32, &h32), GP_OK);
    assert_int_equal(gp_synth_fill_host(&h32, 9), GP_OK);
    const uint64_t bad_at = gp_synth_numel(&c, GP_T_WQKV) / 2; /* inside the tensor */
    ((float *)h32.layers[1].wqkv)[bad_at] = -1.0e5f;
    gp_device_weights *up = NULL;
    assert_int_equal(gp_device_weights_upload(&h32, GP_DTYPE_F16, &up), GP_ERR_UNSUPPORTED);
    assert_null(up);
    if (!strstr(gp_last_error(), "layer 1 wqkv"))
        fail_msg("the refusal does not name the tensor 'layer 1 wqkv': %s", gp_last_error());
    char at[32];
    snprintf(at, sizeof at, "element %llu ", (unsigned long long)bad_at);
    if (!strstr(gp_last_error(), at))
        fail_msg("the refusal does not name the %s: %s", at, gp_last_error());
    assert_non_null(strstr(gp_last_error(), "--dtype bf16"));
    assert_int_equal(gp_device_weights_upload(&h32, GP_DTYPE_BF16, &up), GP_OK);
    gp_device_weights_destroy(up);
    assert_int_equal(gp_device_weights_upload(&h32, GP_DTYPE_F32, &up), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "F32"));
    gp_host_weights_free(&h32);
}

static void test_group_acquire_release(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    gp_device_weights *dw = NULL;
    assert_int_equal(gp_device_weights_synthetic(&c, GP_DTYPE_BF16, 1, &dw), GP_OK);
    gp_weight_group *a0 = gp_device_weights_group(dw, GP_GROUP_ATTN, 0);
    gp_weight_group *f1 = gp_device_weights_group(dw, GP_GROUP_FFN, 1);
    gp_weight_group *hd = gp_device_weights_group(dw, GP_GROUP_HEAD, 0);
    assert_non_null(a0);
    assert_non_null(f1);
    assert_non_null(hd);
    assert_ptr_not_equal(a0, f1);
    assert_null(gp_device_weights_group(dw, GP_GROUP_ATTN, 2));
    assert_null(gp_device_weights_group(dw, GP_GROUP_FFN, -1));
    assert_null(gp_device_weights_group(dw, (gp_group_kind)7, 0));

    cudaStream_t s;
    GP_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    assert_int_equal(gp_weight_group_in_use(a0), 0);
    /* each acquire grants its group's tensors, and only those */
    const gp_host_weights *v = gp_device_weights_view(dw);
    gp_group_tensors ta, tf, th;
    assert_int_equal(gp_weight_group_acquire(a0, s, &ta), GP_OK);
    assert_int_equal(gp_weight_group_acquire(a0, s, NULL), GP_OK);
    assert_int_equal(gp_weight_group_acquire(f1, s, &tf), GP_OK);
    assert_ptr_equal(ta.layer.attn_norm, v->layers[0].attn_norm);
    assert_ptr_equal(ta.layer.wqkv, v->layers[0].wqkv);
    assert_ptr_equal(ta.layer.wo, v->layers[0].wo);
    assert_null(ta.layer.ffn_norm);
    assert_null(ta.embed);
    assert_ptr_equal(tf.layer.ffn_norm, v->layers[1].ffn_norm);
    assert_ptr_equal(tf.layer.w_gate_up, v->layers[1].w_gate_up);
    assert_ptr_equal(tf.layer.w_down, v->layers[1].w_down);
    assert_null(tf.layer.wqkv);
    assert_null(tf.lm_head);
    assert_int_equal(gp_weight_group_acquire(hd, s, &th), GP_OK);
    assert_ptr_equal(th.embed, v->embed);
    assert_ptr_equal(th.final_norm, v->final_norm);
    assert_ptr_equal(th.lm_head, v->lm_head);
    assert_null(th.layer.wqkv);
    gp_weight_group_release(hd);
    assert_int_equal(gp_weight_group_in_use(a0), 2);
    assert_int_equal(gp_weight_group_in_use(f1), 1);
    assert_int_equal(gp_weight_group_in_use(hd), 0);
    gp_weight_group_release(a0);
    assert_int_equal(gp_weight_group_in_use(a0), 1);
    gp_weight_group_release(a0);
    gp_weight_group_release(f1);
    assert_int_equal(gp_weight_group_in_use(a0), 0);
    assert_int_equal(gp_weight_group_in_use(f1), 0);
    assert_int_equal(gp_weight_group_acquire(NULL, s, NULL), GP_ERR_INVALID_ARG);
    GP_CHECK_CUDA(cudaStreamSynchronize(s));
    GP_CHECK_CUDA(cudaStreamDestroy(s));
    gp_device_weights_destroy(dw);
}

int main(void)
{
    if (gp_cuda_available() != GP_OK) {
        printf("skipped: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_matches_host),
        cmocka_unit_test(test_device_weights_synthetic),
        cmocka_unit_test(test_upload_convert),
        cmocka_unit_test(test_group_acquire_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
