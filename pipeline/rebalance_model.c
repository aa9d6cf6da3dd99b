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
    out->s_sat = GP_REBALANCE_SAT_SHARE * total_sms;
    if (distinct == 1) {
        double t = 0;
        for (int i = 0; i < n; i++)
            t += ms[i];
        out->s0 = sms[0];
        out->t0 = t / n;
        return GP_OK;
    }
    /* Least squares of t = m p + c q with p = max(1, s_sat / s), q = 1 / s,
     * in relative terms (each row divided by t_i: a sample of 20 ms must not
     * outweigh one of 2 ms a hundredfold), by the 2x2 normal equations. */
    double pp = 0, pq = 0, qq = 0, pt = 0, qt = 0;
    for (int i = 0; i < n; i++) {
        double w = ms[i] > 0 ? 1.0 / ms[i] : 1.0;
        double p = fmax(1.0, out->s_sat / sms[i]) * w, q = w / sms[i], t = ms[i] * w;
        pp += p * p;
        pq += p * q;
        qq += q * q;
        pt += p * t;
        qt += q * t;
    }
    double det = pp * qq - pq * pq;
    /* Below s_sat p = s_sat q: the columns are parallel (det ~ 0 up to
     * rounding) and the data cannot tell memory from compute. */
    bool separable = det > 1e-9 * pp * qq;
    double m = separable ? (pt * qq - qt * pq) / det : -1, c = separable ? (qt * pp - pt * pq) / det : -1;
    if (separable && m >= 0 && c >= 0) {
        out->mem_ms = m;
        out->comp = c;
    } else if (separable && c < 0 && pt > 0) {
        /* more SMs measured no faster: a memory-bound side (or noise) */
        out->mem_ms = pt / pp;
        out->comp = 0;
    } else {
        /* compute alone, through the origin (a negative memory part is
         * unphysical; or the two are indistinguishable) */
        out->mem_ms = 0;
        out->comp = qt / qq;
    }
    return GP_OK;
}

double gp_latency_fit_eval(const gp_latency_fit *f, double sms)
{
    if (!f || f->n < 1 || !(sms > 0))
        return NAN;
    if (f->n == 1) {
        /* optimistic both ways: more SMs help as compute, fewer hurt only as
         * memory (flat down to s_sat) */
        if (sms >= f->s0)
            return f->t0 * f->s0 / sms;
        return f->t0 * fmax(1.0, f->s_sat / sms) / fmax(1.0, f->s_sat / f->s0);
    }
    return f->mem_ms * fmax(1.0, f->s_sat / sms) + f->comp / sms;
}
