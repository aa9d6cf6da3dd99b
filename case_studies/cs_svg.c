/* --svg: tokens/s against attention SMs, a line per (workload, M), each
 * workload's seq level dashed, axes, ticks and a legend; hand-written SVG
 * (no library), every text escaped so the file is well-formed XML. */
#include "cs_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Layout in px: the plot area and the legend to its right. */
#define W 980
#define H 560
#define PLOT_X0 84
#define PLOT_X1 700
#define PLOT_Y0 64
#define PLOT_Y1 480
#define LEGEND_X 724
/* Above this max/min ratio the y axis is logarithmic: small and large
 * workloads differ ~30x in tokens/s and would flatten each other. */
#define LOG_RATIO 20.0

static const char *PALETTE[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                 "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22" };
#define N_PALETTE ((int)(sizeof PALETTE / sizeof PALETTE[0]))
/* line patterns telling apart series that differ only in depth or policy */
static const char *VARIANT_DASH[] = { "", "2 3", "7 2 2 2", "1 2" };

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* control characters other than tab/newline are not allowed in XML 1.0 */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n')
                fputc(*s, f);
        }
    }
}

/* ------------------------------------------------------------ the data */

typedef struct series {
    const gp_cs_row *first;  /* identifies workload, M, depth, policy */
    int workload;            /* index into the workload table (colour) */
    int variant;             /* depth/policy combination (line pattern) */
    int n;
    double *x, *y;
} series;

typedef struct plot {
    const gp_cs_row **wl;    /* first row of each workload */
    double *seq_tps;         /* seq tokens/s per workload, NAN when none */
    int n_wl;
    series *s;
    int n_s;
    bool vary_depth, vary_policy, vary_placement;
    int n_failed;
    double x_max, y_min, y_max;
    bool log_y;
} plot;

static bool same_workload(const gp_cs_row *a, const gp_cs_row *b)
{
    return a->B == b->B && a->C == b->C && strcmp(a->workload, b->workload) == 0;
}

static bool plotted(const gp_cs_row *r)
{
    return r->ok && isfinite(r->tokens_per_s) && r->tokens_per_s > 0;
}

static int workload_index(plot *p, const gp_cs_row *r)
{
    for (int i = 0; i < p->n_wl; i++)
        if (same_workload(p->wl[i], r))
            return i;
    p->wl[p->n_wl] = r;
    p->seq_tps[p->n_wl] = NAN;
    return p->n_wl++;
}

static int cmp_x(const void *a, const void *b)
{
    const double *u = a, *v = b;
    return (u[0] > v[0]) - (u[0] < v[0]);
}

/* Sorts a series' points by x (pairs kept together). */
static void sort_series(series *s)
{
    double *xy = malloc(sizeof(double) * 2 * (size_t)(s->n ? s->n : 1));
    if (!xy)
        return; /* unsorted: still a valid drawing */
    for (int i = 0; i < s->n; i++)
        xy[2 * i] = s->x[i], xy[2 * i + 1] = s->y[i];
    qsort(xy, (size_t)s->n, 2 * sizeof(double), cmp_x);
    for (int i = 0; i < s->n; i++)
        s->x[i] = xy[2 * i], s->y[i] = xy[2 * i + 1];
    free(xy);
}

static gp_status collect(plot *p, const gp_cs_row *rows, int n, int sm_count)
{
    memset(p, 0, sizeof *p);
    size_t cap = (size_t)(n > 0 ? n : 1);
    p->wl = calloc(cap, sizeof *p->wl);
    p->seq_tps = calloc(cap, sizeof *p->seq_tps);
    p->s = calloc(cap, sizeof *p->s);
    if (!p->wl || !p->seq_tps || !p->s)
        GP_FAIL(GP_ERR_NO_MEMORY, "SVG chart: out of memory");
    p->y_min = INFINITY;
    p->x_max = sm_count > 0 ? sm_count : 0;
    for (int i = 0; i < n; i++) {
        const gp_cs_row *r = &rows[i];
        if (!r->ok) {
            p->n_failed++;
            continue;
        }
        if (!plotted(r))
            continue;
        int w = workload_index(p, r);
        p->y_max = fmax(p->y_max, r->tokens_per_s);
        p->y_min = fmin(p->y_min, r->tokens_per_s);
        if (r->seq) {
            if (!isfinite(p->seq_tps[w]))
                p->seq_tps[w] = r->tokens_per_s;
            continue;
        }
        int k = 0;
        for (; k < p->n_s; k++) {
            const gp_cs_row *f = p->s[k].first;
            if (same_workload(f, r) && f->M == r->M && f->depth == r->depth && f->rebalance == r->rebalance &&
                f->placement == r->placement)
                break;
        }
        if (k == p->n_s) {
            /* room for every remaining row; x and y share one block */
            double *xy = malloc(sizeof(double) * 2 * (size_t)(n - i));
            if (!xy)
                GP_FAIL(GP_ERR_NO_MEMORY, "SVG chart: out of memory");
            p->s[k].first = r;
            p->s[k].workload = w;
            p->s[k].x = xy;
            p->s[k].y = xy + (n - i);
            p->n_s++;
        }
        series *s = &p->s[k];
        s->x[s->n] = cs_row_attn_x(r);
        s->y[s->n] = r->tokens_per_s;
        p->x_max = fmax(p->x_max, s->x[s->n]);
        s->n++;
    }
    for (int k = 0; k < p->n_s; k++)
        sort_series(&p->s[k]);
    for (int k = 1; k < p->n_s; k++) {
        p->vary_depth |= p->s[k].first->depth != p->s[0].first->depth;
        p->vary_policy |= p->s[k].first->rebalance != p->s[0].first->rebalance;
        p->vary_placement |= p->s[k].first->placement != p->s[0].first->placement;
    }
    /* a variant number per distinct (depth, policy, placement), in order of appearance */
    int n_variants = 0;
    for (int k = 0; k < p->n_s; k++) {
        const gp_cs_row *f = p->s[k].first;
        int j = 0;
        while (j < k && (p->s[j].first->depth != f->depth || p->s[j].first->rebalance != f->rebalance ||
                         p->s[j].first->placement != f->placement))
            j++;
        p->s[k].variant = j < k ? p->s[j].variant : n_variants++;
    }
    p->log_y = p->y_max > 0 && p->y_min > 0 && p->y_max / p->y_min > LOG_RATIO;
    return GP_OK;
}

static void plot_free(plot *p)
{
    for (int k = 0; k < p->n_s; k++)
        free(p->s[k].x); /* x and y share one block */
    free(p->s);
    p->s = NULL;
    p->n_s = 0;
    free(p->wl);
    free(p->seq_tps);
}

/* ------------------------------------------------------------ axes */

/* A 1-2-5 step giving at most max_ticks intervals over span. */
static double nice_step(double span, int max_ticks)
{
    double raw = span / max_ticks, mag = pow(10.0, floor(log10(raw)));
    const double m[] = { 1, 2, 5, 10 };
    for (int i = 0; i < 4; i++)
        if (m[i] * mag >= raw)
            return m[i] * mag;
    return 10 * mag;
}

/* The SM axis steps by powers of two from 1, so ticks land on partition
 * sizes (multiples of 8 on Hopper). */
static int sm_step(double x_max)
{
    int step = 1;
    while (x_max / step > 12)
        step *= 2;
    return step;
}

static void si(char *buf, size_t len, double v)
{
    if (v >= 1e6)
        snprintf(buf, len, "%gM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, len, "%gk", v / 1e3);
    else
        snprintf(buf, len, "%g", v);
}

typedef struct scale {
    double x_max, y_lo, y_hi;
    bool log_y;
} scale;

static double px_x(const scale *s, double x) { return PLOT_X0 + (PLOT_X1 - PLOT_X0) * x / s->x_max; }
static double px_y(const scale *s, double y)
{
    double t = s->log_y ? (log10(y) - log10(s->y_lo)) / (log10(s->y_hi) - log10(s->y_lo))
                        : (y - s->y_lo) / (s->y_hi - s->y_lo);
    return PLOT_Y1 - (PLOT_Y1 - PLOT_Y0) * t;
}

static void axes(FILE *f, const plot *p, scale *s)
{
    s->x_max = p->x_max > 0 ? p->x_max : 1;
    s->log_y = p->log_y;
    if (s->log_y) {
        /* bounds on the 1-2-5 grid just outside the data: whole decades
         * would squeeze the lines into a fraction of the height */
        double dec = pow(10.0, floor(log10(p->y_min)));
        s->y_lo = p->y_min >= 5 * dec ? 5 * dec : p->y_min >= 2 * dec ? 2 * dec : dec;
        dec = pow(10.0, floor(log10(p->y_max)));
        s->y_hi = p->y_max <= dec ? dec : p->y_max <= 2 * dec ? 2 * dec : p->y_max <= 5 * dec ? 5 * dec : 10 * dec;
    } else {
        double top = p->y_max > 0 ? p->y_max * 1.08 : 1.0;
        double step = nice_step(top, 8);
        s->y_lo = 0;
        s->y_hi = ceil(top / step) * step;
    }
    fprintf(f, "<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">\n"
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n</g>\n",
            PLOT_X0, PLOT_Y1, PLOT_X1, PLOT_Y1, PLOT_X0, PLOT_Y0, PLOT_X0, PLOT_Y1);
    fputs("<g class=\"ticks\" font-size=\"11\" fill=\"#333\">\n", f);
    int xs = sm_step(s->x_max);
    for (int x = 0; x <= s->x_max + 1e-9; x += xs) {
        double px = px_x(s, x);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>"
                   "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                px, PLOT_Y1, px, PLOT_Y1 + 5, px, PLOT_Y0, px, PLOT_Y1 - 1, px, PLOT_Y1 + 18, x);
    }
    char label[32];
    if (s->log_y) {
        for (double dec = pow(10.0, floor(log10(s->y_lo))); dec <= s->y_hi * 1.0001; dec *= 10)
            for (int mlt = 1; mlt < 10; mlt++) {
                double y = dec * mlt;
                if (y < s->y_lo * 0.9999)
                    continue;
                if (y > s->y_hi * 1.0001)
                    break;
                bool major = mlt == 1 || mlt == 2 || mlt == 5;
                double py = px_y(s, y);
                fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", PLOT_X0 + 1, py,
                        PLOT_X1, py, major ? "#d5d5d5" : "#f0f0f0");
                if (major) {
                    si(label, sizeof label, y);
                    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", PLOT_X0 - 7, py + 4,
                            label);
                }
            }
    } else {
        double step = nice_step(s->y_hi, 8);
        for (double y = 0; y <= s->y_hi + step * 1e-6; y += step) {
            double py = px_y(s, y);
            si(label, sizeof label, y);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>"
                       "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
                       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    PLOT_X0 - 5, py, PLOT_X0, py, PLOT_X0 + 1, py, PLOT_X1, py, PLOT_X0 - 7, py + 4, label);
        }
    }
    fputs("</g>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">attention SMs (A; F gets the "
               "rest)</text>\n", (PLOT_X0 + PLOT_X1) / 2, PLOT_Y1 + 40);
    fprintf(f, "<text transform=\"translate(%d %d) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">tokens/s%s"
               "</text>\n", PLOT_X0 - 58, (PLOT_Y0 + PLOT_Y1) / 2, s->log_y ? " (log scale)" : "");
}

/* ------------------------------------------------------------ marks */

/* Marker shape by M: circle, square, triangle, diamond. */
static void marker(FILE *f, int M, double x, double y, const char *colour)
{
    switch (M) {
    case 2: fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"%s\"", x - 4, y - 4, colour); break;
    case 3:
        fprintf(f, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"", x, y - 5, x + 5, y + 4, x - 5,
                y + 4, colour);
        break;
    case 4:
        fprintf(f, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"", x, y - 5, x + 5, y, x,
                y + 5, x - 5, y, colour);
        break;
    default: fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"", x, y, colour);
    }
}

static void series_label(FILE *f, const plot *p, const series *s)
{
    const gp_cs_row *r = s->first;
    esc(f, r->workload);
    if (strchr(r->workload, ':') == NULL)
        fprintf(f, " %d:%d", r->B, r->C);
    fprintf(f, ", M=%d", r->M);
    if (p->vary_depth)
        fprintf(f, ", depth %u", r->depth);
    if (p->vary_policy)
        fprintf(f, ", %s", gp_rebalance_policy_name(r->rebalance));
    if (p->vary_placement)
        fprintf(f, ", %s", gp_placement_name(r->placement));
}

static void draw_series(FILE *f, const plot *p, const scale *sc, const series *s)
{
    const char *col = PALETTE[s->workload % N_PALETTE];
    const char *dash = VARIANT_DASH[s->variant % 4];
    fprintf(f, "<g class=\"series\" stroke=\"%s\">\n<polyline fill=\"none\" stroke-width=\"2\"%s%s%s points=\"", col,
            dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
    for (int i = 0; i < s->n; i++)
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", px_x(sc, s->x[i]), px_y(sc, s->y[i]));
    fputs("\"/>\n", f);
    for (int i = 0; i < s->n; i++) {
        marker(f, s->first->M, px_x(sc, s->x[i]), px_y(sc, s->y[i]), col);
        fprintf(f, " stroke=\"none\"><title>");
        series_label(f, p, s);
        fprintf(f, ": A %g SMs, %.0f tokens/s</title></%s>\n", s->x[i], s->y[i],
                s->first->M == 2 ? "rect" : s->first->M == 3 || s->first->M == 4 ? "polygon" : "circle");
    }
    fputs("</g>\n", f);
}

static void draw_seq(FILE *f, const plot *p, const scale *sc, int w)
{
    double py = px_y(sc, p->seq_tps[w]);
    fprintf(f, "<line class=\"seq\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"8 5\"><title>",
            PLOT_X0, py, PLOT_X1, py, PALETTE[w % N_PALETTE]);
    esc(f, p->wl[w]->workload);
    fprintf(f, " seq: %.0f tokens/s</title></line>\n", p->seq_tps[w]);
}

static void legend(FILE *f, const plot *p)
{
    int y = PLOT_Y0 + 4;
    fprintf(f, "<g class=\"legend\" font-size=\"12\" fill=\"#222\">\n");
    for (int k = 0; k < p->n_s; k++, y += 20) {
        const series *s = &p->s[k];
        const char *col = PALETTE[s->workload % N_PALETTE], *dash = VARIANT_DASH[s->variant % 4];
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>", LEGEND_X,
                y, LEGEND_X + 28, y, col, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
        marker(f, s->first->M, LEGEND_X + 14, y, col);
        fputs("/>", f);
        fprintf(f, "<text x=\"%d\" y=\"%d\">", LEGEND_X + 36, y + 4);
        series_label(f, p, s);
        fputs("</text>\n", f);
    }
    for (int w = 0; w < p->n_wl; w++) {
        if (!isfinite(p->seq_tps[w]))
            continue;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"8 5\"/><text x=\"%d\" y=\"%d\">",
                LEGEND_X, y, LEGEND_X + 28, y, PALETTE[w % N_PALETTE], LEGEND_X + 36, y + 4);
        esc(f, p->wl[w]->workload);
        if (strchr(p->wl[w]->workload, ':') == NULL)
            fprintf(f, " %d:%d", p->wl[w]->B, p->wl[w]->C);
        fputs(": seq (all SMs)</text>\n", f);
        y += 20;
    }
    fputs("</g>\n", f);
}

gp_status gp_cs_write_svg(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    static const gp_cs_meta none;
    m = m ? m : &none;
    plot p;
    gp_status st = collect(&p, rows, rows ? n : 0, m->sm_count);
    if (st != GP_OK) {
        plot_free(&p);
        return st;
    }
    FILE *f = cs_open_out(path, "SVG chart");
    if (!f) {
        plot_free(&p);
        return GP_ERR_IO;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" font-weight=\"bold\">tokens/s against attention SMs</text>\n",
            PLOT_X0);
    fprintf(f, "<text x=\"%d\" y=\"48\" font-size=\"12\" fill=\"#555\">", PLOT_X0);
    esc(f, m->gpu[0] ? m->gpu : "GPU ?");
    fprintf(f, " (%d SMs), model ", m->sm_count);
    esc(f, m->model[0] ? m->model : "?");
    if (m->timestamp[0]) {
        fputs(", ", f);
        esc(f, m->timestamp);
    }
    fputs("</text>\n", f);
    if (p.n_s == 0 && p.n_wl == 0) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\">no successful configuration to plot</text>\n", PLOT_X0,
                (PLOT_Y0 + PLOT_Y1) / 2);
    } else {
        scale sc;
        axes(f, &p, &sc);
        for (int w = 0; w < p.n_wl; w++)
            if (isfinite(p.seq_tps[w]))
                draw_seq(f, &p, &sc, w);
        for (int k = 0; k < p.n_s; k++)
            draw_series(f, &p, &sc, &p.s[k]);
        legend(f, &p);
    }
    if (p.n_failed)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#a00\">%d configuration%s failed and %s not "
                   "drawn (see the report)</text>\n",
                PLOT_X0, H - 12, p.n_failed, p.n_failed == 1 ? "" : "s", p.n_failed == 1 ? "is" : "are");
    fputs("</svg>\n", f);
    plot_free(&p);
    return cs_close_out(f, path, "SVG chart");
}
