/* Tests of the device KV cache: creation and its memory check, views, and the
 * step-table upload (from gp_kv_tables and from raw arrays), including a host
 * running many uploads ahead of a busy GPU. */
#include <cuda_runtime_api.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn_test_util.h"
#include "gp_kvcache.h"
#include "gp_test.h"

static uint64_t g_seed;

static void test_host_checks(void **state)
{
    (void)state;
    gp_kv_layout l = { .n_layers = 2, .n_kv_heads = 2, .head_dim = 16, .block_size = 4,
                       .n_blocks = 8 };
    gp_kv_device *kv = (gp_kv_device *)1;
    GP_CHECK_FAIL(gp_kv_device_create(&l, GP_DTYPE_BF16, 0, 4, &kv), GP_ERR_INVALID_ARG, "max_seqs = 0");
    assert_null(kv);
    /* only the 16-bit compute dtypes: the message names the one refused */
    kv = (gp_kv_device *)1;
    GP_CHECK_FAIL(gp_kv_device_create(&l, GP_DTYPE_F32, 2, 4, &kv), GP_ERR_INVALID_ARG, "F32");
    assert_null(kv);
    GP_CHECK_FAIL(gp_kv_device_create(&l, GP_DTYPE_I16, 2, 4, &kv), GP_ERR_INVALID_ARG, "allowed bf16 (BF16) or fp16 (F16)");
    l.block_size = 0;
    GP_CHECK_FAIL(gp_kv_device_create(&l, GP_DTYPE_F16, 2, 4, &kv), GP_ERR_INVALID_ARG, "layout.block_size = 0");
    l.block_size = 4;
    assert_int_equal(gp_kv_device_bytes(&l, GP_DTYPE_BF16, 2, 4),
                     2ull * 2 * 8 * 4 * 2 * 16 * 2 + (2ull * 4 + 2 * 2) * 4);
    assert_int_equal(gp_kv_device_bytes(&l, GP_DTYPE_F16, 2, 4), gp_kv_device_bytes(&l, GP_DTYPE_BF16, 2, 4));
    assert_int_equal(gp_kv_device_bytes(&l, GP_DTYPE_F32, 2, 4), 0);
    assert_int_equal(gp_kv_device_dtype(NULL), GP_DTYPE_BF16);
    gp_kv_view in = { .n_rows = 4, .max_blocks = 3 }, out;
    GP_CHECK_FAIL(gp_kv_view_rows(&in, 2, 3, &out), GP_ERR_INVALID_ARG, "outside");
    in.block_tables = (const int32_t *)(uintptr_t)0x1000;
    in.lens = (const int32_t *)(uintptr_t)0x2000;
    in.positions = (const int32_t *)(uintptr_t)0x3000;
    assert_int_equal(gp_kv_view_rows(&in, 1, 3, &out), GP_OK);
    assert_int_equal(out.n_rows, 3);
    assert_ptr_equal(out.block_tables, in.block_tables + 3);
    assert_ptr_equal(out.lens, in.lens + 1);
    assert_ptr_equal(out.positions, in.positions + 1);
}

static void test_gpu_create(void **state)
{
    (void)state;
    gp_kv_layout l = { .n_layers = 3, .n_kv_heads = 2, .head_dim = 16, .block_size = 4,
                       .n_blocks = 10 };
    gp_kv_device *kv = NULL;
    at_check(gp_kv_device_create(&l, at_dtype(), 5, 6, &kv), "create");
    assert_int_equal(gp_kv_device_dtype(kv), at_dtype());
    assert_int_equal(gp_kv_device_max_seqs(kv), 5);
    assert_int_equal(gp_kv_device_max_blocks_per_seq(kv), 6);
    assert_int_equal(gp_kv_device_layout(kv)->n_blocks, 10);
    const size_t elems = 10 * 4 * 2 * 16;
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(gp_kv_device_v(kv, i), (uint16_t *)gp_kv_device_k(kv, i) + elems);
        gp_kv_view v;
        at_check(gp_kv_device_view(kv, i, &v), "view");
        assert_ptr_equal(v.k, gp_kv_device_k(kv, i));
        assert_int_equal(v.dtype, at_dtype());
        assert_int_equal(v.n_rows, 5);
        assert_int_equal(v.max_blocks, 6);
        assert_ptr_equal(v.lens, gp_kv_device_lens(kv));
        assert_ptr_equal(v.positions, gp_kv_device_positions(kv));
    }
    assert_ptr_equal((uint16_t *)gp_kv_device_k(kv, 2) + 2 * elems, (uint16_t *)gp_kv_device_k(kv, 0) + 6 * elems);
    assert_null(gp_kv_device_k(kv, 3));
    gp_kv_view v;
    GP_CHECK_FAIL(gp_kv_device_view(kv, 3, &v), GP_ERR_INVALID_ARG, "layer = 3");
    /* fresh pools are zero, tables -1 */
    uint16_t first[64];
    at_to_host(first, gp_kv_device_v(kv, 2), sizeof first);
    for (int i = 0; i < 64; i++)
        assert_int_equal(first[i], 0);
    int32_t t[30];
    at_to_host(t, gp_kv_device_block_tables(kv), sizeof t);
    for (int i = 0; i < 30; i++)
        assert_int_equal(t[i], -1);
    gp_kv_device_destroy(kv);

    /* far more than any GPU holds: refused before allocating, naming sizes */
    gp_kv_layout big = { .n_layers = 1000, .n_kv_heads = 8, .head_dim = 128, .block_size = 16,
                         .n_blocks = 1 << 20 };
    kv = (gp_kv_device *)1;
    GP_CHECK_FAIL(gp_kv_device_create(&big, at_dtype(), 4, 4, &kv), GP_ERR_DEVICE_MEMORY, "free");
    assert_null(kv);
}

/* Many steps of reserve / upload / snapshot / advance, host far ahead of the
 * GPU: every snapshot must equal what the host tables said at its step. */
static void test_gpu_sync_tables(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed);
    enum { SEQS = 7, B = 5, BS = 4, MAXB = 16, NB = 80, STEPS = 24 };
    gp_kv_layout l = { .n_layers = 2, .n_kv_heads = 1, .head_dim = 16, .block_size = BS,
                       .n_blocks = NB };
    gp_kv_tables *t;
    gp_kv_device *kv;
    at_check(gp_kv_tables_create(&l, SEQS, MAXB, &t), "tables");
    at_check(gp_kv_device_create(&l, at_dtype(), B, MAXB, &kv), "create");
    /* give the sequences different starting lengths, interleaved */
    for (int round = 0; round < 5; round++)
        for (int s = 0; s < SEQS; s++) {
            int n = at_int(&rng, 4);
            at_check(gp_kv_reserve(t, s, n), "reserve");
            at_check(gp_kv_advance(t, s, n), "advance");
        }
    cudaStream_t st;
    assert_int_equal(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    const size_t snap_ints = (size_t)B * MAXB + 2 * B; /* tables [B][MAXB], lens [B], pos [B] */
    int32_t *snaps = at_dev_alloc((size_t)STEPS * snap_ints * 4);
    int32_t *want = at_malloc((size_t)STEPS * snap_ints * 4);
    int32_t *got = at_malloc((size_t)STEPS * snap_ints * 4);
    int ncols[STEPS][B];
    /* a big memset keeps the stream busy so uploads queue up behind it */
    size_t busy_bytes = 256u << 20;
    void *busy = at_dev_alloc(busy_bytes);
    for (int step = 0; step < STEPS; step++) {
        int ids[SEQS];
        for (int s = 0; s < SEQS; s++)
            ids[s] = s;
        at_shuffle(ids, SEQS, &rng);
        for (int b = 0; b < B; b++)
            at_check(gp_kv_reserve(t, ids[b], 1), "reserve");
        assert_int_equal(cudaMemsetAsync(busy, step & 0xff, busy_bytes, st), cudaSuccess);
        at_check(gp_kv_device_sync_tables(kv, t, B, ids, st), "sync_tables");
        int32_t *w = want + (size_t)step * snap_ints;
        for (int b = 0; b < B; b++) {
            int len = gp_kv_len(t, ids[b]);
            ncols[step][b] = len / BS + 1;
            memcpy(w + (size_t)b * MAXB, gp_kv_block_table(t, ids[b]), MAXB * 4);
            w[B * MAXB + b] = len + 1;
            w[B * MAXB + B + b] = len;
        }
        int32_t *s = snaps + (size_t)step * snap_ints;
        assert_int_equal(cudaMemcpyAsync(s, gp_kv_device_block_tables(kv), (size_t)B * MAXB * 4,
                                         cudaMemcpyDeviceToDevice, st), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(s + B * MAXB, gp_kv_device_lens(kv), (size_t)B * 4,
                                         cudaMemcpyDeviceToDevice, st), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(s + B * MAXB + B, gp_kv_device_positions(kv),
                                         (size_t)B * 4, cudaMemcpyDeviceToDevice, st), cudaSuccess);
        for (int b = 0; b < B; b++)
            at_check(gp_kv_advance(t, ids[b], 1), "advance");
    }
    assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
    at_to_host(got, snaps, (size_t)STEPS * snap_ints * 4);
    for (int step = 0; step < STEPS; step++) {
        const int32_t *g = got + (size_t)step * snap_ints, *w = want + (size_t)step * snap_ints;
        for (int b = 0; b < B; b++) {
            for (int c = 0; c < ncols[step][b]; c++)
                if (g[b * MAXB + c] != w[b * MAXB + c])
                    fail_msg("step %d row %d column %d: block %d, want %d", step, b, c,
                             g[b * MAXB + c], w[b * MAXB + c]);
            if (g[B * MAXB + b] != w[B * MAXB + b] || g[B * MAXB + B + b] != w[B * MAXB + B + b])
                fail_msg("step %d row %d: len/pos %d/%d, want %d/%d", step, b, g[B * MAXB + b],
                         g[B * MAXB + B + b], w[B * MAXB + b], w[B * MAXB + B + b]);
        }
    }

    /* errors */
    int dup[3] = { 1, 2, 1 };
    for (int i = 0; i < 3; i++)
        at_check(gp_kv_reserve(t, dup[i], i == 2 ? 0 : 1), "reserve");
    GP_CHECK_FAIL(gp_kv_device_sync_tables(kv, t, 3, dup, st), GP_ERR_INVALID_ARG, "twice");
    /* a released sequence owns no block for its next position */
    gp_kv_release(t, 6);
    int one[1] = { 6 };
    GP_CHECK_FAIL(gp_kv_device_sync_tables(kv, t, 1, one, st), GP_ERR_STATE, "gp_kv_reserve");
    int bad[1] = { SEQS };
    GP_CHECK_FAIL(gp_kv_device_sync_tables(kv, t, 1, bad, st), GP_ERR_INVALID_ARG, "seq_ids[0]");
    GP_CHECK_FAIL(gp_kv_device_sync_tables(kv, t, B + 1, dup, st), GP_ERR_INVALID_ARG, "B = 6");
    gp_kv_layout other = l;
    other.block_size = 8;
    gp_kv_tables *t2;
    at_check(gp_kv_tables_create(&other, 2, MAXB, &t2), "tables");
    GP_CHECK_FAIL(gp_kv_device_sync_tables(kv, t2, 1, dup, st), GP_ERR_INVALID_ARG, "layout");
    gp_kv_tables_destroy(t2);

    /* not capturable: refused while the stream captures */
    at_check(gp_kv_reserve(t, 0, 1), "reserve");
    int zero[1] = { 0 };
    assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    gp_clear_error();
    gp_status cap_st = gp_kv_device_sync_tables(kv, t, 1, zero, st);
    char cap_msg[512];
    snprintf(cap_msg, sizeof cap_msg, "%s", gp_last_error());
    cudaGraph_t graph = NULL;
    assert_int_equal(cudaStreamEndCapture(st, &graph), cudaSuccess);
    if (graph)
        cudaGraphDestroy(graph);
    if (cap_st != GP_ERR_STATE || !strstr(cap_msg, "capturing"))
        fail_msg("sync during capture: %s (%s), expected %s mentioning 'capturing'", gp_status_str(cap_st), cap_msg,
                 gp_status_str(GP_ERR_STATE));
    at_check(gp_kv_device_sync_tables(kv, t, 1, zero, st), "sync after capture");
    assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);

    at_dev_free(busy);
    at_dev_free(snaps);
    free(want);
    free(got);
    assert_int_equal(cudaStreamDestroy(st), cudaSuccess);
    gp_kv_device_destroy(kv);
    gp_kv_tables_destroy(t);
}

static void test_gpu_upload(void **state)
{
    (void)state;
    uint64_t rng = at_dtype_seed(g_seed) ^ 0x1234567u;
    enum { B = 6, BS = 16, MAXB = 5, NB = 40, STRIDE = 7 };
    gp_kv_layout l = { .n_layers = 1, .n_kv_heads = 2, .head_dim = 32, .block_size = BS,
                       .n_blocks = NB };
    gp_kv_device *kv;
    at_check(gp_kv_device_create(&l, at_dtype(), 8, MAXB, &kv), "create");
    int32_t perm[NB], tables[B * STRIDE], lens[B] = { 1, 15, 16, 17, 80, 33 };
    for (int i = 0; i < NB; i++)
        perm[i] = i;
    at_shuffle(perm, NB, &rng);
    for (int i = 0; i < B * STRIDE; i++)
        tables[i] = perm[i % NB];
    at_check(gp_kv_device_upload(kv, B, tables, STRIDE, lens, NULL), "upload");
    at_dev_sync();
    int32_t got[B * MAXB], gl[B], gpos[B];
    at_to_host(got, gp_kv_device_block_tables(kv), sizeof got);
    at_to_host(gl, gp_kv_device_lens(kv), sizeof gl);
    at_to_host(gpos, gp_kv_device_positions(kv), sizeof gpos);
    for (int b = 0; b < B; b++) {
        assert_int_equal(gl[b], lens[b]);
        assert_int_equal(gpos[b], lens[b] - 1);
        for (int c = 0; c < (lens[b] + BS - 1) / BS; c++)
            assert_int_equal(got[b * MAXB + c], tables[b * STRIDE + c]);
    }
    lens[2] = 0;
    GP_CHECK_FAIL(gp_kv_device_upload(kv, B, tables, STRIDE, lens, NULL), GP_ERR_INVALID_ARG,
                  "lens[2] = 0");
    lens[2] = MAXB * BS + 1;
    GP_CHECK_FAIL(gp_kv_device_upload(kv, B, tables, STRIDE, lens, NULL), GP_ERR_INVALID_ARG,
                  "lens[2] = 81");
    lens[2] = 16;
    tables[4 * STRIDE + 3] = NB;
    GP_CHECK_FAIL(gp_kv_device_upload(kv, B, tables, STRIDE, lens, NULL), GP_ERR_INVALID_ARG,
                  "tables[4][3] = 40");
    GP_CHECK_FAIL(gp_kv_device_upload(kv, B, tables, 2, lens, NULL), GP_ERR_INVALID_ARG,
                  "table_stride = 2");
    gp_kv_device_destroy(kv);
}

int main(void)
{
    g_seed = at_seed("attn_kv_device");
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_host_checks),
    };
    if (cmocka_run_group_tests_name("kv_device (host)", host_tests, NULL, NULL))
        return 1;
    if (!at_gpu_usable())
        return 77;
    const struct CMUnitTest gpu_tests[] = {
        AT_GPU_TEST(test_gpu_create),
        AT_GPU_TEST(test_gpu_sync_tables),
        AT_GPU_TEST(test_gpu_upload),
    };
    return cmocka_run_group_tests_name("kv_device (GPU)", gpu_tests, NULL, NULL) ? 1 : 0;
}
