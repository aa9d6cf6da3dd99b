/* The engine's batched, chunked prefill: against the CPU reference on a
 * variable-length batch (prompts of 1..2100 tokens around block and chunk
 * boundaries, head_dim 128 so the tensor-core attention runs), decode
 * continuing after it, against decode-only prefill, a prompt continued by a
 * second prefill, prompt logits, and bad input refused before anything
 * changes; every test in both engine dtypes (bf16, fp16: the reference then
 * rounds at the engine's points in that dtype). Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_reference.h"
#include "gp_stage.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "engine_tol.h"
#include "gpu_test_util.h"

enum { NS = 6, MAX_CTX = 2304, BLOCK = 16 };
static gp_dtype g_dt = GP_DTYPE_BF16; /* the engine dtype of the pass (main runs both) */
static const int k_lens[NS] = {1, 15, 16, 17, 300, 2100};

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t *prompts[NS];
} fixture;

/* Two layers at head_dim 128 with llama3 RoPE scaling whose regimes all
 * occur below the longest prompt. */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg);
    gp_config *c = &f->cfg;
    c->rope_theta = 500000.0f;
    c->rope_scaling = (gp_rope_scaling){.type = GP_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f,
                                        .high_freq_factor = 4.0f, .original_max_pos = 1024};
    gt_weights_synth(c, 4321, g_dt, &f->w, &f->dw);
    srand(7);
    for (int s = 0; s < NS; s++)
        f->prompts[s] = gt_rand_ids(k_lens[s], c->vocab);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int s = 0; s < NS; s++)
        free(f->prompts[s]);
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f);
    return 0;
}

static gp_engine *engine(fixture *f, int chunk)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NS;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    p.prefill_chunk = chunk;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    return e;
}

static gp_cpu_model *cpu_model(fixture *f)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&f->w, NS, MAX_CTX, BLOCK, &m));
    gp_cpu_model_set_act_dtype(m, g_dt); /* the engine's rounding points, in its dtype */
    return m;
}

static double check_close(const char *what, int s, const float *got, const float *want, int V, double tol)
{
    double err = gp_test_rel_err(got, want, V);
    if (!(err <= tol))
        fail_msg("%s, sequence %d: %.3g off the reference (tolerance %.0e)", what, s, err, tol);
    return err;
}

/* One batched prefill of all prompts (chunks of 512 tokens: chunks hold
 * several prompts and the longest spans five) against the CPU reference,
 * then 4 decode steps of all sequences. */
static void test_batch_vs_cpu(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = engine(f, 512);
    gp_cpu_model *cpu = cpu_model(f);
    gp_prefill_seq ps[NS];
    for (int s = 0; s < NS; s++)
        ps[s] = (gp_prefill_seq){.seq = s, .n = k_lens[s], .tokens = f->prompts[s]};
    float *got = malloc(sizeof(float) * NS * V), *ref = malloc(sizeof(float) * NS * V);
    int32_t next[NS], feed[NS];
    int ids[NS];
    GP_CHECK_OK(gp_engine_prefill_batch(e, NS, ps, next, got, NULL));
    printf("prefill of %d prompts (1..2100 tokens, chunk 512): %.3f ms\n", NS, gp_engine_last_prefill_ms(e));
    double worst = 0;
    for (int s = 0; s < NS; s++) {
        GP_CHECK_OK(gp_cpu_prefill(cpu, s, k_lens[s], f->prompts[s], ref + (size_t)s * V));
        worst = fmax(worst, check_close("prefill logits", s, got + (size_t)s * V, ref + (size_t)s * V, V, PREFILL_TOL));
        assert_int_equal(next[s], gp_argmax(got + (size_t)s * V, V));
        ids[s] = s;
        feed[s] = gp_argmax(ref + (size_t)s * V, V);
    }
    for (int t = 0; t < 4; t++) {
        GP_CHECK_OK(gp_engine_decode_step(e, NS, ids, feed, next, got));
        GP_CHECK_OK(gp_cpu_decode_step(cpu, NS, ids, feed, ref));
        for (int s = 0; s < NS; s++) {
            worst = fmax(worst, check_close("decode after prefill", s, got + (size_t)s * V, ref + (size_t)s * V, V,
                                            PREFILL_TOL));
            feed[s] = gp_argmax(ref + (size_t)s * V, V);
        }
    }
    printf("%s engine prefill + 4 decode steps vs CPU reference (%s activations): worst %.3g (tol %.0e)\n",
           gp_dtype_flag_name(g_dt), gp_dtype_flag_name(g_dt), worst, PREFILL_TOL);
    gp_cpu_model_destroy(cpu);
    gp_engine_destroy(e);
    free(got);
    free(ref);
}

/* Prefill in chunks of 64 and decode 8 greedy steps: the same tokens as
 * prefilling the prompts token by token through decode steps. */
static void test_vs_decode_only(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *a = engine(f, 64), *b = engine(f, 64);
    enum { STEPS = 8 };
    int32_t ta[NS], tb[NS];
    int ids[NS];
    float *la = malloc(sizeof(float) * NS * V), *lb = malloc(sizeof(float) * NS * V);
    gp_prefill_seq ps[NS];
    for (int s = 0; s < NS; s++) {
        ps[s] = (gp_prefill_seq){.seq = s, .n = k_lens[s], .tokens = f->prompts[s]};
        ids[s] = s;
        for (int i = 0; i < k_lens[s]; i++)
            GP_CHECK_OK(gp_engine_decode_step(b, 1, &s, &f->prompts[s][i], &tb[s], lb + (size_t)s * V));
    }
    GP_CHECK_OK(gp_engine_prefill_batch(a, NS, ps, ta, la, NULL));
    double worst = 0;
    for (int t = 0; t <= STEPS; t++) {
        for (int s = 0; s < NS; s++) {
            worst = fmax(worst, check_close("chunked prefill vs decode-only", s, la + (size_t)s * V,
                                            lb + (size_t)s * V, V, PREFILL_TOL));
            if (ta[s] != tb[s])
                fail_msg("step %d, sequence %d: token %d after prefill, %d after decode-only prefill", t, s, ta[s],
                         tb[s]);
        }
        if (t < STEPS) {
            int32_t fa[NS], fb[NS];
            memcpy(fa, ta, sizeof fa);
            memcpy(fb, tb, sizeof fb);
            GP_CHECK_OK(gp_engine_decode_step(a, NS, ids, fa, ta, la));
            GP_CHECK_OK(gp_engine_decode_step(b, NS, ids, fb, tb, lb));
        }
    }
    printf("chunked prefill (64) vs decode-only prefill: same tokens over %d steps, logits worst %.3g\n", STEPS,
           worst);
    gp_engine_destroy(a);
    gp_engine_destroy(b);
    free(la);
    free(lb);
}

/* A prompt continued by a second prefill equals one prefill of the whole;
 * prompt logits at every position equal decode steps' logits, and their
 * last row the last logits. */
static void test_continue_and_prompt_logits(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab, n = 300, cut = 123;
    const int32_t *p = f->prompts[4];
    gp_engine *e = engine(f, 100);
    float *whole = malloc(sizeof(float) * V), *cont = malloc(sizeof(float) * V);
    float *pl = malloc(sizeof(float) * (size_t)n * V), *ref = malloc(sizeof(float) * (size_t)n * V);
    gp_prefill_seq one = {.seq = 0, .n = n, .tokens = p};
    GP_CHECK_OK(gp_engine_prefill_batch(e, 1, &one, NULL, whole, pl));
    gp_prefill_seq first = {.seq = 1, .n = cut, .tokens = p}, rest = {.seq = 1, .n = n - cut, .tokens = p + cut};
    GP_CHECK_OK(gp_engine_prefill_batch(e, 1, &first, NULL, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefill_batch(e, 1, &rest, NULL, cont, NULL));
    double w1 = check_close("continued prefill vs whole", 1, cont, whole, V, PREFILL_TOL);
    double w2 = check_close("last prompt-logits row vs last logits", 0, pl + (size_t)(n - 1) * V, whole, V, 1e-5);
    gp_cpu_model *cpu = cpu_model(f);
    double w3 = 0;
    for (int t = 0; t < n; t++) {
        int s = 0;
        GP_CHECK_OK(gp_cpu_decode_step(cpu, 1, &s, &p[t], ref + (size_t)t * V));
        w3 = fmax(w3, check_close("prompt logits vs CPU steps", t, pl + (size_t)t * V, ref + (size_t)t * V, V,
                                  PREFILL_TOL));
    }
    printf("continued vs whole %.3g; last prompt row vs last logits %.3g; prompt logits vs CPU worst %.3g\n", w1, w2,
           w3);
    gp_cpu_model_destroy(cpu);
    gp_engine_destroy(e);
    free(whole);
    free(cont);
    free(pl);
    free(ref);
}

/* Bad calls fail before any state changes: a valid prefill afterwards gives
 * the logits a fresh engine gives. */
static void test_errors(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = engine(f, 256), *fresh = engine(f, 256);
    int32_t bad[3] = {1, (int32_t)V, 2};
    gp_prefill_seq two[2] = {{.seq = 0, .n = 15, .tokens = f->prompts[1]}, {.seq = 0, .n = 16, .tokens = f->prompts[2]}};
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 2, two, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "appears twice");
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 0, two, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "0 prompts");
    gp_prefill_seq p = {.seq = 0, .n = 0, .tokens = bad};
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 1, &p, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "has 0 tokens");
    p.n = 3;
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 1, &p, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "token 512");
    p.seq = NS;
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 1, &p, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "sequence id 6");
    two[1] = (gp_prefill_seq){.seq = 1, .n = 2100, .tokens = f->prompts[5]};
    gp_prefill_seq pre = {.seq = 1, .n = 300, .tokens = f->prompts[4]};
    GP_CHECK_OK(gp_engine_prefill_batch(e, 1, &pre, NULL, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefill_batch(fresh, 1, &pre, NULL, NULL, NULL));
    GP_CHECK_FAIL(gp_engine_prefill_batch(e, 2, two, NULL, NULL, NULL), GP_ERR_STATE, "fit sequence 1");
    float *a = malloc(sizeof(float) * 2 * V), *b = malloc(sizeof(float) * 2 * V);
    two[1].n = 1000;
    GP_CHECK_OK(gp_engine_prefill_batch(e, 2, two, NULL, a, NULL));
    GP_CHECK_OK(gp_engine_prefill_batch(fresh, 2, two, NULL, b, NULL));
    assert_memory_equal(a, b, sizeof(float) * 2 * V);
    gp_engine_destroy(e);
    gp_engine_destroy(fresh);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_vs_cpu),
        cmocka_unit_test(test_vs_decode_only),
        cmocka_unit_test(test_continue_and_prompt_logits),
        cmocka_unit_test(test_errors),
    };
    return GT_ENGINE_MAIN("engine_prefill", tests, setup, teardown, &g_dt);
}
