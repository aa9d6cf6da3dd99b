/* The device-dependent half of --sm-splits: each split checked against the
 * GPU's partition rules, "sweep" and the default set expanded, seq first. */
#include "cs_impl.h"

#include <math.h>
#include <string.h>

/* The default set, as shares of the device: on the H100 (132 SMs, groups of
 * 8, remainder on F) they give A = 40, 56, 72, around the A = 48 the probe
 * found best (docs/ARCHITECTURE.md §6) and either side of an even split. */
static const double DEFAULT_SHARES[] = { 40.0 / 132.0, 56.0 / 132.0, 72.0 / 132.0 };

/* The plan of the sequential engine: no partition. The device's cut is
 * still described, so a reader sees what the splits were planned against. */
static void seq_plan(const gp_split_plan *any, gp_split_side side, gp_split_plan *p)
{
    memset(p, 0, sizeof *p);
    p->remainder_side = side;
    if (any) {
        p->granularity = any->granularity;
        p->n_groups = any->n_groups;
        p->remainder = any->remainder;
    }
}

/* Index of the plan giving A attn_sms SMs, or -1. Plans are valid, so an
 * equal A means an equal F: the same split. */
static int find_attn(const gp_split_plan *out, int n, int attn_sms)
{
    for (int i = 0; i < n; i++)
        if (out[i].attn_sms == attn_sms)
            return i;
    return -1;
}

/* The default set: each share rounded to a valid A; equal results (small
 * devices) are kept once. */
static int default_set(const gp_sm_info *info, gp_split_side side, gp_split_plan *out, int cap)
{
    gp_split_plan all[1];
    int n_valid = 0;
    if (gp_split_enumerate(info, side, all, 1, &n_valid) != GP_OK || n_valid < 1)
        return 0;
    int g = all[0].granularity, rem_a = side == GP_SPLIT_SIDE_A ? all[0].remainder : 0;
    int n = 0;
    for (size_t i = 0; i < sizeof DEFAULT_SHARES / sizeof DEFAULT_SHARES[0] && n < cap; i++) {
        long k = lround((DEFAULT_SHARES[i] * info->sm_count - rem_a) / g);
        if (k < 1)
            k = 1;
        if (k > n_valid)
            k = n_valid;
        gp_split_req r = { (int)k * g + rem_a, GP_SPLIT_REST };
        gp_split_plan p;
        if (gp_split_plan_make(info, r, side, &p) == GP_OK && find_attn(out, n, p.attn_sms) < 0)
            out[n++] = p;
    }
    gp_clear_error();
    return n;
}

gp_status gp_cs_resolve_splits(const gp_cs_options *o, const gp_sm_info *info, gp_split_side side,
                               gp_split_plan *plans, int cap, int *n)
{
    if (!o || !info || !n || cap < 1 || !plans)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cs_resolve_splits: options, info, plans and n must be given, cap >= 1");
    *n = 0;
    int total = 1; /* seq */
    /* Splits go after slot 0; seq is filled in last, once a plan shows the cut. */
    gp_split_plan *sp = plans + 1;
    int sp_cap = cap - 1;

    if (o->sweep) {
        int n_sweep = 0;
        gp_status st = gp_split_enumerate(info, side, NULL, 0, &n_sweep);
        if (st != GP_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", gp_last_error());
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits sweep: %s", why);
        }
        if (n_sweep > sp_cap)
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits sweep: %d splits on this device, room for %d", n_sweep,
                    sp_cap);
        GP_TRY(gp_split_enumerate(info, side, sp, sp_cap, &n_sweep));
        total += n_sweep;
    } else if (!o->splits_given) {
        total += default_set(info, side, sp, sp_cap);
    }

    int n_sweep = total - 1;
    for (int i = 0; i < o->n_splits; i++) {
        char text[48];
        cs_req_text(&o->splits[i], text, sizeof text);
        gp_split_plan p;
        if (gp_split_plan_make(info, o->splits[i], side, &p) != GP_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", gp_last_error());
            /* The planner's reason for A = every SM (e.g. "not a multiple of
             * 8") misses the point: nothing is left for F. */
            bool all = o->splits[i].attn_sms >= info->sm_count && o->splits[i].ffn_sms == GP_SPLIT_REST;
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits %s: %s%s", text,
                    all ? "every SM to attention leaves none for FFN (the seq row already runs on all SMs); " : "",
                    why);
        }
        int k = find_attn(sp, total - 1, p.attn_sms);
        if (k >= 0 && k < n_sweep)
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits %s: already part of sweep (every valid split, A %d:F %d "
                    "among them); give sweep or the split, not both", text, p.attn_sms, p.ffn_sms);
        if (k >= 0) {
            char other[48];
            cs_req_text(&o->splits[k - n_sweep], other, sizeof other);
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits %s and %s: the same split on this device (A %d, F %d SMs); "
                    "give each split once", other, text, p.attn_sms, p.ffn_sms);
        }
        if (total - 1 >= sp_cap)
            GP_FAIL(GP_ERR_INVALID_ARG, "--sm-splits: more than the %d splits there is room for", sp_cap);
        sp[total - 1] = p;
        total++;
    }
    seq_plan(total > 1 ? &sp[0] : NULL, side, &plans[0]);
    *n = total;
    return GP_OK;
}
