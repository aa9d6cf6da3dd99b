/* The rebalancer: between steps, from windowed statistics, chooses which of
 * the executor's pooled partition pairs the next step runs on (policies ratio
 * and model), with hysteresis, a cooldown after each move and a rule that
 * keeps it from flapping; every decision is logged with its inputs.
 *
 * How a decision is taken (at the end of each window of `window` steps on one
 * pair, outside the cooldown):
 *  1. The window's means (attention and FFN ms per layer over all
 *     micro-batches, step ms) update the pair's sample: a running mean over
 *     its first 4 windows, then an exponential average (weight 1/4) so that a
 *     slowly drifting workload (context grows every step) is followed.
 *  2. Every candidate pair (a real split whose attention share lies in
 *     [min_share, max_share]) gets a predicted step time: a pair already run
 *     is predicted by its own measured step (measurement beats model); any
 *     other by gp_overlap_step_ms of its predicted stage latencies, plus the
 *     current pair's calibration offset (measured step minus the overlap model
 *     of its measured stages: embedding, head, gaps, and the model's error),
 *     assumed the same on every pair.
 *     ratio: latencies scaled by 1/SMs from the current pair's measurement
 *            (latency ~ work / SMs); the pair chosen is the better, by that
 *            prediction, of the two pairs bracketing the target share of
 *            gp_rebalance_target_share (the curve is asymmetric about the
 *            target, so the nearer pair in share can be the worse one).
 *     model: latencies from gp_latency_fit over the samples of every pair
 *            run so far (a roofline sum m max(1, s_sat/s) + c/s per side;
 *            optimistic while a side has one sample, so that it explores
 *            instead of stalling); the pair chosen is the one with the
 *            lowest prediction.
 *  3. It moves only when (predicted current - predicted chosen) / predicted
 *     current > hysteresis, and then discards `cooldown` steps (the new pair's
 *     first steps pay for warm-up) before its next window starts.
 * Why it cannot flap: a move to a pair already run compares two
 * measurements and needs a gain above the hysteresis. After A -> B, going
 * back B -> A needs A measured better than B by the hysteresis, and crossing
 * again A -> B then needs B measured better than A by it: only a drift of
 * twice the hysteresis between windows can produce that. Moves to pairs not
 * yet run are bounded by the number of pairs. So,
 * per workload (B, M), the moves are at most n_pairs - 1 plus one per
 * measured improvement of more than the hysteresis, and the steps until the
 * last move at most window + moves x (cooldown + window). Samples are cleared
 * when B, M or the layer count changes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_pipeline.h"

#define EWMA_WINDOWS 4 /* windows averaged plainly before the exponential average takes over */

typedef struct pair_sample {
    int windows;       /* windows measured on this pair (0: never run) */
    double attn_ms, ffn_ms, step_ms;
} pair_sample;

struct gp_rebalancer {
    gp_rebalance_params p;
    int n_pairs;
    gp_split_info *pairs;   /* [n_pairs] copies (unit strings borrowed) */
    double *a_sms, *f_sms;  /* [n_pairs] SMs each side holds (obtained when partitioned) */
    double *share;          /* [n_pairs] attention share */
    bool *candidate;        /* [n_pairs] a split within the share bounds */
    double total_sms;
    pair_sample *samples;   /* [n_pairs], for the current workload */
    int B, M, n_layers;     /* the workload the samples belong to (0: none yet) */
    /* the window being accumulated */
    int win_pair, win_steps;
    double w_attn, w_ffn, w_ab, w_fb, w_a2f, w_step;
    int cooldown_left;
    int steps;              /* steps observed */
    gp_rebalance_decision *log;
    int n_log, cap_log;
};

const char *gp_rebalance_policy_name(gp_rebalance_policy p)
{
    switch (p) {
    case GP_REBALANCE_OFF: return "off";
    case GP_REBALANCE_RATIO: return "ratio";
    case GP_REBALANCE_MODEL: return "model";
    }
    return "unknown";
}

gp_rebalance_params gp_rebalance_default_params(void)
{
    /* window 4: a few steps smooth per-step noise while still reacting within
     * a handful of steps; cooldown 8 = two windows after each move. */
    return (gp_rebalance_params){.policy = GP_REBALANCE_RATIO, .window = 4, .hysteresis = 0.03,
                                 .min_share = 0.1, .max_share = 0.9, .cooldown = 8};
}

static gp_status check_params(const gp_rebalance_params *p)
{
    if (p->policy != GP_REBALANCE_OFF && p->policy != GP_REBALANCE_RATIO && p->policy != GP_REBALANCE_MODEL)
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: policy %d: allowed %d (off), %d (ratio), %d (model)", (int)p->policy,
                GP_REBALANCE_OFF, GP_REBALANCE_RATIO, GP_REBALANCE_MODEL);
    if (p->window < 1 || p->window > 1000000)
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: window %d steps: allowed 1..1000000", p->window);
    if (!(p->hysteresis >= 0 && p->hysteresis < 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: hysteresis %g: allowed [0, 1) (a fraction of the step time)",
                p->hysteresis);
    if (!(p->min_share > 0 && p->min_share <= p->max_share && p->max_share < 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: attention share bounds [%g, %g]: need 0 < min <= max < 1",
                p->min_share, p->max_share);
    if (p->cooldown < 0 || p->cooldown > 1000000)
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: cooldown %d steps: allowed 0..1000000", p->cooldown);
    return GP_OK;
}

void gp_rebalancer_destroy(gp_rebalancer *r)
{
    if (!r)
        return;
    free(r->pairs);
    free(r->a_sms);
    free(r->f_sms);
    free(r->share);
    free(r->candidate);
    free(r->samples);
    free(r->log);
    free(r);
}

gp_status gp_rebalancer_create(const gp_rebalance_params *p, const gp_split_info *pairs, int n_pairs,
                               gp_rebalancer **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: out is NULL");
    *out = NULL;
    gp_rebalance_params params = p ? *p : gp_rebalance_default_params();
    GP_TRY(check_params(&params));
    if (!pairs || n_pairs < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: %d pairs (array %s): need at least 1", n_pairs,
                pairs ? "set" : "NULL");
    gp_rebalancer *r = calloc(1, sizeof *r);
    if (!r)
        GP_FAIL(GP_ERR_NO_MEMORY, "rebalancer: out of memory");
    r->p = params;
    r->n_pairs = n_pairs;
    r->pairs = malloc(sizeof *r->pairs * (size_t)n_pairs);
    r->a_sms = calloc((size_t)n_pairs, sizeof(double));
    r->f_sms = calloc((size_t)n_pairs, sizeof(double));
    r->share = calloc((size_t)n_pairs, sizeof(double));
    r->candidate = calloc((size_t)n_pairs, sizeof(bool));
    r->samples = calloc((size_t)n_pairs, sizeof(pair_sample));
    if (!r->pairs || !r->a_sms || !r->f_sms || !r->share || !r->candidate || !r->samples) {
        gp_rebalancer_destroy(r);
        GP_FAIL(GP_ERR_NO_MEMORY, "rebalancer: out of memory");
    }
    memcpy(r->pairs, pairs, sizeof *r->pairs * (size_t)n_pairs);
    int n_cand = 0;
    for (int i = 0; i < n_pairs; i++) {
        const gp_split_info *s = &pairs[i];
        if (s->a_req < 0 || s->f_req < 0 || s->a_got < 0 || s->f_got < 0) {
            gp_rebalancer_destroy(r);
            GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: pair %d is %d:%d requested, %d:%d obtained: counts must be >= 0",
                    i, s->a_req, s->f_req, s->a_got, s->f_got);
        }
        /* An unpartitioned pair reports the whole device on both sides; its
         * request is still what the split would be, so shares come from it. */
        bool got = s->partitioned && s->a_got > 0 && s->f_got > 0;
        r->a_sms[i] = got ? s->a_got : s->a_req;
        r->f_sms[i] = got ? s->f_got : s->f_req;
        double tot = r->a_sms[i] + r->f_sms[i];
        /* a_req == 0: the sequential engine, not a split the rebalancer can pick */
        r->share[i] = s->a_req > 0 && s->f_req > 0 && tot > 0 ? r->a_sms[i] / tot : NAN;
        r->candidate[i] = isfinite(r->share[i]) && r->share[i] >= params.min_share - 1e-12 &&
                          r->share[i] <= params.max_share + 1e-12;
        n_cand += r->candidate[i];
        if (tot > r->total_sms)
            r->total_sms = tot;
    }
    if (params.policy != GP_REBALANCE_OFF && n_cand == 0) {
        gp_rebalancer_destroy(r);
        GP_FAIL(GP_ERR_INVALID_ARG, "rebalancer: none of the %d pairs is a split with an attention share in "
                "[%g, %g]; nothing to choose from", n_pairs, params.min_share, params.max_share);
    }
    r->win_pair = -1;
    *out = r;
    return GP_OK;
}

int gp_rebalancer_log(const gp_rebalancer *r, const gp_rebalance_decision **out)
{
    if (out)
        *out = r ? r->log : NULL;
    return r ? r->n_log : 0;
}

static void reset_window(gp_rebalancer *r, int pair)
{
    r->win_pair = pair;
    r->win_steps = 0;
    r->w_attn = r->w_ffn = r->w_ab = r->w_fb = r->w_a2f = r->w_step = 0;
}

/* Checks what the decision reads of one step; false with a message. */
static bool stats_usable(const gp_step_stats *s)
{
    if (!s) {
        gp_set_error("rebalancer: statistics are NULL");
        return false;
    }
    if (s->n_layers < 1 || s->M < 1 || s->M > GP_PIPE_MAX_MICRO || s->B < 1 || !s->attn_ms || !s->ffn_ms) {
        gp_set_error("rebalancer: statistics of %d layers, M %d, B %d (stage arrays %s): not a finished step",
                     s->n_layers, s->M, s->B, s->attn_ms && s->ffn_ms ? "set" : "NULL");
        return false;
    }
    return true;
}

static bool log_push(gp_rebalancer *r, const gp_rebalance_decision *d)
{
    if (r->n_log == r->cap_log) {
        int cap = r->cap_log ? 2 * r->cap_log : 32;
        gp_rebalance_decision *n = realloc(r->log, sizeof *n * (size_t)cap);
        if (!n)
            return false; /* the decision stands; only its record is lost */
        r->log = n;
        r->cap_log = cap;
    }
    r->log[r->n_log++] = *d;
    return true;
}

static void sample_update(pair_sample *ps, double attn, double ffn, double step)
{
    ps->windows++;
    double w = ps->windows <= EWMA_WINDOWS ? 1.0 / ps->windows : 1.0 / EWMA_WINDOWS;
    ps->attn_ms += w * (attn - ps->attn_ms);
    ps->ffn_ms += w * (ffn - ps->ffn_ms);
    ps->step_ms += w * (step - ps->step_ms);
}

/* Per-layer stage latencies of pair j under the policy's model. */
static bool predict_stages(const gp_rebalancer *r, int cur, int j, const gp_latency_fit *fa, const gp_latency_fit *ff,
                           double *attn, double *ffn)
{
    const pair_sample *c = &r->samples[cur];
    if (r->p.policy == GP_REBALANCE_RATIO) {
        *attn = c->attn_ms * r->a_sms[cur] / r->a_sms[j];
        *ffn = c->ffn_ms * r->f_sms[cur] / r->f_sms[j];
    } else {
        *attn = gp_latency_fit_eval(fa, r->a_sms[j]);
        *ffn = gp_latency_fit_eval(ff, r->f_sms[j]);
    }
    return isfinite(*attn) && isfinite(*ffn);
}

/* Predicted step of pair j: measured if it has run, else the model. */
static double predict_step(const gp_rebalancer *r, int cur, int j, double overhead, const gp_latency_fit *fa,
                           const gp_latency_fit *ff)
{
    if (r->samples[j].windows > 0)
        return r->samples[j].step_ms;
    double a, f;
    if (!predict_stages(r, cur, j, fa, ff, &a, &f))
        return INFINITY;
    return gp_overlap_step_ms(r->n_layers, r->M, a / r->M, f / r->M) + overhead;
}

/* Fits of both sides over every pair run for this workload. */
static bool fit_sides(const gp_rebalancer *r, gp_latency_fit *fa, gp_latency_fit *ff)
{
    int n = 0;
    double *buf = malloc(sizeof(double) * 4 * (size_t)r->n_pairs);
    if (!buf)
        return false;
    double *sa = buf, *ta = buf + r->n_pairs, *sf = buf + 2 * r->n_pairs, *tf = buf + 3 * r->n_pairs;
    for (int j = 0; j < r->n_pairs; j++)
        if (r->samples[j].windows > 0) {
            sa[n] = r->a_sms[j];
            ta[n] = r->samples[j].attn_ms;
            sf[n] = r->f_sms[j];
            tf[n] = r->samples[j].ffn_ms;
            n++;
        }
    bool ok = n > 0 && gp_latency_fit_make(sa, ta, n, r->total_sms, fa) == GP_OK &&
              gp_latency_fit_make(sf, tf, n, r->total_sms, ff) == GP_OK;
    free(buf);
    return ok;
}

/* The decision's reason, cut to its field (a reason is a sentence, never
 * needed in full for the decision itself). */
static void set_reason(gp_rebalance_decision *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void set_reason(gp_rebalance_decision *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason, sizeof d->reason, fmt, ap);
    va_end(ap);
}

static void pair_text(const gp_rebalancer *r, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%d (%g:%g)", i, r->a_sms[i], r->f_sms[i]);
}

/* The decision at the end of a window on pair cur; fills d->to, the
 * predictions and the reason. */
static void decide(gp_rebalancer *r, int cur, gp_rebalance_decision *d)
{
    const pair_sample *c = &r->samples[cur];
    const double h = r->p.hysteresis;
    const char *pol = gp_rebalance_policy_name(r->p.policy);
    char cur_txt[48], to_txt[48];
    pair_text(r, cur, cur_txt, sizeof cur_txt);
    d->to = cur;
    d->predicted_from_ms = c->step_ms;
    d->predicted_to_ms = c->step_ms;
    d->target_share = r->share[cur];
    if (!(c->attn_ms > 0) || !(c->ffn_ms > 0) || !(c->step_ms > 0) || !isfinite(r->share[cur])) {
        set_reason(d, "%s: stay on %s: %s", pol, cur_txt,
                 isfinite(r->share[cur]) ? "no stage times measured" : "the current pair is not a split");
        return;
    }
    /* Calibration at the current pair: measured step minus the overlap model
     * of its measured stages. It holds the time outside the stages
     * (embedding, head, gaps) and the model's error there (negative when
     * interference stretched stages that did not limit the step); both are
     * taken to carry over to the other pairs. */
    double overhead = c->step_ms - gp_overlap_step_ms(r->n_layers, r->M, c->attn_ms / r->M, c->ffn_ms / r->M);
    gp_latency_fit fa = {0}, ff = {0};
    if (r->p.policy == GP_REBALANCE_MODEL && !fit_sides(r, &fa, &ff)) {
        set_reason(d, "%s: stay on %s: no latency fit (%s)", pol, cur_txt, gp_last_error());
        return;
    }
    int best = -1;
    double best_ms = INFINITY;
    if (r->p.policy == GP_REBALANCE_RATIO) {
        double t = gp_rebalance_target_share(c->attn_ms, c->ffn_ms, r->share[cur], r->M, r->p.min_share,
                                              r->p.max_share);
        d->target_share = t;
        /* the two candidates bracketing t: the largest share <= t and the smallest >= t */
        int lo = -1, hi = -1;
        for (int j = 0; j < r->n_pairs; j++) {
            if (!r->candidate[j])
                continue;
            if (r->share[j] <= t && (lo < 0 || r->share[j] > r->share[lo]))
                lo = j;
            if (r->share[j] >= t && (hi < 0 || r->share[j] < r->share[hi]))
                hi = j;
        }
        int br[2] = {lo, hi};
        for (int k = 0; k < 2; k++) {
            if (br[k] < 0)
                continue;
            double ms = br[k] == cur ? c->step_ms : predict_step(r, cur, br[k], overhead, &fa, &ff);
            if (ms < best_ms) {
                best_ms = ms;
                best = br[k];
            }
        }
    } else {
        for (int j = 0; j < r->n_pairs; j++) {
            if (!r->candidate[j] && j != cur)
                continue;
            double ms = j == cur ? c->step_ms : predict_step(r, cur, j, overhead, &fa, &ff);
            if (ms < best_ms) {
                best_ms = ms;
                best = j;
            }
        }
        if (best >= 0)
            d->target_share = r->share[best];
    }
    if (best < 0 || !isfinite(best_ms)) {
        set_reason(d, "%s: stay on %s: no candidate pair has a prediction", pol, cur_txt);
        return;
    }
    d->predicted_to_ms = best_ms;
    pair_text(r, best, to_txt, sizeof to_txt);
    if (best == cur) {
        set_reason(d, "%s: stay on %s: it is the best prediction (%.4g ms)", pol, cur_txt,
                 c->step_ms);
        return;
    }
    double gain = (c->step_ms - best_ms) / c->step_ms;
    const char *how = r->samples[best].windows > 0 ? "measured" : "predicted";
    if (gain <= h) {
        set_reason(d, "%s: stay on %s: %s %s %.4g ms vs %.4g ms, gain %.1f%% <= "
                 "hysteresis %.1f%%", pol, cur_txt, to_txt, how, best_ms, c->step_ms, 100 * gain, 100 * h);
        return;
    }
    d->to = best;
    set_reason(d, "%s: move %s -> %s: %s %.4g ms vs %.4g ms, gain %.1f%% > hysteresis %.1f%%",
             pol, cur_txt, to_txt, how, best_ms, c->step_ms, 100 * gain, 100 * h);
}

bool gp_rebalancer_observe(gp_rebalancer *r, int current, const gp_step_stats *s, int *next,
                           gp_rebalance_decision *d)
{
    if (!r || !next) {
        gp_set_error("rebalancer: %s is NULL", r ? "next" : "the rebalancer");
        return false;
    }
    *next = current;
    if (current < 0 || current >= r->n_pairs) {
        gp_set_error("rebalancer: current pair %d: allowed 0..%d", current, r->n_pairs - 1);
        return false;
    }
    if (r->p.policy == GP_REBALANCE_OFF || !stats_usable(s))
        return false;
    r->steps++;
    if (s->B != r->B || s->M != r->M || s->n_layers != r->n_layers) {
        /* another workload: latencies measured for the old one do not apply */
        memset(r->samples, 0, sizeof *r->samples * (size_t)r->n_pairs);
        r->B = s->B;
        r->M = s->M;
        r->n_layers = s->n_layers;
        reset_window(r, current);
    }
    if (r->cooldown_left > 0) {
        r->cooldown_left--;
        reset_window(r, current);
        return false;
    }
    if (current != r->win_pair)
        reset_window(r, current); /* the caller switched pairs itself */

    double a = 0, f = 0;
    for (int i = 0; i < s->n_layers * s->M; i++) {
        a += s->attn_ms[i];
        f += s->ffn_ms[i];
    }
    r->w_attn += a / s->n_layers;
    r->w_ffn += f / s->n_layers;
    r->w_ab += s->attn_backlog_mean;
    r->w_fb += s->ffn_backlog_mean;
    r->w_a2f += s->a2f_mb_per_token;
    r->w_step += s->step_ms;
    if (++r->win_steps < r->p.window)
        return false;

    double n = r->win_steps;
    gp_rebalance_decision dec;
    memset(&dec, 0, sizeof dec);
    dec.step = r->steps;
    dec.from = current;
    dec.from_a = (int)r->a_sms[current];
    dec.attn_ms = r->w_attn / n;
    dec.ffn_ms = r->w_ffn / n;
    dec.attn_backlog = r->w_ab / n;
    dec.ffn_backlog = r->w_fb / n;
    dec.a2f_mb_per_token = r->w_a2f / n;
    dec.step_ms = r->w_step / n;
    sample_update(&r->samples[current], dec.attn_ms, dec.ffn_ms, dec.step_ms);
    decide(r, current, &dec);
    dec.to_a = (int)r->a_sms[dec.to];
    reset_window(r, current);
    if (dec.to != current)
        r->cooldown_left = r->p.cooldown;
    log_push(r, &dec);
    *next = dec.to;
    if (d)
        *d = dec;
    return true;
}
