/* Tests of the host sampler: generator streams, temperature 0 and near 0
 * against argmax, exact top-k, top-p and min-p sets (ties included), sampled
 * frequencies against the softmax with fixed seeds, and the repeat penalty. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_tools.h"

static gp_sample_params params(double t, int k, double p)
{
    return (gp_sample_params){.temperature = t, .top_k = k, .top_p = p};
}

static void test_rng_streams(void **state)
{
    (void)state;
    gp_rng a, b, c, d;
    gp_rng_seed(&a, 42, 0);
    gp_rng_seed(&b, 42, 0);
    gp_rng_seed(&c, 42, 1);
    gp_rng_seed(&d, 43, 0);
    int same_c = 0, same_d = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = gp_rng_next(&a);
        assert_true(x == gp_rng_next(&b));
        same_c += x == gp_rng_next(&c);
        same_d += x == gp_rng_next(&d);
    }
    assert_int_equal(same_c, 0);
    assert_int_equal(same_d, 0);
    /* (seed, stream) pairs do not collapse into their sum */
    gp_rng_seed(&a, 1, 0);
    gp_rng_seed(&b, 0, 1);
    assert_true(gp_rng_next(&a) != gp_rng_next(&b));
    double lo = 1, hi = 0, mean = 0;
    for (int i = 0; i < 100000; i++) {
        double u = gp_rng_uniform(&a);
        assert_true(u >= 0.0 && u < 1.0);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        mean += u / 100000;
    }
    assert_true(lo < 1e-3 && hi > 1 - 1e-3 && fabs(mean - 0.5) < 0.01);
}

static void test_greedy_and_cold(void **state)
{
    (void)state;
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, 6), GP_OK);
    const float lg[6] = {0.5f, 2.0f, -1.0f, 3.0f, 2.999f, NAN};
    gp_sample_params g = params(0, 0, 1);
    assert_int_equal(gp_sample(&s, &g, lg, NULL), 3);
    gp_rng r;
    gp_rng_seed(&r, 7, 0);
    gp_sample_params cold = params(1e-6, 0, 1);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(gp_sample(&s, &cold, lg, &r), 3);
    /* ties: greedy takes the lower id; near 0 the tied ids share the draws */
    const float tie[6] = {1.0f, 4.0f, 0.0f, 4.0f, -2.0f, 3.0f};
    assert_int_equal(gp_sample(&s, &g, tie, NULL), 1);
    int n1 = 0, n3 = 0;
    for (int i = 0; i < 10000; i++) {
        int32_t t = gp_sample(&s, &cold, tie, &r);
        assert_true(t == 1 || t == 3);
        n1 += t == 1;
        n3 += t == 3;
    }
    assert_true(abs(n1 - n3) < 400);
    /* top-k 1 of a tie keeps the lower id: greedy's choice */
    gp_sample_params k1 = params(1.0, 1, 1);
    for (int i = 0; i < 100; i++)
        assert_int_equal(gp_sample(&s, &k1, tie, &r), 1);
    gp_sampler_free(&s);
}

/* The k largest by the rank order (logit descending, id ascending), by brute force. */
static int rank_cmp(const void *a, const void *b, const float *lg)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (lg[x] != lg[y])
        return lg[x] > lg[y] ? -1 : 1;
    return x < y ? -1 : 1;
}
static const float *g_lg;
static int rank_cmp_g(const void *a, const void *b) { return rank_cmp(a, b, g_lg); }

static void test_top_k_exact(void **state)
{
    (void)state;
    enum { V = 5000 };
    float *lg = malloc(V * sizeof *lg);
    int32_t *order = malloc(V * sizeof *order);
    gp_rng r;
    gp_rng_seed(&r, 1, 0);
    for (int i = 0; i < V; i++) {
        lg[i] = (float)(int)(gp_rng_uniform(&r) * 200) / 10.0f; /* many ties */
        order[i] = i;
    }
    g_lg = lg;
    qsort(order, V, sizeof *order, rank_cmp_g);
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, V), GP_OK);
    const int ks[] = {1, 2, 7, 50, 999, V - 1, V};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
        gp_sample_params p = params(0.7, ks[j], 1);
        int n = gp_sample_candidates(&s, &p, lg);
        assert_int_equal(n, ks[j]);
        if (ks[j] < V) { /* truncated: in rank order */
            for (int i = 0; i < n; i++)
                assert_int_equal(s.idx[i], order[i]);
        }
        double sum = 0, z = 0;
        for (int i = 0; i < n; i++)
            z += exp((lg[order[i]] - lg[order[0]]) / 0.7);
        for (int i = 0; i < n; i++) {
            int32_t id = s.idx[i];
            assert_true(fabs(s.prob[i] - exp((lg[id] - lg[order[0]]) / 0.7) / z) < 1e-12);
            sum += s.prob[i];
        }
        assert_true(fabs(sum - 1.0) < 1e-9);
        for (int i = 0; i < 200; i++) { /* draws stay inside the k */
            int32_t t = gp_sample(&s, &p, lg, &r);
            int pos = 0;
            while (order[pos] != t)
                pos++;
            assert_true(pos < ks[j]);
        }
    }
    gp_sampler_free(&s);
    free(lg);
    free(order);
}

static void test_top_p_exact(void **state)
{
    (void)state;
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, 5), GP_OK);
    /* probabilities 0.5, 0.3, 0.15, 0.05, 0 (ids shuffled) at temperature 1 */
    const float lg[5] = {(float)log(0.15), (float)log(0.5), -INFINITY, (float)log(0.05), (float)log(0.3)};
    struct { double p; int n; int32_t ids[4]; } cases[] = {
        {0.4, 1, {1}}, {0.75, 2, {1, 4}}, {0.85, 3, {1, 4, 0}}, {0.99, 4, {1, 4, 0, 3}}, {1.0, 5, {0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_sample_params p = params(1.0, 0, cases[c].p);
        int n = gp_sample_candidates(&s, &p, lg);
        assert_int_equal(n, cases[c].n);
        if (cases[c].p < 1.0)
            for (int i = 0; i < n; i++)
                assert_int_equal(s.idx[i], cases[c].ids[i]);
    }
    /* top-k first, then the nucleus of the renormalised k: 0.5 / 0.8 >= 0.6 */
    gp_sample_params kp = params(1.0, 2, 0.6);
    assert_int_equal(gp_sample_candidates(&s, &kp, lg), 1);
    kp.top_p = 0.7;
    assert_int_equal(gp_sample_candidates(&s, &kp, lg), 2);
    gp_sampler_free(&s);
}

/* The pruned nucleus search of a large vocabulary against a full sort. */
static void test_top_p_large(void **state)
{
    (void)state;
    enum { V = 40000 };
    float *lg = malloc(V * sizeof *lg);
    int32_t *order = malloc(V * sizeof *order);
    gp_rng r;
    gp_rng_seed(&r, 3, 0);
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, V), GP_OK);
    const double temps[] = {0.3, 1.0, 5.0, 100.0}, ps[] = {0.1, 0.5, 0.9, 0.999};
    for (int ti = 0; ti < 4; ti++)
        for (int pi = 0; pi < 4; pi++) {
            for (int i = 0; i < V; i++) {
                lg[i] = (float)(gp_rng_uniform(&r) * 20.0 - 10.0);
                order[i] = i;
            }
            g_lg = lg;
            qsort(order, V, sizeof *order, rank_cmp_g);
            double z = 0, cum = 0;
            for (int i = 0; i < V; i++)
                z += exp((lg[order[i]] - lg[order[0]]) / temps[ti]);
            int want = 0;
            while (want < V) {
                cum += exp((lg[order[want++]] - lg[order[0]]) / temps[ti]);
                if (cum >= ps[pi] * z)
                    break;
            }
            gp_sample_params p = params(temps[ti], 0, ps[pi]);
            int n = gp_sample_candidates(&s, &p, lg);
            assert_int_equal(n, want);
            for (int i = 0; i < n; i++)
                assert_int_equal(s.idx[i], order[i]);
        }
    gp_sampler_free(&s);
    free(lg);
    free(order);
}

/* Frequencies of 200000 draws against the tempered softmax. */
static void test_distribution(void **state)
{
    (void)state;
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, 4), GP_OK);
    const float lg[4] = {(float)log(0.2), (float)log(0.5), (float)log(0.3), -INFINITY};
    const double temps[] = {1.0, 2.0, 0.5};
    for (int ti = 0; ti < 3; ti++) {
        double w[4] = {0}, z = 0;
        for (int i = 0; i < 3; i++)
            z += w[i] = pow(exp(lg[i]), 1.0 / temps[ti]);
        gp_rng r;
        gp_rng_seed(&r, 1234, (uint64_t)ti);
        int count[4] = {0};
        gp_sample_params p = params(temps[ti], 0, 1);
        for (int i = 0; i < 200000; i++)
            count[gp_sample(&s, &p, lg, &r)]++;
        assert_int_equal(count[3], 0);
        for (int i = 0; i < 3; i++)
            assert_true(fabs(count[i] / 200000.0 - w[i] / z) < 0.005);
    }
    /* the same seed repeats the same tokens */
    gp_rng a, b;
    gp_rng_seed(&a, 99, 2);
    gp_rng_seed(&b, 99, 2);
    gp_sample_params p = params(1.0, 0, 1);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(gp_sample(&s, &p, lg, &a), gp_sample(&s, &p, lg, &b));
    /* all weightless: id 0, as argmax of all -inf */
    const float dead[4] = {-INFINITY, NAN, -INFINITY, -INFINITY};
    assert_int_equal(gp_sample(&s, &p, dead, &a), 0);
    gp_sampler_free(&s);
}

static void test_params_check(void **state)
{
    (void)state;
    gp_sample_params ok = params(0.7, 40, 0.9);
    assert_int_equal(gp_sample_params_check(&ok, 100), GP_OK);
    struct { gp_sample_params p; const char *needle; } bad[] = {
        {params(-0.1, 0, 1), "--temperature -0.1 is out of range; allowed: [0, 100]"},
        {params(101, 0, 1), "--temperature 101"},
        {params(1, -1, 1), "--top-k -1 is out of range; allowed: [0, 100]"},
        {params(1, 101, 1), "--top-k 101"},
        {params(1, 0, 0), "--top-p 0 is out of range; allowed: (0, 1]"},
        {params(1, 0, 1.5), "--top-p 1.5"},
        {{.temperature = 1, .top_p = 1, .min_p = -0.1}, "--min-p -0.1 is out of range; allowed: [0, 1] (0: off)"},
        {{.temperature = 1, .top_p = 1, .min_p = 1.5}, "--min-p 1.5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(gp_sample_params_check(&bad[i].p, 100), GP_ERR_INVALID_ARG);
        if (!strstr(gp_last_error(), bad[i].needle))
            fail_msg("message '%s' does not mention '%s'", gp_last_error(), bad[i].needle);
    }
}

/* min-p keeps exactly the tokens whose tempered probability is at least
 * min_p times the top one's, after top-k and top-p, and renormalises. */
static void test_min_p_exact(void **state)
{
    (void)state;
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, 6), GP_OK);
    /* probabilities relative to the top (id 2): 1, 0.5, 0.25, 0.1, 0.05, tie at 0.5 */
    const float lg[6] = {(float)log(0.5), (float)log(0.25), 0.0f, (float)log(0.1), (float)log(0.05),
                         (float)log(0.5)};
    struct { double t, min_p; int k; double top_p; int n; int32_t ids[6]; } cases[] = {
        {1.0, 0.0, 0, 1.0, 6, {0, 1, 2, 3, 4, 5}},  /* off: all, in id order */
        {1.0, 0.49, 0, 1.0, 3, {0, 2, 5}},          /* the tie at 0.5 stays together */
        {1.0, 0.26, 0, 1.0, 3, {0, 2, 5}},
        {1.0, 0.2, 0, 1.0, 4, {0, 1, 2, 5}},
        {1.0, 1.0, 0, 1.0, 1, {2}},                 /* only the top */
        {2.0, 0.45, 0, 1.0, 4, {0, 1, 2, 5}},       /* at T=2 id 1 weighs sqrt(0.25) = 0.5 */
        {1.0, 0.2, 2, 1.0, 2, {2, 0}},              /* after top-k: rank order */
        {1.0, 0.0001, 3, 1.0, 3, {2, 0, 5}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_sample_params p = params(cases[c].t, cases[c].k, cases[c].top_p);
        p.min_p = cases[c].min_p;
        int n = gp_sample_candidates(&s, &p, lg);
        assert_int_equal(n, cases[c].n);
        double sum = 0, top = 0;
        for (int i = 0; i < n; i++) {
            assert_int_equal(s.idx[i], cases[c].ids[i]);
            sum += s.prob[i];
            if (s.idx[i] == 2)
                top = s.prob[i];
        }
        assert_true(fabs(sum - 1.0) < 1e-9);
        for (int i = 0; i < n; i++)
            assert_true(s.prob[i] >= cases[c].min_p * top * (1 - 1e-9));
    }
    /* draws stay inside the kept set */
    gp_rng r;
    gp_rng_seed(&r, 5, 0);
    gp_sample_params p = params(1.0, 0, 1.0);
    p.min_p = 0.3;
    for (int i = 0; i < 2000; i++) {
        int32_t t = gp_sample(&s, &p, lg, &r);
        assert_true(t == 0 || t == 2 || t == 5);
    }
    gp_sampler_free(&s);
}

/* llama.cpp's repeat penalty: distinct tokens of the last N divide a positive
 * logit and multiply a negative one by R, once each; N -1 the whole context,
 * 0 nothing; R 1 nothing; greedy then chooses among the penalised logits. */
static void test_repeat_penalty(void **state)
{
    (void)state;
    gp_sampler s;
    assert_int_equal(gp_sampler_init(&s, 6), GP_OK);
    const float base[6] = {2.0f, -1.0f, 0.0f, 4.0f, 1.0f, -3.0f};
    const int32_t ctx[] = {3, 0, 1, 3, 3, 1, 9, -1}; /* 9 and -1 lie outside the vocabulary: ignored */
    float lg[6];
    gp_repeat_params r = {.penalty = 2.0, .last_n = -1};
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, ctx, 8);
    const float all[6] = {1.0f, -2.0f, 0.0f, 2.0f, 1.0f, -3.0f}; /* 3 once, however often it repeats */
    for (int i = 0; i < 6; i++)
        assert_true(lg[i] == all[i]);
    /* the last 5: 3, 3, 1 and the ignored ids; 0 is older */
    r.last_n = 5;
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, ctx, 8);
    const float last[6] = {2.0f, -2.0f, 0.0f, 2.0f, 1.0f, -3.0f};
    for (int i = 0; i < 6; i++)
        assert_true(lg[i] == last[i]);
    /* a window longer than the context: all of it */
    r.last_n = 64;
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, ctx, 8);
    for (int i = 0; i < 6; i++)
        assert_true(lg[i] == all[i]);
    /* the marks are cleared: a second call sees its own context only */
    const int32_t four[] = {4};
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, four, 1);
    for (int i = 0; i < 6; i++)
        assert_true(lg[i] == (i == 4 ? 0.5f : base[i]));
    /* off: last_n 0 or penalty 1 */
    gp_repeat_params off[] = {{.penalty = 2.0, .last_n = 0}, {.penalty = 1.0, .last_n = -1}};
    for (int k = 0; k < 2; k++) {
        assert_false(gp_repeat_on(&off[k]));
        memcpy(lg, base, sizeof lg);
        gp_repeat_penalize(&s, &off[k], lg, ctx, 8);
        assert_memory_equal(lg, base, sizeof lg);
    }
    /* greedy after the penalty: 3 (4.0) falls to 2.0 below 0 (2.0 stays,
     * lower id wins the tie); a penalty below 1 favours repeats */
    r = (gp_repeat_params){.penalty = 2.0, .last_n = 1};
    const int32_t three[] = {3};
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, three, 1);
    gp_sample_params g = params(0, 0, 1);
    assert_int_equal(gp_sample(&s, &g, lg, NULL), 0);
    r.penalty = 0.1;
    const int32_t five[] = {5};
    memcpy(lg, base, sizeof lg);
    gp_repeat_penalize(&s, &r, lg, five, 1);
    assert_true(fabsf(lg[5] + 0.3f) < 1e-6f);
    /* defaults and checks */
    gp_repeat_params d = gp_repeat_default_params();
    assert_true(d.penalty == 1.0 && d.last_n == GP_REPEAT_DEFAULT_LAST_N && !gp_repeat_on(&d));
    assert_int_equal(gp_repeat_params_check(&d), GP_OK);
    struct { gp_repeat_params r; const char *needle; } bad[] = {
        {{.penalty = 0.0, .last_n = 64}, "--repeat-penalty 0 is out of range; allowed: (0, 100] (1: off)"},
        {{.penalty = 101, .last_n = 64}, "--repeat-penalty 101"},
        {{.penalty = 1.1, .last_n = -2}, "--repeat-last-n -2 is out of range; allowed: -1 (the whole context)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(gp_repeat_params_check(&bad[i].r), GP_ERR_INVALID_ARG);
        if (!strstr(gp_last_error(), bad[i].needle))
            fail_msg("message '%s' does not mention '%s'", gp_last_error(), bad[i].needle);
    }
    gp_sampler_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_streams),   cmocka_unit_test(test_greedy_and_cold),
        cmocka_unit_test(test_top_k_exact),   cmocka_unit_test(test_top_p_exact),
        cmocka_unit_test(test_top_p_large),   cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_params_check),  cmocka_unit_test(test_min_p_exact),
        cmocka_unit_test(test_repeat_penalty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
