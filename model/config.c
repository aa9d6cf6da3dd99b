/* Model configuration: built-in presets, HF config.json parsing (classic and
 * rope_parameters forms), validation, parameter count and RoPE frequencies. */
#include "gp_model.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- presets */

/* Values copied from the HF config.json of each model. */
static const gp_config gp_presets[] = {
    {
        .name = "tiny", .n_layers = 2, .hidden = 64, .n_heads = 4, .n_kv_heads = 2,
        .head_dim = 16, .ffn = 128, .vocab = 256, .norm_eps = 1e-5f, .rope_theta = 10000.0f,
        .rope_scaling = { .type = GP_ROPE_DEFAULT },
        .tied_embeddings = true, .max_context = 256,
    },
    {
        .name = "llama3.2-1b", .n_layers = 16, .hidden = 2048, .n_heads = 32, .n_kv_heads = 8,
        .head_dim = 64, .ffn = 8192, .vocab = 128256, .norm_eps = 1e-5f, .rope_theta = 500000.0f,
        .rope_scaling = { .type = GP_ROPE_LLAMA3, .factor = 32.0f, .low_freq_factor = 1.0f,
                          .high_freq_factor = 4.0f, .original_max_pos = 8192 },
        .tied_embeddings = true, .max_context = 131072,
    },
    {
        .name = "llama3-8b", .n_layers = 32, .hidden = 4096, .n_heads = 32, .n_kv_heads = 8,
        .head_dim = 128, .ffn = 14336, .vocab = 128256, .norm_eps = 1e-5f, .rope_theta = 500000.0f,
        .rope_scaling = { .type = GP_ROPE_DEFAULT },
        .tied_embeddings = false, .max_context = 8192,
    },
    {
        .name = "llama3.1-8b", .n_layers = 32, .hidden = 4096, .n_heads = 32, .n_kv_heads = 8,
        .head_dim = 128, .ffn = 14336, .vocab = 128256, .norm_eps = 1e-5f, .rope_theta = 500000.0f,
        .rope_scaling = { .type = GP_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f,
                          .high_freq_factor = 4.0f, .original_max_pos = 8192 },
        .tied_embeddings = false, .max_context = 131072,
    },
    {
        .name = "llama3-70b", .n_layers = 80, .hidden = 8192, .n_heads = 64, .n_kv_heads = 8,
        .head_dim = 128, .ffn = 28672, .vocab = 128256, .norm_eps = 1e-5f, .rope_theta = 500000.0f,
        .rope_scaling = { .type = GP_ROPE_DEFAULT },
        .tied_embeddings = false, .max_context = 8192,
    },
};

const char *gp_config_preset_names(void)
{
    return "tiny, llama3.2-1b, llama3-8b, llama3.1-8b, llama3-70b";
}

gp_status gp_config_preset(const char *name, gp_config *out)
{
    if (!name || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_config_preset: name and out must not be NULL");
    for (size_t i = 0; i < sizeof gp_presets / sizeof gp_presets[0]; i++) {
        if (strcmp(name, gp_presets[i].name) == 0) {
            *out = gp_presets[i];
            out->arch = gp_arch_default();
            return GP_OK;
        }
    }
    GP_FAIL(GP_ERR_NOT_FOUND, "unknown preset '%s' (presets: %s)", name, gp_config_preset_names());
}

/* ---------------------------------------------------------------- validation */

gp_status gp_config_validate(const gp_config *c)
{
    if (!c)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_config_validate: cfg is NULL");
    const char *n = c->name[0] ? c->name : "(unnamed)";
    const struct { const char *field; int v; } pos[] = {
        { "n_layers (num_hidden_layers)", c->n_layers },
        { "hidden (hidden_size)", c->hidden },
        { "n_heads (num_attention_heads)", c->n_heads },
        { "n_kv_heads (num_key_value_heads)", c->n_kv_heads },
        { "head_dim", c->head_dim },
        { "ffn (intermediate_size)", c->ffn },
        { "vocab (vocab_size)", c->vocab },
        { "max_context (max_position_embeddings)", c->max_context },
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "config %s: %s = %d must be positive", n, pos[i].field,
                    pos[i].v);
    if (c->n_heads % c->n_kv_heads != 0)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "config %s: n_heads = %d is not a multiple of n_kv_heads = %d (GQA needs it)", n,
                c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "config %s: head_dim = %d must be even (RoPE rotates pairs)",
                n, c->head_dim);
    /* Row counts are held in int by the kernels. Unsigned 64 bits hold the
     * product of three positive ints: (3 * INT_MAX) * INT_MAX < 2^64. */
    uint64_t qkv = ((uint64_t)c->n_heads + 2 * (uint64_t)c->n_kv_heads) * (uint64_t)c->head_dim;
    if (qkv > INT_MAX || 2 * (uint64_t)c->ffn > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "config %s: (n_heads + 2 n_kv_heads) * head_dim = %llu or 2 * ffn = %llu "
                "exceeds %d", n, (unsigned long long)qkv, 2 * (unsigned long long)c->ffn, INT_MAX);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps))
        GP_FAIL(GP_ERR_INVALID_ARG, "config %s: norm_eps (rms_norm_eps) = %g must be positive "
                "and finite", n, (double)c->norm_eps);
    /* Below 1 the frequencies theta^(-2i/head_dim) exceed 1; near 0 they
     * reach inf. Real models use 10^4 and more. */
    if (!(c->rope_theta >= 1.0f) || !isfinite(c->rope_theta))
        GP_FAIL(GP_ERR_INVALID_ARG, "config %s: rope_theta = %g must be finite and at least 1", n,
                (double)c->rope_theta);
    const gp_rope_scaling *s = &c->rope_scaling;
    if (s->type == GP_ROPE_LLAMA3) {
        if (!(s->factor >= 1.0f) || !isfinite(s->factor))
            GP_FAIL(GP_ERR_INVALID_ARG, "config %s: rope_scaling.factor = %g must be >= 1", n,
                    (double)s->factor);
        if (!(s->low_freq_factor > 0.0f) || !isfinite(s->low_freq_factor))
            GP_FAIL(GP_ERR_INVALID_ARG, "config %s: rope_scaling.low_freq_factor = %g must be > 0",
                    n, (double)s->low_freq_factor);
        if (!(s->high_freq_factor > s->low_freq_factor) || !isfinite(s->high_freq_factor))
            GP_FAIL(GP_ERR_INVALID_ARG,
                    "config %s: rope_scaling.high_freq_factor = %g must be greater than "
                    "low_freq_factor = %g", n, (double)s->high_freq_factor,
                    (double)s->low_freq_factor);
        if (s->original_max_pos <= 0)
            GP_FAIL(GP_ERR_INVALID_ARG,
                    "config %s: rope_scaling.original_max_position_embeddings = %d must be "
                    "positive", n, s->original_max_pos);
    } else if (s->type != GP_ROPE_DEFAULT) {
        GP_FAIL(GP_ERR_INVALID_ARG, "config %s: rope_scaling.type = %d is not one of %d (default) "
                "or %d (llama3)", n, (int)s->type, GP_ROPE_DEFAULT, GP_ROPE_LLAMA3);
    }
    if (c->vocab_parts < 0 || c->vocab_parts > GP_TP_MAX || c->vocab_parts > c->vocab)
        GP_FAIL(GP_ERR_INVALID_ARG, "config %s: vocab_parts = %d: allowed 0..%d and at most vocab = %d", n,
                c->vocab_parts, GP_TP_MAX, c->vocab);
    return GP_OK;
}

/* ---------------------------------------------------------------- JSON */

/* Copies the last path component of label (trailing slashes ignored). */
static void gp_set_basename(char *dst, size_t cap, const char *label)
{
    size_t end = strlen(label);
    while (end > 1 && label[end - 1] == '/')
        end--;
    size_t begin = end;
    while (begin > 0 && label[begin - 1] != '/')
        begin--;
    size_t len = end - begin;
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, label + begin, len);
    dst[len] = '\0';
}

/* Absent and JSON null both mean "not given", as HF treats None. */
static json_t *gp_json_opt(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

/* prefix names the enclosing object ("" or "rope_scaling.") in messages. */
static gp_status gp_json_int(json_t *obj, const char *prefix, const char *key, const char *label,
                             bool required, int *out)
{
    json_t *v = gp_json_opt(obj, key);
    if (!v) {
        if (required)
            GP_FAIL(GP_ERR_FORMAT, "%s: missing required key \"%s%s\" (an integer)", label,
                    prefix, key);
        return GP_OK;
    }
    if (!json_is_integer(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" must be an integer", label, prefix, key);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" = %lld is outside the int range", label, prefix,
                key, (long long)x);
    *out = (int)x;
    return GP_OK;
}

static gp_status gp_json_float(json_t *obj, const char *prefix, const char *key, const char *label,
                               bool required, float *out)
{
    json_t *v = gp_json_opt(obj, key);
    if (!v) {
        if (required)
            GP_FAIL(GP_ERR_FORMAT, "%s: missing required key \"%s%s\" (a number)", label, prefix,
                    key);
        return GP_OK;
    }
    if (!json_is_number(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" must be a number", label, prefix, key);
    /* Checked here, in double, so the message shows the value the file holds
     * rather than the inf or 0 it would become as a float. */
    double x = json_number_value(v);
    if (!(fabs(x) <= FLT_MAX))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" = %g is outside the float range (|x| <= %g)",
                label, prefix, key, x, (double)FLT_MAX);
    if (x != 0.0 && (float)x == 0.0f)
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" = %g is too small for a float (it would be 0)",
                label, prefix, key, x);
    *out = (float)x;
    return GP_OK;
}

static gp_status gp_json_bool(json_t *obj, const char *key, const char *label, bool *out)
{
    json_t *v = gp_json_opt(obj, key);
    if (!v)
        return GP_OK;
    if (!json_is_boolean(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" must be true or false", label, key);
    *out = json_is_true(v);
    return GP_OK;
}

/* Optional string key; *out stays NULL when absent. */
static gp_status gp_json_str(json_t *obj, const char *prefix, const char *key, const char *label,
                             const char **out)
{
    json_t *v = gp_json_opt(obj, key);
    if (!v)
        return GP_OK;
    if (!json_is_string(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s%s\" must be a string", label, prefix, key);
    *out = json_string_value(v);
    return GP_OK;
}

/* HF rope_type spellings of gp_rope_type, indexed by it. */
static const char *const gp_rope_names[] = {
    [GP_ROPE_DEFAULT] = "default",
    [GP_ROPE_LLAMA3] = "llama3",
};
#define GP_N_ROPE_TYPES (sizeof gp_rope_names / sizeof gp_rope_names[0])

/* Reads a rope_scaling / rope_parameters object; what names it in messages.
 * The rope types a accepts are the supported ones. theta receives
 * rope_theta when the object carries it (rope_parameters). */
static gp_status gp_parse_rope(json_t *r, const char *what, const char *label, const gp_arch *a,
                               gp_rope_scaling *out, float *theta)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", what);
    if (!json_is_object(r))
        GP_FAIL(GP_ERR_FORMAT, "%s: key \"%s\" must be an object or null", label, what);
    const char *type = NULL;
    GP_TRY(gp_json_str(r, prefix, "rope_type", label, &type));
    if (!type) /* older configs spell it "type" */
        GP_TRY(gp_json_str(r, prefix, "type", label, &type));
    GP_TRY(gp_json_float(r, prefix, "rope_theta", label, false, theta));
    if (!type)
        GP_FAIL(GP_ERR_FORMAT, "%s: \"%s\" has no \"rope_type\" (or \"type\") string", label, what);
    size_t t = 0; /* the accepted type spelled type, or GP_N_ROPE_TYPES */
    while (t < GP_N_ROPE_TYPES
           && !(((a->rope_types >> t) & 1u) && strcmp(type, gp_rope_names[t]) == 0))
        t++;
    if (t == GP_N_ROPE_TYPES) {
        char list[128];
        size_t at = 0;
        list[0] = '\0';
        for (size_t i = 0; i < GP_N_ROPE_TYPES && at < sizeof list; i++)
            if ((a->rope_types >> i) & 1u)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"", at ? ", " : "",
                                       gp_rope_names[i]);
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: %s rope type \"%s\" is not supported (supported: %s)",
                label, what, type, list);
    }
    gp_rope_scaling s = { .type = (gp_rope_type)t };
    if (s.type == GP_ROPE_LLAMA3) {
        GP_TRY(gp_json_float(r, prefix, "factor", label, true, &s.factor));
        GP_TRY(gp_json_float(r, prefix, "low_freq_factor", label, true, &s.low_freq_factor));
        GP_TRY(gp_json_float(r, prefix, "high_freq_factor", label, true, &s.high_freq_factor));
        GP_TRY(gp_json_int(r, prefix, "original_max_position_embeddings", label, true,
                           &s.original_max_pos));
    }
    *out = s;
    return GP_OK;
}

/* The gp_config member a numeric key fills. */
static void *gp_config_member(gp_config *c, gp_config_field f)
{
    switch (f) {
    case GP_CF_N_LAYERS: return &c->n_layers;
    case GP_CF_HIDDEN: return &c->hidden;
    case GP_CF_N_HEADS: return &c->n_heads;
    case GP_CF_N_KV_HEADS: return &c->n_kv_heads;
    case GP_CF_HEAD_DIM: return &c->head_dim;
    case GP_CF_FFN: return &c->ffn;
    case GP_CF_VOCAB: return &c->vocab;
    case GP_CF_NORM_EPS: return &c->norm_eps;
    case GP_CF_MAX_CONTEXT: return &c->max_context;
    case GP_CF_ROPE_THETA: return &c->rope_theta;
    }
    return NULL;
}

static bool gp_field_is_float(gp_config_field f)
{
    return f == GP_CF_NORM_EPS || f == GP_CF_ROPE_THETA;
}

/* The family comes first: it says which keys to read and what to refuse. */
static gp_status gp_parse_arch(json_t *root, const char *label, gp_config *c)
{
    const char *s = NULL;
    GP_TRY(gp_json_str(root, "", "model_type", label, &s));
    /* A config without model_type is read as the default family. */
    const gp_arch *a = s ? gp_arch_find(s) : gp_arch_default();
    if (!a) {
        char names[256];
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (supported: %s)",
                label, s, gp_arch_names(names, sizeof names));
    }
    c->arch = a;
    s = NULL;
    GP_TRY(gp_json_str(root, "", "hidden_act", label, &s));
    if (s && a->hidden_act && strcmp(s, a->hidden_act) != 0)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported (only \"%s\")",
                label, s, a->hidden_act);
    unsigned bias = a->bias;
    for (size_t i = 0; i < GP_ARCH_MAX_BIAS_KEYS && a->bias_keys[i].key; i++) {
        bool b = false;
        GP_TRY(gp_json_bool(root, a->bias_keys[i].key, label, &b));
        if (!b)
            continue;
        /* The key's name leads the message: it is what the user can look up. */
        if (gp_arch_check_supported(a, a->bias_keys[i].projs, label) != GP_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", gp_last_error());
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s = true is not supported: %s", a->bias_keys[i].key, msg);
        }
        bias |= a->bias_keys[i].projs;
    }
    GP_TRY(gp_arch_check_supported(a, bias, label));
    c->qkv_bias = (bias & GP_AT_QKV_PROJS) != 0; /* the check allows the three or none */
    return GP_OK;
}

/* Sliding-window attention is not implemented: accept a config only where
 * the window never bites, i.e. no window (key absent or null; for Qwen2
 * also use_sliding_window false, or max_window_layers covering every layer)
 * or one at least max_position_embeddings wide. */
static gp_status gp_parse_sliding_window(json_t *root, const char *label, const gp_arch *a,
                                         const gp_config *c)
{
    if (!a->sliding_window_key)
        return GP_OK;
    if (a->use_sliding_window_key) {
        bool use = false; /* HF's default */
        GP_TRY(gp_json_bool(root, a->use_sliding_window_key, label, &use));
        if (!use)
            return GP_OK; /* HF ignores sliding_window then */
    }
    if (!gp_json_opt(root, a->sliding_window_key))
        return GP_OK;
    int window = 0;
    GP_TRY(gp_json_int(root, "", a->sliding_window_key, label, false, &window));
    if (window >= c->max_context)
        return GP_OK;
    if (a->max_window_layers_key && gp_json_opt(root, a->max_window_layers_key)) {
        int full = 0; /* layers [0, full) attend fully */
        GP_TRY(gp_json_int(root, "", a->max_window_layers_key, label, false, &full));
        if (full >= c->n_layers)
            return GP_OK;
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: %s = %d with %s = true and %s = %d puts a sliding window "
                "on layers %d..%d; the engine does not implement sliding-window attention (allowed: "
                "%s null or >= max_position_embeddings = %d, %s false, or %s >= num_hidden_layers "
                "= %d)", label, a->sliding_window_key, window, a->use_sliding_window_key,
                a->max_window_layers_key, full, full < 0 ? 0 : full, c->n_layers - 1,
                a->sliding_window_key, c->max_context, a->use_sliding_window_key,
                a->max_window_layers_key, c->n_layers);
    }
    GP_FAIL(GP_ERR_UNSUPPORTED, "%s: %s = %d: the engine does not implement sliding-window attention "
            "(allowed: %s null or >= max_position_embeddings = %d%s%s%s)", label, a->sliding_window_key,
            window, a->sliding_window_key, c->max_context, a->use_sliding_window_key ? ", or " : "",
            a->use_sliding_window_key ? a->use_sliding_window_key : "",
            a->use_sliding_window_key ? " false" : "");
}

static gp_status gp_parse_root(json_t *root, const char *label, gp_config *c)
{
    if (!json_is_object(root))
        GP_FAIL(GP_ERR_FORMAT, "%s: the top level must be a JSON object", label);
    GP_TRY(gp_parse_arch(root, label, c));
    const gp_arch *a = c->arch;

    /* Optional keys left out keep these (HF's defaults); the head defaults
     * depend on other keys and are filled in after the loop. */
    c->rope_theta = a->rope_theta_default;
    bool got_kv_heads = false, got_head_dim = false;
    for (size_t i = 0; i < a->n_keys; i++) {
        const gp_arch_key *k = &a->keys[i];
        void *m = gp_config_member(c, k->field);
        if (gp_field_is_float(k->field))
            GP_TRY(gp_json_float(root, "", k->key, label, k->required, m));
        else
            GP_TRY(gp_json_int(root, "", k->key, label, k->required, m));
        bool given = gp_json_opt(root, k->key) != NULL;
        if (k->field == GP_CF_N_KV_HEADS)
            got_kv_heads = given;
        if (k->field == GP_CF_HEAD_DIM)
            got_head_dim = given;
    }
    if (!got_kv_heads)
        c->n_kv_heads = c->n_heads;
    /* Default head_dim needs heads > 0; validation reports the zero otherwise. */
    if (!got_head_dim)
        c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
    c->tied_embeddings = a->tie_default;
    GP_TRY(gp_json_bool(root, a->tie_key, label, &c->tied_embeddings));
    GP_TRY(gp_parse_sliding_window(root, label, a, c));

    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    c->rope_scaling.type = GP_ROPE_DEFAULT;
    json_t *r = gp_json_opt(root, "rope_scaling");
    if (r) {
        float ignored = 0.0f;
        GP_TRY(gp_parse_rope(r, "rope_scaling", label, a, &c->rope_scaling, &ignored));
    }
    /* The newer form wins when both are present: transformers writes it from
     * the classic keys when it converts a config. */
    r = gp_json_opt(root, "rope_parameters");
    if (r)
        GP_TRY(gp_parse_rope(r, "rope_parameters", label, a, &c->rope_scaling, &c->rope_theta));
    return GP_OK;
}

gp_status gp_config_parse_json(const char *text, size_t len, const char *label, gp_config *out)
{
    if (!text || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_config_parse_json: text and out must not be NULL");
    if (!label)
        label = "config.json";
    /* jansson 2.14 skips a NUL byte that follows a number; JSON has none. */
    const char *nul = memchr(text, '\0', len);
    if (nul)
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON: NUL byte at offset %zu", label,
                (size_t)(nul - text));
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line,
                jerr.column, jerr.text);
    gp_config c;
    memset(&c, 0, sizeof c);
    gp_set_basename(c.name, sizeof c.name, label);
    gp_status st = gp_parse_root(root, label, &c);
    json_decref(root);
    if (st != GP_OK)
        return st;
    GP_TRY(gp_config_validate(&c));
    *out = c;
    return GP_OK;
}

#define GP_CONFIG_MAX_BYTES (16u << 20) /* config.json is a few KB; refuse absurd files */

gp_status gp_config_load_dir(const char *dir, gp_config *out)
{
    if (!dir || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_config_load_dir: dir and out must not be NULL");
    size_t plen = strlen(dir) + sizeof "/config.json";
    char *path = malloc(plen);
    if (!path)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_config_load_dir: cannot allocate %zu bytes", plen);
    snprintf(path, plen, "%s/config.json", dir);

    char *buf = NULL;
    size_t n = 0;
    gp_status st = gp_read_file(path, GP_CONFIG_MAX_BYTES, &buf, &n);
    if (st != GP_OK)
        goto done;
    gp_config c;
    st = gp_config_parse_json(buf, n, path, &c);
    if (st == GP_OK) {
        gp_set_basename(c.name, sizeof c.name, dir);
        *out = c;
    }
done:
    free(buf);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- derived */

uint64_t gp_config_param_count(const gp_config *c)
{
    if (!c)
        return 0;
    uint64_t h = (uint64_t)c->hidden;
    uint64_t embed = (uint64_t)gp_config_vocab_rows(c) * h;
    uint64_t layer = 2 * h                                           /* two norms */
                     + (uint64_t)gp_config_qkv_rows(c) * h           /* wqkv */
                     + h * (uint64_t)c->n_heads * (uint64_t)c->head_dim /* wo */
                     + 3 * (uint64_t)c->ffn * h                       /* gate, up, down */
                     + (c->qkv_bias ? (uint64_t)gp_config_qkv_rows(c) : 0); /* q/k/v biases */
    return embed + (uint64_t)c->n_layers * layer + h + (c->tied_embeddings ? 0 : embed);
}

/* Mirrors transformers' _compute_default_rope_parameters and
 * _compute_llama3_parameters operation by operation, so the values are HF's
 * bit for bit: torch forms the exponent and everything after the power in
 * float32 (Python scalars cast to float32), the power itself in double (the
 * base is a Python float). The correctly rounded formula differs from HF by
 * 1-2 ulp in some entries, which at position ~2100 moved logits by ~1e-4
 * relative (tests/hf/README.md, long-gqa). */
void gp_rope_inv_freq(const gp_config *c, float *out)
{
    if (!c || !out || c->head_dim <= 0)
        return;
    const double pi = 3.14159265358979323846;
    const gp_rope_scaling *s = &c->rope_scaling;
    for (int i = 0; i < c->head_dim / 2; i++) {
        float e = (float)(2 * i) / (float)c->head_dim;
        float f = 1.0f / (float)pow((double)c->rope_theta, (double)e);
        if (s->type == GP_ROPE_LLAMA3) {
            float factor = s->factor, low = s->low_freq_factor, high = s->high_freq_factor;
            float orig = (float)s->original_max_pos;
            float low_freq_wavelen = (float)((double)s->original_max_pos / (double)low);
            float high_freq_wavelen = (float)((double)s->original_max_pos / (double)high);
            float wavelen = (float)(2.0 * pi) / f;
            float llama = wavelen > low_freq_wavelen ? f / factor : f;
            float smooth = (orig / wavelen - low) / (float)((double)high - (double)low);
            float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
            bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            f = medium ? smoothed : llama;
        }
        out[i] = f;
    }
}
