/* The prefill/decode latency model and planner without a GPU: the fit on a
 * profile made from known coefficients, the profile file and its refusals,
 * and the planner's rule (partition, target, mixed batches, hysteresis). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_pipeline.h"

#define HAS(text, part)                                                                                            \
    do {                                                                                                           \
        if (!strstr((text), (part)))                                                                               \
            fail_msg("\"%s\" does not mention \"%s\"", (text), (part));                                            \
    } while (0)

/* ------------------------------------------------------------ the synthetic device */

/* Three pairs of a 132-SM device. Step times follow lines whose
 * coefficients shrink with the partition's SMs, a step beside the other
 * partition's work is slower by a constant factor, and prefill has a large
 * constant (the weights read once per batch): the planner tests below rely
 * on these numbers, each worked out where it is used. */
#define N_SPLITS 3
#define TOTAL_SMS 132
static const int decode_sms[N_SPLITS] = {20, 44, 66};
static const int prefill_sms[N_SPLITS] = {112, 88, 66};

/* The true coefficients of a set, in the model's order (constant, rows,
 * context, tokens with the kind's inputs only). */
static int truth(gp_pd_kind kind, int split, bool corun, double *c)
{
    int d = split == GP_PD_WHOLE ? TOTAL_SMS : decode_sms[split];
    int p = split == GP_PD_WHOLE ? TOTAL_SMS : prefill_sms[split];
    switch (kind) {
    case GP_PD_DECODE: {
        double k = corun ? 1.15 : 1.0;
        c[0] = k * (2.0 + 60.0 / d), c[1] = k * 4.0 / d, c[2] = k * 0.009 / d;
        return 3;
    }
    case GP_PD_PREFILL: {
        double k = corun ? 1.1 : 1.0;
        c[0] = k * (8.0 + 100.0 / p), c[1] = k * 2.6 / p;
        return 2;
    }
    default:
        c[0] = 6.0, c[1] = 4.0 / TOTAL_SMS, c[2] = 0.009 / TOTAL_SMS, c[3] = 0.03;
        return 4;
    }
}

static double truth_ms(gp_pd_kind kind, int split, bool corun, int rows, long long context, int tokens)
{
    double c[4];
    truth(kind, split, corun, c);
    switch (kind) {
    case GP_PD_DECODE: return c[0] + c[1] * rows + c[2] * (double)context;
    case GP_PD_PREFILL: return c[0] + c[1] * tokens;
    default: return c[0] + c[1] * rows + c[2] * (double)context + c[3] * tokens;
    }
}

static const int prof_rows[] = {1, 16, 64}, prof_per_row[] = {512, 2048}, prof_tokens[] = {128, 512, 2048};
static const int prof_mixed_tokens[] = {32, 256, 1024};

/* Adds the set's grid of points; noise is the relative amplitude of a
 * seeded uniform error on each time. */
static void add_set(gp_pd_profile *p, gp_pd_kind kind, int split, bool corun, double noise, uint64_t *rng)
{
    for (int r = 0; r < (kind == GP_PD_PREFILL ? 1 : 3); r++)
        for (int x = 0; x < (kind == GP_PD_PREFILL ? 1 : 2); x++)
            for (int t = 0; t < (kind == GP_PD_DECODE ? 1 : 3); t++) {
                gp_pd_sample s = {.kind = kind, .split = split, .corun = corun};
                if (kind != GP_PD_PREFILL) {
                    s.rows = prof_rows[r];
                    s.context = (long long)prof_rows[r] * prof_per_row[x];
                }
                if (kind != GP_PD_DECODE)
                    s.tokens = kind == GP_PD_PREFILL ? prof_tokens[t] : prof_mixed_tokens[t];
                double ms = truth_ms(kind, split, corun, s.rows, s.context, s.tokens);
                s.ms = (float)(ms * (1.0 + noise * (2.0 * gp_test_uniform(rng) - 1.0)));
                GP_CHECK_OK(gp_pd_profile_add(p, &s));
            }
}

/* Every set the fit needs, except the one (kind, split, corun) named by
 * skip (skip_kind -1: none). */
static void make_profile(gp_pd_profile *p, double noise, int skip_kind, int skip_split, bool skip_corun)
{
    uint64_t rng = 42;
    *p = (gp_pd_profile){.n_splits = N_SPLITS};
    snprintf(p->device, sizeof p->device, "synthetic 132-SM device");
    snprintf(p->model, sizeof p->model, "test-model bf16");
    for (int s = 0; s < N_SPLITS; s++) {
        p->decode_sms[s] = decode_sms[s];
        p->prefill_sms[s] = prefill_sms[s];
    }
    for (int s = GP_PD_WHOLE; s < N_SPLITS; s++)
        for (int k = 0; k < 3; k++)
            for (int c = 0; c < 2; c++) {
                bool held = s == GP_PD_WHOLE ? !c : k != GP_PD_MIXED;
                bool skipped = k == skip_kind && s == skip_split && c == skip_corun;
                if (held && !skipped)
                    add_set(p, (gp_pd_kind)k, s, c, noise, &rng);
            }
}

static gp_pd_model *fit(double noise)
{
    gp_pd_profile p;
    gp_pd_model *m = NULL;
    make_profile(&p, noise, -1, 0, false);
    GP_CHECK_OK(gp_pd_model_fit(&p, &m));
    gp_pd_profile_free(&p);
    return m;
}

/* ------------------------------------------------------------ fit */

static double pred(const gp_pd_model *m, gp_pd_kind k, int s, bool c, int rows, long long ctx, int tokens)
{
    float ms = gp_pd_model_predict(m, k, s, c, rows, ctx, tokens);
    assert_true(ms > 0);
    return ms;
}

/* A set's coefficients read back from predictions at points above every
 * sample's floor (the line is what the model holds; the clamp acts below
 * the smallest sample only). */
static int recovered(const gp_pd_model *m, gp_pd_kind k, int s, bool c, double *co)
{
    switch (k) {
    case GP_PD_DECODE:
        co[1] = (pred(m, k, s, c, 64, 65536, 0) - pred(m, k, s, c, 16, 65536, 0)) / 48.0;
        co[2] = (pred(m, k, s, c, 32, 131072, 0) - pred(m, k, s, c, 32, 32768, 0)) / 98304.0;
        co[0] = pred(m, k, s, c, 32, 65536, 0) - 32 * co[1] - 65536 * co[2];
        return 3;
    case GP_PD_PREFILL:
        co[1] = (pred(m, k, s, c, 0, 0, 2048) - pred(m, k, s, c, 0, 0, 512)) / 1536.0;
        co[0] = pred(m, k, s, c, 0, 0, 1024) - 1024 * co[1];
        return 2;
    default:
        co[1] = (pred(m, k, s, c, 64, 65536, 512) - pred(m, k, s, c, 16, 65536, 512)) / 48.0;
        co[2] = (pred(m, k, s, c, 32, 131072, 512) - pred(m, k, s, c, 32, 32768, 512)) / 98304.0;
        co[3] = (pred(m, k, s, c, 32, 65536, 1024) - pred(m, k, s, c, 32, 65536, 256)) / 768.0;
        co[0] = pred(m, k, s, c, 32, 65536, 512) - 32 * co[1] - 65536 * co[2] - 512 * co[3];
        return 4;
    }
}

/* Every set's coefficients near the truth, each judged by its term at the
 * largest input sampled (a slope of a small term is loosely pinned and
 * matters as little): within tol_ms; and its fit_error under max_err. */
static void check_recovery(const gp_pd_model *m, double tol_ms, double max_err)
{
    static const double range[3][4] = {{1, 64, 131072}, {1, 2048}, {1, 64, 131072, 1024}};
    for (int s = GP_PD_WHOLE; s < N_SPLITS; s++)
        for (int k = 0; k < 3; k++)
            for (int c = 0; c < 2; c++) {
                if (s == GP_PD_WHOLE ? c : k == GP_PD_MIXED)
                    continue;
                double want[4], got[4];
                int n = truth((gp_pd_kind)k, s, c, want);
                recovered(m, (gp_pd_kind)k, s, c, got);
                for (int j = 0; j < n; j++)
                    if (fabs(got[j] - want[j]) * range[k][j] > tol_ms)
                        fail_msg("%s split %d corun %d: coefficient %d is %g, truth %g", gp_pd_kind_name(k), s, c, j,
                                 got[j], want[j]);
                float e = gp_pd_model_fit_error(m, (gp_pd_kind)k, s, c);
                if (!(e >= 0 && e <= max_err))
                    fail_msg("%s split %d corun %d: fit error %g, allowed %g", gp_pd_kind_name(k), s, c, e, max_err);
            }
}

static void test_fit_exact(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    /* float times: 1e-3 ms on steps of up to 100 ms, well above the
     * samples' float rounding */
    check_recovery(m, 1e-3, 1e-5f);
    gp_pd_model_destroy(m);
}

static void test_fit_noisy(void **state)
{
    (void)state;
    /* +-0.5% on every time, +-0.5 ms on the longest steps (100 ms): each
     * term within 1 ms (three prompt sizes pin prefill's three
     * coefficients, so their noise is not averaged away), no sample more
     * than 1% off its line */
    gp_pd_model *m = fit(0.005);
    check_recovery(m, 1.0, 0.01f);
    gp_pd_model_destroy(m);
}

static void test_predict(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    /* below the samples, the line gives way to the smallest sample */
    float floor_ms = gp_pd_model_predict(m, GP_PD_PREFILL, 0, false, 0, 0, 0);
    assert_true(fabs(floor_ms - truth_ms(GP_PD_PREFILL, 0, false, 0, 0, 128)) < 1e-4);
    /* sets the model does not hold */
    assert_true(gp_pd_model_predict(m, GP_PD_DECODE, GP_PD_WHOLE, true, 1, 512, 0) == -1.0f);
    assert_true(gp_pd_model_predict(m, GP_PD_DECODE, N_SPLITS, false, 1, 512, 0) == -1.0f);
    assert_true(gp_pd_model_predict(m, GP_PD_DECODE, -2, false, 1, 512, 0) == -1.0f);
    assert_true(gp_pd_model_predict(m, GP_PD_MIXED, 0, false, 1, 512, 64) == -1.0f);
    assert_true(gp_pd_model_predict(m, (gp_pd_kind)7, 0, false, 1, 512, 64) == -1.0f);
    assert_true(gp_pd_model_predict(m, GP_PD_DECODE, 0, false, -1, 512, 0) == -1.0f);
    assert_true(gp_pd_model_predict(NULL, GP_PD_DECODE, 0, false, 1, 512, 0) == -1.0f);
    assert_true(gp_pd_model_fit_error(m, GP_PD_PREFILL, GP_PD_WHOLE, true) == -1.0f);
    /* the model keeps its own copy of the profile */
    const gp_pd_profile *p = gp_pd_model_profile(m);
    assert_int_equal(p->n_splits, N_SPLITS);
    assert_int_equal(p->decode_sms[2], 66);
    assert_string_equal(p->model, "test-model bf16");
    gp_pd_model_destroy(m);
}

static void fit_fails(gp_pd_profile *p, const char *needle)
{
    gp_pd_model *m = (gp_pd_model *)p; /* must come back NULL */
    GP_CHECK_FAIL(gp_pd_model_fit(p, &m), GP_ERR_INVALID_ARG, needle);
    assert_null(m);
    gp_pd_profile_free(p);
}

static void test_fit_refusals(void **state)
{
    (void)state;
    gp_pd_profile p;
    make_profile(&p, 0.0, GP_PD_PREFILL, 1, true);
    fit_fails(&p, "split 1 (44:88): prefill beside decode: 0 distinct points; 3 needed");
    make_profile(&p, 0.0, GP_PD_MIXED, GP_PD_WHOLE, false);
    fit_fails(&p, "every SM: mixed: 0 distinct points; 5 needed");
    /* one point measured twice is still one point */
    make_profile(&p, 0.0, GP_PD_PREFILL, 2, false);
    for (int i = 0; i < 2; i++)
        GP_CHECK_OK(gp_pd_profile_add(&p, &(gp_pd_sample){.kind = GP_PD_PREFILL, .split = 2, .tokens = 512,
                                                          .ms = 20.0f + (float)i}));
    fit_fails(&p, "split 2 (66:66): prefill alone: 1 distinct point; 3 needed");
    /* distinct, but context always 512 per row: rows and context cannot be told apart */
    make_profile(&p, 0.0, GP_PD_DECODE, 0, false);
    for (int r = 0; r < 3; r++)
        GP_CHECK_OK(gp_pd_profile_add(&p, &(gp_pd_sample){.kind = GP_PD_DECODE, .split = 0, .rows = prof_rows[r],
                                                          .context = 512LL * prof_rows[r],
                                                          .ms = 5.0f + (float)r}));
    fit_fails(&p, "split 0 (20:112): decode alone: 3 distinct points do not determine 3 coefficients");
    /* a profile made by hand is checked like a loaded one */
    make_profile(&p, 0.0, -1, 0, false);
    p.samples[3].ms = -1.0f;
    fit_fails(&p, "samples[3].ms");
    make_profile(&p, 0.0, -1, 0, false);
    p.prefill_sms[1] = 0;
    fit_fails(&p, "splits[1]");
    GP_CHECK_FAIL(gp_pd_model_fit(NULL, &(gp_pd_model *){NULL}), GP_ERR_INVALID_ARG, "profile");
}

/* ------------------------------------------------------------ profile */

static void test_kind_names(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        gp_pd_kind back;
        GP_CHECK_OK(gp_pd_kind_parse(gp_pd_kind_name((gp_pd_kind)k), &back));
        assert_int_equal(back, k);
    }
    assert_string_equal(gp_pd_kind_name(GP_PD_MIXED), "mixed");
    gp_pd_kind k;
    GP_CHECK_FAIL(gp_pd_kind_parse("chunked", &k), GP_ERR_INVALID_ARG, "'chunked': allowed decode, prefill, mixed");
    GP_CHECK_FAIL(gp_pd_kind_parse(NULL, &k), GP_ERR_INVALID_ARG, "allowed decode");
}

static void test_add_refusals(void **state)
{
    (void)state;
    gp_pd_profile p = {.n_splits = 2, .decode_sms = {16, 32}, .prefill_sms = {116, 100}};
    gp_pd_sample ok = {.kind = GP_PD_DECODE, .split = 1, .corun = true, .rows = 4, .context = 2048, .ms = 3.0f};
    GP_CHECK_OK(gp_pd_profile_add(&p, &ok));
    gp_pd_sample s = ok;
    s.split = 2;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "split: 2: allowed -1 (every SM) or 0..1");
    s = ok, s.split = GP_PD_WHOLE;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "corun: true with split -1");
    s = ok, s.kind = GP_PD_MIXED, s.corun = false;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "split: 1 with kind mixed");
    s = ok, s.ms = 0.0f;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "ms: 0");
    s = ok, s.ms = NAN;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "ms: nan");
    s = ok, s.context = -5;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "context -5");
    s = ok, s.kind = (gp_pd_kind)3;
    GP_CHECK_FAIL(gp_pd_profile_add(&p, &s), GP_ERR_INVALID_ARG, "kind: 3");
    assert_int_equal(p.n_samples, 1);
    gp_pd_profile bad = {.n_splits = GP_PD_MAX_SPLITS + 1};
    GP_CHECK_FAIL(gp_pd_profile_add(&bad, &ok), GP_ERR_INVALID_ARG, "17 pairs: allowed 1..16");
    gp_pd_profile_free(&p);
    assert_null(p.samples);
    assert_int_equal(p.n_samples, 0);
}

typedef struct tmp_fixture {
    char dir[64];
} tmp_fixture;

static int tmp_setup(void **state)
{
    tmp_fixture *f = calloc(1, sizeof *f);
    if (!f || gp_test_tmpdir_make(f->dir, sizeof f->dir, "gp_pd_model") != 0) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int tmp_teardown(void **state)
{
    tmp_fixture *f = *state;
    int rc = gp_test_tmpdir_remove(f->dir);
    free(f);
    return rc;
}

static void test_roundtrip(void **state)
{
    tmp_fixture *f = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/profile.json", f->dir);
    gp_pd_profile p, back;
    make_profile(&p, 0.003, -1, 0, false);
    p.samples[0].ms = 1e-7f; /* a time printed with its every digit */
    p.samples[1].ms = 3.0f;  /* an integral time stays a real */
    GP_CHECK_OK(gp_pd_profile_save(&p, path));
    GP_CHECK_OK(gp_pd_profile_load(path, &back));
    assert_string_equal(back.device, p.device);
    assert_string_equal(back.model, p.model);
    assert_int_equal(back.n_splits, p.n_splits);
    for (int s = 0; s < p.n_splits; s++) {
        assert_int_equal(back.decode_sms[s], p.decode_sms[s]);
        assert_int_equal(back.prefill_sms[s], p.prefill_sms[s]);
    }
    assert_int_equal(back.n_samples, p.n_samples);
    for (int i = 0; i < p.n_samples; i++) {
        const gp_pd_sample *a = &p.samples[i], *b = &back.samples[i];
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->split, b->split);
        assert_int_equal(a->corun, b->corun);
        assert_int_equal(a->rows, b->rows);
        assert_true(a->context == b->context);
        assert_int_equal(a->tokens, b->tokens);
        assert_memory_equal(&a->ms, &b->ms, sizeof a->ms);
    }
    /* and the file says ms as a real */
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = 0;
    HAS(text, "\"ms\": 3.0");
    HAS(text, "\"format\": \"greenpipe-pd-profile\"");
    gp_pd_profile_free(&p);
    gp_pd_profile_free(&back);
}

/* A one-pair profile file with the given splits and samples text. */
static void write_profile(const char *path, const char *head, const char *splits, const char *samples)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "{%s \"device\": \"d\", \"model\": \"m\", \"splits\": %s, \"samples\": [%s]}",
            head ? head : "\"format\": \"greenpipe-pd-profile\", \"version\": 1,", splits, samples);
    fclose(fp);
}

#define ONE_SPLIT "[{\"decode_sms\": 20, \"prefill_sms\": 112}]"
#define SAMPLE(kind, split, corun, ms)                                                                           \
    "{\"kind\": " kind ", \"split\": " split ", \"corun\": " corun                                                \
    ", \"rows\": 4, \"context\": 2048, \"tokens\": 0, \"position\": 0, \"ms\": " ms "}"
#define GOOD SAMPLE("\"decode\"", "0", "true", "2.5")

static void load_fails(const char *path, gp_status want, const char *needle)
{
    gp_pd_profile p;
    GP_CHECK_FAIL(gp_pd_profile_load(path, &p), want, needle);
    /* nothing is left to free */
    assert_null(p.samples);
    assert_int_equal(p.n_samples, 0);
    HAS(gp_last_error(), path);
}

static void test_bad_files(void **state)
{
    tmp_fixture *f = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/bad.json", f->dir);
    gp_pd_profile p;

    write_profile(path, NULL, ONE_SPLIT, GOOD "," GOOD);
    GP_CHECK_OK(gp_pd_profile_load(path, &p));
    assert_int_equal(p.n_samples, 2);
    gp_pd_profile_free(&p);

    write_profile(path, NULL, ONE_SPLIT,
                  GOOD ", {\"kind\": \"decode\", \"split\": 0, \"corun\": true, \"rows\": 4, \"context\": 9, "
                       "\"tokens\": 0, \"position\": 0}");
    load_fails(path, GP_ERR_INVALID_ARG, "samples[1]: no field \"ms\"");
    write_profile(path, NULL, ONE_SPLIT, GOOD "," SAMPLE("\"decoder\"", "0", "true", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[1].kind: \"decoder\": allowed decode, prefill, mixed");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "1", "true", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].split: 1: allowed -1 (every SM) or 0..0");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "-2", "false", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].split: -2");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "0", "true", "0.0"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].ms: 0");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "0", "true", "-3"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].ms: -3");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "0", "true", "\"fast\""));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].ms: must be a number");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "-1", "true", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].corun: true with split -1");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"decode\"", "0", "1", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].corun: must be true or false");
    write_profile(path, NULL, ONE_SPLIT, SAMPLE("\"mixed\"", "0", "false", "2.5"));
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].split: 0 with kind mixed");
    write_profile(path, NULL, ONE_SPLIT, "{\"kind\": \"prefill\", \"split\": 0, \"corun\": false, \"rows\": 0, "
                                         "\"context\": 0, \"tokens\": -4, \"position\": 0, \"ms\": 2.0}");
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].tokens: -4: allowed 0..");
    write_profile(path, NULL, ONE_SPLIT, "{\"kind\": \"prefill\", \"split\": 0, \"corun\": false, \"rows\": 0, "
                                         "\"context\": 0, \"tokens\": 4000000000, \"position\": 0, \"ms\": 2.0}");
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].tokens: 4000000000: allowed 0..2147483647");
    write_profile(path, NULL, ONE_SPLIT, "{\"kind\": \"prefill\", \"split\": 0, \"corun\": false, \"rows\": 0, "
                                         "\"context\": 0, \"tokens\": 40, \"ms\": 2.0}");
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0]: no field \"position\"");
    write_profile(path, NULL, ONE_SPLIT, "{\"kind\": \"decode\", \"split\": 0, \"corun\": false, \"rows\": 1, "
                                         "\"context\": 9, \"tokens\": 0, \"position\": 5, \"ms\": 2.0}");
    load_fails(path, GP_ERR_INVALID_ARG, "samples[0].position: 5 with kind decode");
    write_profile(path, NULL, "[]", GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "splits: 0 pairs: allowed 1..16");
    write_profile(path, NULL, "[{\"decode_sms\": 0, \"prefill_sms\": 112}]", GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "splits[0].decode_sms: 0");
    write_profile(path, NULL, "[{\"decode_sms\": 20}]", GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "splits[0]: no field \"prefill_sms\"");
    write_profile(path, NULL, "{}", GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "splits: must be an array");
    write_profile(path, "\"format\": \"other\", \"version\": 1,", ONE_SPLIT, GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "format: \"other\"");
    write_profile(path, "\"format\": \"greenpipe-pd-profile\", \"version\": 2,", ONE_SPLIT, GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "version: 2: allowed 1");
    write_profile(path, "", ONE_SPLIT, GOOD);
    load_fails(path, GP_ERR_INVALID_ARG, "no field \"format\"");

    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"format\": \"greenpipe-pd-profile\", \"version\": 1,", fp);
    fclose(fp);
    load_fails(path, GP_ERR_INVALID_ARG, "not JSON");

    char missing[160];
    snprintf(missing, sizeof missing, "%s/absent.json", f->dir);
    load_fails(missing, GP_ERR_IO, "cannot open");

    char unwritable[160];
    snprintf(unwritable, sizeof unwritable, "%s/no/such/dir/p.json", f->dir);
    make_profile(&p, 0.0, -1, 0, false);
    GP_CHECK_FAIL(gp_pd_profile_save(&p, unwritable), GP_ERR_IO, unwritable);
    snprintf(p.device, sizeof p.device, "GPU \xff");
    GP_CHECK_FAIL(gp_pd_profile_save(&p, path), GP_ERR_INVALID_ARG, "device: not UTF-8 text");
    gp_pd_profile_free(&p);
}

/* ------------------------------------------------------------ planner */

static gp_pd_planner *planner(const gp_pd_model *m, float tpot, int hysteresis, bool mixed)
{
    gp_pd_planner_params pp = gp_pd_planner_default_params();
    pp.tpot_ms = tpot;
    pp.hysteresis = hysteresis;
    pp.lane_tokens = 2048;
    pp.mixed = mixed;
    gp_pd_planner *pl = NULL;
    GP_CHECK_OK(gp_pd_planner_create(m, &pp, &pl));
    return pl;
}

static gp_pd_choice choose(gp_pd_planner *pl, int rows, long long ctx, long long backlog, int budget)
{
    gp_pd_plan_in in = {.decode_rows = rows, .decode_context = ctx, .backlog_tokens = backlog,
                        .token_budget = budget};
    gp_pd_choice c;
    GP_CHECK_OK(gp_pd_planner_choose(pl, &in, &c));
    return c;
}

/* The decode batches the planner tests use, with their predicted decode
 * steps beside a prefill batch (truth(), corun): small, 4 rows of 1024
 * tokens: 8.8, 5.2 and 4.3 ms on pairs 0, 1, 2; heavy, 64 rows of 2048:
 * 88.3, 41.4 and 28.4 ms. */
#define SMALL 4, 4096LL
#define HEAVY 64, 131072LL
#define LONG_BACKLOG 100000LL, 4096

static void test_params(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    gp_pd_planner_params d = gp_pd_planner_default_params();
    assert_true(d.tpot_ms == 40.0f && d.hysteresis == 3 && d.lane_tokens == 0 && d.mixed);
    gp_pd_planner *pl = NULL;
    GP_CHECK_FAIL(gp_pd_planner_create(m, &d, &pl), GP_ERR_INVALID_ARG, "lane_tokens 0");
    d.lane_tokens = 64;
    d.hysteresis = 0;
    GP_CHECK_FAIL(gp_pd_planner_create(m, &d, &pl), GP_ERR_INVALID_ARG, "hysteresis 0");
    d.hysteresis = 1;
    d.tpot_ms = 0;
    GP_CHECK_FAIL(gp_pd_planner_create(m, &d, &pl), GP_ERR_INVALID_ARG, "tpot_ms 0");
    d.tpot_ms = 40;
    GP_CHECK_FAIL(gp_pd_planner_create(NULL, &d, &pl), GP_ERR_INVALID_ARG, "model is NULL");
    assert_null(pl);
    GP_CHECK_OK(gp_pd_planner_create(m, &d, &pl));
    gp_pd_choice c;
    gp_pd_plan_in in = {.decode_rows = -1, .backlog_tokens = 10, .token_budget = 10};
    GP_CHECK_FAIL(gp_pd_planner_choose(pl, &in, &c), GP_ERR_INVALID_ARG, "-1 decode rows");
    in = (gp_pd_plan_in){.decode_rows = 0, .decode_context = 5, .backlog_tokens = 10, .token_budget = 10};
    GP_CHECK_FAIL(gp_pd_planner_choose(pl, &in, &c), GP_ERR_INVALID_ARG, "no context without rows");
    in = (gp_pd_plan_in){.decode_rows = 1, .decode_context = 5, .backlog_tokens = 0, .token_budget = 10};
    GP_CHECK_FAIL(gp_pd_planner_choose(pl, &in, &c), GP_ERR_INVALID_ARG, "backlog 0 tokens");
    in.backlog_tokens = 4, in.token_budget = 0;
    GP_CHECK_FAIL(gp_pd_planner_choose(pl, &in, &c), GP_ERR_INVALID_ARG, "budget 0");
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

static void test_no_decode_rows(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    gp_pd_planner *pl = planner(m, 30, 3, true);
    gp_pd_choice c = choose(pl, 0, 0, 5000, 4096);
    assert_int_equal(c.run, GP_PD_RUN_LANE);
    assert_int_equal(c.split, GP_PD_WHOLE);
    assert_int_equal(c.tokens, 2048);
    assert_true(c.decode_ms == 0 && c.meets_tpot);
    assert_true(fabs(c.prefill_tok_s - 2048e3 / truth_ms(GP_PD_PREFILL, GP_PD_WHOLE, false, 0, 0, 2048)) < 1);
    c = choose(pl, 0, 0, 100, 4096);
    assert_int_equal(c.tokens, 100);
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

static void test_partition(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    /* small batch: every pair is under 30 ms and pair 0 has the most
     * prefill SMs (2048 tokens in 62.1 ms); mixed, held to 786 tokens by
     * the target, gives 26.2 tokens/ms against the lane's 33.0 */
    gp_pd_planner *pl = planner(m, 30, 1, true);
    gp_pd_choice c = choose(pl, SMALL, LONG_BACKLOG);
    assert_int_equal(c.run, GP_PD_RUN_LANE);
    assert_int_equal(c.split, 0);
    assert_int_equal(c.tokens, 2048);
    assert_true(c.meets_tpot);
    assert_true(fabs(c.decode_ms - truth_ms(GP_PD_DECODE, 0, true, SMALL, 0)) < 1e-3);
    assert_true(fabs(c.prefill_tok_s - 2048e3 / truth_ms(GP_PD_PREFILL, 0, true, 0, 0, 2048)) < 1);
    /* heavy batch: only pair 2 stays under 30 ms */
    c = choose(pl, HEAVY, LONG_BACKLOG);
    assert_int_equal(c.run, GP_PD_RUN_LANE);
    assert_int_equal(c.split, 2);
    assert_true(c.meets_tpot && c.decode_ms <= 30);
    gp_pd_planner_destroy(pl);
    /* 50 ms: the heavy batch fits pair 1 (41.4 ms), whose prefill is faster */
    pl = planner(m, 50, 1, true);
    c = choose(pl, HEAVY, LONG_BACKLOG);
    assert_int_equal(c.split, 1);
    gp_pd_planner_destroy(pl);
    /* 1 ms is out of reach: the shortest decode step, pair 2, and no mixed
     * batch (even one token is over it) */
    pl = planner(m, 1, 1, true);
    c = choose(pl, SMALL, LONG_BACKLOG);
    assert_int_equal(c.run, GP_PD_RUN_LANE);
    assert_int_equal(c.split, 2);
    assert_false(c.meets_tpot);
    assert_true(fabs(c.decode_ms - truth_ms(GP_PD_DECODE, 2, true, SMALL, 0)) < 1e-3);
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

static void test_mixed(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    gp_pd_planner *pl = planner(m, 30, 1, true);
    /* a 64-token prompt: the mixed step (8.3 ms) beats the lane's batch,
     * whose constant dominates (13.1 ms on pair 0, its 128-token sample:
     * the line is not followed below it) */
    gp_pd_choice c = choose(pl, SMALL, 64, 4096);
    assert_int_equal(c.run, GP_PD_RUN_MIXED);
    assert_int_equal(c.split, GP_PD_WHOLE);
    assert_int_equal(c.tokens, 64);
    assert_true(c.meets_tpot);
    assert_true(fabs(c.decode_ms - truth_ms(GP_PD_MIXED, GP_PD_WHOLE, false, SMALL, 64)) < 1e-3);
    /* a long backlog: the lane's 2048 tokens beat mixed's 786 */
    c = choose(pl, SMALL, LONG_BACKLOG);
    assert_int_equal(c.run, GP_PD_RUN_LANE);
    gp_pd_planner_destroy(pl);
    /* mixed off: never mixed */
    pl = planner(m, 30, 1, false);
    for (long long backlog = 1; backlog <= 4096; backlog *= 2) {
        c = choose(pl, SMALL, backlog, 4096);
        assert_int_equal(c.run, GP_PD_RUN_LANE);
        c = choose(pl, HEAVY, backlog, 4096);
        assert_int_equal(c.run, GP_PD_RUN_LANE);
    }
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

/* The mixed batch's tokens against a search of every count: the most whose
 * predicted step is under the target. */
static int mixed_brute(const gp_pd_model *m, float tpot, int rows, long long ctx, int cap)
{
    int best = 0;
    for (int t = 1; t <= cap; t++)
        if (gp_pd_model_predict(m, GP_PD_MIXED, GP_PD_WHOLE, false, rows, ctx, t) <= tpot)
            best = t;
    return best;
}

/* The window: steps observed over the target leave the bare target (no
 * debt), steps under it give slack (the heavy batch's mixed step, over the
 * bare target, meets it); window 1 ignores observations. */
static void test_window(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    gp_pd_planner_params pp = gp_pd_planner_default_params();
    assert_int_equal(pp.window, 32);
    pp.tpot_ms = 30;
    pp.lane_tokens = 2048;
    pp.window = 0;
    gp_pd_planner *pl = NULL;
    GP_CHECK_FAIL(gp_pd_planner_create(m, &pp, &pl), GP_ERR_INVALID_ARG, "window 0");
    pp.window = 32;
    GP_CHECK_OK(gp_pd_planner_create(m, &pp, &pl));
    assert_true(choose(pl, SMALL, 64, 4096).meets_tpot);
    for (int i = 0; i < 40; i++)
        gp_pd_planner_observe(pl, 60.0f);
    gp_pd_choice c = choose(pl, SMALL, 64, 4096);
    assert_true(c.meets_tpot);
    assert_int_equal(c.tokens, 64);
    for (int i = 0; i < 31; i++) /* the ring holds 31: these replace every slow one */
        gp_pd_planner_observe(pl, 0.0f);
    c = choose(pl, HEAVY, 2048, 4096);
    assert_true(c.meets_tpot);
    if (c.run == GP_PD_RUN_MIXED)
        assert_int_equal(c.tokens, mixed_brute(m, 30 + 31 * 30, HEAVY, 2048));
    gp_pd_planner_destroy(pl);
    pp.window = 1;
    GP_CHECK_OK(gp_pd_planner_create(m, &pp, &pl));
    for (int i = 0; i < 8; i++)
        gp_pd_planner_observe(pl, 60.0f);
    assert_true(choose(pl, SMALL, 64, 4096).meets_tpot);
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

static void test_token_bounds(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.005);
    static const int rows[] = {0, 1, 4, 64}, budgets[] = {1, 16, 512, 4096}, lanes[] = {16, 2048};
    static const long long backlogs[] = {1, 7, 64, 3000, 100000};
    static const float tpots[] = {1, 12, 30, 200};
    int mixed_seen = 0, lane_seen = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int l = 0; l < 2; l++)
                for (int k = 0; k < 5; k++)
                    for (int t = 0; t < 4; t++) {
                        gp_pd_planner_params pp = gp_pd_planner_default_params();
                        pp.tpot_ms = tpots[t], pp.lane_tokens = lanes[l], pp.hysteresis = 1;
                        gp_pd_planner *pl = NULL;
                        GP_CHECK_OK(gp_pd_planner_create(m, &pp, &pl));
                        gp_pd_choice c = choose(pl, rows[a], rows[a] * 1024LL, backlogs[k], budgets[b]);
                        long long cap = backlogs[k] < budgets[b] ? backlogs[k] : budgets[b];
                        assert_true(c.tokens >= 1 && c.tokens <= cap);
                        assert_true(c.prefill_tok_s > 0);
                        if (c.run == GP_PD_RUN_LANE) {
                            lane_seen++;
                            assert_true(c.tokens == (cap < lanes[l] ? cap : lanes[l]));
                        } else {
                            /* the contract bounds a mixed batch by the budget and backlog only */
                            mixed_seen++;
                            assert_true(c.meets_tpot && c.decode_ms <= tpots[t]);
                            int want = mixed_brute(m, tpots[t], rows[a], rows[a] * 1024LL, (int)cap);
                            if (c.tokens != want)
                                fail_msg("mixed %d tokens, search %d (rows %d, cap %lld, tpot %g)", c.tokens, want,
                                         rows[a], cap, tpots[t]);
                        }
                        gp_pd_planner_destroy(pl);
                    }
    assert_true(mixed_seen > 0 && lane_seen > 0);
    gp_pd_model_destroy(m);
}

static void test_hysteresis(void **state)
{
    (void)state;
    gp_pd_model *m = fit(0.0);
    gp_pd_planner *pl = planner(m, 30, 3, false);
    /* the first choice is taken as it is */
    assert_int_equal(choose(pl, HEAVY, LONG_BACKLOG).split, 2);
    /* the small batch wants pair 0: pair 2 stays for two launches, with
     * pair 2's own predictions */
    for (int i = 0; i < 2; i++) {
        gp_pd_choice c = choose(pl, SMALL, LONG_BACKLOG);
        assert_int_equal(c.split, 2);
        assert_true(fabs(c.decode_ms - truth_ms(GP_PD_DECODE, 2, true, SMALL, 0)) < 1e-3);
        assert_true(fabs(c.prefill_tok_s - 2048e3 / truth_ms(GP_PD_PREFILL, 2, true, 0, 0, 2048)) < 1);
        assert_true(c.meets_tpot);
    }
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 0); /* the third in a row */
    /* a rise is taken at once */
    assert_int_equal(choose(pl, HEAVY, LONG_BACKLOG).split, 2);
    /* a launch that keeps the partition breaks the row */
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, HEAVY, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 2);
    /* a launch on every SM (no decode rows) neither counts nor breaks it */
    assert_int_equal(choose(pl, 0, 0, LONG_BACKLOG).split, GP_PD_WHOLE);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 0);
    gp_pd_planner_destroy(pl);

    /* with mixed on, a mixed launch neither counts nor breaks it either */
    pl = planner(m, 30, 2, true);
    assert_int_equal(choose(pl, HEAVY, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, 64, 4096).run, GP_PD_RUN_MIXED);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 0);
    gp_pd_planner_destroy(pl);

    /* hysteresis 1: no hold */
    pl = planner(m, 30, 1, false);
    assert_int_equal(choose(pl, HEAVY, LONG_BACKLOG).split, 2);
    assert_int_equal(choose(pl, SMALL, LONG_BACKLOG).split, 0);
    gp_pd_planner_destroy(pl);
    gp_pd_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_exact),
        cmocka_unit_test(test_fit_noisy),
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_fit_refusals),
        cmocka_unit_test(test_kind_names),
        cmocka_unit_test(test_add_refusals),
        cmocka_unit_test_setup_teardown(test_roundtrip, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, tmp_setup, tmp_teardown),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_no_decode_rows),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_token_bounds),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_hysteresis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
