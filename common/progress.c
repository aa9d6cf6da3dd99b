/* Progress of long work: the throttled reporting side the library calls,
 * and the one text every front end shows for it (gp_common.h). */
#include <stdio.h>
#include <string.h>

#include "gp_common.h"

void gp_progress_begin(gp_progress_run *r, const gp_progress_cb *cb, const char *what, const char *unit,
                       uint64_t total)
{
    memset(r, 0, sizeof *r);
    if (cb)
        r->cb = *cb;
    r->t0 = r->last = gp_now_s();
    r->ev = (gp_progress){.event = GP_PROGRESS_START, .what = what, .unit = unit, .total = total};
    if (r->cb.fn)
        r->cb.fn(r->cb.ctx, &r->ev);
}

void gp_progress_update(gp_progress_run *r, uint64_t done)
{
    if (!r->cb.fn)
        return;
    double now = gp_now_s();
    if (now - r->last < GP_PROGRESS_INTERVAL_S)
        return;
    r->last = now;
    r->ev.event = GP_PROGRESS_UPDATE;
    r->ev.done = done;
    r->ev.elapsed_s = now - r->t0;
    r->cb.fn(r->cb.ctx, &r->ev);
}

void gp_progress_end(gp_progress_run *r, uint64_t done)
{
    if (!r->cb.fn)
        return;
    r->ev.event = GP_PROGRESS_END;
    r->ev.done = done;
    r->ev.elapsed_s = gp_now_s() - r->t0;
    r->cb.fn(r->cb.ctx, &r->ev);
}

/* "12.3 s", "4 min 05 s", "2 h 10 min": a minute count reads better than
 * 245.0 s once the wait is that long. */
static const char *fmt_secs(double s, char *buf, size_t cap)
{
    if (!(s >= 0.0))
        s = 0.0;
    if (s < 60.0)
        snprintf(buf, cap, "%.1f s", s);
    else if (s < 3600.0)
        snprintf(buf, cap, "%d min %02d s", (int)(s / 60.0), (int)s % 60);
    else
        snprintf(buf, cap, "%d h %02d min", (int)(s / 3600.0), (int)(s / 60.0) % 60);
    return buf;
}

/* The decimal unit that shows bytes up to max with a few digits. */
static void byte_unit(uint64_t max, double *div, const char **name)
{
    *div = max >= 1000000000u ? 1e9 : max >= 1000000u ? 1e6 : 1e3;
    *name = max >= 1000000000u ? "GB" : max >= 1000000u ? "MB" : "kB";
}

const char *gp_format_bytes(uint64_t bytes, char *buf, size_t cap)
{
    double div;
    const char *name;
    byte_unit(bytes, &div, &name);
    snprintf(buf, cap, "%.2f %s", (double)bytes / div, name);
    return buf;
}

/* An amount of p's unit: bytes in the unit of the total (so "3.21 of 16.06
 * GB" shares one), counts as integers. */
static const char *fmt_amount(const gp_progress *p, uint64_t v, bool with_unit, char *buf, size_t cap)
{
    bool bytes = p->unit && !strcmp(p->unit, "B");
    double div;
    const char *name;
    byte_unit(p->total, &div, &name);
    if (bytes)
        snprintf(buf, cap, "%.2f%s%s", (double)v / div, with_unit ? " " : "", with_unit ? name : "");
    else
        snprintf(buf, cap, "%llu%s%s", (unsigned long long)v, with_unit && p->unit ? " " : "",
                 with_unit && p->unit ? p->unit : "");
    return buf;
}

static const char *fmt_rate(const gp_progress *p, double per_s, char *buf, size_t cap)
{
    if (p->unit && !strcmp(p->unit, "B"))
        snprintf(buf, cap, "%.2f GB/s", per_s / 1e9);
    else
        snprintf(buf, cap, "%.*f %s/s", per_s < 10.0 ? 2 : 0, per_s, p->unit ? p->unit : "");
    return buf;
}

const char *gp_progress_format(const gp_progress *p, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    if (!p) {
        buf[0] = '\0';
        return buf;
    }
    const char *what = p->what ? p->what : "working";
    char done[48], total[48], rate[48], el[32], left[32];
    double per_s = p->elapsed_s > 0.0 ? (double)p->done / p->elapsed_s : 0.0;
    fmt_amount(p, p->total, true, total, sizeof total);
    switch (p->event) {
    case GP_PROGRESS_START:
        snprintf(buf, cap, "%s: %s", what, total);
        break;
    case GP_PROGRESS_UPDATE: {
        double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 0.0;
        int n = snprintf(buf, cap, "%s: %s of %s (%.0f%%), %s, %s", what, fmt_amount(p, p->done, false, done,
                         sizeof done), total, pct, fmt_rate(p, per_s, rate, sizeof rate),
                         fmt_secs(p->elapsed_s, el, sizeof el));
        /* the rest at the rate so far: the estimate a user can act on */
        if (per_s > 0.0 && p->done < p->total && n > 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, ", ~%s left",
                     fmt_secs((double)(p->total - p->done) / per_s, left, sizeof left));
        break;
    }
    case GP_PROGRESS_END:
        if (p->done >= p->total)
            snprintf(buf, cap, "%s: %s in %s, %s", what, total, fmt_secs(p->elapsed_s, el, sizeof el),
                     fmt_rate(p, per_s, rate, sizeof rate));
        else
            snprintf(buf, cap, "%s: stopped at %s of %s after %s", what,
                     fmt_amount(p, p->done, false, done, sizeof done), total,
                     fmt_secs(p->elapsed_s, el, sizeof el));
        break;
    }
    return buf;
}
