/* The host tier behind a prefix cache on the engine: blocks retained,
 * offloaded into the store and dropped, then looked up and loaded into
 * other sequences, reloaded layer by layer with the next mixed batch, give
 * bit for bit the logits and decode steps of the same prompt computed in two
 * batches (prefix, then the rest: the shapes the reuse runs); two loads in
 * one batch beside a decode row; a load left waiting by a refused batch; a
 * load dropped by a reset; pins released; refusals. Both engine dtypes.
 * Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_kvstore.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "gpu_test_util.h"

enum { MAX_CTX = 512, BLOCK = 16, NSEQ = 6, LEN = 150, NB = 5, P = NB * BLOCK };
static gp_dtype g_dt = GP_DTYPE_BF16;

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t a[LEN], b[LEN]; /* b shares none of a's blocks */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg); /* head_dim 128: the tensor-core prefill attention runs */
    f->cfg.n_layers = 6;
    gt_weights_synth(&f->cfg, 7, g_dt, &f->w, &f->dw);
    srand((unsigned)gt_seed("engine_host_tier"));
    for (int i = 0; i < LEN; i++) {
        f->a[i] = rand() % f->cfg.vocab;
        f->b[i] = rand() % f->cfg.vocab;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f);
    return 0;
}

static gp_engine *tier_engine(fixture *f, int block_tokens)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    gp_prefix_params pp = gp_prefix_default_params();
    pp.model = "engine_host_tier synthetic seed 7";
    pp.block_tokens = block_tokens;
    pp.store_bytes = 32 * gp_engine_prefix_block_bytes(e, block_tokens);
    GP_CHECK_OK(gp_engine_prefix_enable(e, &pp));
    return e;
}

static void keys_of(gp_engine *e, const int32_t *t, uint64_t *keys)
{
    uint64_t k = gp_engine_host_seed(e);
    for (int i = 0; i < NB; i++)
        keys[i] = k = gp_kvstore_next_key(k, t + i * BLOCK, BLOCK);
}

static uint64_t pinned(gp_engine *e)
{
    gp_kvstore_stats st;
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &st, false);
    return st.blocks_pinned;
}

/* One mixed batch of prefill parts (seq, tokens [from, LEN) of t) and an
 * optional decode row; logits [n_parts][V], poisoned first. */
static gp_status run(gp_engine *e, int n, const int *seqs, const int32_t *const *t, const int *from, int dseq,
                     const int32_t *dtok, int32_t *next, float *logits)
{
    gp_batch_part parts[4];
    int np = 0;
    for (int i = 0; i < n; i++)
        parts[np++] = (gp_batch_part){.seq = seqs[i], .kind = GP_BATCH_PREFILL, .n = LEN - from[i],
                                      .tokens = t[i] + from[i]};
    if (dseq >= 0)
        parts[np++] = (gp_batch_part){.seq = dseq, .kind = GP_BATCH_DECODE, .n = 1, .tokens = dtok};
    memset(logits, 0xff, sizeof(float) * (size_t)np * (size_t)gp_engine_config(e)->vocab);
    const gp_batch b = {.n_parts = np, .parts = parts};
    return gp_lane_run_batch(gp_engine_lane(e), &b, next, logits);
}

/* t's prefix alone into empty seq: the reference's first batch. */
static void prefix_batch(gp_engine *e, int seq, const int32_t *t)
{
    float *scratch = malloc(sizeof(float) * gp_engine_config(e)->vocab);
    int32_t nx;
    gp_batch_part part = {.seq = seq, .kind = GP_BATCH_PREFILL, .n = P, .tokens = t};
    const gp_batch b = {.n_parts = 1, .parts = &part};
    GP_CHECK_OK(gp_lane_run_batch(gp_engine_lane(e), &b, &nx, scratch));
    free(scratch);
}

/* Prefill t into seq, retain its first NB blocks, offload them and let the
 * device let them go (the prefix cache's eviction). */
static void offload(gp_engine *e, int seq, const int32_t *t)
{
    uint64_t keys[NB];
    keys_of(e, t, keys);
    const int from = 0;
    int32_t nx;
    float *lg = malloc(sizeof(float) * gp_engine_config(e)->vocab);
    GP_CHECK_OK(run(e, 1, &seq, &t, &from, -1, NULL, &nx, lg));
    free(lg);
    int h[NB];
    for (int i = 0; i < NB; i++)
        GP_CHECK_OK(gp_engine_kv_retain_block(e, seq, i, &h[i]));
    gp_engine_reset_seq(e, seq);
    gp_kvstore_stats st0, st1;
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &st0, false);
    for (int i = 0; i < NB; i++)
        GP_CHECK_OK(gp_engine_host_offload(e, h[i], keys[i], t + i * BLOCK));
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &st1, false);
    assert_int_equal(st1.blocks_held - st0.blocks_held, NB);
    for (int i = 0; i < NB; i++) /* held already: touched, not copied again */
        GP_CHECK_OK(gp_engine_host_offload(e, h[i], keys[i], t + i * BLOCK));
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &st0, false);
    assert_int_equal(st0.blocks_held, st1.blocks_held);
    for (int i = 0; i < NB; i++)
        gp_engine_kv_drop_block(e, h[i]);
}

static void lookup_load(gp_engine *e, int seq, const int32_t *t, int want)
{
    uint64_t keys[NB];
    keys_of(e, t, keys);
    int held = -1;
    GP_CHECK_OK(gp_engine_host_lookup(e, keys, t, NB, &held));
    assert_int_equal(held, NB);
    GP_CHECK_OK(gp_engine_host_load(e, seq, want));
}

static void test_reload_bitwise(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = tier_engine(f, BLOCK);
    offload(e, 0, f->a);
    offload(e, 0, f->b);
    float *ref = malloc(sizeof(float) * 4 * V), *got = malloc(sizeof(float) * 4 * V);
    int32_t nref[3], ngot[3];
    const int32_t *ts[2] = {f->a, f->b};
    const int from[2] = {P, P}, ctx_from = LEN - 5;
    GP_CHECK_OK(run(e, 1, &(int){0}, &ts[1], &ctx_from, -1, NULL, nref, ref)); /* the decode row's context */
    int32_t dtok = nref[0];

    /* the reference: both prefixes computed, then both suffixes in one
     * batch beside a decode row; the tier: both prefixes loaded, then the
     * same batch (a row's result depends on the batch's shape, not on the
     * other rows) */
    prefix_batch(e, 1, f->a);
    prefix_batch(e, 2, f->b);
    const int rs[2] = {1, 2}, ls[2] = {3, 4};
    GP_CHECK_OK(run(e, 2, rs, ts, from, 0, &dtok, nref, ref));
    lookup_load(e, 3, f->a, NB);
    lookup_load(e, 4, f->b, NB);
    assert_int_equal(pinned(e), 2 * NB);
    GP_CHECK_OK(run(e, 2, ls, ts, from, 0, &dtok, ngot, got));
    assert_int_equal(pinned(e), 0);
    assert_memory_equal(got, ref, sizeof(float) * 2 * V);
    assert_int_equal(ngot[0], nref[0]);
    assert_int_equal(ngot[1], nref[1]);
    int32_t x = nref[1], y = ngot[1]; /* decode steps after it: the reference's */
    for (int i = 0; i < 3; i++) {
        int s2 = 2, s4 = 4;
        GP_CHECK_OK(gp_engine_decode_step(e, 1, &s2, &x, &x, ref + 2 * V));
        GP_CHECK_OK(gp_engine_decode_step(e, 1, &s4, &y, &y, got + 2 * V));
        assert_memory_equal(got + 2 * V, ref + 2 * V, sizeof(float) * V);
    }

    /* a batch refused before its first layer leaves the load waiting */
    gp_engine_reset_seq(e, 1);
    prefix_batch(e, 1, f->a);
    GP_CHECK_OK(run(e, 1, &rs[0], &ts[0], &from[0], -1, NULL, nref, ref));
    gp_engine_reset_seq(e, 3);
    lookup_load(e, 3, f->a, NB);
    int32_t bad = V;
    const gp_batch_part bp = {.seq = 3, .kind = GP_BATCH_PREFILL, .n = 1, .tokens = &bad};
    const gp_batch bb = {.n_parts = 1, .parts = &bp};
    GP_CHECK_FAIL(gp_lane_run_batch(gp_engine_lane(e), &bb, ngot, got), GP_ERR_INVALID_ARG, "token");
    assert_int_equal(pinned(e), NB);
    GP_CHECK_OK(run(e, 1, &ls[0], &ts[0], &from[0], -1, NULL, ngot, got));
    assert_memory_equal(got, ref, sizeof(float) * V);
    assert_int_equal(pinned(e), 0);

    /* a reset drops a waiting load: nothing reloads into the emptied sequence */
    gp_engine_reset_seq(e, 3);
    lookup_load(e, 3, f->a, 2);
    assert_int_equal(pinned(e), 2);
    gp_engine_reset_seq(e, 3);
    assert_int_equal(pinned(e), 0);
    const int zero = 0;
    GP_CHECK_OK(run(e, 1, &ls[0], &ts[0], &zero, -1, NULL, ngot, got));
    print_message("  %s: two prefixes of %d tokens reloaded in one batch beside a decode row, bitwise\n",
                  gp_dtype_name(g_dt), P);
    free(ref);
    free(got);
    gp_engine_destroy(e);
}

static void test_errors(void **state)
{
    fixture *f = *state;
    gp_engine *e = tier_engine(f, 2 * BLOCK);
    uint64_t keys[NB] = {0};
    int held;
    GP_CHECK_FAIL(gp_engine_host_lookup(e, keys, f->a, NB, &held), GP_ERR_STATE, "stored blocks of 32 tokens");
    gp_engine_destroy(e);

    e = tier_engine(f, BLOCK);
    offload(e, 0, f->a);
    keys_of(e, f->a, keys);
    GP_CHECK_FAIL(gp_engine_host_offload(e, -1, keys[0] ^ 1, f->a), GP_ERR_INVALID_ARG, "block -1");
    GP_CHECK_OK(gp_engine_host_lookup(e, keys, f->a, NB, &held));
    GP_CHECK_FAIL(gp_engine_host_load(e, 3, NB + 1), GP_ERR_INVALID_ARG, "allowed 0..5 blocks");
    assert_int_equal(pinned(e), 0); /* a refused load lets the lookup go */
    GP_CHECK_OK(gp_engine_host_lookup(e, keys, f->a, NB, &held));
    GP_CHECK_OK(gp_engine_host_load(e, 3, 2));
    GP_CHECK_OK(gp_engine_host_lookup(e, keys, f->a, NB, &held));
    GP_CHECK_FAIL(gp_engine_host_load(e, 3, 1), GP_ERR_STATE, "a load into it still waits");
    GP_CHECK_FAIL(gp_engine_prefill_prefix(e, 4, LEN, f->a, NULL, NULL, NULL), GP_ERR_STATE,
                  "the host tier's loads are in progress");
    gp_engine_reset_seq(e, 3);
    const int32_t *ta = f->a;
    int32_t nx;
    float *lg = malloc(sizeof(float) * f->cfg.vocab);
    const int seq = 5, from = LEN - 7;
    GP_CHECK_OK(run(e, 1, &seq, &ta, &from, -1, NULL, &nx, lg)); /* 7 tokens: not whole blocks */
    GP_CHECK_OK(gp_engine_host_lookup(e, keys, f->a, NB, &held));
    GP_CHECK_FAIL(gp_engine_host_load(e, 5, 1), GP_ERR_STATE, "not whole blocks of 16");
    assert_int_equal(pinned(e), 0);
    free(lg);
    gp_engine_destroy(e);

    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    GP_CHECK_FAIL(gp_engine_host_lookup(e, keys, f->a, NB, &held), GP_ERR_STATE, "stored prefixes are off");
    gp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_bitwise),
        cmocka_unit_test(test_errors),
    };
    return GT_ENGINE_MAIN("engine_host_tier", tests, setup, teardown, &g_dt);
}
