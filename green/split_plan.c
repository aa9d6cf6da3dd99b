/* Split planning: which A:F SM splits a device allows, in pure C so that CI
 * (no GPU) checks the rules the pool later hands to the driver. */
#include "gp_green.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

gp_sm_info gp_sm_info_guess(int sm_count, int cc_major)
{
    gp_sm_info info = { 0 };
    info.sm_count = sm_count;
    info.min_partition = cc_major >= 9 ? 8 : cc_major == 8 ? 4 : 2;
    info.alignment = cc_major >= 9 ? 8 : 2;
    info.groups = 0;
    return info;
}

int gp_split_granularity(const gp_sm_info *info)
{
    if (!info || info->sm_count < 1 || info->min_partition < 1 || info->alignment < 1)
        return 0;
    int g = info->min_partition > info->alignment ? info->min_partition : info->alignment;
    /* The driver rounds a split's minCount up to the alignment; planning with
     * the rounded value keeps the prediction equal to what it will create. */
    return (g + info->alignment - 1) / info->alignment * info->alignment;
}

/* The cut every plan of a device shares. */
typedef struct cut { int sms, g, n, r; gp_split_side side; } cut;

static const char *side_letter(gp_split_side s) { return s == GP_SPLIT_SIDE_A ? "A" : "F"; }

/* "allowed 8, 16, ..., 112 (F gets the 12 remainder SMs)" for the values one
 * side may take; gets_rem says whether that side holds the remainder. */
static const char *allowed_text(const cut *c, int gets_rem, char *buf, size_t cap)
{
    int base = gets_rem ? c->r : 0, k_last = c->n - 1;
    int len;
    if (k_last < 1)
        len = snprintf(buf, cap, "none");
    else if (k_last == 1)
        len = snprintf(buf, cap, "%d", c->g + base);
    else if (k_last == 2)
        len = snprintf(buf, cap, "%d, %d", c->g + base, 2 * c->g + base);
    else if (k_last == 3)
        len = snprintf(buf, cap, "%d, %d, %d", c->g + base, 2 * c->g + base, 3 * c->g + base);
    else
        len = snprintf(buf, cap, "%d, %d, ..., %d", c->g + base, 2 * c->g + base,
                       k_last * c->g + base);
    if (len < 0 || (size_t)len >= cap)
        return buf;
    if (c->r)
        snprintf(buf + len, cap - (size_t)len, " (%s gets the %d remainder SMs)",
                 side_letter(c->side), c->r);
    else
        snprintf(buf + len, cap - (size_t)len, " (no remainder SMs)");
    return buf;
}

static gp_status make_cut(const gp_sm_info *info, gp_split_side side, cut *c)
{
    if (!info)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: SM info is NULL");
    if (side != GP_SPLIT_SIDE_F && side != GP_SPLIT_SIDE_A)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: remainder side %d: allowed %d (F) or %d (A)",
                (int)side, (int)GP_SPLIT_SIDE_F, (int)GP_SPLIT_SIDE_A);
    int g = gp_split_granularity(info);
    if (!g)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: SM info {sm_count %d, min_partition %d, "
                "alignment %d}: every field must be positive", info->sm_count,
                info->min_partition, info->alignment);
    if (info->groups < 0 || info->groups > info->sm_count / g)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: SM info groups %d: allowed 0 (assume "
                "sm_count / granularity) .. %d (%d SMs in groups of %d)", info->groups,
                info->sm_count / g, info->sm_count, g);
    c->sms = info->sm_count;
    c->g = g;
    c->n = info->groups ? info->groups : info->sm_count / g;
    c->r = info->sm_count - c->n * g;
    c->side = side;
    if (c->n < 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: a device of %d SMs holds %d partition(s) "
                "of %d SMs (min_partition %d, alignment %d): no split into A and F is possible",
                c->sms, c->n, g, info->min_partition, info->alignment);
    return GP_OK;
}

static void fill_plan(const cut *c, int attn_groups, gp_split_plan *p)
{
    p->granularity = c->g;
    p->n_groups = c->n;
    p->remainder = c->r;
    p->remainder_side = c->side;
    p->attn_groups = attn_groups;
    p->ffn_groups = c->n - attn_groups;
    p->attn_sms = attn_groups * c->g + (c->side == GP_SPLIT_SIDE_A ? c->r : 0);
    p->ffn_sms = p->ffn_groups * c->g + (c->side == GP_SPLIT_SIDE_F ? c->r : 0);
}

/* A's value against the set A may take; all messages name it. */
static gp_status check_attn(const cut *c, int a, const char *allowed)
{
    int rem = c->side == GP_SPLIT_SIDE_A ? c->r : 0; /* A's share of the remainder */
    int f = c->sms - a;
    if (rem && a == rem)
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: only the %d remainder SMs, without a "
                "full partition of %d; allowed %s", a, rem, c->g, allowed);
    if (a < c->g + rem) {
        if (rem)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: below the minimum partition of %d SMs "
                    "plus the %d remainder SMs; allowed %s", a, c->g, rem, allowed);
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: below the minimum partition of %d SMs; "
                "allowed %s", a, c->g, allowed);
    }
    if ((a - rem) % c->g) {
        if (rem)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: not the %d remainder SMs plus a "
                    "multiple of the partition granularity %d; allowed %s", a, rem, c->g, allowed);
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: not a multiple of the partition "
                "granularity %d; allowed %s", a, c->g, allowed);
    }
    int f_rem = c->r - rem; /* F's share of the remainder */
    if (f < c->g + f_rem) {
        if (f_rem && f == f_rem)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: leaves F only the %d remainder SMs, "
                    "without a full partition of %d; allowed %s", a, f_rem, c->g, allowed);
        if (f_rem)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: leaves F %d SMs, fewer than one "
                    "partition of %d plus the %d remainder SMs; allowed %s", a, f, c->g, f_rem,
                    allowed);
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: leaves F %d SMs, below the minimum "
                "partition of %d SMs; allowed %s", a, f, c->g, allowed);
    }
    return GP_OK;
}

gp_status gp_split_plan_make(const gp_sm_info *info, gp_split_req req, gp_split_side side,
                             gp_split_plan *plan)
{
    if (!plan)
        GP_FAIL(GP_ERR_INVALID_ARG, "split planning: plan is NULL");
    cut c;
    GP_TRY(make_cut(info, side, &c));
    char a_ok[160], f_ok[160];
    allowed_text(&c, side == GP_SPLIT_SIDE_A, a_ok, sizeof a_ok);
    allowed_text(&c, side == GP_SPLIT_SIDE_F, f_ok, sizeof f_ok);
    int a = req.attn_sms, f = req.ffn_sms;

    if (a < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: must be positive; allowed %s", a, a_ok);
    if (a > c.sms)
        GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d: more than the device's %d SMs; allowed %s",
                a, c.sms, a_ok);
    if (f == GP_SPLIT_REST) {
        f = c.sms - a;
    } else {
        if (f < 1)
            GP_FAIL(GP_ERR_INVALID_ARG, "FFN SMs %d: must be positive; allowed %s", f, f_ok);
        if (f > c.sms)
            GP_FAIL(GP_ERR_INVALID_ARG, "FFN SMs %d: more than the device's %d SMs; allowed %s",
                    f, c.sms, f_ok);
        /* No overflow: both are at most sm_count. */
        if (a + f > c.sms)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d + FFN SMs %d = %d: more than the "
                    "device's %d SMs; A + F must equal %d (or give A alone); allowed A %s",
                    a, f, a + f, c.sms, c.sms, a_ok);
        if (a + f < c.sms)
            GP_FAIL(GP_ERR_INVALID_ARG, "attention SMs %d + FFN SMs %d = %d: fewer than the "
                    "device's %d SMs, %d would sit idle; A + F must equal %d (or give A alone); "
                    "allowed A %s", a, f, a + f, c.sms, c.sms - a - f, c.sms, a_ok);
    }
    GP_TRY(check_attn(&c, a, a_ok));
    int rem = side == GP_SPLIT_SIDE_A ? c.r : 0;
    fill_plan(&c, (a - rem) / c.g, plan);
    return GP_OK;
}

gp_status gp_split_enumerate(const gp_sm_info *info, gp_split_side side, gp_split_plan *out,
                             int cap, int *n)
{
    if (!n)
        GP_FAIL(GP_ERR_INVALID_ARG, "split enumeration: n is NULL");
    if (cap < 0 || (cap > 0 && !out))
        GP_FAIL(GP_ERR_INVALID_ARG, "split enumeration: cap %d with out %s: cap must be >= 0 "
                "and out non-NULL when cap > 0", cap, out ? "set" : "NULL");
    *n = 0;
    cut c;
    GP_TRY(make_cut(info, side, &c));
    *n = c.n - 1;
    for (int k = 1; k < c.n && k - 1 < cap; k++)
        fill_plan(&c, k, &out[k - 1]);
    return GP_OK;
}

/* One decimal int; *end is where it stopped. 0 when there is none. */
static int parse_int(const char *s, const char **end, long *v)
{
    char *e;
    errno = 0;
    *v = strtol(s, &e, 10);
    *end = e;
    return e != s && errno == 0 && *v >= INT_MIN && *v <= INT_MAX;
}

gp_status gp_split_parse(const char *text, gp_split_req *req)
{
    if (!text || !req)
        GP_FAIL(GP_ERR_INVALID_ARG, "split: text and req must be non-NULL");
    const char *p;
    long a, f;
    if (!parse_int(text, &p, &a) || (*p && *p != ':'))
        GP_FAIL(GP_ERR_INVALID_ARG, "split \"%s\": expected A:F or A (SM counts of the "
                "attention and FFN partitions), e.g. 56:76 or 56", text);
    if (!*p) {
        req->attn_sms = (int)a;
        req->ffn_sms = GP_SPLIT_REST;
        return GP_OK;
    }
    if (!parse_int(p + 1, &p, &f) || *p)
        GP_FAIL(GP_ERR_INVALID_ARG, "split \"%s\": expected A:F or A (SM counts of the "
                "attention and FFN partitions), e.g. 56:76 or 56", text);
    if (f < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "split \"%s\": FFN SMs %ld: must be positive", text, f);
    req->attn_sms = (int)a;
    req->ffn_sms = (int)f;
    return GP_OK;
}
