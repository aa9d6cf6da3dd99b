/* Unit tests of the rebalancer's parts: the overlap timeline, the ratio
 * formula, the latency fit, the decision rules fed with hand-made statistics
 * (hysteresis, cooldown, no flapping, logged inputs, parameter checks), and
 * the simulated executor's timeline and executor contract. */
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

#include "sim_exec.h"

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))
#define HAS(text, part)                                                                                            \
    do {                                                                                                           \
        if (!strstr((text), (part)))                                                                               \
            fail_msg("\"%s\" does not mention \"%s\"", (text), (part));                                            \
    } while (0)

/* ------------------------------------------------------------ formulas */

static void test_overlap(void **state)
{
    /* M = 1: nothing overlaps */
    NEAR(gp_overlap_step_ms(4, 1, 1.0, 2.0), 12.0, 1e-12);
    /* M = 2, equal stages: L * M * a plus one stage of drain */
    for (int L = 1; L <= 5; L++)
        NEAR(gp_overlap_step_ms(L, 2, 1.0, 1.0), 2.0 * L + 1, 1e-12);
    /* attention twice the FFN: attention sets the pace, the last FFN drains */
    NEAR(gp_overlap_step_ms(2, 2, 2.0, 1.0), 9.0, 1e-12);
    /* FFN-bound: the first attention fills, FFN sets the pace */
    NEAR(gp_overlap_step_ms(3, 2, 1.0, 2.0), 1.0 + 3 * 2 * 2.0, 1e-12);
    /* invalid inputs give 0 */
    assert_true(gp_overlap_step_ms(0, 2, 1, 1) == 0);
    assert_true(gp_overlap_step_ms(2, 0, 1, 1) == 0);
    assert_true(gp_overlap_step_ms(2, GP_PIPE_MAX_MICRO + 1, 1, 1) == 0);
    assert_true(gp_overlap_step_ms(2, 2, NAN, 1) == 0);
    assert_true(gp_overlap_step_ms(2, 2, -1, 1) == 0);
}

static void test_target_share(void **state)
{
    /* M >= 2: equal latencies. t_a = 2, t_f = 1 at s0 = 0.5: w_a = 1, w_f = 0.5 -> 2/3 */
    NEAR(gp_rebalance_target_share(2, 1, 0.5, 2, 0.1, 0.9), 2.0 / 3.0, 1e-12);
    /* ... and at the target the predicted latencies are equal */
    double s0 = 0.3, ta = 5, tf = 1, s = gp_rebalance_target_share(ta, tf, s0, 4, 0.01, 0.99);
    NEAR(ta * s0 / s, tf * (1 - s0) / (1 - s), 1e-9);
    /* balanced already: stays */
    NEAR(gp_rebalance_target_share(1, 1, 0.5, 2, 0.1, 0.9), 0.5, 1e-12);
    /* M == 1: s/(1-s) = sqrt(w_a/w_f) = sqrt(2) */
    NEAR(gp_rebalance_target_share(2, 1, 0.5, 1, 0.1, 0.9), sqrt(2.0) / (1 + sqrt(2.0)), 1e-12);
    /* ... which minimises w_a/s + w_f/(1-s) */
    {
        double wa = 2 * 0.5, wf = 1 * 0.5, best = INFINITY, arg = 0;
        for (int i = 1; i < 10000; i++) {
            double x = i / 10000.0, v = wa / x + wf / (1 - x);
            if (v < best) {
                best = v;
                arg = x;
            }
        }
        NEAR(gp_rebalance_target_share(2, 1, 0.5, 1, 0.01, 0.99), arg, 1e-4);
    }
    /* bounds */
    NEAR(gp_rebalance_target_share(100, 1, 0.5, 2, 0.1, 0.9), 0.9, 1e-12);
    NEAR(gp_rebalance_target_share(1, 100, 0.5, 2, 0.1, 0.9), 0.1, 1e-12);
    /* nothing measured: the current share, clamped */
    NEAR(gp_rebalance_target_share(0, 1, 0.4, 2, 0.1, 0.9), 0.4, 1e-12);
    NEAR(gp_rebalance_target_share(NAN, 1, 0.95, 2, 0.1, 0.9), 0.9, 1e-12);
}

static void test_fit(void **state)
{
    gp_latency_fit f;
    const double total = 132, sat = GP_REBALANCE_SAT_SHARE * total; /* 56 */
    /* exact recovery of m max(1, s_sat/s) + c/s from samples on both sides of s_sat */
    const double m = 0.7, c = 40;
    double s[4] = {24, 48, 80, 112}, t[4];
    for (int i = 0; i < 4; i++)
        t[i] = m * fmax(1, sat / s[i]) + c / s[i];
    GP_CHECK_OK(gp_latency_fit_make(s, t, 4, total, &f));
    assert_int_equal(f.n, 4);
    NEAR(f.mem_ms, m, 1e-9);
    NEAR(f.comp, c, 1e-7);
    NEAR(gp_latency_fit_eval(&f, 64), m + c / 64, 1e-9);
    NEAR(gp_latency_fit_eval(&f, 16), m * sat / 16 + c / 16, 1e-9);
    /* two samples suffice when they straddle s_sat */
    double s2[2] = {40, 100}, t2[2] = {t[0] * 0 + m * sat / 40 + c / 40, m + c / 100};
    GP_CHECK_OK(gp_latency_fit_make(s2, t2, 2, total, &f));
    NEAR(f.mem_ms, m, 1e-9);
    NEAR(f.comp, c, 1e-7);
    /* all at or below s_sat: memory and compute both scale as 1/s, c alone */
    double s3[2] = {16, 48}, t3[2] = {60.0 / 16, 60.0 / 48};
    GP_CHECK_OK(gp_latency_fit_make(s3, t3, 2, total, &f));
    NEAR(f.mem_ms, 0, 1e-12);
    NEAR(f.comp, 60, 1e-9);
    /* more SMs measured slower: memory part alone, no gain from more SMs */
    double s4[2] = {64, 96}, t4[2] = {2.0, 2.2};
    GP_CHECK_OK(gp_latency_fit_make(s4, t4, 2, total, &f));
    assert_true(f.comp == 0 && f.mem_ms > 2.0 && f.mem_ms < 2.2);
    NEAR(gp_latency_fit_eval(&f, 120), f.mem_ms, 1e-12);
    /* one sample: optimistic both ways */
    double s5[1] = {64}, t5[1] = {3.0};
    GP_CHECK_OK(gp_latency_fit_make(s5, t5, 1, total, &f));
    assert_int_equal(f.n, 1);
    NEAR(gp_latency_fit_eval(&f, 128), 1.5, 1e-12);     /* more SMs: 1/s */
    NEAR(gp_latency_fit_eval(&f, 56), 3.0, 1e-12);      /* fewer, down to s_sat: free */
    NEAR(gp_latency_fit_eval(&f, 28), 6.0, 1e-12);      /* below s_sat: memory-bound 1/s */
    double s6[1] = {16}, t6[1] = {8.0};
    GP_CHECK_OK(gp_latency_fit_make(s6, t6, 1, total, &f));
    NEAR(gp_latency_fit_eval(&f, 8), 16.0, 1e-12);
    NEAR(gp_latency_fit_eval(&f, 32), 4.0, 1e-12);
    /* repeated counts are one distinct count */
    double s7[3] = {32, 32, 32}, t7[3] = {1, 2, 3};
    GP_CHECK_OK(gp_latency_fit_make(s7, t7, 3, total, &f));
    assert_int_equal(f.n, 1);
    NEAR(f.t0, 2.0, 1e-12);
    /* bad input names the value */
    double bad_s[2] = {32, 0}, bad_t[2] = {1, 1};
    assert_int_equal(gp_latency_fit_make(bad_s, bad_t, 2, total, &f), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "sample 1");
    assert_int_equal(gp_latency_fit_make(s, t, 0, total, &f), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_latency_fit_make(s, t, 2, 0, &f), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "device of 0 SMs");
    assert_true(isnan(gp_latency_fit_eval(&f, 0)));
}

/* ------------------------------------------------------------ decisions */

/* A step's statistics by hand: L layers, M micro-batches, every attention
 * stage a ms, every FFN stage f ms. */
typedef struct fake_stats {
    gp_step_stats s;
    float attn[64], ffn[64];
    double a2f[16];
} fake_stats;

static void fake(fake_stats *fs, int L, int M, double a, double f, double step_ms)
{
    memset(fs, 0, sizeof *fs);
    fs->s.B = 64;
    fs->s.M = M;
    fs->s.n_layers = L;
    for (int i = 0; i < L * M; i++) {
        fs->attn[i] = (float)a;
        fs->ffn[i] = (float)f;
    }
    for (int l = 0; l < L; l++)
        fs->a2f[l] = 64 * 16384.0;
    fs->s.attn_ms = fs->attn;
    fs->s.ffn_ms = fs->ffn;
    fs->s.a2f_bytes = fs->a2f;
    fs->s.a2f_mb_per_token = 16384.0 / 1e6;
    fs->s.step_ms = (float)step_ms;
    fs->s.attn_backlog_mean = 0.5;
    fs->s.ffn_backlog_mean = 1.5;
}

/* The 14 pairs of a 132-SM device cut into 15 groups of 8. */
static int device_pairs(gp_split_info *p)
{
    for (int k = 1; k <= 14; k++)
        p[k - 1] = (gp_split_info){.a_req = 8 * k, .f_req = 132 - 8 * k, .a_got = 8 * k, .f_got = 132 - 8 * k,
                                   .partitioned = true, .unit = "SMs"};
    return 14;
}

static void test_params(void **state)
{
    gp_rebalance_params d = gp_rebalance_default_params();
    assert_int_equal(d.window, 4);
    NEAR(d.hysteresis, 0.03, 1e-12);
    NEAR(d.min_share, 0.1, 1e-12);
    NEAR(d.max_share, 0.9, 1e-12);
    assert_int_equal(d.cooldown, 8);
    assert_string_equal(gp_rebalance_policy_name(GP_REBALANCE_OFF), "off");
    assert_string_equal(gp_rebalance_policy_name(GP_REBALANCE_RATIO), "ratio");
    assert_string_equal(gp_rebalance_policy_name(GP_REBALANCE_MODEL), "model");
    assert_string_equal(gp_rebalance_policy_name((gp_rebalance_policy)7), "unknown");

    gp_split_info pairs[14];
    int n = device_pairs(pairs);
    gp_rebalancer *r = (gp_rebalancer *)&r;
    gp_rebalance_params p = d;
    p.window = 0;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    assert_null(r);
    HAS(gp_last_error(), "window 0");
    p = d;
    p.hysteresis = 1.5;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "hysteresis 1.5");
    p = d;
    p.min_share = 0.7;
    p.max_share = 0.6;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "[0.7, 0.6]");
    p = d;
    p.cooldown = -1;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "cooldown -1");
    p = d;
    p.policy = (gp_rebalance_policy)9;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "policy 9");
    assert_int_equal(gp_rebalancer_create(&d, NULL, 3, &r), GP_ERR_INVALID_ARG);
    /* no pair inside the bounds: nothing to choose from */
    p = d;
    p.min_share = 0.95;
    p.max_share = 0.99;
    assert_int_equal(gp_rebalancer_create(&p, pairs, n, &r), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "nothing to choose from");
    /* a bad current pair is refused without a decision */
    GP_CHECK_OK(gp_rebalancer_create(&d, pairs, n, &r));
    fake_stats fs;
    fake(&fs, 2, 2, 1, 1, 5);
    int next = -5;
    assert_false(gp_rebalancer_observe(r, 14, &fs.s, &next, NULL));
    HAS(gp_last_error(), "current pair 14");
    assert_false(gp_rebalancer_observe(r, 3, NULL, &next, NULL));
    assert_int_equal(next, 3);
    gp_rebalancer_destroy(r);
    gp_rebalancer_destroy(NULL);
}

/* What the ratio policy predicts for the pairs bracketing its target, from
 * stats of L = 1, M = 2 with stage times a, f on pair cur and no time
 * outside the stages. */
static void ratio_expectation(const gp_split_info *pairs, int n, int cur, double a, double f, int *best, double *gain)
{
    double s0 = (double)pairs[cur].a_got / 132, t = gp_rebalance_target_share(2 * a, 2 * f, s0, 2, 0.1, 0.9);
    int lo = -1, hi = -1;
    for (int j = 0; j < n; j++) {
        double sj = (double)pairs[j].a_got / 132;
        if (sj < 0.1 || sj > 0.9)
            continue;
        if (sj <= t && (lo < 0 || sj > (double)pairs[lo].a_got / 132))
            lo = j;
        if (sj >= t && (hi < 0 || sj < (double)pairs[hi].a_got / 132))
            hi = j;
    }
    double now = gp_overlap_step_ms(1, 2, a, f), best_ms = INFINITY;
    int br[2] = {lo, hi};
    for (int k = 0; k < 2; k++) {
        int j = br[k];
        if (j < 0)
            continue;
        double ms = j == cur ? now
                             : gp_overlap_step_ms(1, 2, a * pairs[cur].a_got / pairs[j].a_got,
                                                  f * pairs[cur].f_got / pairs[j].f_got);
        if (ms < best_ms) {
            best_ms = ms;
            *best = j;
        }
    }
    *gain = (now - best_ms) / now;
}

static void test_hysteresis(void **state)
{
    gp_split_info pairs[14];
    int n = device_pairs(pairs);
    const int cur = 6; /* 56:76 */
    const double a = 1.25, f = 1.0;
    int best = -1;
    double gain = 0;
    ratio_expectation(pairs, n, cur, a, f, &best, &gain);
    assert_true(best != cur && gain > 0.01);
    fake_stats fs;
    fake(&fs, 1, 2, a, f, gp_overlap_step_ms(1, 2, a, f));
    for (int k = 0; k < 2; k++) {
        gp_rebalance_params p = gp_rebalance_default_params();
        p.window = 1;
        p.cooldown = 0;
        p.hysteresis = k == 0 ? gain - 0.005 : gain + 0.005; /* just below, just above the predicted gain */
        gp_rebalancer *r;
        GP_CHECK_OK(gp_rebalancer_create(&p, pairs, n, &r));
        int next;
        gp_rebalance_decision d;
        assert_true(gp_rebalancer_observe(r, cur, &fs.s, &next, &d));
        NEAR((d.predicted_from_ms - d.predicted_to_ms) / d.predicted_from_ms, gain, 1e-6);
        if (k == 0) {
            assert_int_equal(next, best);
            assert_int_equal(d.to, best);
            HAS(d.reason, "move");
        } else {
            assert_int_equal(next, cur);
            assert_int_equal(d.to, cur);
            HAS(d.reason, "hysteresis");
        }
        printf("  hysteresis %.4f, predicted gain %.4f: %s\n", p.hysteresis, gain, d.reason);
        gp_rebalancer_destroy(r);
    }
}

/* Inputs logged: window means of what was fed. Cooldown: after a move the
 * next `cooldown` steps are discarded, then a full window. */
static void test_log_and_cooldown(void **state)
{
    gp_split_info pairs[14];
    int n = device_pairs(pairs);
    gp_rebalance_params p = gp_rebalance_default_params();
    p.window = 2;
    p.cooldown = 3;
    gp_rebalancer *r;
    GP_CHECK_OK(gp_rebalancer_create(&p, pairs, n, &r));
    fake_stats f1, f2;
    fake(&f1, 2, 2, 3.0, 1.0, 14.0);
    fake(&f2, 2, 2, 5.0, 1.0, 22.0);
    f2.s.attn_backlog_mean = 1.5;
    int next;
    gp_rebalance_decision d;
    assert_false(gp_rebalancer_observe(r, 2, &f1.s, &next, &d));
    assert_int_equal(next, 2);
    assert_true(gp_rebalancer_observe(r, 2, &f2.s, &next, &d));
    assert_int_equal(d.step, 2);
    assert_int_equal(d.from, 2);
    assert_int_equal(d.from_a, 24);
    NEAR(d.attn_ms, 2 * (3.0 + 5.0) / 2, 1e-6); /* per layer, both micro-batches, mean of 2 steps */
    NEAR(d.ffn_ms, 2.0, 1e-6);
    NEAR(d.step_ms, 18.0, 1e-6);
    NEAR(d.attn_backlog, 1.0, 1e-12);
    NEAR(d.ffn_backlog, 1.5, 1e-12);
    NEAR(d.a2f_mb_per_token, 0.016384, 1e-9);
    assert_true(d.target_share > 24.0 / 132);
    assert_int_not_equal(d.to, 2); /* attention 4x the FFN on 24 of 132 SMs: moves up */
    assert_int_equal(d.to_a, pairs[d.to].a_got);
    assert_int_equal(next, d.to);
    const gp_rebalance_decision *log;
    assert_int_equal(gp_rebalancer_log(r, &log), 1);
    assert_memory_equal(&log[0], &d, sizeof d);
    /* cooldown: 3 steps without a decision, then a window of 2 */
    int cur = next;
    for (int i = 0; i < 3 + 1; i++) {
        assert_false(gp_rebalancer_observe(r, cur, &f1.s, &next, &d));
        assert_int_equal(next, cur);
    }
    assert_true(gp_rebalancer_observe(r, cur, &f1.s, &next, &d));
    assert_int_equal(d.step, 2 + 3 + 2);
    assert_int_equal(gp_rebalancer_log(r, NULL), 2);
    gp_rebalancer_destroy(r);
}

/* Predictions that contradict each other (at P the stats say go to Q, at Q
 * they say go back to P, both steps equally fast) must not make the
 * rebalancer flap: it returns to a measured pair only for a measured gain. */
static void test_no_flap(void **state)
{
    gp_split_info pairs[2] = {
        {.a_req = 48, .f_req = 84, .a_got = 48, .f_got = 84, .partitioned = true, .unit = "SMs"},
        {.a_req = 80, .f_req = 52, .a_got = 80, .f_got = 52, .partitioned = true, .unit = "SMs"},
    };
    gp_rebalance_params p = gp_rebalance_default_params();
    p.window = 1;
    p.cooldown = 0;
    gp_rebalancer *r;
    GP_CHECK_OK(gp_rebalancer_create(&p, pairs, 2, &r));
    fake_stats up, down;
    fake(&up, 2, 2, 2.0, 1.0, 10.0);   /* attention-heavy: wants pair 1 */
    fake(&down, 2, 2, 1.0, 2.0, 10.0); /* FFN-heavy: wants pair 0 */
    int cur = 0, next, moves = 0;
    gp_rebalance_decision d;
    assert_true(gp_rebalancer_observe(r, cur, &up.s, &next, &d));
    assert_int_equal(next, 1);
    HAS(d.reason, "predicted");
    cur = next;
    moves++;
    for (int i = 0; i < 50; i++) {
        assert_true(gp_rebalancer_observe(r, cur, &down.s, &next, &d));
        if (next != cur)
            fail_msg("step %d: flapped back to %d: %s", d.step, next, d.reason);
        HAS(d.reason, "measured");
    }
    /* pair 1 now measures slower: a measured gain beyond the hysteresis
     * justifies one return ... */
    down.s.step_ms = 12.0;
    for (int i = 0; i < 50 && next == cur; i++)
        gp_rebalancer_observe(r, cur, &down.s, &next, &d);
    assert_int_equal(next, 0);
    HAS(d.reason, "measured");
    cur = next;
    moves++;
    /* ... and the attention-heavy stats at pair 0 no longer send it back */
    for (int i = 0; i < 50; i++) {
        gp_rebalancer_observe(r, cur, &up.s, &next, &d);
        if (next != cur)
            fail_msg("step %d: flapped to %d again: %s", d.step, next, d.reason);
    }
    assert_int_equal(moves, 2);
    /* another batch size is another workload: the measurements are dropped */
    up.s.B = 128;
    assert_true(gp_rebalancer_observe(r, cur, &up.s, &next, &d));
    assert_int_equal(next, 1);
    HAS(d.reason, "predicted");
    gp_rebalancer_destroy(r);
}

/* ------------------------------------------------------------ simulated executor */

typedef struct unit_cost {
    double a, f; /* ms per stage regardless of rows and SMs, unless scaled */
    bool scale;  /* a * rows / sms */
    bool poison; /* return NaN */
} unit_cost;

static double ucost(void *user, gp_sim_side side, long step, int layer, int micro, int rows, int sms)
{
    const unit_cost *u = user;
    if (u->poison)
        return NAN;
    double v = side == GP_SIM_ATTN ? u->a : u->f;
    return u->scale ? v * rows / sms : v;
}

static gp_sim_exec *sim(int L, unit_cost *u, double sa, double sf, int vocab)
{
    gp_sim_params p = gp_sim_default_params();
    p.n_layers = L;
    p.cost = ucost;
    p.user = u;
    p.attn_slowdown = sa;
    p.ffn_slowdown = sf;
    p.vocab = vocab;
    gp_sim_exec *x;
    GP_CHECK_OK(gp_sim_exec_create(&p, &x));
    return x;
}

static void test_sim_timeline(void **state)
{
    unit_cost u = {.a = 1, .f = 1};
    gp_sim_exec *x = sim(1, &u, 2.0, 2.0, 0);
    gp_step_plan pn = {.B = 2, .M = 2, .b0 = {0, 1}, .nb = {1, 1}, .n_layers = 1};
    float b[4][GP_PIPE_MAX_MICRO];
    gp_step_timing t = {.begin = {b[0], b[2]}, .end = {b[1], b[3]}};
    /* A0 alone [0, 1]; A1 and F0 together from 1, each at half speed: [1, 3];
     * F1 alone [3, 4] */
    GP_CHECK_OK(gp_sim_exec_timeline(x, 0, &pn, -1, &t));
    NEAR(t.begin[0][0], 0, 1e-6);
    NEAR(t.end[0][0], 1, 1e-6);
    NEAR(t.begin[0][1], 1, 1e-6);
    NEAR(t.end[0][1], 3, 1e-6);
    NEAR(t.begin[1][0], 1, 1e-6);
    NEAR(t.end[1][0], 3, 1e-6);
    NEAR(t.begin[1][1], 3, 1e-6);
    NEAR(t.end[1][1], 4, 1e-6);
    NEAR(t.step_ms, 4, 1e-6);
    gp_sim_exec_destroy(x);

    /* without interference, uniform stages: the rebalancer's overlap model */
    for (int M = 1; M <= GP_PIPE_MAX_MICRO; M++) {
        unit_cost v = {.a = 0.7, .f = 1.3};
        gp_sim_exec *y = sim(5, &v, 1.0, 1.0, 0);
        gp_step_plan q = {.B = 8, .M = M, .n_layers = 5};
        for (int m = 0; m < M; m++) {
            q.b0[m] = m;
            q.nb[m] = 1;
        }
        float c[4][5 * GP_PIPE_MAX_MICRO];
        gp_step_timing tt = {.begin = {c[0], c[2]}, .end = {c[1], c[3]}};
        GP_CHECK_OK(gp_sim_exec_timeline(y, 3, &q, -1, &tt));
        NEAR(tt.step_ms, gp_overlap_step_ms(5, M, 0.7, 1.3), 1e-4);
        gp_sim_exec_destroy(y);
    }
}

static void test_sim_exec(void **state)
{
    unit_cost u = {.a = 2.0, .f = 3.0, .scale = true};
    gp_sim_exec *x = sim(3, &u, 1.2, 1.1, 5);
    gp_exec ex = gp_sim_exec_get(x);
    assert_string_equal(ex.session->name, "sim");
    /* pairs: A = 8..112 with F the rest */
    assert_int_equal(ex.session->n_splits(ex.ctx), 14);
    gp_split_info si;
    ex.session->split_info(ex.ctx, 13, &si);
    assert_int_equal(si.a_got, 112);
    assert_int_equal(si.f_got, 20);
    assert_true(si.partitioned);
    assert_int_equal(ex.session->select_split(ex.ctx, 14), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "split 14");
    GP_CHECK_OK(ex.session->select_split(ex.ctx, 6));
    ex.session->split_info(ex.ctx, -1, &si);
    assert_int_equal(si.a_got, 56);

    /* the runner over it: statistics from the simulated timeline */
    gp_pipeline *pl;
    gp_pipeline_params pp = gp_pipeline_default_params();
    GP_CHECK_OK(gp_pipeline_create(ex, 3, &pp, &pl));
    int seq[6] = {0, 1, 2, 3, 4, 5};
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, next[6] = {9, 9, 9, 9, 9, 9};
    float logits[6 * 5];
    memset(logits, 0xff, sizeof logits);
    GP_CHECK_OK(gp_pipeline_step(pl, 6, seq, tok, next, logits));
    for (int i = 0; i < 6; i++)
        assert_int_equal(next[i], 0);
    for (int i = 0; i < 30; i++)
        assert_true(logits[i] == 0.0f);
    const gp_step_stats *st = gp_pipeline_last_stats(pl);
    assert_non_null(st);
    assert_int_equal(st->split.a_got, 56);
    gp_step_plan pn;
    GP_CHECK_OK(gp_pipeline_plan(&pp, 3, 6, &pn));
    float b[4][3 * GP_PIPE_MAX_MICRO];
    gp_step_timing t = {.begin = {b[0], b[2]}, .end = {b[1], b[3]}};
    GP_CHECK_OK(gp_sim_exec_timeline(x, 6, &pn, -1, &t));
    NEAR(st->step_ms, t.step_ms, 1e-5);
    for (int i = 0; i < 3 * 2; i++) {
        NEAR(st->attn_ms[i], b[1][i] - b[0][i], 1e-5);
        NEAR(st->ffn_ms[i], b[3][i] - b[2][i], 1e-5);
    }
    NEAR(st->a2f_bytes[0], 6 * 16384.0, 1e-9);
    assert_int_equal(gp_sim_exec_steps(x), 1);

    /* the sequential engine: every stage on all 132 SMs, summed */
    float seq_ms = 0;
    GP_CHECK_OK(ex.session->sequential_step(ex.ctx, 6, seq, tok, next, NULL, &seq_ms));
    NEAR(seq_ms, 3 * (2.0 + 3.0) * 6 / 132, 1e-5);

    /* a cost model that fails stops the step with a message; the pipeline
     * stays usable */
    u.poison = true;
    assert_int_equal(gp_pipeline_step(pl, 6, seq, tok, next, NULL), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "cost model gave nan");
    u.poison = false;
    GP_CHECK_OK(gp_pipeline_step(pl, 6, seq, tok, next, NULL));
    assert_int_equal(gp_sim_exec_steps(x), 2);
    gp_pipeline_destroy(pl);
    gp_sim_exec_destroy(x);

    /* logits without a vocabulary are refused */
    gp_sim_exec *y = sim(1, &u, 1, 1, 0);
    gp_exec ey = gp_sim_exec_get(y);
    assert_int_equal(ey.session->sequential_step(ey.ctx, 2, seq, tok, next, logits, NULL), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "vocab 0");
    gp_sim_exec_destroy(y);
}

static void test_sim_params(void **state)
{
    unit_cost u = {.a = 1, .f = 1};
    gp_sim_params p = gp_sim_default_params();
    gp_sim_exec *x = (gp_sim_exec *)&x;
    p.n_layers = 2;
    assert_int_equal(gp_sim_exec_create(&p, &x), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "no cost model");
    assert_null(x);
    p.cost = ucost;
    p.user = &u;
    p.attn_slowdown = 0.5;
    assert_int_equal(gp_sim_exec_create(&p, &x), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "slowdowns 0.5");
    p.attn_slowdown = 1;
    p.groups = 40;
    assert_int_equal(gp_sim_exec_create(&p, &x), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "40 groups");
    p.groups = 0; /* 132 / 8 = 16 groups: 15 pairs */
    GP_CHECK_OK(gp_sim_exec_create(&p, &x));
    gp_exec ex = gp_sim_exec_get(x);
    assert_int_equal(ex.session->n_splits(ex.ctx), 15);
    gp_sim_exec_destroy(x);
    /* explicit pairs */
    gp_split_info pairs[2] = {{.a_req = 30, .f_req = 70, .a_got = 30, .f_got = 70, .partitioned = true},
                              {.a_req = 0, .f_req = 100, .a_got = 0, .f_got = 100, .partitioned = true}};
    p.pairs = pairs;
    p.n_pairs = 2;
    assert_int_equal(gp_sim_exec_create(&p, &x), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "pair 1 is 0:100");
    p.n_pairs = 1;
    GP_CHECK_OK(gp_sim_exec_create(&p, &x));
    ex = gp_sim_exec_get(x);
    assert_int_equal(ex.session->n_splits(ex.ctx), 1);
    /* a plan of the wrong depth is refused */
    gp_step_plan pn = {.B = 2, .M = 2, .b0 = {0, 1}, .nb = {1, 1}, .n_layers = 3};
    assert_int_equal(ex.step->step_begin(ex.ctx, &pn, NULL, NULL), GP_ERR_SHAPE);
    HAS(gp_last_error(), "plan of 3 layers");
    gp_sim_exec_destroy(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap),      cmocka_unit_test(test_target_share),
        cmocka_unit_test(test_fit),          cmocka_unit_test(test_params),
        cmocka_unit_test(test_hysteresis),   cmocka_unit_test(test_log_and_cooldown),
        cmocka_unit_test(test_no_flap),      cmocka_unit_test(test_sim_timeline),
        cmocka_unit_test(test_sim_exec),     cmocka_unit_test(test_sim_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
