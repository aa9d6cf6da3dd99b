/* --tuning and --profile: loads a tuning profile (checking every field it
 * uses, errors naming the file and the field) and picks a configuration for
 * a workload: the rule's choice, and the best measured one when the profile
 * has exactly that workload on the same model and device. A shipped profile
 * adds its name, the device it applies to and its source. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cs_tuning_impl.h"
#include "kernels.h" /* GP_GEMM_TUNE_MAX_CANDIDATES: header only */

typedef struct rd {
    const char *path;
    char where[96]; /* the object being read, for messages: "rule", "best[2]" */
} rd;

static gp_status bad(const rd *r, const char *key, const char *what)
{
    GP_FAIL(GP_ERR_FORMAT, "tuning profile %s: %s%s%s %s", r->path, r->where, r->where[0] && key[0] ? "." : "", key,
            what);
}

static gp_status get_obj(const rd *r, json_t *o, const char *key, json_t **out)
{
    *out = json_object_get(o, key);
    if (!json_is_object(*out))
        return bad(r, key, "missing or not an object");
    return GP_OK;
}

static gp_status get_int(const rd *r, json_t *o, const char *key, long long lo, long long hi, int *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return bad(r, key, "missing or not an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        char msg[96];
        snprintf(msg, sizeof msg, "is %lld: allowed %lld..%lld", x, lo, hi);
        return bad(r, key, msg);
    }
    *out = (int)x;
    return GP_OK;
}

/* A number; null reads as NAN when allow_null. */
static gp_status get_num(const rd *r, json_t *o, const char *key, bool allow_null, double *out)
{
    json_t *v = json_object_get(o, key);
    if (allow_null && json_is_null(v)) {
        *out = NAN;
        return GP_OK;
    }
    if (!json_is_number(v))
        return bad(r, key, allow_null ? "missing or not a number (or null)" : "missing or not a number");
    *out = json_number_value(v);
    return GP_OK;
}

/* Profiles written before placements existed say nothing: qkvo-a, the
 * placement they measured. */
static gp_status get_placement(const rd *r, json_t *o, gp_placement *out)
{
    json_t *v = json_object_get(o, "placement");
    *out = GP_PLACE_QKVO_A;
    if (!v)
        return GP_OK;
    if (!json_is_string(v) || gp_placement_parse(json_string_value(v), out) != GP_OK)
        return bad(r, "placement", "is not \"qkvo-a\" or \"qkvo-f\"");
    return GP_OK;
}

/* Absent: 0, what profiles written before GEMM tuning was recorded mean. */
static gp_status get_gemm_tune(const rd *r, json_t *o, int *out)
{
    *out = 0;
    if (!json_object_get(o, "gemm_tune"))
        return GP_OK;
    return get_int(r, o, "gemm_tune", 0, GP_GEMM_TUNE_MAX_CANDIDATES, out);
}

/* A string of 1..cap-1 bytes. */
static gp_status get_str(const rd *r, json_t *o, const char *key, char *out, size_t cap)
{
    const char *v = json_string_value(json_object_get(o, key));
    if (!v || !v[0])
        return bad(r, key, "missing or not a non-empty string");
    if (strlen(v) >= cap) {
        char msg[64];
        snprintf(msg, sizeof msg, "is longer than %zu characters", cap - 1);
        return bad(r, key, msg);
    }
    snprintf(out, cap, "%s", v);
    return GP_OK;
}

static gp_status get_bool(const rd *r, json_t *o, const char *key, bool *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_boolean(v))
        return bad(r, key, "missing or not true/false");
    *out = json_is_true(v);
    return GP_OK;
}

static gp_status read_model(rd *r, json_t *root, gp_config *c)
{
    json_t *o;
    GP_TRY(get_obj(r, root, "model", &o));
    snprintf(r->where, sizeof r->where, "model");
    memset(c, 0, sizeof *c);
    const char *name = json_string_value(json_object_get(o, "name"));
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    GP_TRY(get_int(r, o, "n_layers", 1, 1 << 20, &c->n_layers));
    GP_TRY(get_int(r, o, "hidden", 1, 1 << 24, &c->hidden));
    GP_TRY(get_int(r, o, "n_heads", 1, 1 << 16, &c->n_heads));
    GP_TRY(get_int(r, o, "n_kv_heads", 1, 1 << 16, &c->n_kv_heads));
    GP_TRY(get_int(r, o, "head_dim", 1, 1 << 16, &c->head_dim));
    GP_TRY(get_int(r, o, "ffn", 1, 1 << 26, &c->ffn));
    return GP_OK;
}

static gp_status read_best(rd *r, json_t *root, gp_cs_tuning *t)
{
    json_t *a = json_object_get(root, "best");
    r->where[0] = 0;
    if (!json_is_array(a))
        return bad(r, "best", "missing or not an array");
    size_t n = json_array_size(a);
    t->best = calloc(n > 0 ? n : 1, sizeof *t->best);
    if (!t->best)
        GP_FAIL(GP_ERR_NO_MEMORY, "tuning profile %s: out of memory", r->path);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        snprintf(r->where, sizeof r->where, "best[%zu]", i);
        if (!json_is_object(e))
            return bad(r, "", "is not an object");
        bool ok;
        GP_TRY(get_bool(r, e, "ok", &ok));
        if (!ok)
            continue; /* a workload where nothing ran */
        cs_best *b = &t->best[t->n_best];
        int depth;
        GP_TRY(get_int(r, e, "B", 1, 1 << 30, &b->B));
        GP_TRY(get_int(r, e, "C", 0, 1 << 30, &b->C));
        GP_TRY(get_bool(r, e, "seq", &b->choice.seq));
        GP_TRY(get_int(r, e, "attn_sms", 0, 1 << 20, &b->choice.attn_sms));
        GP_TRY(get_num(r, e, "attn_share", false, &b->choice.attn_share));
        GP_TRY(get_int(r, e, "M", 1, GP_PIPE_MAX_MICRO, &b->choice.M));
        GP_TRY(get_placement(r, e, &b->choice.placement));
        GP_TRY(get_gemm_tune(r, e, &b->choice.gemm_tune));
        GP_TRY(get_int(r, e, "depth", 0, GP_RING_MAX_DEPTH, &depth));
        GP_TRY(get_num(r, e, "ms", false, &b->choice.ms));
        b->choice.depth = (unsigned)depth;
        if (!b->choice.seq && b->choice.attn_sms < 1)
            return bad(r, "attn_sms", "is 0 for a split (seq false)");
        t->n_best++;
    }
    return GP_OK;
}

static gp_status read_rule(rd *r, json_t *root, cs_rule *ru)
{
    json_t *o, *sh;
    r->where[0] = 0;
    GP_TRY(get_obj(r, root, "rule", &o));
    snprintf(r->where, sizeof r->where, "rule");
    GP_TRY(get_bool(r, o, "split", &ru->split));
    double th;
    GP_TRY(get_num(r, o, "threshold", true, &th));
    if (ru->split && !isfinite(th))
        return bad(r, "threshold", "is null although split is true");
    ru->threshold = ru->split ? th : 0;
    GP_TRY(get_obj(r, o, "share", &sh));
    snprintf(r->where, sizeof r->where, "rule.share");
    GP_TRY(get_num(r, sh, "k0", false, &ru->k0));
    GP_TRY(get_num(r, sh, "k1", false, &ru->k1));
    snprintf(r->where, sizeof r->where, "rule");
    json_t *pa = json_object_get(o, "points");
    if (!json_is_array(pa))
        return bad(r, "points", "missing or not an array");
    size_t n = json_array_size(pa);
    ru->points = calloc(n > 0 ? n : 1, sizeof *ru->points);
    if (!ru->points)
        GP_FAIL(GP_ERR_NO_MEMORY, "tuning profile %s: out of memory", r->path);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(pa, i);
        cs_point *p = &ru->points[i];
        int depth;
        snprintf(r->where, sizeof r->where, "rule.points[%zu]", i);
        if (!json_is_object(e))
            return bad(r, "", "is not an object");
        const char *wlabel = json_string_value(json_object_get(e, "workload"));
        snprintf(p->workload, sizeof p->workload, "%s", wlabel ? wlabel : "");
        GP_TRY(get_int(r, e, "B", 1, 1 << 30, &p->B));
        GP_TRY(get_int(r, e, "C", 0, 1 << 30, &p->C));
        GP_TRY(get_bool(r, e, "has_seq", &p->has_seq));
        GP_TRY(get_bool(r, e, "won", &p->won));
        GP_TRY(get_num(r, e, "headroom", true, &p->headroom));
        GP_TRY(get_num(r, e, "attn_frac", true, &p->attn_frac));
        GP_TRY(get_num(r, e, "best_share", true, &p->best_share));
        GP_TRY(get_int(r, e, "M", 1, GP_PIPE_MAX_MICRO, &p->M));
        GP_TRY(get_placement(r, e, &p->placement));
        GP_TRY(get_gemm_tune(r, e, &p->gemm_tune));
        GP_TRY(get_int(r, e, "depth", 0, GP_RING_MAX_DEPTH, &depth));
        p->depth = (unsigned)depth;
        ru->n_points++;
    }
    return GP_OK;
}

/* "name": optional; the file name without .json stands in for it. */
static gp_status read_name(rd *r, json_t *root, gp_cs_tuning *t)
{
    r->where[0] = 0;
    if (json_object_get(root, "name"))
        return get_str(r, root, "name", t->name, sizeof t->name);
    const char *base = strrchr(t->path, '/');
    base = base ? base + 1 : t->path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0)
        n -= 5;
    snprintf(t->name, sizeof t->name, "%.*s", (int)(n < sizeof t->name ? n : sizeof t->name - 1), base);
    return GP_OK;
}

/* "device": optional; present, every field is required: a profile that
 * says what it applies to must say it completely. */
static gp_status read_device(rd *r, json_t *root, gp_cs_tuning *t)
{
    r->where[0] = 0;
    json_t *o = json_object_get(root, "device");
    if (!o)
        return GP_OK;
    if (!json_is_object(o))
        return bad(r, "device", "is not an object");
    snprintf(r->where, sizeof r->where, "device");
    json_t *names = json_object_get(o, "names");
    size_t n = json_array_size(names);
    if (!json_is_array(names) || n == 0 || n > CS_DEVICE_NAMES) {
        char msg[96];
        snprintf(msg, sizeof msg, "missing or not an array of 1..%d device names", CS_DEVICE_NAMES);
        return bad(r, "names", msg);
    }
    for (size_t i = 0; i < n; i++) {
        const char *v = json_string_value(json_array_get(names, i));
        if (!v || !v[0] || strlen(v) >= sizeof t->device_names[0]) {
            char key[32];
            snprintf(key, sizeof key, "names[%zu]", i);
            return bad(r, key, "is not a device name (a non-empty string under 128 characters)");
        }
        snprintf(t->device_names[i], sizeof t->device_names[i], "%s", v);
    }
    t->n_device_names = (int)n;
    GP_TRY(get_int(r, o, "sm_count", 1, 1 << 20, &t->device_sm_count));
    const char *cc = json_string_value(json_object_get(o, "compute_capability"));
    int major, minor, used = 0;
    if (!cc || sscanf(cc, "%d.%d%n", &major, &minor, &used) != 2 || cc[used] || major < 1 || minor < 0)
        return bad(r, "compute_capability", "missing or not \"MAJOR.MINOR\" (e.g. \"9.0\")");
    t->device_cc_major = major;
    t->device_cc_minor = minor;
    t->has_device = true;
    return GP_OK;
}

/* "source": optional; present, where the figures came from, as a sentence. */
static gp_status read_source(rd *r, json_t *root, gp_cs_tuning *t)
{
    r->where[0] = 0;
    json_t *o = json_object_get(root, "source");
    if (!o)
        return GP_OK;
    if (!json_is_object(o))
        return bad(r, "source", "is not an object");
    snprintf(r->where, sizeof r->where, "source");
    char doc[400], commit[64], date[32];
    GP_TRY(get_str(r, o, "doc", doc, sizeof doc));
    GP_TRY(get_str(r, o, "commit", commit, sizeof commit));
    GP_TRY(get_str(r, o, "date", date, sizeof date));
    snprintf(t->source, sizeof t->source, "%s, commit %s, %s", doc, commit, date);
    return GP_OK;
}

void gp_cs_tuning_free(gp_cs_tuning *t)
{
    if (!t)
        return;
    free(t->best);
    free(t->rule.points);
    free(t);
}

gp_status gp_cs_tuning_read(const char *path, gp_cs_tuning **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile: no path given");
    FILE *f = fopen(path, "r");
    if (!f)
        GP_FAIL(GP_ERR_IO, "tuning profile %s: cannot open: %s", path, strerror(errno));
    json_error_t err;
    json_t *root = json_loadf(f, 0, &err);
    fclose(f);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "tuning profile %s: not valid JSON (line %d, column %d: %s)", path, err.line,
                err.column, err.text);
    gp_cs_tuning *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "tuning profile %s: out of memory", path);
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    rd r = {.path = path};
    gp_status st = GP_OK;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    json_t *ver = json_object_get(root, "version");
    json_t *meta = NULL;
    if (!json_is_object(root) || !fmt || strcmp(fmt, CS_TUNING_FORMAT) != 0) {
        gp_set_error("tuning profile %s: not a greenpipe tuning profile (\"format\" is %s%s%s, expected \"%s\")",
                     path, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", CS_TUNING_FORMAT);
        st = GP_ERR_FORMAT;
    } else if (!json_is_integer(ver) || json_integer_value(ver) != CS_TUNING_VERSION) {
        gp_set_error("tuning profile %s: version %lld, this build reads version %d", path,
                     json_is_integer(ver) ? json_integer_value(ver) : -1LL, CS_TUNING_VERSION);
        st = GP_ERR_FORMAT;
    }
    if (st == GP_OK)
        st = get_obj(&r, root, "meta", &meta);
    if (st == GP_OK) {
        snprintf(r.where, sizeof r.where, "meta");
        st = get_int(&r, meta, "sm_count", 0, 1 << 20, &t->sm_count);
    }
    if (st == GP_OK)
        st = read_name(&r, root, t);
    if (st == GP_OK)
        st = read_device(&r, root, t);
    if (st == GP_OK)
        st = read_source(&r, root, t);
    if (st == GP_OK)
        st = read_model(&r, root, &t->shape);
    if (st == GP_OK && !json_is_array(json_object_get(root, "rows"))) {
        r.where[0] = 0;
        st = bad(&r, "rows", "missing or not an array");
    }
    if (st == GP_OK)
        st = read_best(&r, root, t);
    if (st == GP_OK)
        st = read_rule(&r, root, &t->rule);
    json_decref(root);
    if (st != GP_OK) {
        gp_cs_tuning_free(t);
        return st;
    }
    *out = t;
    return GP_OK;
}

gp_status gp_cs_tuning_pick(const gp_cs_tuning *t, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                            gp_cs_choice *rule, gp_cs_choice *best, bool *best_found)
{
    if (!t || !cfg || !info || !rule || !best || !best_found)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning pick: profile, config, SM info and all three outputs must be non-NULL");
    memset(best, 0, sizeof *best);
    *best_found = false;
    if (B < 1 || C < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning pick: workload B=%d C=%d: need B >= 1 and C >= 0", B, C);
    if (cfg->n_layers < 1 || cfg->hidden < 1 || cfg->n_heads < 1 || cfg->head_dim < 1 || cfg->ffn < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning pick: model config %s is not a model (%d layers, hidden %d)", cfg->name,
                cfg->n_layers, cfg->hidden);
    GP_TRY(cs_rule_pick(&t->rule, cfg, info, B, C, rule));
    /* a measurement applies only to the same model shape on the same device */
    if (!cs_same_shape(&t->shape, cfg) || t->sm_count != info->sm_count)
        return GP_OK;
    for (int i = 0; i < t->n_best; i++) {
        const cs_best *b = &t->best[i];
        if (b->B != B || b->C != C)
            continue;
        if (!b->choice.seq) {
            gp_split_plan pl;
            if (gp_split_plan_make(info, (gp_split_req){b->choice.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &pl) !=
                GP_OK) {
                gp_clear_error();
                return GP_OK; /* measured under partition rules this device does not share */
            }
        }
        *best = b->choice;
        *best_found = true;
        return GP_OK;
    }
    return GP_OK;
}

gp_status gp_cs_tuning_choose(const gp_cs_tuning *t, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                              gp_cs_choice *out, bool *measured)
{
    gp_cs_choice rule, best;
    if (!out || !measured)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning choice: both outputs must be non-NULL");
    GP_TRY(gp_cs_tuning_pick(t, cfg, info, B, C, &rule, &best, measured));
    *out = *measured ? best : rule;
    return GP_OK;
}
