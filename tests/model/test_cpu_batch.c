/* Mixed batches on the CPU reference: random batches of prefill chunks and
 * decode rows of many sequences against separate prefill and decode calls on
 * a second model over the same weights. Rows never mix in the reference, so
 * both kinds of part must match bitwise, in fp32 and in bf16 activations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"
#include "gp_reference.h"
#include "gp_stage.h"

#define N_SEQS 6
#define MAX_CTX 48
#define BLOCK 4

static gp_host_weights g_w;

static int setup(void **state)
{
    gp_config cfg;
    if (gp_config_preset("tiny", &cfg) != GP_OK || gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &g_w) != GP_OK ||
        gp_synth_fill_host(&g_w, 4321) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    gp_host_weights_free(&g_w);
    return 0;
}

static uint64_t g_rng = 99;

static int rnd(int n) /* [0, n) */
{
    return (int)(gp_test_uniform(&g_rng) * n) % n;
}

/* One sequence of the schedule: a prompt fed in chunks, then decode rows. */
typedef struct seq_state {
    int32_t prompt[MAX_CTX];
    int n_prompt, fed; /* prompt tokens, of which fed were run */
    int len;           /* tokens the caches hold */
    int limit;         /* tokens it runs in all */
} seq_state;

static void seq_init(seq_state *s, int vocab)
{
    s->n_prompt = 2 + rnd(20);
    for (int i = 0; i < s->n_prompt; i++)
        s->prompt[i] = rnd(vocab);
    s->fed = s->len = 0;
    s->limit = s->n_prompt + 1 + rnd(MAX_CTX - s->n_prompt);
}

static gp_cpu_model *make_model(gp_dtype act)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, N_SEQS, MAX_CTX, BLOCK, &m));
    gp_cpu_model_set_act_dtype(m, act);
    return m;
}

/* Runs random rounds: each picks some sequences, a chunk of the prompt for
 * those still prefilling (several chunks of one prompt over successive
 * rounds), a decode row for the others, as one mixed batch on `mixed`, and
 * as one gp_cpu_prefill_batch plus one gp_cpu_decode_step on `sep`. */
static void run_schedule(gp_dtype act, int rounds)
{
    const int V = g_w.cfg.vocab;
    gp_cpu_model *mixed = make_model(act), *sep = make_model(act);
    seq_state seq[N_SEQS];
    for (int s = 0; s < N_SEQS; s++)
        seq_init(&seq[s], V);
    float *lm = malloc(sizeof(float) * N_SEQS * V), *lp = malloc(sizeof(float) * N_SEQS * V),
          *ld = malloc(sizeof(float) * N_SEQS * V);
    int32_t next[N_SEQS], dec_tok[N_SEQS];
    int checked_pre = 0, checked_dec = 0, shared_rounds = 0;
    for (int r = 0; r < rounds; r++) {
        gp_batch_part parts[N_SEQS];
        gp_prefill_seq pre[N_SEQS];
        int dec_ids[N_SEQS], n_pre = 0, n_dec = 0;
        for (int s = 0; s < N_SEQS; s++) {
            seq_state *q = &seq[s];
            if (q->len >= q->limit) { /* done: start over */
                gp_cpu_reset_seq(mixed, s);
                gp_cpu_reset_seq(sep, s);
                seq_init(q, V);
            }
            if (rnd(4) == 0)
                continue; /* not in this round */
            if (q->fed < q->n_prompt) {
                int n = 1 + rnd(q->n_prompt - q->fed);
                pre[n_pre++] = (gp_prefill_seq){.seq = s, .n = n, .tokens = q->prompt + q->fed};
            } else {
                dec_tok[n_dec] = rnd(V);
                dec_ids[n_dec++] = s;
            }
        }
        if (n_pre + n_dec == 0)
            continue;
        for (int i = 0; i < n_pre; i++)
            parts[i] = (gp_batch_part){.seq = pre[i].seq, .kind = GP_BATCH_PREFILL, .n = pre[i].n,
                                       .tokens = pre[i].tokens};
        for (int i = 0; i < n_dec; i++)
            parts[n_pre + i] = (gp_batch_part){.seq = dec_ids[i], .kind = GP_BATCH_DECODE, .n = 1,
                                               .tokens = &dec_tok[i]};
        gp_batch b = {.n_parts = n_pre + n_dec, .parts = parts};
        GP_CHECK_OK(gp_cpu_run_batch(mixed, &b, next, lm));
        if (n_pre)
            GP_CHECK_OK(gp_cpu_prefill_batch(sep, n_pre, pre, lp, NULL));
        if (n_dec)
            GP_CHECK_OK(gp_cpu_decode_step(sep, n_dec, dec_ids, dec_tok, ld));
        for (int i = 0; i < n_pre; i++) {
            assert_memory_equal(lm + (size_t)i * V, lp + (size_t)i * V, sizeof(float) * V);
            assert_int_equal(next[i], gp_argmax(lp + (size_t)i * V, V));
            seq[pre[i].seq].fed += pre[i].n;
            seq[pre[i].seq].len += pre[i].n;
        }
        for (int i = 0; i < n_dec; i++) {
            assert_memory_equal(lm + (size_t)(n_pre + i) * V, ld + (size_t)i * V, sizeof(float) * V);
            seq[dec_ids[i]].len++;
        }
        checked_pre += n_pre;
        checked_dec += n_dec;
        shared_rounds += n_pre && n_dec;
    }
    printf("%s: %d prefill chunks and %d decode rows bitwise, %d rounds mixing both\n", gp_dtype_name(act),
           checked_pre, checked_dec, shared_rounds);
    assert_true(checked_pre > 0 && checked_dec > 0 && shared_rounds > 0);
    free(lm), free(lp), free(ld);
    gp_cpu_model_destroy(mixed);
    gp_cpu_model_destroy(sep);
}

static void test_mixed_matches_separate_f32(void **state)
{
    run_schedule(GP_DTYPE_F32, 60);
}

static void test_mixed_matches_separate_bf16(void **state)
{
    run_schedule(GP_DTYPE_BF16, 60);
}

/* The same batch run as stages over two row ranges that split a prefill
 * chunk (attention of the earlier rows first) gives the one forward's logits
 * bitwise, and gp_cpu_step_end gives one row of logits per part. */
static void test_stages_split_a_chunk(void **state)
{
    const int V = g_w.cfg.vocab;
    gp_cpu_model *a = make_model(GP_DTYPE_BF16), *b = make_model(GP_DTYPE_BF16);
    const int32_t p0[3] = {5, 6, 7}, p1[7] = {1, 2, 3, 4, 5, 6, 7}, d2 = 9;
    /* sequence 2 decodes after a prompt */
    GP_CHECK_OK(gp_cpu_prefill(a, 2, 3, p0, NULL));
    GP_CHECK_OK(gp_cpu_prefill(b, 2, 3, p0, NULL));
    gp_batch_part parts[3] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = p0},
                              {.seq = 1, .kind = GP_BATCH_PREFILL, .n = 7, .tokens = p1},
                              {.seq = 2, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &d2}};
    gp_batch batch = {.n_parts = 3, .parts = parts};
    float *la = malloc(sizeof(float) * 3 * V), *lb = malloc(sizeof(float) * 3 * V);
    GP_CHECK_OK(gp_cpu_run_batch(a, &batch, NULL, la));

    gp_cpu_worker *wk;
    GP_CHECK_OK(gp_cpu_worker_create(b, 1, &wk));
    GP_CHECK_OK(gp_cpu_step_begin_batch(b, &batch));
    const int rows = 11, cut = 6; /* rows 0-2 sequence 0, 3-9 sequence 1, 10 sequence 2 */
    gp_tensor_view all;
    GP_CHECK_OK(gp_cpu_resid_view(b, 0, rows, &all));
    for (int l = 0; l < g_w.cfg.n_layers; l++)
        for (int k = 0; k < 2; k++) {
            int b0 = k ? cut : 0, nb = k ? rows - cut : cut;
            gp_stage_io io = {.layer = l, .b0 = b0, .nb = nb, .resid = gp_view_rows(all, b0, nb)};
            GP_CHECK_OK(gp_cpu_stage(b, wk, GP_STAGE_ATTN, &io));
            GP_CHECK_OK(gp_cpu_stage(b, wk, GP_STAGE_FFN, &io));
        }
    GP_CHECK_OK(gp_cpu_step_end(b, wk, &all, lb));
    assert_memory_equal(la, lb, sizeof(float) * 3 * V);
    gp_cpu_worker_destroy(wk);
    free(la), free(lb);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
}

/* Masking applies to a batch of decode parts only: its rows equal a masked
 * decode step; a batch with prefill rows stays dense, decode rows included. */
static void test_sparsity_rule(void **state)
{
    const int V = g_w.cfg.vocab, L = g_w.cfg.n_layers;
    float *t = malloc(sizeof(float) * L * GP_CPU_PROJ_COUNT);
    for (int i = 0; i < L * GP_CPU_PROJ_COUNT; i++)
        t[i] = 0.05f;
    gp_cpu_model *mixed = make_model(GP_DTYPE_F32), *dense = make_model(GP_DTYPE_F32),
                 *masked = make_model(GP_DTYPE_F32);
    gp_cpu_model_set_sparsity(mixed, t);
    gp_cpu_model_set_sparsity(masked, t);
    const int32_t p[4] = {3, 1, 4, 1}, tok[2] = {5, 9};
    const int prompted[4] = {0, 1, 3, 4};
    for (int i = 0; i < 4; i++) {
        GP_CHECK_OK(gp_cpu_prefill(mixed, prompted[i], 4, p, NULL));
        GP_CHECK_OK(gp_cpu_prefill(dense, prompted[i], 4, p, NULL));
        GP_CHECK_OK(gp_cpu_prefill(masked, prompted[i], 4, p, NULL));
    }
    float *lm = malloc(sizeof(float) * 3 * V), *lr = malloc(sizeof(float) * 3 * V);
    /* decode parts only (sequences 0 and 1): masked */
    gp_batch_part parts[3] = {{.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[0]},
                              {.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[1]}};
    gp_batch b = {.n_parts = 2, .parts = parts};
    GP_CHECK_OK(gp_cpu_run_batch(mixed, &b, NULL, lm));
    int ids[2] = {0, 1};
    GP_CHECK_OK(gp_cpu_decode_step(masked, 2, ids, tok, lr));
    assert_memory_equal(lm, lr, sizeof(float) * 2 * V);
    GP_CHECK_OK(gp_cpu_decode_step(dense, 2, ids, tok, lr));
    assert_memory_not_equal(lm, lr, sizeof(float) * 2 * V); /* the thresholds did mask something */
    /* decode rows of sequences 3 and 4 beside a prefill of sequence 2: dense */
    parts[0] = (gp_batch_part){.seq = 2, .kind = GP_BATCH_PREFILL, .n = 4, .tokens = p};
    parts[1] = (gp_batch_part){.seq = 3, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[0]};
    parts[2] = (gp_batch_part){.seq = 4, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[1]};
    b = (gp_batch){.n_parts = 3, .parts = parts};
    GP_CHECK_OK(gp_cpu_run_batch(mixed, &b, NULL, lm));
    ids[0] = 3, ids[1] = 4;
    GP_CHECK_OK(gp_cpu_decode_step(dense, 2, ids, tok, lr));
    assert_memory_equal(lm + V, lr, sizeof(float) * 2 * V);
    free(t), free(lm), free(lr);
    gp_cpu_model_destroy(mixed);
    gp_cpu_model_destroy(dense);
    gp_cpu_model_destroy(masked);
}

/* Each refused batch names what is wrong and changes nothing: the next
 * batch gives what it gives on a model that never saw the refused ones. */
static void test_refused_changes_nothing(void **state)
{
    const int V = g_w.cfg.vocab;
    gp_cpu_model *a = make_model(GP_DTYPE_F32), *b = make_model(GP_DTYPE_F32);
    int32_t p[MAX_CTX] = {1, 2, 3, 4, 5, 6, 7, 8}; /* the rest 0: a part too long to fit reads valid tokens */
    const int32_t bad = V, one = 3;
    GP_CHECK_OK(gp_cpu_prefill(a, 0, 8, p, NULL));
    GP_CHECK_OK(gp_cpu_prefill(b, 0, 8, p, NULL));
    gp_batch_part ok_pre = {.seq = 1, .kind = GP_BATCH_PREFILL, .n = 8, .tokens = p};
    gp_batch_part dec0 = {.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &one};
    struct {
        gp_batch_part parts[3];
        int n;
        gp_status st;
        const char *needle;
    } cases[] = {
        {{ok_pre, {.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &bad}}, 2, GP_ERR_INVALID_ARG,
         "token 256 at position 0 of sequence 0's decode part: allowed [0, 255]"},
        {{dec0, ok_pre}, 2, GP_ERR_INVALID_ARG, "the prefill part of sequence 1 follows a decode part"},
        {{ok_pre, {.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &one}}, 2, GP_ERR_INVALID_ARG,
         "sequence id 1 appears twice"},
        {{ok_pre, {.seq = 0, .kind = GP_BATCH_PREFILL, .n = MAX_CTX - 7, .tokens = p}}, 2, GP_ERR_STATE,
         "41 tokens do not fit sequence 0: it holds 8 tokens and the max context is 48"},
        {{ok_pre, {.seq = 0, .kind = GP_BATCH_DECODE, .n = 2, .tokens = p}}, 2, GP_ERR_INVALID_ARG,
         "decode part of sequence 0 has 2 tokens, allowed 1"},
        {{ok_pre, {.seq = N_SEQS, .kind = GP_BATCH_DECODE, .n = 1, .tokens = p}}, 2, GP_ERR_INVALID_ARG,
         "sequence id 6: allowed [0, 5]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_batch bad_b = {.n_parts = cases[i].n, .parts = cases[i].parts};
        int32_t next[3] = {-1, -1, -1};
        GP_CHECK_FAIL(gp_cpu_run_batch(a, &bad_b, next, NULL), cases[i].st, cases[i].needle);
        assert_int_equal(next[0], -1);
    }
    GP_CHECK_FAIL(gp_cpu_run_batch(a, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "are required");
    GP_CHECK_FAIL(gp_cpu_run_batch(NULL, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "model is NULL");
    gp_batch none = {.n_parts = 0, .parts = &dec0};
    GP_CHECK_FAIL(gp_cpu_run_batch(a, &none, NULL, NULL), GP_ERR_INVALID_ARG, "0 sequences, allowed 1..6");

    gp_batch_part parts[2] = {ok_pre, dec0};
    gp_batch good = {.n_parts = 2, .parts = parts};
    float *la = malloc(sizeof(float) * 2 * V), *lb = malloc(sizeof(float) * 2 * V);
    int32_t na[2], nb[2];
    GP_CHECK_OK(gp_cpu_run_batch(a, &good, na, la));
    GP_CHECK_OK(gp_cpu_run_batch(b, &good, nb, lb));
    assert_memory_equal(la, lb, sizeof(float) * 2 * V);
    assert_memory_equal(na, nb, sizeof na);
    /* next without logits: the greedy tokens of the same rows */
    int32_t nc[2];
    gp_cpu_reset_seq(b, 1);
    gp_cpu_reset_seq(a, 1);
    int32_t again = 4;
    gp_batch_part p2[2] = {ok_pre, {.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &again}};
    good.parts = p2;
    GP_CHECK_OK(gp_cpu_run_batch(a, &good, nc, NULL));
    GP_CHECK_OK(gp_cpu_run_batch(b, &good, nb, lb));
    assert_memory_equal(nc, nb, sizeof nc);
    free(la), free(lb);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_matches_separate_f32),
        cmocka_unit_test(test_mixed_matches_separate_bf16),
        cmocka_unit_test(test_stages_split_a_chunk),
        cmocka_unit_test(test_sparsity_rule),
        cmocka_unit_test(test_refused_changes_nothing),
    };
    return cmocka_run_group_tests_name("CPU reference: mixed batches", tests, setup, teardown);
}
