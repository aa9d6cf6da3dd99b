/* bench-serve's statistics against numpy's figures (linear percentiles,
 * population std), vLLM's TPOT and goodput rules, and the arrival process:
 * gamma gaps of mean 1 / rate and squared coefficient of variation
 * 1 / burstiness, the same for the same seed. */
#include "gp_loadgen.h"
#include "gp_test.h"

#define NEAR(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

static void test_percentile_numpy(void **state)
{
    (void)state;
    const double a[] = {1, 2, 3, 4};
    NEAR(gp_lg_percentile(a, 4, 50), 2.5, 1e-12);
    NEAR(gp_lg_percentile(a, 4, 99), 3.97, 1e-12); /* np.percentile([1,2,3,4], 99) */
    NEAR(gp_lg_percentile(a, 4, 0), 1.0, 1e-12);
    NEAR(gp_lg_percentile(a, 4, 100), 4.0, 1e-12);
    const double b[] = {15, 20, 35, 40, 50};
    NEAR(gp_lg_percentile(b, 5, 40), 29.0, 1e-12); /* np.percentile(b, 40) */
    NEAR(gp_lg_percentile(b, 5, 90), 46.0, 1e-12);
    const double one[] = {7};
    NEAR(gp_lg_percentile(one, 1, 99), 7.0, 0);
}

static void test_dist(void **state)
{
    (void)state;
    const double v[] = {4, 1, 3, 2}; /* unsorted: the input stays as it is */
    const double pcts[] = {25, 99.9};
    gp_lg_dist d;
    GP_CHECK_OK(gp_lg_dist_compute(v, 4, pcts, 2, &d));
    NEAR(d.mean, 2.5, 1e-12);
    NEAR(d.median, 2.5, 1e-12);
    NEAR(d.std, sqrt(1.25), 1e-12); /* np.std: ddof 0 */
    NEAR(d.pct[0], 1.75, 1e-12);
    NEAR(d.pct[1], 3.997, 1e-12);
    assert_true(v[0] == 4 && v[1] == 1);
    GP_CHECK_OK(gp_lg_dist_compute(NULL, 0, pcts, 2, &d)); /* vLLM's np.mean(x or 0) */
    assert_true(d.mean == 0 && d.median == 0 && d.pct[1] == 0);
}

static void test_pcts_parse(void **state)
{
    (void)state;
    double p[GP_LG_MAX_PCTS];
    int n;
    GP_CHECK_OK(gp_lg_pcts_parse("50,90,99.9", p, &n));
    assert_int_equal(n, 3);
    NEAR(p[2], 99.9, 1e-12);
    GP_CHECK_FAIL(gp_lg_pcts_parse("0", p, &n), GP_ERR_INVALID_ARG,
                  "'0' is not a percentile; allowed: numbers in (0, 100]");
    GP_CHECK_FAIL(gp_lg_pcts_parse("50,101", p, &n), GP_ERR_INVALID_ARG, "'101'");
    GP_CHECK_FAIL(gp_lg_pcts_parse("p99", p, &n), GP_ERR_INVALID_ARG, "'p99'");
    GP_CHECK_FAIL(gp_lg_pcts_parse("", p, &n), GP_ERR_INVALID_ARG, "no percentile given");
    GP_CHECK_FAIL(gp_lg_pcts_parse("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", p, &n), GP_ERR_INVALID_ARG,
                  "more than 16");
}

static void test_slo_parse(void **state)
{
    (void)state;
    gp_lg_slo s = {0};
    assert_false(gp_lg_slo_any(&s));
    GP_CHECK_OK(gp_lg_slo_add(&s, "ttft:500"));
    GP_CHECK_OK(gp_lg_slo_add(&s, "e2el:2.5"));
    assert_true(s.has_ttft && !s.has_tpot && s.has_e2el && s.ttft_ms == 500 && s.e2el_ms == 2.5);
    GP_CHECK_FAIL(gp_lg_slo_add(&s, "ttft:100"), GP_ERR_INVALID_ARG, "ttft given twice");
    GP_CHECK_FAIL(gp_lg_slo_add(&s, "itl:100"), GP_ERR_INVALID_ARG, "unknown metric 'itl'");
    GP_CHECK_FAIL(gp_lg_slo_add(&s, "tpot:-1"), GP_ERR_INVALID_ARG, "'-1' is not a number of milliseconds > 0");
    GP_CHECK_FAIL(gp_lg_slo_add(&s, "tpot"), GP_ERR_INVALID_ARG, "is not METRIC:MS");
}

static gp_lg_outcome ok_outcome(int in, int out, double ttft, double e2el)
{
    gp_lg_outcome o = {.ok = true, .prompt_tokens = in, .output_tokens = out, .ttft = ttft, .e2el = e2el};
    return o;
}

static void test_metrics_goodput(void **state)
{
    (void)state;
    double itl_a[] = {0.01, 0.03}, itl_b[] = {0.02};
    gp_lg_outcome o[5] = {
        ok_outcome(10, 3, 0.100, 0.140),  /* TPOT 20 ms: good */
        ok_outcome(20, 2, 0.300, 0.320),  /* TTFT 300 ms: misses the TTFT SLO */
        ok_outcome(30, 1, 0.050, 0.050),  /* one token: no TPOT, 0 for goodput: good */
        ok_outcome(40, 5, 0.100, 0.500),  /* TPOT 100 ms: misses the TPOT SLO */
        {.ok = false, .prompt_tokens = 99, .output_tokens = 7, .error = "HTTP 500"},
    };
    o[0].itl = itl_a;
    o[0].n_itl = 2;
    o[1].itl = itl_b;
    o[1].n_itl = 1;
    gp_lg_slo slo = {0};
    GP_CHECK_OK(gp_lg_slo_add(&slo, "ttft:200"));
    GP_CHECK_OK(gp_lg_slo_add(&slo, "tpot:50"));
    const double pcts[] = {99};
    gp_lg_metrics m;
    GP_CHECK_OK(gp_lg_metrics_compute(o, 5, 2.0, &slo, pcts, 1, &m));
    assert_int_equal(m.completed, 4);
    assert_int_equal(m.failed, 1);
    assert_int_equal(m.total_input, 100); /* the failed request's tokens are not counted */
    assert_int_equal(m.total_output, 11);
    NEAR(m.request_throughput, 2.0, 1e-12);
    NEAR(m.output_throughput, 5.5, 1e-12);
    NEAR(m.total_token_throughput, 55.5, 1e-12);
    assert_true(m.has_goodput);
    assert_int_equal(m.good, 2);
    NEAR(m.request_goodput, 1.0, 1e-12);
    NEAR(m.ttft.mean, (100 + 300 + 50 + 100) / 4.0, 1e-9);
    NEAR(m.ttft.median, 100, 1e-9);
    /* TPOT over the three requests of more than one token: 20, 20, 100 ms */
    NEAR(m.tpot.mean, 140.0 / 3, 1e-9);
    NEAR(m.tpot.median, 20, 1e-9);
    NEAR(m.itl.mean, 20, 1e-9);
    NEAR(m.itl.pct[0], 29.8, 1e-9); /* np.percentile([10, 20, 30], 99) */
    NEAR(m.e2el.median, (140 + 320) / 2.0, 1e-9);
    GP_CHECK_OK(gp_lg_metrics_compute(o, 5, 2.0, NULL, pcts, 1, &m));
    assert_false(m.has_goodput);
    GP_CHECK_FAIL(gp_lg_metrics_compute(o, 5, 0.0, NULL, pcts, 1, &m), GP_ERR_INVALID_ARG, "duration");
}

/* Gaps of n arrivals: their mean and squared coefficient of variation. */
static void gap_moments(const double *t, int n, double *mean, double *cv2)
{
    double s = 0, ss = 0;
    for (int i = 1; i < n; i++) {
        double g = t[i] - t[i - 1];
        assert_true(g >= 0);
        s += g;
        ss += g * g;
    }
    int k = n - 1;
    *mean = s / k;
    *cv2 = (ss / k - *mean * *mean) / (*mean * *mean);
}

static void test_arrivals(void **state)
{
    (void)state;
    enum { N = 40001 };
    double *t = malloc(N * sizeof *t), *u = malloc(N * sizeof *u);
    const double shapes[] = {1.0, 0.5, 4.0};
    for (int k = 0; k < 3; k++) {
        GP_CHECK_OK(gp_lg_arrivals(10.0, shapes[k], 7, N, t));
        assert_true(t[0] == 0.0);
        double mean, cv2;
        gap_moments(t, N, &mean, &cv2);
        /* 40000 gaps: the mean's relative error is ~ sqrt(cv2 / 40000) < 0.8% */
        NEAR(mean, 0.1, 0.1 * 0.03);
        NEAR(cv2, 1.0 / shapes[k], 0.1 / shapes[k]);
    }
    GP_CHECK_OK(gp_lg_arrivals(10.0, 1.0, 7, 100, t));
    GP_CHECK_OK(gp_lg_arrivals(10.0, 1.0, 7, 100, u));
    assert_memory_equal(t, u, 100 * sizeof *t);
    GP_CHECK_OK(gp_lg_arrivals(10.0, 1.0, 8, 100, u));
    assert_true(memcmp(t, u, 100 * sizeof *t) != 0);
    GP_CHECK_OK(gp_lg_arrivals(INFINITY, 1.0, 7, 100, t));
    for (int i = 0; i < 100; i++)
        assert_true(t[i] == 0.0);
    GP_CHECK_FAIL(gp_lg_arrivals(0.0, 1.0, 7, 10, t), GP_ERR_INVALID_ARG, "allowed: > 0 requests/s, or inf");
    GP_CHECK_FAIL(gp_lg_arrivals(1.0, 0.0, 7, 10, t), GP_ERR_INVALID_ARG, "burstiness 0");
    free(t);
    free(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_numpy), cmocka_unit_test(test_dist),
        cmocka_unit_test(test_pcts_parse),       cmocka_unit_test(test_slo_parse),
        cmocka_unit_test(test_metrics_goodput),  cmocka_unit_test(test_arrivals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
