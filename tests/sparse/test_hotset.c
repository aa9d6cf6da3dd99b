/* The hot-set tracker: capacity from a byte budget, the top-H choice
 * against a brute-force sort, every refused parameter, the decayed
 * frequencies and hit statistics, the step protocol, reload plans (top-H
 * reached, slots kept, hysteresis, the swap cap, stale plans refused) and a
 * stationary simulation whose hit rate reaches the best a hot set can give. */
#include "gp_test.h"

#include "gp_sparse.h"

static uint64_t g_rng = 7;

static double uniform(void) { return gp_test_uniform(&g_rng); }

static gp_config tiny_cfg(void)
{
    gp_config c;
    if (gp_config_preset("tiny", &c) != GP_OK)
        fail_msg("tiny preset: %s", gp_last_error());
    return c;
}

static void test_capacity(void **state)
{
    gp_config c;
    GP_CHECK_OK(gp_config_preset("llama3-8b", &c));
    assert_int_equal(gp_hotset_neuron_bytes(&c, GP_DTYPE_BF16), 3 * 4096 * 2);
    const uint64_t slot = 32ull * 3 * 4096 * 2; /* one neuron in every layer */
    int H = -1;
    bool all = true;
    GP_CHECK_OK(gp_hotset_capacity(&c, GP_DTYPE_BF16, 8ull << 30, &H, &all));
    assert_int_equal(H, (int)((8ull << 30) / slot / 8 * 8));
    assert_int_equal(H % GP_HOTSET_ALIGN, 0);
    assert_false(all);
    GP_CHECK_OK(gp_hotset_capacity(&c, GP_DTYPE_F16, 8 * slot, &H, &all));
    assert_int_equal(H, 8);
    GP_CHECK_OK(gp_hotset_capacity(&c, GP_DTYPE_BF16, 15 * slot, &H, &all)); /* rounds down */
    assert_int_equal(H, 8);
    GP_CHECK_OK(gp_hotset_capacity(&c, GP_DTYPE_BF16, 14336ull * slot, &H, &all));
    assert_int_equal(H, 14336);
    assert_true(all);
    GP_CHECK_OK(gp_hotset_capacity(&c, GP_DTYPE_BF16, UINT64_MAX, &H, &all));
    assert_true(all);
    /* the message names the budget and the bytes the minimum needs */
    GP_CHECK_FAIL(gp_hotset_capacity(&c, GP_DTYPE_BF16, 8 * slot - 1, &H, &all), GP_ERR_INVALID_ARG, "6291455 bytes");
    GP_CHECK_FAIL(gp_hotset_capacity(&c, GP_DTYPE_BF16, 0, &H, &all), GP_ERR_INVALID_ARG, "needs 6291456 bytes");
    GP_CHECK_FAIL(gp_hotset_capacity(&c, GP_DTYPE_F32, 1ull << 30, &H, &all), GP_ERR_INVALID_ARG, "F32");
}

/* index order of the top H by brute force: O(n^2) counting of who beats whom */
static int beats(const float *f, int a, int b)
{
    int an = isnan(f[a]), bn = isnan(f[b]);
    if (an != bn)
        return bn;
    if (!an && f[a] != f[b])
        return f[a] > f[b];
    return a < b;
}

static void test_choose(void **state)
{
    for (int trial = 0; trial < 40; trial++) {
        const int n = 1 + (int)(uniform() * 300), H = 1 + (int)(uniform() * n);
        float *f = malloc((size_t)n * sizeof *f);
        int *got = malloc((size_t)n * sizeof *got);
        for (int i = 0; i < n; i++) {
            double u = uniform();
            f[i] = u < 0.1 ? NAN : (float)((int)(uniform() * (trial % 2 ? 5 : 1000)) / 1000.0); /* many ties */
        }
        GP_CHECK_OK(gp_hotset_choose(f, n, H, got));
        for (int r = 0; r < H; r++) {
            int better = 0; /* neurons that beat got[r]: must be exactly r */
            for (int j = 0; j < n; j++)
                better += j != got[r] && beats(f, j, got[r]);
            assert_int_equal(better, r);
        }
        free(f), free(got);
    }
    float f[3] = {0.5f, 0.5f, 0.5f};
    int out[3];
    GP_CHECK_OK(gp_hotset_choose(f, 3, 3, out));
    assert_int_equal(out[0], 0), assert_int_equal(out[1], 1), assert_int_equal(out[2], 2);
    GP_CHECK_FAIL(gp_hotset_choose(f, 3, 4, out), GP_ERR_INVALID_ARG, "H 4");
    GP_CHECK_FAIL(gp_hotset_choose(f, 3, 0, out), GP_ERR_INVALID_ARG, "H 0");
}

static void test_params(void **state)
{
    const gp_config c = tiny_cfg();
    gp_hotset *h = NULL;
    gp_hotset_params d = gp_hotset_default_params();
    assert_true(d.decay > 0 && d.decay < 1);
    assert_true(d.reload_window >= 1);
    assert_int_equal(d.dtype, GP_DTYPE_BF16);
    d.hot_per_layer = 32;
    gp_hotset_params p = d;
    GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
    gp_hotset_destroy(h);
    p = d, p.decay = 1.0;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "decay 1 (allowed: 0 < decay < 1)");
    p = d, p.decay = 0.0;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "decay 0");
    p = d, p.decay = NAN;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "decay nan");
    p = d, p.reload_window = 0;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "reload_window 0 (allowed: >= 1");
    p = d, p.margin = -0.5;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "margin -0.5");
    p = d, p.max_swaps = -1;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "max_swaps -1");
    p = d, p.hot_per_layer = 0;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "hot_per_layer 0 (allowed: 1..ffn = 128");
    p = d, p.hot_per_layer = 129;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "hot_per_layer 129");
    p = d, p.dtype = GP_DTYPE_F32;
    GP_CHECK_FAIL(gp_hotset_create(&c, &p, NULL, &h), GP_ERR_INVALID_ARG, "dtype F32");
    /* a calibration of another shape */
    gp_sparsity s;
    gp_config other = c;
    other.ffn = 256;
    GP_CHECK_OK(gp_sparsity_thresholds_zero(&other, &s));
    GP_CHECK_FAIL(gp_hotset_create(&c, &d, &s, &h), GP_ERR_SHAPE, "ffn");
    gp_sparsity_free(&s);
}

/* Starts from the calibration's frequencies (top H, slots ascending) or
 * from zeros (neurons 0..H-1); the decay rule; hits; the step protocol. */
static void test_observe(void **state)
{
    const gp_config c = tiny_cfg();
    const int L = c.n_layers, F = c.ffn, H = 16;
    gp_sparsity s;
    GP_CHECK_OK(gp_sparsity_thresholds_zero(&c, &s));
    s.freq = malloc((size_t)L * F * sizeof *s.freq);
    for (int i = 0; i < L * F; i++)
        s.freq[i] = (float)uniform();
    gp_hotset_params p = gp_hotset_default_params();
    p.hot_per_layer = H, p.reload_window = 3, p.decay = 0.9;
    gp_hotset *h;
    GP_CHECK_OK(gp_hotset_create(&c, &p, &s, &h));
    assert_int_equal(gp_hotset_capacity_of(h), H);
    for (int l = 0; l < L; l++) {
        int top[16];
        GP_CHECK_OK(gp_hotset_choose(s.freq + (size_t)l * F, F, H, top));
        const int *sl = gp_hotset_slots(h, l);
        for (int k = 0; k < H; k++) {
            assert_true(gp_hotset_slot_of(h, l, top[k]) >= 0);
            if (k)
                assert_true(sl[k] > sl[k - 1]); /* ascending */
            assert_int_equal(gp_hotset_slot_of(h, l, sl[k]), k);
        }
        int cold[128], n;
        GP_CHECK_OK(gp_hotset_cold_list(h, l, cold, &n));
        assert_int_equal(n, F - H);
        for (int k = 0; k < n; k++)
            assert_int_equal(gp_hotset_slot_of(h, l, cold[k]), -1);
        assert_memory_equal(gp_hotset_freq(h, l), s.freq + (size_t)l * F, (size_t)F * sizeof(float));
    }
    /* one step: layer 0 from an active mask, layer 1 from rows */
    uint8_t act[128];
    float rows[2 * 128];
    for (int j = 0; j < F; j++) {
        act[j] = uniform() < 0.5;
        rows[j] = (float)(uniform() - 0.5);
        rows[F + j] = (float)(uniform() - 0.5);
    }
    const float t = 0.3f;
    long want_active = 0, want_hits = 0;
    for (int j = 0; j < F; j++) {
        want_active += act[j];
        want_hits += act[j] && gp_hotset_slot_of(h, 0, j) >= 0;
        int a1 = fabsf(rows[j]) > t || fabsf(rows[F + j]) > t;
        want_active += a1;
        want_hits += a1 && gp_hotset_slot_of(h, 1, j) >= 0;
    }
    int due = -1;
    GP_CHECK_FAIL(gp_hotset_end_step(h, &due), GP_ERR_STATE, "layer 0 was not observed");
    GP_CHECK_OK(gp_hotset_observe(h, 0, act));
    GP_CHECK_FAIL(gp_hotset_observe(h, 0, act), GP_ERR_STATE, "layer 0 was already observed");
    GP_CHECK_FAIL(gp_hotset_end_step(h, &due), GP_ERR_STATE, "layer 1 was not observed");
    GP_CHECK_FAIL(gp_hotset_observe(h, 2, act), GP_ERR_INVALID_ARG, "layer 2");
    GP_CHECK_FAIL(gp_hotset_observe_rows(h, 1, 17, rows, t), GP_ERR_INVALID_ARG, "B 17");
    GP_CHECK_FAIL(gp_hotset_observe_rows(h, 1, 2, rows, -1.0f), GP_ERR_INVALID_ARG, "threshold -1");
    GP_CHECK_OK(gp_hotset_observe_rows(h, 1, 2, rows, t));
    GP_CHECK_OK(gp_hotset_end_step(h, &due));
    assert_int_equal(due, 0);
    const float dd = 0.9f, e = (float)(1.0 - 0.9);
    for (int j = 0; j < F; j++) {
        float want0 = dd * s.freq[j] + (act[j] ? e : 0.0f);
        int a1 = fabsf(rows[j]) > t || fabsf(rows[F + j]) > t;
        float want1 = dd * s.freq[F + j] + (a1 ? e : 0.0f);
        assert_true(gp_hotset_freq(h, 0)[j] == want0);
        assert_true(gp_hotset_freq(h, 1)[j] == want1);
    }
    gp_hotset_stats st;
    gp_hotset_get_stats(h, &st, 0);
    assert_int_equal(st.steps, 1);
    assert_int_equal(st.active, want_active);
    assert_int_equal(st.hits, want_hits);
    assert_true(fabs(st.hit_rate - (double)want_hits / want_active) < 1e-12);
    for (int step = 2; step <= 6; step++) {
        GP_CHECK_OK(gp_hotset_observe(h, 0, act));
        GP_CHECK_OK(gp_hotset_observe(h, 1, act));
        GP_CHECK_OK(gp_hotset_end_step(h, &due));
        assert_int_equal(due, step % 3 == 0);
    }
    gp_hotset_get_stats(h, &st, 1);
    assert_int_equal(st.steps, 6);
    gp_hotset_get_stats(h, &st, 0);
    assert_int_equal(st.steps, 0);
    assert_int_equal(st.active, 0);
    assert_true(st.hit_rate == 0.0);
    gp_hotset_destroy(h);
    gp_sparsity_free(&s);

    /* without frequencies: all 0, the lowest indices hot */
    GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
    for (int k = 0; k < H; k++)
        assert_int_equal(gp_hotset_slots(h, 1)[k], k);
    gp_hotset_destroy(h);
}

/* Sets layer l's frequencies by observing: the tracker has no setter, so
 * steps with chosen activity drive it (decay 0.5: a few steps separate the
 * neurons clearly). */
static void drive(gp_hotset *h, const gp_config *c, const uint8_t *const *pattern, int steps)
{
    for (int s = 0; s < steps; s++) {
        for (int l = 0; l < c->n_layers; l++)
            GP_CHECK_OK(gp_hotset_observe(h, l, pattern[s] + (size_t)l * c->ffn));
        GP_CHECK_OK(gp_hotset_end_step(h, NULL));
    }
}

static void test_plan(void **state)
{
    const gp_config c = tiny_cfg();
    const int L = c.n_layers, F = c.ffn, H = 24;
    gp_hotset_params p = gp_hotset_default_params();
    p.hot_per_layer = H, p.margin = 0.0, p.decay = 0.5;
    gp_hotset *h;
    GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
    /* random activity, 12 steps: frequencies with few ties */
    enum { STEPS = 12 };
    uint8_t *pat[STEPS];
    for (int s = 0; s < STEPS; s++) {
        pat[s] = malloc((size_t)L * F);
        for (int i = 0; i < L * F; i++)
            pat[s][i] = uniform() < (i % F) / (double)F; /* higher neurons more active */
    }
    drive(h, &c, (const uint8_t *const *)pat, STEPS);
    int before[2][24];
    for (int l = 0; l < L; l++)
        memcpy(before[l], gp_hotset_slots(h, l), sizeof before[l]);
    gp_hotset_plan plan;
    GP_CHECK_OK(gp_hotset_plan_alloc(h, &plan));
    assert_int_equal(plan.cap, H);
    GP_CHECK_OK(gp_hotset_plan_make(h, &plan));
    assert_true(plan.total > 0);
    assert_int_equal(plan.bytes, (uint64_t)plan.total * gp_hotset_neuron_bytes(&c, GP_DTYPE_BF16));
    GP_CHECK_OK(gp_hotset_plan_commit(h, &plan));
    for (int l = 0; l < L; l++) {
        /* the top H is hot (up to ties: compare frequencies, not indices) */
        int top[24];
        const float *f = gp_hotset_freq(h, l);
        GP_CHECK_OK(gp_hotset_choose(f, F, H, top));
        float hot_min = INFINITY, cold_max = -INFINITY;
        for (int j = 0; j < F; j++) {
            if (gp_hotset_slot_of(h, l, j) >= 0)
                hot_min = fminf(hot_min, f[j]);
            else
                cold_max = fmaxf(cold_max, f[j]);
        }
        assert_true(hot_min >= cold_max);
        /* a neuron hot before and after kept its slot; slots are a permutation of hot neurons */
        for (int s = 0; s < H; s++) {
            const int j = before[l][s];
            if (gp_hotset_slot_of(h, l, j) >= 0)
                assert_int_equal(gp_hotset_slot_of(h, l, j), s);
            assert_int_equal(gp_hotset_slot_of(h, l, gp_hotset_slots(h, l)[s]), s);
        }
    }
    gp_hotset_stats st;
    gp_hotset_get_stats(h, &st, 0);
    assert_int_equal(st.reloads, 1);
    assert_int_equal(st.swaps, plan.total);
    assert_int_equal(st.bytes, plan.bytes);
    /* committing the same plan again: its swaps no longer match */
    GP_CHECK_FAIL(gp_hotset_plan_commit(h, &plan), GP_ERR_STATE, "does not match the current hot set");
    /* a settled set plans nothing */
    GP_CHECK_OK(gp_hotset_plan_make(h, &plan));
    assert_int_equal(plan.total, 0);
    gp_hotset_plan_free(&plan);
    gp_hotset_destroy(h);

    /* hysteresis: f_in - f_out must exceed the margin. After one step with
     * neuron H (cold) active and everything else idle, f = 0.5 for it and 0
     * for the rest: margin 0.5 keeps it out, 0.49 lets it in. */
    uint8_t *one = calloc((size_t)L * F, 1);
    for (int l = 0; l < L; l++)
        one[(size_t)l * F + H] = 1;
    const double margins[2] = {0.5, 0.49};
    for (int m = 0; m < 2; m++) {
        p.margin = margins[m];
        GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
        const uint8_t *pp[1] = {one};
        drive(h, &c, pp, 1);
        GP_CHECK_OK(gp_hotset_plan_alloc(h, &plan));
        GP_CHECK_OK(gp_hotset_plan_make(h, &plan));
        assert_int_equal(plan.total, m == 0 ? 0 : L);
        if (m == 1) {
            /* the outgoing one is the coldest hot neuron: all tie at 0, the highest index goes */
            assert_int_equal(plan.swaps[0].in, H);
            assert_int_equal(plan.swaps[0].out, H - 1);
            assert_int_equal(plan.swaps[0].slot, H - 1);
        }
        gp_hotset_plan_free(&plan);
        gp_hotset_destroy(h);
    }
    free(one);

    /* the cap: at most max_swaps per layer, the best pairs first */
    p.margin = 0.0, p.max_swaps = 3;
    GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
    drive(h, &c, (const uint8_t *const *)pat, STEPS);
    GP_CHECK_OK(gp_hotset_plan_alloc(h, &plan));
    assert_int_equal(plan.cap, 3);
    GP_CHECK_OK(gp_hotset_plan_make(h, &plan));
    for (int l = 0; l < L; l++) {
        assert_int_equal(plan.n_swaps[l], 3);
        const float *f = gp_hotset_freq(h, l);
        int top[3];
        float cf[128];
        for (int j = 0; j < F; j++) /* the cold neurons' frequencies, hot ones pushed below all */
            cf[j] = gp_hotset_slot_of(h, l, j) >= 0 ? -1.0f : f[j];
        GP_CHECK_OK(gp_hotset_choose(cf, F, 3, top));
        for (int k = 0; k < 3; k++)
            assert_int_equal(plan.swaps[(size_t)l * plan.cap + k].in, top[k]);
    }
    gp_hotset_plan_free(&plan);
    gp_hotset_destroy(h);
    for (int s = 0; s < STEPS; s++)
        free(pat[s]);
}

/* Stationary activity (neuron j active with a fixed probability q_j per
 * step) from a start that knows nothing: with reloads the hit rate after a
 * warm-up approaches the best any H neurons give, sum of the top H q_j over
 * sum of all q_j. Margin 0.02 and a cap of 8 swaps per reload. */
static void test_stationary(void **state)
{
    const gp_config c = tiny_cfg();
    const int L = c.n_layers, F = c.ffn, H = 32;
    gp_hotset_params p = gp_hotset_default_params();
    p.hot_per_layer = H, p.decay = 0.95, p.reload_window = 8, p.margin = 0.02, p.max_swaps = 8;
    gp_hotset *h;
    GP_CHECK_OK(gp_hotset_create(&c, &p, NULL, &h));
    float q[2][128];
    for (int l = 0; l < L; l++)
        for (int j = 0; j < F; j++) /* a skewed profile in a shuffled order */
            q[l][(j * 37 + l * 11) % F] = (float)pow(0.97, j);
    double best = 0.0, all = 0.0;
    for (int l = 0; l < L; l++) {
        int top[32];
        GP_CHECK_OK(gp_hotset_choose(q[l], F, H, top));
        for (int k = 0; k < H; k++)
            best += q[l][top[k]];
        for (int j = 0; j < F; j++)
            all += q[l][j];
    }
    best /= all;
    gp_hotset_plan plan;
    GP_CHECK_OK(gp_hotset_plan_alloc(h, &plan));
    uint8_t act[128];
    long max_swaps_seen = 0;
    for (int step = 0; step < 3000; step++) {
        if (step == 1000) {
            gp_hotset_stats st;
            gp_hotset_get_stats(h, &st, 1); /* after the warm-up */
        }
        for (int l = 0; l < L; l++) {
            for (int j = 0; j < F; j++)
                act[j] = uniform() < q[l][j];
            GP_CHECK_OK(gp_hotset_observe(h, l, act));
        }
        int due;
        GP_CHECK_OK(gp_hotset_end_step(h, &due));
        if (due) {
            GP_CHECK_OK(gp_hotset_plan_make(h, &plan));
            for (int l = 0; l < L; l++)
                max_swaps_seen = plan.n_swaps[l] > max_swaps_seen ? plan.n_swaps[l] : max_swaps_seen;
            GP_CHECK_OK(gp_hotset_plan_commit(h, &plan));
        }
    }
    gp_hotset_stats st;
    gp_hotset_get_stats(h, &st, 0);
    assert_int_equal(st.steps, 2000);
    assert_int_equal(st.reloads, 250);
    assert_true(max_swaps_seen <= 8);
    print_message("stationary: hit rate %.4f, best %.4f, uniform %.4f, %ld swaps over %ld reloads\n", st.hit_rate,
                  best, (double)H / F, st.swaps, st.reloads);
    assert_true(st.hit_rate > best - 0.03);
    assert_true(st.hit_rate > 1.5 * H / F);
    gp_hotset_plan_free(&plan);
    gp_hotset_destroy(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity), cmocka_unit_test(test_choose), cmocka_unit_test(test_params),
        cmocka_unit_test(test_observe), cmocka_unit_test(test_plan),   cmocka_unit_test(test_stationary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
