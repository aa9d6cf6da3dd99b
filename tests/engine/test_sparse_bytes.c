/* The device bytes of the sparse projections' transposed copies
 * (gp_engine_sparse_device_bytes), which gp_engine_set_sparsity weighs
 * against the free memory beside resident or streamed weights: every
 * projection with a threshold above 0 somewhere, at a 256-byte boundary per
 * layer, plus two split workspaces; the FFN's left out when the CPU-assisted
 * FFN serves it on streamed weights. Pure arithmetic: no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "gp_engine.h"
#include "gp_sparse.h"
#include "gp_test.h"

#define SMS 132

static uint64_t expect(const gp_config *c, const bool *copy)
{
    uint64_t layer = 0, ws = 0;
    for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
        if (!copy[p])
            continue;
        int N, K;
        gp_sparse_proj_shape(c, (gp_sparse_proj)p, &N, &K);
        layer += ((uint64_t)N * K * 2 + 255) & ~(uint64_t)255;
        uint64_t w = gp_sparse_gemv_ws_bytes(GP_SPARSE_MAX_B, N, K, SMS);
        ws = w > ws ? w : ws;
    }
    return layer * (uint64_t)c->n_layers + 2 * ws;
}

static void test_bytes(void **state)
{
    (void)state;
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve("llama3-8b", 0, &src));
    const gp_config *c = &src.cfg;
    const int n = c->n_layers * GP_SPARSE_PROJ_COUNT;
    float *t = calloc((size_t)n, sizeof(float));
    assert_non_null(t);
    assert_int_equal(gp_engine_sparse_device_bytes(c, t, false, SMS), 0); /* all 0: every projection dense */
    for (int i = 0; i < n; i++)
        t[i] = 0.25f;
    const bool all[4] = {true, true, true, true}, attn[4] = {true, true, false, false};
    const uint64_t b_all = gp_engine_sparse_device_bytes(c, t, false, SMS);
    const uint64_t b_attn = gp_engine_sparse_device_bytes(c, t, true, SMS);
    assert_int_equal(b_all, expect(c, all));
    assert_int_equal(b_attn, expect(c, attn));
    /* the layer weights' bytes again, within the alignment and workspaces */
    const uint64_t weights = (uint64_t)c->n_layers *
                             ((uint64_t)c->hidden * (c->n_heads + 2 * c->n_kv_heads) * c->head_dim +
                              (uint64_t)c->n_heads * c->head_dim * c->hidden + 3ull * c->hidden * c->ffn) * 2;
    assert_true(b_all >= weights && b_all < weights + (256u << 20));
    assert_true(b_attn < b_all / 3);
    printf("llama3-8b: transposed copies %.2f GiB (every projection), %.2f GiB (attention only)\n",
           b_all / 1073741824.0, b_attn / 1073741824.0);
    /* a projection above 0 in one layer only still gets its copy in every layer */
    for (int i = 0; i < n; i++)
        t[i] = 0.0f;
    t[3 * GP_SPARSE_PROJ_COUNT + GP_SPARSE_O] = 0.1f;
    const bool o_only[4] = {false, true, false, false};
    assert_int_equal(gp_engine_sparse_device_bytes(c, t, false, SMS), expect(c, o_only));
    assert_int_equal(gp_engine_sparse_device_bytes(c, NULL, false, SMS), 0);
    assert_int_equal(gp_engine_sparse_device_bytes(c, t, false, 0), 0);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bytes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
