/* The tuning profile's cold-start rule: workload features from the
 * performance model, the fit of the threshold and the attention share to the
 * measured best configurations, and the rule's choice for a new workload.
 * Few workloads are ever measured (a sweep costs minutes each), so the rule
 * has three numbers and falls back to physics where the data are silent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cs_tuning_impl.h"

/* max(bytes at the HBM rate, flops at the GEMM rate), in ms */
static double roof_ms(double bytes, double flops)
{
    return 1e3 * fmax(bytes / GP_HBM_BYTES_PER_S, flops / GP_GEMM_FLOPS_PER_S);
}

void cs_tuning_features(const gp_config *c, int B, int C, cs_features *f)
{
    const double hd = c->head_dim, h = c->hidden;
    const double w_attn = h * gp_config_qkv_rows(c) + (double)c->n_heads * hd * h; /* QKV + O parameters */
    const double w_ffn = 3.0 * h * c->ffn;                                         /* gate, up, down */
    const double kv_tok = 2.0 * c->n_kv_heads * hd * 2.0;                          /* K + V bytes per token, bf16 */
    const double ctx = (double)B * C;
    f->attn_ms = roof_ms(2 * w_attn, 2 * w_attn * B) + roof_ms(ctx * kv_tok, 4.0 * ctx * c->n_heads * hd);
    f->ffn_ms = roof_ms(2 * w_ffn, 2 * w_ffn * B);
    double sum = f->attn_ms + f->ffn_ms;
    f->attn_frac = sum > 0 ? f->attn_ms / sum : 0.5;
    double head = (double)c->vocab * h;
    f->seq_ms = c->n_layers * sum + roof_ms(2 * head, 2 * head * B);
    gp_step_cost sc;
    gp_step_floor(c, B, C, 2, &sc);
    f->floor2_ms = sc.floor_ms;
    f->headroom = f->floor2_ms > 0 ? f->seq_ms / f->floor2_ms : 0;
}

bool cs_same_shape(const gp_config *a, const gp_config *b)
{
    return a->n_layers == b->n_layers && a->hidden == b->hidden && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->ffn == b->ffn;
}

/* Split iff headroom >= threshold: the winner's headroom that misclassifies
 * the fewest measured workloads, the largest on a tie (seq is the safe
 * default: a split only where the data say it pays). Not moved below the
 * smallest such winner: without a losing workload beneath it there is no
 * evidence of where splits stop paying, so the rule does not extrapolate
 * there; with one, the threshold sits midway between the two, though not
 * below 1. */
static void fit_threshold(const cs_point *p, int n, cs_rule *r)
{
    r->split = false;
    r->threshold = 0;
    r->training_errors = 0;
    int best_err = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
        if (!p[i].has_seq || !p[i].won)
            continue;
        double t = p[i].headroom;
        int err = 0;
        for (int j = 0; j < n; j++)
            if (p[j].has_seq)
                err += p[j].won ? p[j].headroom < t : p[j].headroom >= t;
        if (best_err < 0 || err < best_err || (err == best_err && t > best_t)) {
            best_err = err;
            best_t = t;
        }
    }
    if (best_err < 0) {
        /* no split won anywhere: seq always */
        for (int j = 0; j < n; j++)
            r->training_errors += p[j].has_seq && p[j].won;
        return;
    }
    double below = -1;
    for (int j = 0; j < n; j++)
        if (p[j].has_seq && !p[j].won && p[j].headroom < best_t && p[j].headroom > below)
            below = p[j].headroom;
    r->split = true;
    /* midway, but not below headroom 1 (where even a perfect split of the
     * model's estimate cannot beat seq) unless a measured winner sits there */
    r->threshold = below >= 0 ? fmax(0.5 * (below + best_t), fmin(1.0, best_t)) : best_t;
    for (int j = 0; j < n; j++)
        if (p[j].has_seq)
            r->training_errors += p[j].won ? p[j].headroom < r->threshold : p[j].headroom >= r->threshold;
}

/* share = k0 + k1 attn_frac over the winners. With two or more whose
 * attention fractions differ (by 0.05 or more) a least-squares line, its
 * slope held to [0, 2] (a steeper or falling line from a handful of noisy
 * points is not believable); otherwise slope 1 (the share follows the
 * attention fraction, as the ratio rule does) and an offset through their
 * mean. With no winner k0 = 0, k1 = 1 (unused: the rule never splits). */
static void fit_share(const cs_point *p, int n, cs_rule *r)
{
    double sx = 0, sy = 0, lo = INFINITY, hi = -INFINITY;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (p[i].won) {
            sx += p[i].attn_frac;
            sy += p[i].best_share;
            lo = fmin(lo, p[i].attn_frac);
            hi = fmax(hi, p[i].attn_frac);
            k++;
        }
    r->k0 = 0;
    r->k1 = 1;
    if (k == 0)
        return;
    double mx = sx / k, my = sy / k;
    if (k >= 2 && hi - lo >= 0.05) {
        double sxx = 0, sxy = 0;
        for (int i = 0; i < n; i++)
            if (p[i].won) {
                sxx += (p[i].attn_frac - mx) * (p[i].attn_frac - mx);
                sxy += (p[i].attn_frac - mx) * (p[i].best_share - my);
            }
        r->k1 = fmin(2.0, fmax(0.0, sxy / sxx));
    }
    r->k0 = my - r->k1 * mx;
}

void cs_rule_fit(cs_point *points, int n, cs_rule *rule)
{
    memset(rule, 0, sizeof *rule);
    rule->points = points;
    rule->n_points = n;
    fit_threshold(points, n, rule);
    fit_share(points, n, rule);
}

gp_status cs_rule_pick(const cs_rule *rule, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                       gp_cs_choice *out)
{
    memset(out, 0, sizeof *out);
    cs_features f;
    cs_tuning_features(cfg, B, C, &f);
    out->depth = GP_RING_DEFAULT_DEPTH;
    out->M = 1;
    if (!rule->split || !(f.headroom >= rule->threshold)) {
        out->seq = true;
        return GP_OK;
    }
    double share = rule->k0 + rule->k1 * f.attn_frac;
    /* the nearest valid split (remainder on F, the pool's default) */
    gp_split_plan plans[GP_CS_MAX_SPLITS];
    int n = 0;
    GP_TRY(gp_split_enumerate(info, GP_SPLIT_SIDE_F, plans, GP_CS_MAX_SPLITS, &n));
    if (n > GP_CS_MAX_SPLITS)
        n = GP_CS_MAX_SPLITS;
    int bi = 0;
    for (int i = 1; i < n; i++)
        if (fabs((double)plans[i].attn_sms / info->sm_count - share) <
            fabs((double)plans[bi].attn_sms / info->sm_count - share))
            bi = i;
    gp_split_plan chk;
    GP_TRY(gp_split_plan_make(info, (gp_split_req){plans[bi].attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &chk));
    out->attn_sms = chk.attn_sms;
    out->attn_share = (double)chk.attn_sms / info->sm_count;
    /* M and depth: those of the nearest winning workload in (log2 B, log2 C) */
    double best_d = INFINITY;
    out->M = 2;
    for (int i = 0; i < rule->n_points; i++) {
        const cs_point *p = &rule->points[i];
        if (!p->won)
            continue;
        double db = log2((double)B) - log2((double)p->B), dc = log2(1.0 + C) - log2(1.0 + p->C);
        double d = db * db + dc * dc;
        if (d < best_d) {
            best_d = d;
            out->M = p->M;
            out->depth = p->depth;
            out->placement = p->placement;
            out->gemm_tune = p->gemm_tune;
        }
    }
    return GP_OK;
}
