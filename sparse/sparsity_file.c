/* The calibration file of activation sparsity (gp_sparse.h): JSON written
 * and read back with every refusal naming the key, the layer and what is
 * allowed, and the check that a calibration fits a model. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_reference.h"
#include "gp_sparse.h"

_Static_assert(GP_SPARSE_PROJ_COUNT == GP_CPU_PROJ_COUNT, "model/'s projection numbering is gp_sparse_proj's");
_Static_assert(GP_SPARSE_MAX_B == GP_CPU_SPARSE_MAX_B, "the reference masks the batches the kernel serves");

/* A file holding frequencies of a 70B-class model is a few tens of MB; the
 * cap only stops a wrong path from filling memory. */
#define GP_SPARSITY_FILE_CAP ((size_t)1 << 30)
/* Widths beyond any model, so sizes computed from them stay in range. */
#define GP_SPARSITY_MAX_DIM (1 << 24)
#define GP_SPARSITY_MAX_LAYERS 4096

static const char *const gp_proj_names[GP_SPARSE_PROJ_COUNT] = {"qkv", "o", "gate_up", "down"};

const char *gp_sparse_proj_name(gp_sparse_proj p)
{
    return p >= 0 && p < GP_SPARSE_PROJ_COUNT ? gp_proj_names[p] : "?";
}

void gp_sparsity_free(gp_sparsity *s)
{
    if (!s)
        return;
    free(s->thresholds);
    free(s->freq);
    free(s->zeros);
    memset(s, 0, sizeof *s);
}

/* 16 lowercase hex digits, as gp_model_identity writes them. */
static bool gp_fingerprint_ok(const char *f)
{
    size_t n = strnlen(f, 17);
    if (n != 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((f[i] >= '0' && f[i] <= '9') || (f[i] >= 'a' && f[i] <= 'f')))
            return false;
    return true;
}

/* Everything the file format requires of an in-memory calibration; who
 * names it in messages (a path, or "calibration"). */
static gp_status gp_sparsity_validate(const gp_sparsity *s, const char *who)
{
    if (s->n_layers < 1 || s->n_layers > GP_SPARSITY_MAX_LAYERS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_layers %d, allowed 1..%d", who, s->n_layers, GP_SPARSITY_MAX_LAYERS);
    const int dims[3] = {s->hidden, s->ffn, s->q_dim};
    const char *const dim_names[3] = {"hidden", "ffn", "q_dim"};
    for (int i = 0; i < 3; i++)
        if (dims[i] < 1 || dims[i] > GP_SPARSITY_MAX_DIM)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s %d, allowed 1..%d", who, dim_names[i], dims[i], GP_SPARSITY_MAX_DIM);
    if (!(s->target >= 0.0 && s->target < 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: target %g, allowed [0, 1)", who, s->target);
    if (s->tokens < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: tokens %ld, allowed >= 0", who, s->tokens);
    if (!s->thresholds)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: no thresholds", who);
    if (!memchr(s->model, '\0', sizeof s->model) || !memchr(s->source, '\0', sizeof s->source) ||
        !memchr(s->identity.summary, '\0', sizeof s->identity.summary))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model, source or identity summary is not a terminated string", who);
    if (s->identity.fingerprint[0] && !gp_fingerprint_ok(s->identity.fingerprint))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: identity fingerprint '%.16s' is not 16 lowercase hex digits", who,
                s->identity.fingerprint);
    for (int l = 0; l < s->n_layers; l++)
        for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
            float t = s->thresholds[l * GP_SPARSE_PROJ_COUNT + p];
            if (!(t >= 0.0f && t <= FLT_MAX))
                GP_FAIL(GP_ERR_INVALID_ARG, "%s: layer %d threshold %s = %g, allowed finite and >= 0", who, l,
                        gp_proj_names[p], (double)t);
            float z = s->zeros ? s->zeros[l * GP_SPARSE_PROJ_COUNT + p] : 0.0f;
            if (!(z >= 0.0f && z <= 1.0f))
                GP_FAIL(GP_ERR_INVALID_ARG, "%s: layer %d zeros %s = %g, allowed [0, 1]", who, l, gp_proj_names[p],
                        (double)z);
        }
    for (size_t i = 0; s->freq && i < (size_t)s->n_layers * (size_t)s->ffn; i++)
        if (!(s->freq[i] >= 0.0f && s->freq[i] <= 1.0f))
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: layer %zu freq[%zu] = %g, allowed [0, 1]", who, i / (size_t)s->ffn,
                    i % (size_t)s->ffn, (double)s->freq[i]);
    return GP_OK;
}

gp_status gp_sparsity_check(const gp_sparsity *s, const gp_config *cfg)
{
    if (!s || !cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_check: calibration and config are required");
    const int have[4] = {s->n_layers, s->hidden, s->ffn, s->q_dim};
    const int want[4] = {cfg->n_layers, cfg->hidden, cfg->ffn, cfg->n_heads * cfg->head_dim};
    const char *const names[4] = {"n_layers", "hidden", "ffn", "q_dim (n_heads x head_dim)"};
    for (int i = 0; i < 4; i++)
        if (have[i] != want[i])
            GP_FAIL(GP_ERR_SHAPE, "the sparsity calibration has %s %d, model '%s' has %d", names[i], have[i],
                    cfg->name, want[i]);
    return GP_OK;
}

gp_status gp_sparsity_check_identity(const gp_sparsity *s, const gp_model_identity *id)
{
    if (!s || !id)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_check_identity: calibration and identity are required");
    /* a model of the same shape (a fine-tune, another size's twin) has other
     * activations: its thresholds would drop the wrong share */
    if (!s->identity.fingerprint[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "the sparsity calibration (model '%s') records no identity of its weights: it "
                "predates calibrations identified by the weights' content, so nothing says it was made on these; "
                "recalibrate them: greenpipe calibrate --model DIR|PRESET --sparsity %g --out FILE.json", s->model,
                s->target);
    if (strcmp(s->identity.fingerprint, id->fingerprint))
        GP_FAIL(GP_ERR_INVALID_ARG, "the sparsity calibration was made on other weights: calibration: fingerprint "
                "%s, %s; this model: fingerprint %s, %s; calibrate these weights (greenpipe calibrate)",
                s->identity.fingerprint, s->identity.summary, id->fingerprint, id->summary);
    return GP_OK;
}

gp_status gp_sparsity_load_for(const char *path, const gp_model_source *src, gp_sparsity *out)
{
    if (!src)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_load_for: the model source is required");
    GP_TRY(gp_sparsity_load(path, out));
    /* the weights' content decides, not the folder's name */
    gp_model_identity id;
    gp_status st = gp_sparsity_check(out, &src->cfg);
    if (st == GP_OK)
        st = gp_model_identity_of(src, &id);
    if (st == GP_OK)
        st = gp_sparsity_check_identity(out, &id);
    if (st != GP_OK)
        gp_sparsity_free(out);
    return st;
}

gp_status gp_sparsity_thresholds_zero(const gp_config *cfg, gp_sparsity *out)
{
    if (!cfg || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_thresholds_zero: config and out are required");
    memset(out, 0, sizeof *out);
    if (cfg->n_layers < 1 || cfg->n_layers > GP_SPARSITY_MAX_LAYERS)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_thresholds_zero: n_layers %d, allowed 1..%d", cfg->n_layers,
                GP_SPARSITY_MAX_LAYERS);
    out->thresholds = calloc((size_t)cfg->n_layers * GP_SPARSE_PROJ_COUNT, sizeof *out->thresholds);
    if (!out->thresholds)
        GP_FAIL(GP_ERR_NO_MEMORY, "sparsity calibration of %d layers: out of memory", cfg->n_layers);
    snprintf(out->model, sizeof out->model, "%s", cfg->name);
    out->n_layers = cfg->n_layers;
    out->hidden = cfg->hidden;
    out->ffn = cfg->ffn;
    out->q_dim = cfg->n_heads * cfg->head_dim;
    snprintf(out->source, sizeof out->source, "all thresholds 0 (dense-equivalent)");
    return GP_OK;
}

/* ------------------------------------------------------------ save */

/* Builds the document; NULL when out of memory. */
static json_t *gp_sparsity_json(const gp_sparsity *s)
{
    bool ok = true;
#define PUT(obj, key, val) (ok = ok && json_object_set_new((obj), (key), (val)) == 0)
    json_t *root = json_object(), *shape = json_object(), *layers = json_array();
    if (!root || !shape || !layers) {
        json_decref(root), json_decref(shape), json_decref(layers);
        return NULL;
    }
    PUT(root, "format", json_string(GP_SPARSITY_FORMAT));
    PUT(root, "version", json_integer(GP_SPARSITY_VERSION));
    PUT(root, "model", json_string(s->model));
    if (s->identity.fingerprint[0]) {
        json_t *id = json_object();
        PUT(root, "identity", id);
        if (ok) {
            PUT(id, "fingerprint", json_string(s->identity.fingerprint));
            PUT(id, "summary", json_string(s->identity.summary));
        }
    }
    PUT(shape, "n_layers", json_integer(s->n_layers));
    PUT(shape, "hidden", json_integer(s->hidden));
    PUT(shape, "ffn", json_integer(s->ffn));
    PUT(shape, "q_dim", json_integer(s->q_dim));
    PUT(root, "shape", shape);
    PUT(root, "target", json_real(s->target));
    PUT(root, "tokens", json_integer(s->tokens));
    PUT(root, "source", json_string(s->source));
    PUT(root, "layers", layers);
    for (int l = 0; ok && l < s->n_layers; l++) {
        json_t *lo = json_object();
        ok = lo && json_array_append_new(layers, lo) == 0;
        for (int p = 0; ok && p < GP_SPARSE_PROJ_COUNT; p++)
            PUT(lo, gp_proj_names[p], json_real(s->thresholds[l * GP_SPARSE_PROJ_COUNT + p]));
        if (ok && s->zeros) {
            json_t *z = json_object();
            PUT(lo, "zeros", z);
            for (int p = 0; ok && p < GP_SPARSE_PROJ_COUNT; p++)
                PUT(z, gp_proj_names[p], json_real(s->zeros[l * GP_SPARSE_PROJ_COUNT + p]));
        }
        if (ok && s->freq) {
            json_t *fa = json_array();
            PUT(lo, "freq", fa);
            const float *f = s->freq + (size_t)l * (size_t)s->ffn;
            for (int i = 0; ok && i < s->ffn; i++)
                ok = json_array_append_new(fa, json_real(f[i])) == 0;
        }
    }
#undef PUT
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

gp_status gp_sparsity_save(const gp_sparsity *s, const char *path)
{
    if (!s || !path)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_save: calibration and path are required");
    GP_TRY(gp_sparsity_validate(s, "sparsity calibration"));
    json_t *root = gp_sparsity_json(s);
    if (!root)
        GP_FAIL(GP_ERR_NO_MEMORY, "sparsity calibration for '%s': out of memory building the JSON", path);
    /* 9 significant digits give every float back exactly */
    errno = 0;
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    int e = errno;
    json_decref(root);
    if (rc != 0)
        GP_FAIL(GP_ERR_IO, "cannot write the sparsity calibration to '%s': %s", path,
                e ? strerror(e) : "the JSON encoder failed");
    return GP_OK;
}

/* ------------------------------------------------------------ load */

/* where: "" or "layer 3 ", prefix: "" or "zeros." (the enclosing object), so
 * messages say which key of which layer. */
static gp_status gp_get_number(json_t *obj, const char *prefix, const char *key, const char *label,
                               const char *where, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        GP_FAIL(GP_ERR_FORMAT, "%s: %skey \"%s%s\" is missing (a number)", label, where, prefix, key);
    if (!json_is_number(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: %skey \"%s%s\" must be a number", label, where, prefix, key);
    *out = json_number_value(v);
    return GP_OK;
}

static gp_status gp_get_int(json_t *obj, const char *key, const char *label, long lo, long hi, long *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" is missing (an integer)", label, key);
    if (!json_is_integer(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" must be an integer", label, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" = %lld, allowed %ld..%ld", label, key, (long long)x, lo, hi);
    *out = (long)x;
    return GP_OK;
}

static gp_status gp_get_string(json_t *obj, const char *key, const char *label, char *dst, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" is missing (a string)", label, key);
    if (!json_is_string(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" must be a string", label, key);
    const char *str = json_string_value(v);
    if (strlen(str) >= cap)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" is %zu bytes long, allowed at most %zu", label, key, strlen(str),
                cap - 1);
    memcpy(dst, str, strlen(str) + 1);
    return GP_OK;
}

/* A share in [0, 1], key of the layer's "zeros" object. */
static gp_status gp_get_share(json_t *obj, const char *key, const char *label, const char *where, float *out)
{
    double x;
    GP_TRY(gp_get_number(obj, "zeros.", key, label, where, &x));
    if (!(x >= 0.0 && x <= 1.0))
        GP_FAIL(GP_ERR_FORMAT, "%s: %skey \"zeros.%s\" = %g is not a share; allowed [0, 1]", label, where, key, x);
    *out = (float)x;
    return GP_OK;
}

static gp_status gp_parse_layer(json_t *lo, int l, const char *label, gp_sparsity *s, bool *has_zeros,
                                bool *has_freq)
{
    char where[64];
    snprintf(where, sizeof where, "layer %d ", l);
    if (!json_is_object(lo))
        GP_FAIL(GP_ERR_FORMAT, "%s: layers[%d] must be an object of the four thresholds", label, l);
    for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
        double t;
        GP_TRY(gp_get_number(lo, "", gp_proj_names[p], label, where, &t));
        if (!(t >= 0.0 && t <= FLT_MAX))
            GP_FAIL(GP_ERR_FORMAT, "%s: layer %d threshold \"%s\" = %g; allowed a finite float >= 0", label, l,
                    gp_proj_names[p], t);
        s->thresholds[l * GP_SPARSE_PROJ_COUNT + p] = (float)t;
    }
    json_t *z = json_object_get(lo, "zeros"), *f = json_object_get(lo, "freq");
    /* one array per calibration: every layer has them or none does */
    if (l == 0) {
        *has_zeros = z != NULL;
        *has_freq = f != NULL;
        size_t n = (size_t)s->n_layers * GP_SPARSE_PROJ_COUNT, nf = (size_t)s->n_layers * (size_t)s->ffn;
        if ((z && !(s->zeros = malloc(n * sizeof *s->zeros))) || (f && !(s->freq = malloc(nf * sizeof *s->freq))))
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for %d layers", label, s->n_layers);
    } else {
        const char *key = (z != NULL) != *has_zeros ? "zeros" : (f != NULL) != *has_freq ? "freq" : NULL;
        bool here = key && key[0] == 'z' ? z != NULL : f != NULL;
        if (key)
            GP_FAIL(GP_ERR_FORMAT, "%s: layer %d %s \"%s\" and layer 0 %s; allowed: \"%s\" in every layer or in none",
                    label, l, here ? "has" : "lacks", key, here ? "does not" : "has it", key);
    }
    if (z) {
        if (!json_is_object(z))
            GP_FAIL(GP_ERR_FORMAT, "%s: layer %d \"zeros\" must be an object of four shares", label, l);
        for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++)
            GP_TRY(gp_get_share(z, gp_proj_names[p], label, where, &s->zeros[l * GP_SPARSE_PROJ_COUNT + p]));
    }
    if (f) {
        if (!json_is_array(f) || json_array_size(f) != (size_t)s->ffn)
            GP_FAIL(GP_ERR_FORMAT, "%s: layer %d \"freq\" must be an array of ffn = %d shares%s%zu", label, l, s->ffn,
                    json_is_array(f) ? "; it has " : "", json_is_array(f) ? json_array_size(f) : (size_t)0);
        float *row = s->freq + (size_t)l * (size_t)s->ffn;
        for (int i = 0; i < s->ffn; i++) {
            json_t *v = json_array_get(f, (size_t)i);
            double x = json_is_number(v) ? json_number_value(v) : NAN;
            if (!json_is_number(v) || !(x >= 0.0 && x <= 1.0))
                GP_FAIL(GP_ERR_FORMAT, "%s: layer %d freq[%d] %s; allowed a share in [0, 1]", label, l, i,
                        json_is_number(v) ? "is outside [0, 1]" : "is not a number");
            row[i] = (float)x;
        }
    }
    return GP_OK;
}

static gp_status gp_parse_root(json_t *root, const char *label, gp_sparsity *s)
{
    if (!json_is_object(root))
        GP_FAIL(GP_ERR_FORMAT, "%s: the top level must be a JSON object", label);
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), GP_SPARSITY_FORMAT))
        GP_FAIL(GP_ERR_FORMAT, "%s: \"format\" is %s%s%s; expected \"%s\" (a file of greenpipe calibrate)", label,
                json_is_string(fmt) ? "'" : "", json_is_string(fmt) ? json_string_value(fmt) : fmt ? "not a string" :
                "missing", json_is_string(fmt) ? "'" : "", GP_SPARSITY_FORMAT);
    long v;
    GP_TRY(gp_get_int(root, "version", label, LONG_MIN, LONG_MAX, &v));
    if (v != GP_SPARSITY_VERSION)
        GP_FAIL(GP_ERR_FORMAT, "%s: version %ld; this greenpipe reads version %d", label, v, GP_SPARSITY_VERSION);
    GP_TRY(gp_get_string(root, "model", label, s->model, sizeof s->model));
    GP_TRY(gp_get_string(root, "source", label, s->source, sizeof s->source));
    json_t *id = json_object_get(root, "identity");
    if (id) {
        if (!json_is_object(id))
            GP_FAIL(GP_ERR_FORMAT, "%s: key \"identity\" must be an object {fingerprint, summary}", label);
        char ilabel[4200];
        snprintf(ilabel, sizeof ilabel, "%s: identity", label);
        GP_TRY(gp_get_string(id, "fingerprint", ilabel, s->identity.fingerprint, sizeof s->identity.fingerprint));
        GP_TRY(gp_get_string(id, "summary", ilabel, s->identity.summary, sizeof s->identity.summary));
        if (!gp_fingerprint_ok(s->identity.fingerprint))
            GP_FAIL(GP_ERR_FORMAT, "%s: \"fingerprint\" '%s' is not a fingerprint; allowed: 16 lowercase hex "
                    "digits (greenpipe calibrate writes it)", ilabel, s->identity.fingerprint);
    }
    json_t *shape = json_object_get(root, "shape");
    if (!json_is_object(shape))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"shape\" must be an object {n_layers, hidden, ffn, q_dim}%s", label,
                shape ? "" : " (missing)");
    char slabel[4200];
    snprintf(slabel, sizeof slabel, "%s: shape", label);
    long x;
    GP_TRY(gp_get_int(shape, "n_layers", slabel, 1, GP_SPARSITY_MAX_LAYERS, &x));
    s->n_layers = (int)x;
    GP_TRY(gp_get_int(shape, "hidden", slabel, 1, GP_SPARSITY_MAX_DIM, &x));
    s->hidden = (int)x;
    GP_TRY(gp_get_int(shape, "ffn", slabel, 1, GP_SPARSITY_MAX_DIM, &x));
    s->ffn = (int)x;
    GP_TRY(gp_get_int(shape, "q_dim", slabel, 1, GP_SPARSITY_MAX_DIM, &x));
    s->q_dim = (int)x;
    GP_TRY(gp_get_number(root, "", "target", label, "", &s->target));
    if (!(s->target >= 0.0 && s->target < 1.0))
        GP_FAIL(GP_ERR_FORMAT, "%s: \"target\" = %g; allowed [0, 1)", label, s->target);
    GP_TRY(gp_get_int(root, "tokens", label, 0, LONG_MAX, &s->tokens));
    json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"layers\" must be an array of n_layers = %d objects%s", label, s->n_layers,
                layers ? "" : " (missing)");
    if (json_array_size(layers) != (size_t)s->n_layers)
        GP_FAIL(GP_ERR_FORMAT, "%s: \"layers\" holds %zu layers, shape.n_layers is %d", label,
                json_array_size(layers), s->n_layers);
    if (!(s->thresholds = malloc((size_t)s->n_layers * GP_SPARSE_PROJ_COUNT * sizeof *s->thresholds)))
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for %d layers", label, s->n_layers);
    bool has_zeros = false, has_freq = false;
    for (int l = 0; l < s->n_layers; l++)
        GP_TRY(gp_parse_layer(json_array_get(layers, (size_t)l), l, label, s, &has_zeros, &has_freq));
    return GP_OK;
}

gp_status gp_sparsity_load(const char *path, gp_sparsity *out)
{
    if (!path || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_load: path and out are required");
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    GP_TRY(gp_read_file(path, GP_SPARSITY_FILE_CAP, &text, &len));
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
    gp_sparsity s = {0};
    gp_status st = gp_parse_root(root, path, &s);
    json_decref(root);
    if (st != GP_OK) {
        gp_sparsity_free(&s);
        return st;
    }
    *out = s;
    return GP_OK;
}
