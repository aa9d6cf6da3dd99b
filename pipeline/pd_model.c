/* The latency model of prefill and decode on two SM partitions: the measured
 * profile and its JSON file, the least-squares fit per set, and the planner
 * that chooses where each waiting prefill runs. Pure C, so CI tests it all. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_pipeline.h"

#define PD_FORMAT "greenpipe-pd-profile"
#define PD_VERSION 1
#define PD_MAX_COEF 5

static const char *const kind_names[] = {"decode", "prefill", "mixed"};
#define KINDS_ALLOWED "allowed decode, prefill, mixed"
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *gp_pd_kind_name(gp_pd_kind k)
{
    return (unsigned)k < (unsigned)N_KINDS ? kind_names[k] : "unknown";
}

gp_status gp_pd_kind_parse(const char *s, gp_pd_kind *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd kind: out is NULL");
    for (int k = 0; s && k < N_KINDS; k++)
        if (!strcmp(s, kind_names[k])) {
            *out = (gp_pd_kind)k;
            return GP_OK;
        }
    GP_FAIL(GP_ERR_INVALID_ARG, "pd kind '%s': " KINDS_ALLOWED, s ? s : "(null)");
}

/* ------------------------------------------------------------ profile */

static gp_status check_splits(const gp_pd_profile *p, const char *who)
{
    if (p->n_splits < 1 || p->n_splits > GP_PD_MAX_SPLITS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: splits: %d pairs: allowed 1..%d", who, p->n_splits, GP_PD_MAX_SPLITS);
    for (int s = 0; s < p->n_splits; s++)
        if (p->decode_sms[s] <= 0 || p->prefill_sms[s] <= 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: splits[%d]: decode_sms %d, prefill_sms %d: both must be > 0", who, s,
                    p->decode_sms[s], p->prefill_sms[s]);
    return GP_OK;
}

/* The one check of a sample, for add, load and fit; who names the sample
 * (its path and index in a file) so each message names the field. */
static gp_status check_sample(const gp_pd_profile *p, const gp_pd_sample *s, const char *who)
{
    if ((unsigned)s->kind >= (unsigned)N_KINDS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.kind: %d: " KINDS_ALLOWED, who, (int)s->kind);
    if (s->split != GP_PD_WHOLE && (s->split < 0 || s->split >= p->n_splits))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.split: %d: allowed -1 (every SM) or 0..%d", who, s->split, p->n_splits - 1);
    if (s->kind == GP_PD_MIXED && s->split != GP_PD_WHOLE)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.split: %d with kind mixed: allowed -1 (mixed runs on every SM)", who,
                s->split);
    if (s->corun && s->split == GP_PD_WHOLE)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.corun: true with split -1: allowed only with a pair's split (>= 0)", who);
    if (s->rows < 0 || s->context < 0 || s->tokens < 0 || s->position < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: rows %d, context %lld, tokens %d, position %d: each must be >= 0", who,
                s->rows, s->context, s->tokens, s->position);
    if (s->kind == GP_PD_DECODE && s->position != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.position: %d with kind decode: allowed 0 (a prompt's position)", who,
                s->position);
    if (!(s->ms > 0) || !isfinite(s->ms))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s.ms: %g: must be a finite time > 0", who, (double)s->ms);
    return GP_OK;
}

gp_status gp_pd_profile_add(gp_pd_profile *p, const gp_pd_sample *s)
{
    if (!p || !s)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile add: %s is NULL", p ? "sample" : "profile");
    GP_TRY(check_splits(p, "pd profile add"));
    GP_TRY(check_sample(p, s, "pd profile add: sample"));
    if (p->n_samples == p->cap_samples) {
        int cap = p->cap_samples ? 2 * p->cap_samples : 64;
        if (cap <= p->cap_samples)
            GP_FAIL(GP_ERR_OVERFLOW, "pd profile add: %d samples: no room for more", p->n_samples);
        gp_pd_sample *grown = realloc(p->samples, (size_t)cap * sizeof *grown);
        if (!grown)
            GP_FAIL(GP_ERR_NO_MEMORY, "pd profile add: %d samples: out of memory", cap);
        p->samples = grown;
        p->cap_samples = cap;
    }
    p->samples[p->n_samples++] = *s;
    return GP_OK;
}

void gp_pd_profile_free(gp_pd_profile *p)
{
    if (!p)
        return;
    free(p->samples);
    *p = (gp_pd_profile){0};
}

/* The checks a profile made in memory gets before it is saved or fitted,
 * the same as a loaded one. */
static gp_status check_profile(const gp_pd_profile *p, const char *who)
{
    GP_TRY(check_splits(p, who));
    if (p->n_samples < 0 || (p->n_samples > 0 && !p->samples))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %d samples at %p", who, p->n_samples, (void *)p->samples);
    for (int i = 0; i < p->n_samples; i++) {
        char where[96];
        snprintf(where, sizeof where, "%s: samples[%d]", who, i);
        GP_TRY(check_sample(p, &p->samples[i], where));
    }
    return GP_OK;
}

gp_status gp_pd_profile_save(const gp_pd_profile *p, const char *path)
{
    if (!p || !path)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile save: %s is NULL", p ? "path" : "profile");
    GP_TRY(check_profile(p, "pd profile save"));
    if (strnlen(p->device, sizeof p->device) == sizeof p->device ||
        strnlen(p->model, sizeof p->model) == sizeof p->model)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile save %s: device or model: no terminating NUL in %zu bytes", path,
                sizeof p->device);
    json_t *device = json_string(p->device), *model = json_string(p->model);
    json_t *splits = json_array(), *samples = json_array();
    bool ok = splits && samples;
    for (int s = 0; ok && s < p->n_splits; s++)
        ok = !json_array_append_new(splits, json_pack("{s:i, s:i}", "decode_sms", p->decode_sms[s], "prefill_sms",
                                                      p->prefill_sms[s]));
    for (int i = 0; ok && i < p->n_samples; i++) {
        const gp_pd_sample *s = &p->samples[i];
        /* ms goes through double exactly, and jansson writes reals with 17
         * significant digits, so the float comes back bit for bit. */
        ok = !json_array_append_new(samples, json_pack("{s:s, s:i, s:b, s:i, s:I, s:i, s:i, s:f}", "kind",
                                                       kind_names[s->kind], "split", s->split, "corun", s->corun,
                                                       "rows", s->rows, "context", (json_int_t)s->context,
                                                       "tokens", s->tokens, "position", s->position, "ms",
                                                       (double)s->ms));
    }
    json_t *root = ok && device && model ? json_pack("{s:s, s:i, s:O, s:O, s:O, s:O}", "format", PD_FORMAT, "version",
                                                     PD_VERSION, "device", device, "model", model, "splits", splits,
                                                     "samples", samples)
                                         : NULL;
    gp_status st = GP_OK;
    if (!device || !model) {
        gp_set_error("pd profile save %s: %s: not UTF-8 text", path, !device ? "device" : "model");
        st = GP_ERR_INVALID_ARG;
    } else if (!root) {
        gp_set_error("pd profile save %s: out of memory", path);
        st = GP_ERR_NO_MEMORY;
    } else if (json_dump_file(root, path, JSON_INDENT(1)) != 0) {
        gp_set_error("pd profile save %s: cannot write the file", path);
        st = GP_ERR_IO;
    }
    json_decref(device);
    json_decref(model);
    json_decref(splits);
    json_decref(samples);
    json_decref(root);
    return st;
}

/* A present member of o of the JSON type want (JSON_REAL: any number,
 * JSON_TRUE: a boolean), or NULL with the message; where names o in the
 * file ("" at the top level). */
static json_t *member(json_t *o, const char *key, json_type want, const char *path, const char *where)
{
    static const char *const type_names[] = {"an object", "an array", "a string", "an integer",
                                             "a number",  "true or false"};
    json_t *v = json_object_get(o, key);
    const char *dot = where[0] ? "." : "";
    if (!v)
        gp_set_error("pd profile %s: %s%sno field \"%s\"", path, where, where[0] ? ": " : "", key);
    else if (want == JSON_REAL ? !json_is_number(v) : want == JSON_TRUE ? !json_is_boolean(v) : json_typeof(v) != want)
        gp_set_error("pd profile %s: %s%s%s: must be %s", path, where, dot, key, type_names[want]);
    else
        return v;
    return NULL;
}

/* An integer member within [lo, hi] (the range of the C field it fills;
 * the meaning of the value is check_sample's and check_splits'). */
static bool int_member(json_t *o, const char *key, long long lo, long long hi, const char *path, const char *where,
                       long long *out)
{
    json_t *v = member(o, key, JSON_INTEGER, path, where);
    if (!v)
        return false;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        gp_set_error("pd profile %s: %s%s%s: %lld: allowed %lld..%lld", path, where, where[0] ? "." : "", key,
                     (long long)x, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

static bool string_member(json_t *o, const char *key, char *dst, size_t cap, const char *path)
{
    json_t *v = member(o, key, JSON_STRING, path, "");
    if (!v)
        return false;
    if (json_string_length(v) >= cap) {
        gp_set_error("pd profile %s: %s: %zu bytes: allowed < %zu", path, key, json_string_length(v), cap);
        return false;
    }
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return true;
}

static gp_status load_splits(json_t *root, const char *path, gp_pd_profile *out)
{
    json_t *splits = member(root, "splits", JSON_ARRAY, path, "");
    if (!splits)
        return GP_ERR_INVALID_ARG;
    out->n_splits = (int)(json_array_size(splits) < INT_MAX ? json_array_size(splits) : INT_MAX);
    if (out->n_splits < 1 || out->n_splits > GP_PD_MAX_SPLITS)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: splits: %d pairs: allowed 1..%d", path, out->n_splits,
                GP_PD_MAX_SPLITS);
    for (int s = 0; s < out->n_splits; s++) {
        char where[32];
        snprintf(where, sizeof where, "splits[%d]", s);
        json_t *o = json_array_get(splits, (size_t)s);
        long long d, f;
        if (!json_is_object(o))
            GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: %s: must be an object", path, where);
        if (!int_member(o, "decode_sms", 1, INT_MAX, path, where, &d) ||
            !int_member(o, "prefill_sms", 1, INT_MAX, path, where, &f))
            return GP_ERR_INVALID_ARG;
        out->decode_sms[s] = (int)d;
        out->prefill_sms[s] = (int)f;
    }
    return GP_OK;
}

static gp_status load_sample(json_t *o, const char *path, const char *where, const gp_pd_profile *p,
                             gp_pd_sample *s)
{
    if (!json_is_object(o))
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: %s: must be an object", path, where);
    json_t *kind = member(o, "kind", JSON_STRING, path, where);
    if (!kind)
        return GP_ERR_INVALID_ARG;
    if (gp_pd_kind_parse(json_string_value(kind), &s->kind) != GP_OK)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: %s.kind: \"%s\": " KINDS_ALLOWED, path, where,
                json_string_value(kind));
    json_t *corun, *ms;
    long long split, rows, context, tokens, position;
    if (!(corun = member(o, "corun", JSON_TRUE, path, where)) ||
        !int_member(o, "split", INT_MIN, INT_MAX, path, where, &split) ||
        !int_member(o, "rows", 0, INT_MAX, path, where, &rows) ||
        !int_member(o, "context", 0, LLONG_MAX, path, where, &context) ||
        !int_member(o, "tokens", 0, INT_MAX, path, where, &tokens) ||
        !int_member(o, "position", 0, INT_MAX, path, where, &position) ||
        !(ms = member(o, "ms", JSON_REAL, path, where)))
        return GP_ERR_INVALID_ARG;
    double t = json_number_value(ms);
    if (!(fabs(t) <= FLT_MAX))
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: %s.ms: %g: must be a finite float time > 0", path, where, t);
    s->split = (int)split;
    s->corun = json_is_true(corun);
    s->rows = (int)rows;
    s->context = context;
    s->tokens = (int)tokens;
    s->position = (int)position;
    s->ms = (float)t;
    char who[4352]; /* a path of PATH_MAX and the field */
    snprintf(who, sizeof who, "pd profile %s: %s", path, where);
    return check_sample(p, s, who);
}

gp_status gp_pd_profile_load(const char *path, gp_pd_profile *out)
{
    if (!path || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile load: %s is NULL", path ? "out" : "path");
    *out = (gp_pd_profile){0};
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_cannot_open_file)
            GP_FAIL(GP_ERR_IO, "pd profile %s: cannot open: %s", path, je.text);
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile %s: not JSON: line %d column %d: %s", path, je.line, je.column,
                je.text);
    }
    gp_status st = GP_ERR_INVALID_ARG;
    json_t *format, *version, *samples;
    if (!json_is_object(root)) {
        gp_set_error("pd profile %s: top level: must be an object", path);
        goto done;
    }
    if (!(format = member(root, "format", JSON_STRING, path, "")) ||
        !(version = member(root, "version", JSON_INTEGER, path, "")))
        goto done;
    if (strcmp(json_string_value(format), PD_FORMAT) != 0) {
        gp_set_error("pd profile %s: format: \"%s\": allowed \"%s\"", path, json_string_value(format), PD_FORMAT);
        goto done;
    }
    if (json_integer_value(version) != PD_VERSION) {
        gp_set_error("pd profile %s: version: %lld: allowed %d", path, (long long)json_integer_value(version),
                     PD_VERSION);
        goto done;
    }
    if (!string_member(root, "device", out->device, sizeof out->device, path) ||
        !string_member(root, "model", out->model, sizeof out->model, path) ||
        load_splits(root, path, out) != GP_OK || !(samples = member(root, "samples", JSON_ARRAY, path, "")))
        goto done;
    for (size_t i = 0; i < json_array_size(samples); i++) {
        char where[40];
        snprintf(where, sizeof where, "samples[%zu]", i);
        gp_pd_sample s;
        if ((st = load_sample(json_array_get(samples, i), path, where, out, &s)) != GP_OK ||
            (st = gp_pd_profile_add(out, &s)) != GP_OK)
            goto done;
    }
    st = GP_OK;
done:
    json_decref(root);
    if (st != GP_OK)
        gp_pd_profile_free(out);
    return st;
}

/* ------------------------------------------------------------ fit */

/* One set of samples, (kind, split, corun), and its fitted line. */
typedef struct pd_set {
    int n_coef;
    double coef[PD_MAX_COEF]; /* [n_coef], in the order of features() */
    float min_ms;             /* the smallest sample: predictions stay above it */
    float fit_error;
} pd_set;

struct gp_pd_model {
    gp_pd_profile profile;                     /* a copy */
    pd_set pair[GP_PD_MAX_SPLITS][2][2];       /* [split][DECODE, PREFILL][alone, corun] */
    pd_set whole[3];                           /* [kind] on every SM */
};

static int n_coef(gp_pd_kind k)
{
    return k == GP_PD_DECODE ? 3 : k == GP_PD_PREFILL ? 3 : 5;
}

/* The inputs the kind's step time is linear in, constant term first. A
 * prompt's tokens attend over the position before them and causally over
 * one another: tokens x (position + tokens / 2) pairs, one term, so that
 * prompts of several sizes at position 0 pin it as well as later chunks. */
static void features(gp_pd_kind k, int rows, long long context, int tokens, int position, double *x)
{
    int n = 0;
    x[n++] = 1.0;
    if (k != GP_PD_PREFILL) {
        x[n++] = rows;
        x[n++] = (double)context;
    }
    if (k != GP_PD_DECODE) {
        x[n++] = tokens;
        x[n++] = (double)tokens * (position + tokens / 2.0);
    }
}

/* The set of (kind, split, corun), or NULL where the model holds none. */
static const pd_set *find_set(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun)
{
    if ((unsigned)kind >= (unsigned)N_KINDS)
        return NULL;
    if (split == GP_PD_WHOLE)
        return corun ? NULL : &m->whole[kind];
    if (split < 0 || split >= m->profile.n_splits || kind == GP_PD_MIXED)
        return NULL;
    return &m->pair[split][kind][corun];
}

static void set_name(const gp_pd_profile *p, gp_pd_kind kind, int split, bool corun, char *buf, size_t cap)
{
    if (split == GP_PD_WHOLE)
        snprintf(buf, cap, "every SM: %s", kind_names[kind]);
    else
        snprintf(buf, cap, "split %d (%d:%d): %s %s", split, p->decode_sms[split], p->prefill_sms[split],
                 kind_names[kind],
                 !corun ? "alone" : kind == GP_PD_DECODE ? "beside prefill" : "beside decode");
}

static double set_eval(const pd_set *set, const double *x)
{
    double y = 0;
    for (int j = 0; j < set->n_coef; j++)
        y += set->coef[j] * x[j];
    return fmax(y, set->min_ms);
}

static bool in_set(const gp_pd_sample *s, gp_pd_kind kind, int split, bool corun)
{
    return s->kind == kind && s->split == split && s->corun == corun;
}

/* Least squares over the set's samples by the normal equations, each
 * column scaled to at most 1 first: contexts run to 1e5 while the constant
 * is 1, and unscaled the system would lose most of double's digits. */
static gp_status fit_set(const gp_pd_profile *p, gp_pd_kind kind, int split, bool corun, pd_set *out)
{
    int n = n_coef(kind), distinct = 0;
    double scale[PD_MAX_COEF] = {0}, a[PD_MAX_COEF][PD_MAX_COEF + 1] = {{0}}, x[PD_MAX_COEF], y[PD_MAX_COEF];
    char name[96];
    set_name(p, kind, split, corun, name, sizeof name);
    out->n_coef = n;
    out->min_ms = FLT_MAX;
    for (int i = 0; i < p->n_samples; i++) {
        const gp_pd_sample *s = &p->samples[i];
        if (!in_set(s, kind, split, corun))
            continue;
        features(kind, s->rows, s->context, s->tokens, s->position, x);
        bool seen = false;
        for (int k = 0; k < i && !seen; k++) {
            const gp_pd_sample *o = &p->samples[k];
            features(kind, o->rows, o->context, o->tokens, o->position, y);
            seen = in_set(o, kind, split, corun) && !memcmp(x, y, (size_t)n * sizeof *x);
        }
        distinct += !seen;
        out->min_ms = fminf(out->min_ms, s->ms);
        for (int j = 0; j < n; j++)
            scale[j] = fmax(scale[j], fabs(x[j]));
    }
    if (distinct < n)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %d distinct point%s; %d needed", name, distinct, distinct == 1 ? "" : "s", n);
    for (int j = 0; j < n; j++)
        scale[j] = scale[j] > 0 ? scale[j] : 1.0;
    for (int i = 0; i < p->n_samples; i++) {
        const gp_pd_sample *s = &p->samples[i];
        if (!in_set(s, kind, split, corun))
            continue;
        features(kind, s->rows, s->context, s->tokens, s->position, x);
        for (int j = 0; j < n; j++) {
            for (int k = 0; k < n; k++)
                a[j][k] += x[j] / scale[j] * x[k] / scale[k];
            a[j][n] += x[j] / scale[j] * s->ms;
        }
    }
    /* Gaussian elimination with partial pivoting; a pivot lost to rounding
     * means the points, though distinct, do not pin every coefficient (rows
     * and context that always grow together). */
    double largest = 0;
    for (int j = 0; j < n; j++)
        largest = fmax(largest, a[j][j]);
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r][c]) > fabs(a[piv][c]))
                piv = r;
        if (!(fabs(a[piv][c]) > 1e-10 * largest))
            GP_FAIL(GP_ERR_INVALID_ARG,
                    "%s: %d distinct points do not determine %d coefficients: vary each input on its own", name,
                    distinct, n);
        for (int k = 0; k <= n; k++) {
            double t = a[c][k];
            a[c][k] = a[piv][k];
            a[piv][k] = t;
        }
        for (int r = c + 1; r < n; r++) {
            double f = a[r][c] / a[c][c];
            for (int k = c; k <= n; k++)
                a[r][k] -= f * a[c][k];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        double v = a[c][n];
        for (int k = c + 1; k < n; k++)
            v -= a[c][k] * out->coef[k] * scale[k];
        out->coef[c] = v / a[c][c] / scale[c];
    }
    out->fit_error = 0;
    for (int i = 0; i < p->n_samples; i++) {
        const gp_pd_sample *s = &p->samples[i];
        if (!in_set(s, kind, split, corun))
            continue;
        features(kind, s->rows, s->context, s->tokens, s->position, x);
        out->fit_error = fmaxf(out->fit_error, (float)(fabs((float)set_eval(out, x) - s->ms) / s->ms));
    }
    return GP_OK;
}

gp_status gp_pd_model_fit(const gp_pd_profile *p, gp_pd_model **out)
{
    if (!p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd model fit: %s is NULL", p ? "out" : "profile");
    *out = NULL;
    GP_TRY(check_profile(p, "pd model fit"));
    gp_pd_model *m = calloc(1, sizeof *m);
    gp_pd_sample *copy = p->n_samples ? malloc((size_t)p->n_samples * sizeof *copy) : NULL;
    if (!m || (p->n_samples && !copy)) {
        free(m);
        free(copy);
        GP_FAIL(GP_ERR_NO_MEMORY, "pd model fit: %d samples: out of memory", p->n_samples);
    }
    m->profile = *p;
    m->profile.samples = copy;
    m->profile.cap_samples = p->n_samples;
    if (p->n_samples)
        memcpy(copy, p->samples, (size_t)p->n_samples * sizeof *copy);
    gp_status st = GP_OK;
    for (int s = 0; st == GP_OK && s < p->n_splits; s++)
        for (int k = GP_PD_DECODE; st == GP_OK && k <= GP_PD_PREFILL; k++)
            for (int c = 1; st == GP_OK && c >= 0; c--)
                st = fit_set(p, (gp_pd_kind)k, s, c, &m->pair[s][k][c]);
    for (int k = 0; st == GP_OK && k < N_KINDS; k++)
        st = fit_set(p, (gp_pd_kind)k, GP_PD_WHOLE, false, &m->whole[k]);
    if (st != GP_OK) {
        gp_pd_model_destroy(m);
        return st;
    }
    *out = m;
    return GP_OK;
}

void gp_pd_model_destroy(gp_pd_model *m)
{
    if (!m)
        return;
    gp_pd_profile_free(&m->profile);
    free(m);
}

const gp_pd_profile *gp_pd_model_profile(const gp_pd_model *m)
{
    return m ? &m->profile : NULL;
}

float gp_pd_model_predict_at(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun, int rows,
                             long long context, int tokens, int position)
{
    const pd_set *set = m ? find_set(m, kind, split, corun) : NULL;
    if (!set || rows < 0 || context < 0 || tokens < 0 || position < 0)
        return -1.0f;
    double x[PD_MAX_COEF];
    features(kind, rows, context, tokens, position, x);
    return (float)set_eval(set, x);
}

float gp_pd_model_predict(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun, int rows, long long context,
                          int tokens)
{
    return gp_pd_model_predict_at(m, kind, split, corun, rows, context, tokens, 0);
}

float gp_pd_model_fit_error(const gp_pd_model *m, gp_pd_kind kind, int split, bool corun)
{
    const pd_set *set = m ? find_set(m, kind, split, corun) : NULL;
    return set ? set->fit_error : -1.0f;
}

/* ------------------------------------------------------------ planner */

struct gp_pd_planner {
    const gp_pd_model *m; /* borrowed */
    gp_pd_planner_params p;
    /* Hysteresis: the last lane choice's pair (GP_PD_WHOLE before the
     * first) and how many launches in a row have since chosen a smaller
     * one. Lane choices on every SM and mixed choices leave both alone:
     * they run on no pair, so they say nothing about which decode
     * partition the rows need, and the pair in use stays the one chosen. */
    int last_split;
    int smaller_streak;
    /* The decode steps observed last (a ring of p.window - 1), whose slack
     * under the target the next step may spend. */
    float *obs;
    int n_obs, next_obs;
    double obs_sum;
};

gp_pd_planner_params gp_pd_planner_default_params(void)
{
    return (gp_pd_planner_params){.tpot_ms = 40.0f, .window = 32, .hysteresis = 3, .lane_tokens = 0, .mixed = true};
}

gp_status gp_pd_planner_create(const gp_pd_model *m, const gp_pd_planner_params *p, gp_pd_planner **out)
{
    if (!m || !p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner: %s is NULL", !m ? "model" : !p ? "params" : "out");
    *out = NULL;
    if (!(p->tpot_ms > 0) || !isfinite(p->tpot_ms))
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner: tpot_ms %g: must be a finite time > 0", (double)p->tpot_ms);
    if (p->window < 1 || p->window > 100000)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner: window %d: allowed 1..100000 decode steps", p->window);
    if (p->hysteresis < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner: hysteresis %d: must be >= 1 (1: none)", p->hysteresis);
    if (p->lane_tokens < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner: lane_tokens %d: must be >= 1 (the prefill lane's rows)",
                p->lane_tokens);
    gp_pd_planner *pl = calloc(1, sizeof *pl);
    if (pl && p->window > 1 && !(pl->obs = calloc((size_t)p->window - 1, sizeof *pl->obs))) {
        free(pl);
        pl = NULL;
    }
    if (!pl)
        GP_FAIL(GP_ERR_NO_MEMORY, "pd planner: out of memory");
    pl->m = m;
    pl->p = *p;
    pl->last_split = GP_PD_WHOLE;
    *out = pl;
    return GP_OK;
}

void gp_pd_planner_destroy(gp_pd_planner *pl)
{
    if (pl)
        free(pl->obs);
    free(pl);
}

void gp_pd_planner_observe(gp_pd_planner *pl, float ms)
{
    if (!(ms >= 0) || !isfinite(ms))
        return;
    const int cap = pl->p.window - 1;
    if (cap == 0)
        return;
    if (pl->n_obs == cap)
        pl->obs_sum -= pl->obs[pl->next_obs];
    else
        pl->n_obs++;
    pl->obs[pl->next_obs] = ms;
    pl->obs_sum += ms;
    pl->next_obs = (pl->next_obs + 1) % cap;
}

/* The longest next decode step that keeps the mean of the window (it and
 * the steps observed last) under the target: the target plus the slack
 * the observed steps left, never below the target itself (steps over it
 * are not paid back by starving the prefill: a step at the target keeps
 * the mean from growing, and a limit below the decode step alone would
 * leave no candidate under it). */
static float step_limit(const gp_pd_planner *pl)
{
    double slack = pl->p.tpot_ms * pl->n_obs - pl->obs_sum;
    return pl->p.tpot_ms + (slack > 0 ? (float)slack : 0.0f);
}

/* Pair s's lane candidate for n tokens beside the step's decode rows, held
 * to the bare target: it keeps the rows on its partition for every step of
 * its batch, and a narrow partition's prediction is the least sure (its
 * decode step beside a prefill grows fastest with the rows' contexts). */
static gp_pd_choice lane_choice(const gp_pd_planner *pl, const gp_pd_plan_in *in, int s, int n)
{
    float d = gp_pd_model_predict(pl->m, GP_PD_DECODE, s, true, in->decode_rows, in->decode_context, 0);
    float f = gp_pd_model_predict_at(pl->m, GP_PD_PREFILL, s, true, 0, 0, n, in->prefill_position);
    return (gp_pd_choice){.run = GP_PD_RUN_LANE, .split = s, .tokens = n, .decode_ms = d,
                          .prefill_tok_s = 1000.0f * (float)n / f, .meets_tpot = d <= pl->p.tpot_ms};
}

static float mixed_ms(const gp_pd_planner *pl, const gp_pd_plan_in *in, int tokens)
{
    return gp_pd_model_predict_at(pl->m, GP_PD_MIXED, GP_PD_WHOLE, false, in->decode_rows,
                                                   in->decode_context, tokens, in->prefill_position);
}

/* The mixed batch of the most tokens m <= cap whose step stays under the
 * step limit, or m = 0 when even one token does not: a bisection, the
 * predicted step growing with its tokens (a fit that does not is walked
 * down from the bisection's answer). */
static gp_pd_choice mixed_choice(const gp_pd_planner *pl, const gp_pd_plan_in *in, int cap)
{
    float limit = step_limit(pl);
    int lo = 0, hi = cap; /* mixed_ms(lo) <= limit (or lo = 0), the answer in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (mixed_ms(pl, in, mid) <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo > 0 && mixed_ms(pl, in, lo) > limit)
        lo--;
    float ms = lo ? mixed_ms(pl, in, lo) : 0;
    return (gp_pd_choice){.run = GP_PD_RUN_MIXED, .split = GP_PD_WHOLE, .tokens = lo, .decode_ms = ms,
                          .prefill_tok_s = lo ? 1000.0f * (float)lo / ms : 0, .meets_tpot = true};
}

/* Whether a beats b: under the target before over it; under it, the higher
 * prefill rate; over it, the shorter decode step; a tie goes to the larger
 * decode partition (mixed: every SM), whose decode step has the margin. */
static bool better(const gp_pd_model *m, const gp_pd_choice *a, const gp_pd_choice *b)
{
    if (a->meets_tpot != b->meets_tpot)
        return a->meets_tpot;
    if (a->meets_tpot ? a->prefill_tok_s != b->prefill_tok_s : a->decode_ms != b->decode_ms)
        return a->meets_tpot ? a->prefill_tok_s > b->prefill_tok_s : a->decode_ms < b->decode_ms;
    int da = a->split == GP_PD_WHOLE ? INT_MAX : m->profile.decode_sms[a->split];
    int db = b->split == GP_PD_WHOLE ? INT_MAX : m->profile.decode_sms[b->split];
    return da > db;
}

gp_status gp_pd_planner_choose(gp_pd_planner *pl, const gp_pd_plan_in *in, gp_pd_choice *out)
{
    if (!pl || !in || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner choose: %s is NULL", !pl ? "planner" : !in ? "in" : "out");
    if (in->decode_rows < 0 || in->decode_context < 0 || (in->decode_rows == 0 && in->decode_context != 0))
        GP_FAIL(GP_ERR_INVALID_ARG,
                "pd planner choose: %d decode rows of %lld context tokens: need rows >= 0, context >= 0, "
                "and no context without rows",
                in->decode_rows, in->decode_context);
    if (in->prefill_position < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner choose: prefill position %d: must be >= 0", in->prefill_position);
    if (in->backlog_tokens < 1 || in->token_budget < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd planner choose: backlog %lld tokens, budget %d: both must be >= 1",
                in->backlog_tokens, in->token_budget);
    const gp_pd_model *m = pl->m;
    int cap = in->backlog_tokens < in->token_budget ? (int)in->backlog_tokens : in->token_budget;
    int n = cap < pl->p.lane_tokens ? cap : pl->p.lane_tokens;
    if (in->decode_rows == 0) {
        float f = gp_pd_model_predict_at(m, GP_PD_PREFILL, GP_PD_WHOLE, false, 0, 0, n, in->prefill_position);
        *out = (gp_pd_choice){.run = GP_PD_RUN_LANE, .split = GP_PD_WHOLE, .tokens = n, .decode_ms = 0,
                              .prefill_tok_s = 1000.0f * (float)n / f, .meets_tpot = true};
        return GP_OK;
    }
    gp_pd_choice best = lane_choice(pl, in, 0, n);
    for (int s = 1; s < m->profile.n_splits; s++) {
        gp_pd_choice c = lane_choice(pl, in, s, n);
        if (better(m, &c, &best))
            best = c;
    }
    if (pl->p.mixed) {
        gp_pd_choice c = mixed_choice(pl, in, cap);
        if (c.tokens > 0 && better(m, &c, &best))
            best = c;
    }
    if (best.run == GP_PD_RUN_LANE) {
        const int *sms = m->profile.decode_sms;
        if (pl->last_split != GP_PD_WHOLE && sms[best.split] < sms[pl->last_split] &&
            ++pl->smaller_streak < pl->p.hysteresis)
            best = lane_choice(pl, in, pl->last_split, n);
        else {
            pl->last_split = best.split;
            pl->smaller_streak = 0;
        }
    }
    *out = best;
    return GP_OK;
}
