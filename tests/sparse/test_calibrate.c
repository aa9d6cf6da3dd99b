/* Calibration of activation sparsity on the CPU reference: the histogram's
 * precision against exact quantiles, and gp_sparsity_calibrate at S = 0.5
 * on the tiny preset and the tiny checkpoint, its saved thresholds
 * re-measured through the reference's capture hook. */
#include "gp_test.h"

#include "gp_reference.h"
#include "gp_sparse.h"
#include "sparse_impl.h"

#define NPROJ GP_SPARSE_PROJ_COUNT

static uint64_t g_rng = 1;

static double uniform(void) { return gp_test_uniform(&g_rng); }

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------ histogram */

static void test_hist_bins(void **state)
{
    assert_int_equal(gp_sparse_hist_bin(1.0f), 10 * GP_SPARSE_HIST_PER_DECADE);
    assert_int_equal(gp_sparse_hist_bin(1e-20f), 0);
    assert_int_equal(gp_sparse_hist_bin(1e-45f), 0); /* subnormal */
    assert_int_equal(gp_sparse_hist_bin(1e7f), GP_SPARSE_HIST_BINS - 1);
    assert_int_equal(gp_sparse_hist_bin(3e38f), GP_SPARSE_HIST_BINS - 1);
    assert_true(fabs(gp_sparse_hist_edge(0) / 1e-10 - 1.0) < 1e-12);
    assert_true(fabs(gp_sparse_hist_edge(GP_SPARSE_HIST_BINS) / 1e6 - 1.0) < 1e-12);
    /* every bin is 10^(1/512) wide and values land inside their bin */
    for (int i = 0; i < 100000; i++) {
        float a = (float)pow(10.0, -10.0 + 16.0 * uniform());
        int j = gp_sparse_hist_bin(a);
        double lo = gp_sparse_hist_edge(j), hi = gp_sparse_hist_edge(j + 1);
        assert_true(a >= lo * (1 - 1e-6) && a <= hi * (1 + 1e-6));
    }
    gp_sparse_hist *h = calloc(1, sizeof *h);
    const float x[] = {0.0f, -0.0f, 1.0f, -2.0f, NAN, INFINITY, -INFINITY, 1e-30f};
    gp_sparse_hist_add(h, x, sizeof x / sizeof x[0]);
    assert_int_equal(h->zero, 2);
    assert_int_equal(h->n, 5);
    assert_int_equal(h->nonfinite, 3);
    assert_int_equal(h->bins[0], 1);
    free(h);
    /* empty: 0 */
    gp_sparse_hist e = {0};
    assert_true(gp_sparse_hist_threshold(&e, 0.5) == 0.0f);
}

/* The precision calibrate.c states: t within a bin (a factor 1.0045; two
 * bins' factor allowed for log10's rounding at an edge) of the exact
 * quantile, and the share it drops within the share of values in its bin
 * (plus 1/n) of S. Continuous values over many decades, the same rounded to
 * bf16 (ties), and a third of them exact zeros. */
static void test_hist_precision(void **state)
{
    const int n = 200000;
    const double S_list[] = {0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99};
    float *x = malloc((size_t)n * sizeof *x), *sorted = malloc((size_t)n * sizeof *sorted);
    gp_sparse_hist *h = malloc(sizeof *h);
    const double bin = pow(10.0, 1.0 / GP_SPARSE_HIST_PER_DECADE);
    double worst_share = 0.0, worst_ratio = 1.0;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < n; i++) {
            /* a normal times a log-uniform scale: a heavy, wide spread as activations have */
            double g = sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform());
            float v = (float)(g * pow(10.0, -4.0 + 5.0 * uniform()));
            if (kind == 1)
                v = gp_bf16_to_f32(gp_f32_to_bf16(v));
            if (kind == 2 && i % 3 == 0)
                v = 0.0f;
            x[i] = v;
            sorted[i] = fabsf(v);
        }
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_float);
        memset(h, 0, sizeof *h);
        gp_sparse_hist_add(h, x, (size_t)n);
        for (size_t si = 0; si < sizeof S_list / sizeof S_list[0]; si++) {
            double S = S_list[si];
            float t = gp_sparse_hist_threshold(h, S);
            long k = (long)ceil(S * n); /* values the threshold should drop */
            long dropped = 0;
            for (int i = 0; i < n; i++)
                dropped += !(sorted[i] > t);
            if (k <= (long)h->zero) {
                assert_true(t == 0.0f);
                continue;
            }
            float q = sorted[k - 1];
            double ratio = t > q ? (double)t / q : (double)q / t;
            worst_ratio = fmax(worst_ratio, ratio);
            if (ratio > bin * bin)
                fail_msg("kind %d S %g: t = %.9g, exact quantile %.9g: ratio %.6f beyond two bins (%.6f)", kind, S,
                         (double)t, (double)q, ratio, bin * bin);
            double in_bin = (double)h->bins[gp_sparse_hist_bin(t)] / n;
            double err = fabs((double)dropped / n - S);
            worst_share = fmax(worst_share, err);
            if (err > in_bin + 1.0 / n + 1e-12)
                fail_msg("kind %d S %g: drops %.6f, off by %.6f, more than its bin's share %.6f", kind, S,
                         (double)dropped / n, err, in_bin);
        }
    }
    printf("histogram: worst threshold ratio %.6f (a bin: %.6f), worst share error %.6f\n", worst_ratio, bin,
           worst_share);
    free(x), free(sorted), free(h);
}

/* ------------------------------------------------------------ calibrate */

typedef struct fixture {
    gp_host_weights w;
    const char *what;
} fixture;

static char g_dir[256];

static int setup_preset(void **state)
{
    static fixture f = {.what = "tiny preset"};
    gp_config cfg;
    if (gp_test_tmpdir_make(g_dir, sizeof g_dir, "gp_calibrate") || gp_config_preset("tiny", &cfg) != GP_OK ||
        gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &f.w) != GP_OK || gp_synth_fill_host(&f.w, 0) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    *state = &f;
    return 0;
}

static int setup_checkpoint(void **state)
{
    static fixture f = {.what = "tests/data/tiny"};
    gp_model_source src;
    if (gp_test_tmpdir_make(g_dir, sizeof g_dir, "gp_calibrate") ||
        gp_model_source_resolve(GP_TEST_DATA_DIR "/tiny", 0, &src) != GP_OK ||
        gp_model_source_load_host(&src, &f.w) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_host_weights_free(&f->w);
    return gp_test_tmpdir_remove(g_dir);
}

/* 512 random ids in sequences of 128, as greenpipe calibrate's default. */
#define N_TOK 512
#define SEQ_LEN 128
static int32_t g_ids[N_TOK];
static int g_lens[N_TOK / SEQ_LEN];

static gp_sparsity_calib_params random_params(const gp_config *c, double S)
{
    for (int i = 0; i < N_TOK; i++)
        g_ids[i] = (int32_t)(uniform() * c->vocab);
    for (int s = 0; s < N_TOK / SEQ_LEN; s++)
        g_lens[s] = SEQ_LEN;
    gp_sparsity_calib_params p = gp_sparsity_calib_default_params();
    p.target = S;
    p.n_seqs = N_TOK / SEQ_LEN;
    p.lens = g_lens;
    p.ids = g_ids;
    p.n_threads = 2;
    p.batch = 3; /* groups of 3 and 1: the grouping is part of what runs */
    p.source = "random ids, test";
    return p;
}

/* Counts, through the capture hook, the inputs the thresholds drop. */
typedef struct measure {
    const float *t;
    uint64_t dropped[64][NPROJ], seen[64][NPROJ];
} measure;

static void measure_capture(void *ctx, int layer, int proj, int rows, int width, const float *x)
{
    measure *m = ctx;
    float t = m->t[layer * NPROJ + proj];
    for (int i = 0; i < rows * width; i++)
        m->dropped[layer][proj] += !(fabsf(x[i]) > t);
    m->seen[layer][proj] += (uint64_t)rows * (uint64_t)width;
}

/* The calibration at S = 0.5, saved and loaded back, re-measured on a
 * fresh reference (bf16 activations, each sequence prefilled alone): every
 * layer-projection drops within 0.01 of S, exactly the share it recorded;
 * the mean down frequency is the share of down inputs kept. */
static void test_calibrate_half(void **state)
{
    const fixture *f = *state;
    const gp_config *c = &f->w.cfg;
    const double S = 0.5;
    gp_sparsity_calib_params p = random_params(c, S);
    gp_sparsity cal, s;
    GP_CHECK_OK(gp_sparsity_calibrate(&f->w, &p, &cal));
    GP_CHECK_OK(gp_sparsity_check(&cal, c));
    assert_int_equal(cal.tokens, N_TOK);
    assert_true(cal.target == S);
    assert_string_equal(cal.source, "random ids, test");
    char path[512];
    snprintf(path, sizeof path, "%s/cal.json", g_dir);
    GP_CHECK_OK(gp_sparsity_save(&cal, path));
    GP_CHECK_OK(gp_sparsity_load(path, &s));
    gp_sparsity_free(&cal);

    measure *ms = calloc(1, sizeof *ms);
    ms->t = s.thresholds;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&f->w, 1, SEQ_LEN, 16, &m));
    gp_cpu_model_set_act_dtype(m, GP_DTYPE_BF16);
    gp_cpu_model_set_capture(m, measure_capture, ms);
    for (int q = 0; q < p.n_seqs; q++) {
        gp_cpu_reset_seq(m, 0);
        GP_CHECK_OK(gp_cpu_prefill(m, 0, SEQ_LEN, g_ids + q * SEQ_LEN, NULL));
    }
    gp_cpu_model_destroy(m);
    const int widths[NPROJ] = {c->hidden, c->n_heads * c->head_dim, c->hidden, c->ffn};
    for (int l = 0; l < c->n_layers; l++) {
        double freq_mean = 0.0;
        for (int i = 0; i < c->ffn; i++)
            freq_mean += s.freq[(size_t)l * c->ffn + i];
        freq_mean /= c->ffn;
        for (int pr = 0; pr < NPROJ; pr++) {
            assert_int_equal(ms->seen[l][pr], (uint64_t)N_TOK * widths[pr]);
            double share = (double)ms->dropped[l][pr] / (double)ms->seen[l][pr];
            printf("%s layer %d %-7s t = %-12.6g drops %.4f\n", f->what, l, gp_sparse_proj_name(pr),
                   (double)s.thresholds[l * NPROJ + pr], share);
            if (fabs(share - S) > 0.01)
                fail_msg("%s layer %d %s: threshold %g drops %.4f of the inputs; S = %g +- 0.01", f->what, l,
                         gp_sparse_proj_name(pr), (double)s.thresholds[l * NPROJ + pr], share, S);
            assert_float_equal(s.zeros[l * NPROJ + pr], (float)share, 1e-7);
            assert_true(s.thresholds[l * NPROJ + pr] > 0.0f);
        }
        assert_float_equal(freq_mean, 1.0 - s.zeros[l * NPROJ + GP_SPARSE_DOWN], 1e-5);
    }
    free(ms);
    gp_sparsity_free(&s);
}

/* S = 0 drops nothing: every threshold 0, so masking leaves the dense
 * results; and the calibration does not depend on the batch grouping or the
 * thread count. */
static void test_calibrate_zero_and_grouping(void **state)
{
    const fixture *f = *state;
    const gp_config *c = &f->w.cfg;
    gp_sparsity_calib_params p = random_params(c, 0.0);
    gp_sparsity z;
    GP_CHECK_OK(gp_sparsity_calibrate(&f->w, &p, &z));
    for (int i = 0; i < c->n_layers * NPROJ; i++)
        assert_true(z.thresholds[i] == 0.0f);
    gp_sparsity_free(&z);

    gp_sparsity a, b;
    p.target = 0.7;
    GP_CHECK_OK(gp_sparsity_calibrate(&f->w, &p, &a));
    p.batch = 8;
    p.n_threads = 1;
    GP_CHECK_OK(gp_sparsity_calibrate(&f->w, &p, &b));
    assert_memory_equal(a.thresholds, b.thresholds, (size_t)c->n_layers * NPROJ * sizeof(float));
    assert_memory_equal(a.freq, b.freq, (size_t)c->n_layers * c->ffn * sizeof(float));
    gp_sparsity_free(&a);
    gp_sparsity_free(&b);
}

static void test_calibrate_refusals(void **state)
{
    const fixture *f = *state;
    const gp_config *c = &f->w.cfg;
    gp_sparsity s;
    gp_sparsity_calib_params p = random_params(c, 1.0);
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "target S = 1: allowed [0, 1)");
    p.target = NAN;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "allowed [0, 1)");
    p = random_params(c, 0.5);
    p.n_seqs = 0;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "0 sequences");
    p = random_params(c, 0.5);
    g_lens[2] = c->max_context + 1;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG,
                  "sequence 2 has 257 tokens; allowed 1..256");
    p = random_params(c, 0.5);
    g_ids[SEQ_LEN + 5] = c->vocab;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG,
                  "sequence 1: token 5 is 256, outside the vocabulary; allowed 0..255");
    p = random_params(c, 0.5);
    p.act_dtype = GP_DTYPE_I32;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "allowed F32, BF16 or F16");
    p.act_dtype = GP_DTYPE_BF16;
    p.batch = 0;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "batch 0; allowed 1..256");
    p.batch = 8;
    p.n_threads = 17;
    GP_CHECK_FAIL(gp_sparsity_calibrate(&f->w, &p, &s), GP_ERR_INVALID_ARG, "threads 17");
}

int main(void)
{
    const struct CMUnitTest hist[] = {
        cmocka_unit_test(test_hist_bins),
        cmocka_unit_test(test_hist_precision),
    };
    const struct CMUnitTest calib[] = {
        cmocka_unit_test(test_calibrate_half),
        cmocka_unit_test(test_calibrate_zero_and_grouping),
        cmocka_unit_test(test_calibrate_refusals),
    };
    int fails = cmocka_run_group_tests_name("sparsity histogram", hist, NULL, NULL);
    fails += cmocka_run_group_tests_name("calibrate (tiny preset)", calib, setup_preset, teardown);
    fails += cmocka_run_group_tests_name("calibrate (tests/data/tiny)", calib, setup_checkpoint, teardown);
    return fails ? 1 : 0;
}
