/* Lanes over one model state and mixed batches on the GPU: a prefill on one
 * lane while the default lane runs decode steps of other sequences, from
 * two host threads on two streams, gives bitwise the tokens and logits of
 * one lane doing the same work in order; a mixed batch (prefill parts of
 * some sequences, decode rows of others) gives each sequence what separate
 * prefill and decode calls give, within the tolerances below; bad lanes and
 * batches are refused before any work. Both engine dtypes. Skips without a
 * GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_test.h"

#include "engine_tol.h"
#include "gpu_test_util.h"

enum { NSEQ = 4, MAX_CTX = 1024, BLOCK = 16, CHUNK = 128, STEPS = 6 };
static gp_dtype g_dt = GP_DTYPE_BF16;
/* sequences 0, 1: prompts prefilled by the second lane (or the batch's
 * prefill parts); 2, 3: contexts prefilled first, then decoded */
static const int k_lens[NSEQ] = {300, 77, 50, 129};

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t *prompts[NSEQ];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg);
    gt_weights_synth(&f->cfg, 2718, g_dt, &f->w, &f->dw);
    srand(11);
    for (int s = 0; s < NSEQ; s++)
        f->prompts[s] = gt_rand_ids(k_lens[s], f->cfg.vocab);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int s = 0; s < NSEQ; s++)
        free(f->prompts[s]);
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f);
    return 0;
}

static gp_engine *engine(fixture *f)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    p.prefill_chunk = CHUNK;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    return e;
}

/* Sequences 2 and 3 hold their prompts. */
static void contexts(fixture *f, gp_engine *e)
{
    gp_prefill_seq ctx[2] = {{.seq = 2, .n = k_lens[2], .tokens = f->prompts[2]},
                             {.seq = 3, .n = k_lens[3], .tokens = f->prompts[3]}};
    GP_CHECK_OK(gp_engine_prefill_batch(e, 2, ctx, NULL, NULL, NULL));
}

/* What each side produced. */
typedef struct work {
    fixture *f;
    gp_engine *e;
    gp_lane *lane; /* the prefill's */
    int32_t pf_next[2];
    float *pf_logits;          /* [2][V] */
    int32_t dec_next[STEPS][2];
    float *dec_logits;         /* [STEPS][2][V] */
    gp_status pf_st, dec_st;
} work;

static void *prefill_side(void *arg)
{
    work *w = arg;
    gp_prefill_seq p[2] = {{.seq = 0, .n = k_lens[0], .tokens = w->f->prompts[0]},
                           {.seq = 1, .n = k_lens[1], .tokens = w->f->prompts[1]}};
    w->pf_st = gp_lane_prefill_batch(w->lane, 2, p, w->pf_next, w->pf_logits);
    return NULL;
}

static void *decode_side(void *arg)
{
    work *w = arg;
    const int ids[2] = {2, 3};
    int32_t tok[2] = {5, 9};
    const size_t V = (size_t)w->f->cfg.vocab;
    w->dec_st = GP_OK;
    for (int t = 0; t < STEPS && w->dec_st == GP_OK; t++) {
        w->dec_st = gp_engine_decode_step(w->e, 2, ids, tok, w->dec_next[t], w->dec_logits + (size_t)t * 2 * V);
        memcpy(tok, w->dec_next[t], sizeof tok);
    }
    return NULL;
}

static void work_init(work *w, fixture *f, gp_engine *e, gp_lane *lane)
{
    const size_t V = (size_t)f->cfg.vocab;
    *w = (work){.f = f, .e = e, .lane = lane};
    w->pf_logits = gt_host_alloc(sizeof(float) * 2 * V);
    w->dec_logits = gt_host_alloc(sizeof(float) * STEPS * 2 * V);
}

static void work_free(work *w)
{
    free(w->pf_logits);
    free(w->dec_logits);
}

/* A prefill on a second lane beside decode steps on the default lane, two
 * host threads: bitwise one lane doing the same in order. */
static void test_two_lanes_concurrent(void **state)
{
    fixture *f = *state;
    const size_t V = (size_t)f->cfg.vocab;
    gp_engine *one = engine(f), *two = engine(f);
    contexts(f, one);
    contexts(f, two);

    work seq;
    work_init(&seq, f, one, gp_engine_lane(one)); /* in order, on the one default lane */
    prefill_side(&seq);
    GP_CHECK_OK(seq.pf_st);
    decode_side(&seq);
    GP_CHECK_OK(seq.dec_st);

    gp_lane *lane;
    GP_CHECK_OK(gp_lane_create(two, NULL, 0, CHUNK, &lane));
    work par;
    work_init(&par, f, two, lane);
    pthread_t tp, td;
    assert_int_equal(pthread_create(&tp, NULL, prefill_side, &par), 0);
    assert_int_equal(pthread_create(&td, NULL, decode_side, &par), 0);
    pthread_join(tp, NULL);
    pthread_join(td, NULL);
    GP_CHECK_OK(par.pf_st);
    GP_CHECK_OK(par.dec_st);

    assert_memory_equal(seq.pf_next, par.pf_next, sizeof seq.pf_next);
    assert_memory_equal(seq.pf_logits, par.pf_logits, sizeof(float) * 2 * V);
    assert_memory_equal(seq.dec_next, par.dec_next, sizeof seq.dec_next);
    assert_memory_equal(seq.dec_logits, par.dec_logits, sizeof(float) * STEPS * 2 * V);

    /* the lane's sequences continue on the default lane as the in-order ones */
    const int ids[2] = {0, 1};
    int32_t n1[2], n2[2];
    float *l1 = gt_host_alloc(sizeof(float) * 2 * V), *l2 = gt_host_alloc(sizeof(float) * 2 * V);
    GP_CHECK_OK(gp_engine_decode_step(one, 2, ids, seq.pf_next, n1, l1));
    GP_CHECK_OK(gp_engine_decode_step(two, 2, ids, par.pf_next, n2, l2));
    assert_memory_equal(l1, l2, sizeof(float) * 2 * V);
    free(l1);
    free(l2);
    work_free(&seq);
    work_free(&par);
    gp_lane_destroy(lane);
    gp_engine_destroy(one);
    gp_engine_destroy(two);
}

static void check_close(const char *what, int s, const float *got, const float *want, int V, double tol)
{
    double err = gp_test_rel_err(got, want, V);
    if (!(err <= tol))
        fail_msg("%s, sequence %d: %.3g off the separate calls (tolerance %.0e)", what, s, err, tol);
}

/* One mixed batch against a prefill of the same prompts and a decode step
 * of the same rows. The decode rows are not bitwise: their GEMMs run at M =
 * every row of the batch, where cuBLASLt (or the skinny kernel at the
 * step's small M) picks another algorithm, whose fp32 sums round apart; the
 * bound is the engine's decode tolerance (ENGINE_TOL). The prefill rows
 * differ the same way (within PREFILL_TOL). A decode step after it, of
 * every sequence with the same tokens, checks the K/V the batch appended. */
static void test_mixed_batch(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *mix = engine(f), *sep = engine(f);
    contexts(f, mix);
    contexts(f, sep);

    const int32_t dtok[2] = {5, 9};
    gp_batch_part parts[4] = {
        {.seq = 0, .kind = GP_BATCH_PREFILL, .n = k_lens[0], .tokens = f->prompts[0]},
        {.seq = 1, .kind = GP_BATCH_PREFILL, .n = k_lens[1], .tokens = f->prompts[1]},
        {.seq = 2, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &dtok[0]},
        {.seq = 3, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &dtok[1]},
    };
    /* 300 + 77 + 2 rows exceed the lane's CHUNK rows: refused, nothing changes */
    gp_batch big = {.n_parts = 4, .parts = parts};
    GP_CHECK_FAIL(gp_lane_run_batch(gp_engine_lane(mix), &big, NULL, NULL), GP_ERR_INVALID_ARG,
                  "allowed at most 128");
    parts[0].n = 40; /* a chunk of sequence 0's prompt */
    gp_batch b = {.n_parts = 4, .parts = parts};
    int32_t next[4];
    float *lg = gt_host_alloc(sizeof(float) * 4 * (size_t)V);
    GP_CHECK_OK(gp_lane_run_batch(gp_engine_lane(mix), &b, next, lg));

    gp_prefill_seq p[2] = {{.seq = 0, .n = 40, .tokens = f->prompts[0]},
                           {.seq = 1, .n = k_lens[1], .tokens = f->prompts[1]}};
    int32_t pn[2], dn[2];
    float *pl = gt_host_alloc(sizeof(float) * 2 * (size_t)V), *dl = gt_host_alloc(sizeof(float) * 2 * (size_t)V);
    GP_CHECK_OK(gp_engine_prefill_batch(sep, 2, p, pn, pl, NULL));
    const int ids[2] = {2, 3};
    GP_CHECK_OK(gp_engine_decode_step(sep, 2, ids, dtok, dn, dl));
    const double etol = g_dt == GP_DTYPE_F16 ? ENGINE_TOL_F16 : ENGINE_TOL;
    for (int s = 0; s < 2; s++) {
        check_close("mixed batch, prefill part", s, lg + (size_t)s * V, pl + (size_t)s * V, V, PREFILL_TOL);
        check_close("mixed batch, decode row", s + 2, lg + (size_t)(2 + s) * V, dl + (size_t)s * V, V, etol);
    }

    const int all[4] = {0, 1, 2, 3};
    const int32_t tok[4] = {1, 2, 3, 4};
    int32_t n1[4], n2[4];
    float *a1 = gt_host_alloc(sizeof(float) * 4 * (size_t)V), *a2 = gt_host_alloc(sizeof(float) * 4 * (size_t)V);
    GP_CHECK_OK(gp_engine_decode_step(mix, 4, all, tok, n1, a1));
    GP_CHECK_OK(gp_engine_decode_step(sep, 4, all, tok, n2, a2));
    for (int s = 0; s < 4; s++)
        check_close("decode after the mixed batch", s, a1 + (size_t)s * V, a2 + (size_t)s * V, V,
                    s < 2 ? PREFILL_TOL : etol);
    free(a1);
    free(a2);
    free(lg);
    free(pl);
    free(dl);
    gp_engine_destroy(mix);
    gp_engine_destroy(sep);
}

/* Lanes and batches refused with what is allowed. */
static void test_refusals(void **state)
{
    fixture *f = *state;
    gp_engine *e = engine(f);
    gp_lane *lane = NULL;
    GP_CHECK_FAIL(gp_lane_create(e, NULL, 0, CHUNK + 1, &lane), GP_ERR_INVALID_ARG, "allowed 0..128");
    GP_CHECK_FAIL(gp_lane_create(e, NULL, -1, 0, &lane), GP_ERR_INVALID_ARG, "SMs");
    GP_CHECK_OK(gp_lane_create(e, NULL, 0, 0, &lane));
    gp_prefill_seq p = {.seq = 0, .n = 3, .tokens = f->prompts[0]};
    GP_CHECK_FAIL(gp_lane_prefill_batch(lane, 1, &p, NULL, NULL), GP_ERR_STATE, "rows >= 1");
    gp_lane_destroy(lane);
    const int32_t t = 1;
    gp_batch_part parts[2] = {{.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &t},
                              {.seq = 0, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = f->prompts[0]}};
    gp_batch b = {.n_parts = 2, .parts = parts};
    GP_CHECK_FAIL(gp_lane_run_batch(gp_engine_lane(e), &b, NULL, NULL), GP_ERR_INVALID_ARG,
                  "the prefill parts come first");
    gp_engine_destroy(e); /* a lane left undestroyed goes with its engine */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_two_lanes_concurrent),
        cmocka_unit_test(test_mixed_batch),
    };
    return GT_ENGINE_MAIN("engine_lanes", tests, setup, teardown, &g_dt);
}
