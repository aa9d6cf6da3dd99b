/* The rebalancer's models: the overlap timeline of a step, the ratio policy's
 * target share, and the latency-versus-SM-count fit of the model policy. Pure
 * functions, so tests check each formula on its own. */
#include <math.h>

#include "gp_pipeline.h"

double gp_overlap_step_ms(int n_layers, int M, double attn_stage_ms, double ffn_stage_ms)
{
    if (n_layers < 1 || M < 1 || M > GP_PIPE_MAX_MICRO || !isfinite(attn_stage_ms) || !isfinite(ffn_stage_ms) ||
        attn_stage_ms < 0 || ffn_stage_ms < 0)
        return 0.0;
    /* The same recurrence a GPU runs: each stream takes its stages in issue
     * order (layer-major), a stage starts when its stream is free and its
     * dependency has ended. f_end[m] is the end of F(l-1, m) while layer l is
     * walked. With M >= 2 this gives L * M * max(a, f) plus the fill/drain of
     * the faster side; with M = 1 it gives L * (a + f): nothing overlaps. */
    double f_end[GP_PIPE_MAX_MICRO] = {0};
    double a_free = 0, f_free = 0;
    for (int l = 0; l < n_layers; l++)
        for (int m = 0; m < M; m++) {
            double a_end = fmax(a_free, f_end[m]) + attn_stage_ms;
            a_free = a_end;
            f_end[m] = fmax(f_free, a_end) + ffn_stage_ms;
            f_free = f_end[m];
        }
    return f_free;
}

static double clamp(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* Derivation (the comment in the header states the result). Let a side's
 * latency be its work over its SMs: t_a = w_a / s, t_f = w_f / (1 - s) with s
 * the attention share. One measurement at s0 gives w_a = t_a s0 and
 * w_f = t_f (1 - s0).
 *  - M >= 2: the sides overlap and the step is about L * M * max(t_a, t_f) /
 *    M (gp_overlap_step_ms), minimised where t_a = t_f:
 *    w_a / s = w_f / (1 - s)  =>  s* = w_a / (w_a + w_f).
 *  - M == 1: attention and FFN of the one micro-batch alternate, each side
 *    idles while the other runs, the step is L (t_a + t_f); d/ds of
 *    w_a / s + w_f / (1 - s) = 0 gives w_a / s^2 = w_f / (1 - s)^2, i.e.
 *    s* / (1 - s*) = sqrt(w_a / w_f): the square root of the imbalance.
 * Both are exact only for latency proportional to 1/SMs; a memory-bound side
 * saturates early, which the model policy learns and this one does not, so
 * the bounds keep either side from being starved on a misleading sample. */
double gp_rebalance_target_share(double attn_ms, double ffn_ms, double share, int M, double min_share,
                                 double max_share)
{
    if (!(min_share <= max_share)) /* also catches NaN bounds */
        return share;
    if (!isfinite(attn_ms) || !isfinite(ffn_ms) || attn_ms <= 0 || ffn_ms <= 0 || !isfinite(share) || share <= 0 ||
        share >= 1)
        return clamp(isfinite(share) ? share : 0.5, min_share, max_share);
    double wa = attn_ms * share, wf = ffn_ms * (1.0 - share);
    double r = M >= 2 ? wa / wf : sqrt(wa / wf);
    return clamp(r / (1.0 + r), min_share, max_share);
}

gp_status gp_latency_fit_make(const double *sms, const double *ms, int n, double total_sms, gp_latency_fit *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "latency fit: out is NULL");
    *out = (gp_latency_fit){0};
    if (n < 1 || !sms || !ms)
        GP_FAIL(GP_ERR_INVALID_ARG, "latency fit: %d samples (arrays %s): need at least 1", n,
                sms && ms ? "set" : "NULL");
    if (!(total_sms > 0))
        GP_FAIL(GP_ERR_INVALID_ARG, "latency fit: device of %g SMs: must be positive", total_sms);
    for (int i = 0; i < n; i++)
        if (!(sms[i] > 0) || !isfinite(sms[i]) || !(ms[i] >= 0) || !isfinite(ms[i]))
            GP_FAIL(GP_ERR_INVALID_ARG, "latency fit: sample %d is (%g SMs, %g ms): need SMs > 0 and ms >= 0", i,
                    sms[i], ms[i]);
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen = seen || sms[j] == sms[i];
        distinct += !seen;
    }
    out->n = distinct;
    if (distinct == 1) {
        double t = 0;
        for (int i = 0; i < n; i++)
            t += ms[i];
        out->s0 = sms[0];
        out->t0 = t / n;
        out->s_sat = GP_REBALANCE_SAT_SHARE * total_sms;
        return GP_OK;
    }
    /* Least squares of t = a + b x with x = 1/s. */
    double mx = 0, mt = 0;
    for (int i = 0; i < n; i++) {
        mx += 1.0 / sms[i];
        mt += ms[i];
    }
    mx /= n;
    mt /= n;
    double sxx = 0, sxt = 0, sx2 = 0, sx2t = 0;
    for (int i = 0; i < n; i++) {
        double x = 1.0 / sms[i];
        sxx += (x - mx) * (x - mx);
        sxt += (x - mx) * (ms[i] - mt);
        sx2 += x * x;
        sx2t += x * ms[i];
    }
    double b = sxt / sxx, a = mt - b * mx;
    if (b < 0) {
        /* More SMs measured slower: noise or interference, not a trend to
         * extrapolate; the side is treated as insensitive to its SMs. */
        out->a = mt;
        out->b = 0;
    } else if (a < 0) {
        /* A negative fixed cost is unphysical; pure 1/s through the origin. */
        out->a = 0;
        out->b = sx2t / sx2;
    } else {
        out->a = a;
        out->b = b;
    }
    return GP_OK;
}

double gp_latency_fit_eval(const gp_latency_fit *f, double sms)
{
    if (!f || f->n < 1 || !(sms > 0))
        return NAN;
    if (f->n == 1)
        return f->t0 * f->s0 / fmin(sms, fmax(f->s0, f->s_sat));
    return f->a + f->b / sms;
}
