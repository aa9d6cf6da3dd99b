/* The prefill/decode case study's report: decode and prefill steps per
 * split against every SM, and the work-done comparison with the mixed batch
 * that says whether a split pays, from the fitted model at its profile's
 * points. */
#include "gp_pd_case_study.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 64

typedef struct decode_point {
    int rows;
    long long context; /* the rows' contexts summed, as the profile holds it */
} decode_point;

typedef struct prefill_point {
    int tokens, position;
} prefill_point;

/* Per point and split: a decode step or a prefill batch alone on the
 * split's partition and beside the other side's work. */
typedef struct split_cell {
    double alone, beside;
} split_cell;

typedef struct work_cell {
    double prefill, decode, steps, mixed_alt, pays;
} work_cell;

typedef struct report {
    const gp_pd_profile *p;
    int n_decode, n_prefill;
    decode_point decode[MAX_POINTS];
    prefill_point prefill[MAX_POINTS];
    double decode_whole[MAX_POINTS];
    split_cell dcell[MAX_POINTS][GP_PD_MAX_SPLITS];
    double prefill_whole[MAX_POINTS];
    split_cell pcell[MAX_POINTS][GP_PD_MAX_SPLITS];
    int prompt;        /* the work-done table's prompt: the largest at position 0 */
    double mixed[MAX_POINTS];     /* MIXED(rows, context, prompt - rows) */
    int mixed_tokens[MAX_POINTS];
    work_cell wcell[MAX_POINTS][GP_PD_MAX_SPLITS];
    int best[MAX_POINTS];         /* the split of the highest pays */
    char line[MAX_POINTS][512];   /* the closing line */
    char overall[640];
} report;

static int per_row(const decode_point *d)
{
    return d->rows > 0 ? (int)((d->context + d->rows / 2) / d->rows) : 0;
}

static int cmp_decode(const void *a, const void *b)
{
    const decode_point *x = a, *y = b;
    if (x->rows != y->rows)
        return x->rows < y->rows ? -1 : 1;
    return x->context < y->context ? -1 : x->context > y->context;
}

static int cmp_prefill(const void *a, const void *b)
{
    const prefill_point *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return (x->tokens > y->tokens) - (x->tokens < y->tokens);
}

static void split_name(const gp_pd_profile *p, int s, char *buf, size_t len)
{
    if (s == GP_PD_WHOLE)
        snprintf(buf, len, "every SM");
    else
        snprintf(buf, len, "%d:%d", p->decode_sms[s], p->prefill_sms[s]);
}

/* A prediction the report needs; the fit holds every set it reads, so a
 * refusal is a model that is not a prefill/decode profile's. */
static gp_status predict(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun, int rows, long long context,
                         int tokens, int position, double *out)
{
    float ms = gp_pd_model_predict_at(m, kind, split, corun, rows, context, tokens, position);
    if (!(ms > 0) || !isfinite(ms)) {
        char name[64];
        split_name(gp_pd_model_profile(m), split, name, sizeof name);
        GP_FAIL(GP_ERR_INVALID_ARG, "pd report: the model predicts no %s step on %s%s (rows %d, context %lld, "
                "tokens %d, position %d)", gp_pd_kind_name(kind), name, corun ? " beside the other lane" : "",
                rows, context, tokens, position);
    }
    *out = ms;
    return GP_OK;
}

static gp_status collect_points(report *r)
{
    const gp_pd_profile *p = r->p;
    for (int i = 0; i < p->n_samples; i++) {
        const gp_pd_sample *s = &p->samples[i];
        if (s->split != GP_PD_WHOLE)
            continue;
        if (s->kind == GP_PD_DECODE) {
            bool seen = false;
            for (int j = 0; j < r->n_decode && !seen; j++)
                seen = r->decode[j].rows == s->rows && r->decode[j].context == s->context;
            if (seen)
                continue;
            if (r->n_decode == MAX_POINTS)
                GP_FAIL(GP_ERR_INVALID_ARG, "pd report: more than %d decode points on every SM", MAX_POINTS);
            r->decode[r->n_decode++] = (decode_point){.rows = s->rows, .context = s->context};
        } else if (s->kind == GP_PD_PREFILL) {
            bool seen = false;
            for (int j = 0; j < r->n_prefill && !seen; j++)
                seen = r->prefill[j].tokens == s->tokens && r->prefill[j].position == s->position;
            if (seen)
                continue;
            if (r->n_prefill == MAX_POINTS)
                GP_FAIL(GP_ERR_INVALID_ARG, "pd report: more than %d prefill points on every SM", MAX_POINTS);
            r->prefill[r->n_prefill++] = (prefill_point){.tokens = s->tokens, .position = s->position};
        }
    }
    qsort(r->decode, (size_t)r->n_decode, sizeof r->decode[0], cmp_decode);
    qsort(r->prefill, (size_t)r->n_prefill, sizeof r->prefill[0], cmp_prefill);
    r->prompt = 0;
    for (int j = 0; j < r->n_prefill; j++)
        if (r->prefill[j].position == 0 && r->prefill[j].tokens > r->prompt)
            r->prompt = r->prefill[j].tokens;
    if (r->n_decode == 0 || r->prompt == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd report: the profile has %s on every SM (split -1); the report compares the "
                "splits against them", r->n_decode == 0 ? "no decode samples" : "no prefill samples at position 0");
    if (p->n_splits < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd report: the profile has no splits");
    return GP_OK;
}

static void point_text(const decode_point *d, char *buf, size_t len)
{
    snprintf(buf, len, "%d %s x %d", d->rows, d->rows == 1 ? "row" : "rows", per_row(d));
}

static gp_status compute(const gp_pd_model *m, report *r)
{
    const gp_pd_profile *p = r->p;
    const int ns = p->n_splits;
    for (int i = 0; i < r->n_decode; i++) {
        const decode_point *d = &r->decode[i];
        GP_TRY(predict(m, GP_PD_DECODE, GP_PD_WHOLE, false, d->rows, d->context, 0, 0, &r->decode_whole[i]));
        for (int s = 0; s < ns; s++) {
            GP_TRY(predict(m, GP_PD_DECODE, s, false, d->rows, d->context, 0, 0, &r->dcell[i][s].alone));
            GP_TRY(predict(m, GP_PD_DECODE, s, true, d->rows, d->context, 0, 0, &r->dcell[i][s].beside));
        }
    }
    for (int i = 0; i < r->n_prefill; i++) {
        const prefill_point *q = &r->prefill[i];
        GP_TRY(predict(m, GP_PD_PREFILL, GP_PD_WHOLE, false, 0, 0, q->tokens, q->position, &r->prefill_whole[i]));
        for (int s = 0; s < ns; s++) {
            GP_TRY(predict(m, GP_PD_PREFILL, s, false, 0, 0, q->tokens, q->position, &r->pcell[i][s].alone));
            GP_TRY(predict(m, GP_PD_PREFILL, s, true, 0, 0, q->tokens, q->position, &r->pcell[i][s].beside));
        }
    }
    int n_pays = 0, best_i = -1, worst_i = -1;
    for (int i = 0; i < r->n_decode; i++) {
        const decode_point *d = &r->decode[i];
        /* the mixed batch holds the decode rows and as many prompt tokens as
           make up the lane's batch, as the profile's mixed points do */
        r->mixed_tokens[i] = r->prompt - d->rows > 0 ? r->prompt - d->rows : 1;
        GP_TRY(predict(m, GP_PD_MIXED, GP_PD_WHOLE, false, d->rows, d->context, r->mixed_tokens[i], 0, &r->mixed[i]));
        r->best[i] = 0;
        for (int s = 0; s < ns; s++) {
            work_cell *w = &r->wcell[i][s];
            GP_TRY(predict(m, GP_PD_PREFILL, s, true, 0, 0, r->prompt, 0, &w->prefill));
            w->decode = r->dcell[i][s].beside;
            w->steps = w->prefill / w->decode;
            w->mixed_alt = r->mixed[i] + fmax(w->steps - 1.0, 0.0) * r->decode_whole[i];
            w->pays = w->mixed_alt / w->prefill;
            if (w->pays > r->wcell[i][r->best[i]].pays)
                r->best[i] = s;
        }
        char pt[64], sp[32];
        point_text(d, pt, sizeof pt);
        const int b = r->best[i];
        split_name(p, b, sp, sizeof sp);
        const double pays = r->wcell[i][b].pays;
        if (pays > 1.0) {
            snprintf(r->line[i], sizeof r->line[i], "%s: split %s pays %.2fx over the mixed batch", pt, sp, pays);
            n_pays++;
            if (best_i < 0 || pays > r->wcell[best_i][r->best[best_i]].pays)
                best_i = i;
        } else {
            snprintf(r->line[i], sizeof r->line[i],
                     "%s: no split pays; the mixed batch is %.2fx faster than the best split (%s)", pt, 1.0 / pays,
                     sp);
            if (worst_i < 0 || pays > r->wcell[worst_i][r->best[worst_i]].pays)
                worst_i = i; /* the point where a split comes closest */
        }
    }
    if (n_pays == 0) {
        char pt[64], sp[32];
        point_text(&r->decode[worst_i], pt, sizeof pt);
        split_name(p, r->best[worst_i], sp, sizeof sp);
        snprintf(r->overall, sizeof r->overall,
                 "Overall: no split pays at any of the %d decode points with a %d-token prompt; the closest is "
                 "%s at %s (the mixed batch %.2fx faster)", r->n_decode, r->prompt, sp, pt,
                 1.0 / r->wcell[worst_i][r->best[worst_i]].pays);
    } else {
        char pt[64], sp[32];
        point_text(&r->decode[best_i], pt, sizeof pt);
        split_name(p, r->best[best_i], sp, sizeof sp);
        snprintf(r->overall, sizeof r->overall,
                 "Overall: a split pays at %d of the %d decode points with a %d-token prompt; the most is %s at %s "
                 "(%.2fx over the mixed batch)", n_pays, r->n_decode, r->prompt, sp, pt,
                 r->wcell[best_i][r->best[best_i]].pays);
    }
    return GP_OK;
}

/* ------------------------------------------------------------ markdown */

/* One point's rows of the decode or prefill table: a row per split. */
static void cell_rows(FILE *f, const gp_pd_profile *p, const char *point, double whole, const split_cell *cells)
{
    char sp[32];
    for (int s = 0; s < p->n_splits; s++) {
        split_name(p, s, sp, sizeof sp);
        fprintf(f, "| %s | %s | %.1f | %.1f | %.1f | %.2fx |\n", point, sp, whole, cells[s].alone, cells[s].beside,
                cells[s].beside / whole);
    }
}

static void write_markdown(const report *r, FILE *f)
{
    const gp_pd_profile *p = r->p;
    const int ns = p->n_splits;
    char sp[32], pt[64];
    fprintf(f, "# Prefill and decode on two lanes: when the split pays\n\n");
    fprintf(f, "Device: %s; model: %s; splits (decode SMs : prefill SMs): ", p->device[0] ? p->device : "unknown",
            p->model[0] ? p->model : "unknown");
    for (int s = 0; s < ns; s++)
        fprintf(f, "%s%d:%d", s ? ", " : "", p->decode_sms[s], p->prefill_sms[s]);
    fprintf(f, ".\n\nEvery figure is the fitted latency model's prediction at the profile's points (ms), not a "
               "measured sample; a decode point is its rows x each row's context (the profile's summed context "
               "divided by the rows, rounded).\n\n");

    fprintf(f, "## Decode steps\n\n");
    fprintf(f, "| decode point | split | every SM | alone | beside a prefill batch | beside / every SM |\n");
    fprintf(f, "|---|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < r->n_decode; i++) {
        point_text(&r->decode[i], pt, sizeof pt);
        cell_rows(f, p, pt, r->decode_whole[i], r->dcell[i]);
    }

    fprintf(f, "\n## Prefill batches\n\n");
    fprintf(f, "| prompt | split | every SM | alone | beside decode steps | beside / every SM |\n");
    fprintf(f, "|---|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < r->n_prefill; i++) {
        char q[64];
        if (r->prefill[i].position)
            snprintf(q, sizeof q, "%d tokens after %d", r->prefill[i].tokens, r->prefill[i].position);
        else
            snprintf(q, sizeof q, "%d tokens", r->prefill[i].tokens);
        cell_rows(f, p, q, r->prefill_whole[i], r->pcell[i]);
    }

    fprintf(f, "\n## Work done: a %d-token prompt beside the decode rows\n\n", r->prompt);
    fprintf(f, "A split prefills the prompt in T while its decode partition runs k = T / (its decode step beside "
               "the prefill) steps; the mixed batch on every SM does the prefill and one of those steps at once "
               "and the other k - 1 steps alone on every SM, in M. pays = M / T: above 1 the split does the same "
               "work faster. Each split's count is for its own mix, k decode steps per prompt: it pays in serving only "
               "where the workload asks for that many decode steps of these rows per prompt.\n\n");
    fprintf(f, "| decode point | split | prefill beside decode (T) | decode step beside | steps k | mixed batch | "
               "decode on every SM | mixed alternative (M) | pays |\n");
    fprintf(f, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < r->n_decode; i++) {
        point_text(&r->decode[i], pt, sizeof pt);
        for (int s = 0; s < ns; s++) {
            const work_cell *w = &r->wcell[i][s];
            split_name(p, s, sp, sizeof sp);
            fprintf(f, "| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2fx |\n", pt, sp, w->prefill,
                    w->decode, w->steps, r->mixed[i], r->decode_whole[i], w->mixed_alt, w->pays);
        }
    }
    fputc('\n', f);
    for (int i = 0; i < r->n_decode; i++)
        fprintf(f, "%s\n", r->line[i]);
    fprintf(f, "\n%s\n", r->overall);
}

/* ------------------------------------------------------------ JSON */

static json_t *split_obj(const gp_pd_profile *p, int s)
{
    return json_pack("{s:i, s:i, s:i}", "split", s, "decode_sms", p->decode_sms[s], "prefill_sms", p->prefill_sms[s]);
}

/* json_pack's failure is allocation's; *ok keeps the first. */
static void add(json_t *arr, json_t *item, bool *ok)
{
    if (!item || json_array_append_new(arr, item) != 0)
        *ok = false;
}

static void set(json_t *obj, const char *key, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        *ok = false;
}

/* One point's splits of the decode or prefill table into per (NULL: *ok
 * is cleared). */
static void cells_json(const gp_pd_profile *p, double whole, const split_cell *cells, json_t *per, bool *ok)
{
    for (int s = 0; *ok && per && s < p->n_splits; s++) {
        json_t *o = split_obj(p, s);
        add(per, o, ok);
        if (o) {
            set(o, "alone_ms", json_real(cells[s].alone), ok);
            set(o, "beside_ms", json_real(cells[s].beside), ok);
            set(o, "beside_vs_every_sm", json_real(cells[s].beside / whole), ok);
        }
    }
    *ok = *ok && per;
}

static json_t *build_json(const report *r)
{
    const gp_pd_profile *p = r->p;
    const int ns = p->n_splits;
    bool ok = true;
    json_t *root = json_pack("{s:s, s:i, s:s, s:s, s:s}", "format", "greenpipe-pd-case-study", "version", 1,
                             "device", p->device, "model", p->model, "source",
                             "the fitted model's predictions at the profile's points");
    json_t *splits = json_array(), *dec = json_array(), *pre = json_array(), *work = json_array();
    if (!root || !splits || !dec || !pre || !work) {
        json_decref(root);
        json_decref(splits);
        json_decref(dec);
        json_decref(pre);
        json_decref(work);
        return NULL;
    }
    set(root, "splits", splits, &ok);
    set(root, "decode", dec, &ok);
    set(root, "prefill", pre, &ok);
    set(root, "work_done", work, &ok);
    for (int s = 0; s < ns; s++)
        add(splits, json_pack("{s:i, s:i}", "decode_sms", p->decode_sms[s], "prefill_sms", p->prefill_sms[s]), &ok);
    for (int i = 0; ok && i < r->n_decode; i++) {
        json_t *per = json_array();
        add(dec, json_pack("{s:i, s:I, s:i, s:f, s:o*}", "rows", r->decode[i].rows, "context",
                           (json_int_t)r->decode[i].context, "context_per_row", per_row(&r->decode[i]),
                           "every_sm_ms", r->decode_whole[i], "splits", per), &ok);
        cells_json(p, r->decode_whole[i], r->dcell[i], per, &ok);
    }
    for (int i = 0; ok && i < r->n_prefill; i++) {
        json_t *per = json_array();
        add(pre, json_pack("{s:i, s:i, s:f, s:o*}", "tokens", r->prefill[i].tokens, "position",
                           r->prefill[i].position, "every_sm_ms", r->prefill_whole[i], "splits", per), &ok);
        cells_json(p, r->prefill_whole[i], r->pcell[i], per, &ok);
    }
    for (int i = 0; ok && i < r->n_decode; i++) {
        json_t *per = json_array();
        const int b = r->best[i];
        add(work, json_pack("{s:i, s:I, s:i, s:i, s:i, s:f, s:f, s:o*, s:i, s:f, s:b, s:s}", "rows",
                            r->decode[i].rows, "context", (json_int_t)r->decode[i].context, "context_per_row",
                            per_row(&r->decode[i]), "prompt_tokens", r->prompt, "mixed_tokens", r->mixed_tokens[i],
                            "mixed_ms", r->mixed[i], "every_sm_decode_ms", r->decode_whole[i], "splits", per,
                            "best_split", b, "best_pays", r->wcell[i][b].pays, "split_pays", r->wcell[i][b].pays > 1.0,
                            "line", r->line[i]), &ok);
        for (int s = 0; ok && per && s < ns; s++) {
            const work_cell *w = &r->wcell[i][s];
            json_t *o = split_obj(p, s);
            add(per, o, &ok);
            if (o) {
                set(o, "prefill_beside_ms", json_real(w->prefill), &ok);
                set(o, "decode_beside_ms", json_real(w->decode), &ok);
                set(o, "steps", json_real(w->steps), &ok);
                set(o, "mixed_alternative_ms", json_real(w->mixed_alt), &ok);
                set(o, "pays", json_real(w->pays), &ok);
            }
        }
        ok = ok && per;
    }
    set(root, "overall", json_string(r->overall), &ok);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

gp_status gp_cs_pd_report(const gp_pd_model *m, FILE *md, json_t **json)
{
    if (json)
        *json = NULL;
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd report: no model");
    report *r = calloc(1, sizeof *r);
    if (!r)
        GP_FAIL(GP_ERR_NO_MEMORY, "pd report: out of memory");
    r->p = gp_pd_model_profile(m);
    gp_status st = collect_points(r);
    if (st == GP_OK)
        st = compute(m, r);
    if (st == GP_OK && json && !(*json = build_json(r))) {
        gp_set_error("pd report: out of memory building the JSON");
        st = GP_ERR_NO_MEMORY;
    }
    if (st == GP_OK && md) {
        write_markdown(r, md);
        if (fflush(md) != 0 || ferror(md)) {
            gp_set_error("pd report: writing the markdown failed");
            st = GP_ERR_IO;
        }
    }
    if (st != GP_OK && json) {
        json_decref(*json);
        *json = NULL;
    }
    free(r);
    return st;
}
