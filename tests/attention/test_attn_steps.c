/* End-to-end test of the attention stage over many decode steps: host block
 * tables -> gp_kv_device_sync_tables -> RoPE + KV append (a q/k/v bias on
 * every third step) -> decode attention, run as two micro-batches per step,
 * against the references each step, in bf16 and in fp16. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn_test_util.h"
#include "gp_model.h"

/* The bounds of test_decode_attn.c and test_rope_kv.c: fp16 (rounding 8x
 * finer than bf16) gets the bf16 ones / 4. */
#define TOL_ELEM_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)
#define TOL_ROW_ABS (at_dtype() == GP_DTYPE_F16 ? 2.5e-4 : 1e-3)
#define TOL_ROW_REL (at_dtype() == GP_DTYPE_F16 ? 2.5e-3 : 1e-2)

enum { HD = 64, NH = 8, NKV = 2, BS = 16, LAYERS = 2, LAYER = 1, SEQS = 5, MAXB = 8, NB = 48,
       STEPS = 60 };
#define ROWS ((NH + 2 * NKV) * HD)

static uint64_t g_seed;

static void test_gpu_steps(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed);
    gp_kv_layout l = { .n_layers = LAYERS, .n_kv_heads = NKV, .head_dim = HD, .block_size = BS,
                       .n_blocks = NB };
    gp_kv_tables *t;
    gp_kv_device *kv;
    at_check(gp_kv_tables_create(&l, SEQS, MAXB, &t), "tables");
    at_check(gp_kv_device_create(&l, at_dtype(), SEQS, MAXB, &kv), "create");
    /* Hand out blocks in a shuffled order: reserve and release a scrambled
     * set first so the free list is not 0, 1, 2, ... */
    for (int s = 0; s < SEQS; s++)
        at_check(gp_kv_reserve(t, s, at_int(&rng, 3 * BS)), "reserve");
    for (int s = 0; s < SEQS; s++)
        gp_kv_release(t, (s * 3) % SEQS);

    gp_config cfg;
    at_check(gp_config_preset("llama3.2-1b", &cfg), "preset"); /* head_dim 64, llama3 scaling */
    float inv_freq[HD / 2];
    gp_rope_inv_freq(&cfg, inv_freq);

    const size_t pool = gp_kv_layer_elems(&l); /* [NB][BS][NKV][HD] */
    uint16_t *hk = at_malloc(pool * 2), *hv = at_malloc(pool * 2); /* host mirrors of layer 1 */
    uint16_t *gk = at_malloc(pool * 2), *gv = at_malloc(pool * 2);
    memset(hk, 0, pool * 2);
    memset(hv, 0, pool * 2);
    uint16_t *qkv = at_malloc((size_t)SEQS * ROWS * 2), *gq = at_malloc((size_t)SEQS * NH * HD * 2);
    uint16_t *gout = at_malloc((size_t)SEQS * NH * HD * 2);
    float *wq = at_malloc((size_t)SEQS * NH * HD * 4), *wout = at_malloc((size_t)SEQS * NH * HD * 4);
    int32_t tab[SEQS * MAXB], lens[SEQS], pos[SEQS];

    uint16_t *dqkv = at_dev_alloc((size_t)SEQS * ROWS * 2);      /* [B][ROWS] */
    uint16_t *dq = at_dev_alloc((size_t)SEQS * NH * HD * 2);     /* [B][NH][HD] */
    uint16_t *dout = at_dev_alloc((size_t)SEQS * NH * HD * 2);   /* [B][NH][HD] */
    float *dfreq = at_dev_alloc(sizeof inv_freq);
    at_to_dev(dfreq, inv_freq, sizeof inv_freq);
    uint16_t bias[ROWS], *dbias = at_dev_alloc(sizeof bias); /* q/k/v bias of the biased steps */
    at_fill16(bias, ROWS, &rng, 1.0f);
    at_to_dev(dbias, bias, sizeof bias);
    /* even steps: the heuristic (1 split at these lengths); odd steps: 3
     * forced splits, so the combine runs too */
    gp_decode_attn_params p_auto = at_attn_params(), p3 = p_auto;
    p3.force_splits = 3;
    size_t ws_bytes;
    at_check(gp_decode_attn_workspace_max(SEQS, NH, NKV, HD, MAXB * BS, &p3, &ws_bytes), "ws");
    void *ws = at_dev_alloc(ws_bytes);
    cudaStream_t st;
    assert_int_equal(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    gp_kv_view full;
    at_check(gp_kv_device_view(kv, LAYER, &full), "view");

    size_t fails = 0;
    for (int step = 0; step < STEPS; step++) {
        /* a random subset of live sequences in random order */
        int ids[SEQS], B = 0;
        for (int s = 0; s < SEQS; s++)
            ids[s] = s;
        at_shuffle(ids, SEQS, &rng);
        int want_b = 1 + at_int(&rng, SEQS);
        for (int i = 0; i < SEQS && B < want_b; i++)
            if (gp_kv_len(t, ids[i]) + 1 <= MAXB * BS)
                ids[B++] = ids[i];
        if (B == 0)
            break;
        int max_len = 1;
        for (int b = 0; b < B; b++) {
            at_check(gp_kv_reserve(t, ids[b], 1), "reserve");
            pos[b] = gp_kv_len(t, ids[b]);
            lens[b] = pos[b] + 1;
            if (lens[b] > max_len)
                max_len = lens[b];
            memcpy(tab + b * MAXB, gp_kv_block_table(t, ids[b]), MAXB * 4);
        }
        at_check(gp_kv_device_sync_tables(kv, t, B, ids, st), "sync_tables");
        at_fill16(qkv, (size_t)B * ROWS, &rng, 2.0f);
        assert_int_equal(cudaMemcpyAsync(dqkv, qkv, (size_t)B * ROWS * 2, cudaMemcpyHostToDevice,
                                         st), cudaSuccess);
        assert_int_equal(cudaMemsetAsync(dq, 0xff, (size_t)B * NH * HD * 2, st), cudaSuccess);
        assert_int_equal(cudaMemsetAsync(dout, 0xff, (size_t)B * NH * HD * 2, st), cudaSuccess);
        /* two micro-batches, as the pipeline runs them */
        int cut = B / 2;
        const int biased = step % 3 == 1;
        for (int m = 0; m < 2; m++) {
            int first = m == 0 ? 0 : cut, count = m == 0 ? cut : B - cut;
            if (count == 0)
                continue;
            gp_kv_view mv;
            at_check(gp_kv_view_rows(&full, first, count, &mv), "view_rows");
            at_check(gp_rope_kv_append(&mv, count, NH, dqkv + (size_t)first * ROWS, biased ? dbias : NULL,
                                       dfreq, dq + (size_t)first * NH * HD, st), "rope");
            at_check(gp_decode_attn(&mv, count, NH, max_len, dq + (size_t)first * NH * HD,
                                    dout + (size_t)first * NH * HD, ws, ws_bytes,
                                    step % 2 ? &p3 : &p_auto, st), "attn");
        }
        assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
        at_dev_sync();
        at_to_host(gq, dq, (size_t)B * NH * HD * 2);
        at_to_host(gout, dout, (size_t)B * NH * HD * 2);
        at_to_host(gk, gp_kv_device_k(kv, LAYER), pool * 2);
        at_to_host(gv, gp_kv_device_v(kv, LAYER), pool * 2);

        /* RoPE + append on the host mirror, then the pools must agree: V and
         * every untouched slot bit-exact, this step's K slots within 1 ulp */
        gp_rope_kv_append_ref(at_dtype(), qkv, biased ? bias : NULL, B, NH, NKV, HD, pos, inv_freq, tab, MAXB, BS, hk, hv, wq);
        char what[96];
        snprintf(what, sizeof what, "step %d q_out", step);
        fails += at_compare(what, gq, wq, (size_t)B * NH, HD, TOL_ELEM_REL, TOL_ROW_ABS,
                            TOL_ROW_REL);
        for (size_t i = 0; i < pool; i++) {
            if (gv[i] != hv[i]) {
                if (fails < 10)
                    printf("  step %d: V element %zu: 0x%04x, want 0x%04x\n", step, i,
                           (unsigned)gv[i], (unsigned)hv[i]);
                fails++;
            }
            float a = at_f32(gk[i]), w = at_f32(hk[i]);
            /* 1 ulp (bf16 2^-7, fp16 2^-10 relative), plus room for
             * device/host cosf differences where the rotation cancels to
             * near zero */
            const float rel = at_dtype() == GP_DTYPE_F16 ? 2.5e-3f : 1e-2f;
            if (!(fabsf(a - w) <= rel * fabsf(w) + rel * 1e-2f)) {
                if (fails < 10)
                    printf("  step %d: K element %zu: %g, want %g\n", step, i, a, w);
                fails++;
            }
        }
        /* the reference attention reads exactly the device's K */
        memcpy(hk, gk, pool * 2);
        gp_decode_attn_ref(at_dtype(), gq, hk, hv, tab, MAXB, lens, B, NH, NKV, HD, BS, wout);
        snprintf(what, sizeof what, "step %d attention (B %d, max_len %d)", step, B, max_len);
        fails += at_compare(what, gout, wout, (size_t)B * NH, HD, TOL_ELEM_REL, TOL_ROW_ABS,
                            TOL_ROW_REL);
        for (int b = 0; b < B; b++)
            at_check(gp_kv_advance(t, ids[b], 1), "advance");
        if (fails)
            break;
    }
    /* the other layer was never written */
    at_to_host(gk, gp_kv_device_k(kv, 0), pool * 2);
    at_to_host(gv, gp_kv_device_v(kv, 0), pool * 2);
    for (size_t i = 0; i < pool; i++)
        if (gk[i] || gv[i])
            fail_msg("layer 0 element %zu was written", i);

    assert_int_equal(cudaStreamDestroy(st), cudaSuccess);
    at_dev_free(dqkv);
    at_dev_free(dq);
    at_dev_free(dout);
    at_dev_free(dfreq);
    at_dev_free(dbias);
    at_dev_free(ws);
    gp_kv_device_destroy(kv);
    gp_kv_tables_destroy(t);
    free(hk);
    free(hv);
    free(gk);
    free(gv);
    free(qkv);
    free(gq);
    free(gout);
    free(wq);
    free(wout);
    if (fails)
        fail_msg("%zu mismatches (seed %llu)", fails, (unsigned long long)g_seed);
}

int main(int argc, char **argv)
{
    g_seed = at_seed("attn_steps");
    at_attn_args("attn_steps", argc, argv);
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest tests[] = {
        AT_GPU_TEST(test_gpu_steps),
    };
    return cmocka_run_group_tests_name("attention steps (GPU)", tests, NULL, NULL) ? 1 : 0;
}
