/* bench-serve's prompts: random token ids (vLLM's random dataset), groups
 * sharing a prefix (SGLang's generated-shared-prefix) and a JSONL file. */
#include "gp_loadgen.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_tools.h"

struct gp_lg_dataset {
    int n;
    gp_lg_prompt *p; /* [n]; ids point into ids, text into its own allocation */
    int32_t *ids;    /* [sum of the id prompts' lengths] */
    char **texts;    /* [n] owned texts, NULL for id prompts */
};

static gp_status alloc_dataset(int n, size_t n_ids, gp_lg_dataset **out)
{
    gp_lg_dataset *d = calloc(1, sizeof *d);
    if (d) {
        d->n = n;
        d->p = calloc((size_t)(n > 0 ? n : 1), sizeof *d->p);
        d->texts = calloc((size_t)(n > 0 ? n : 1), sizeof *d->texts);
        d->ids = malloc((n_ids ? n_ids : 1) * sizeof *d->ids);
    }
    if (!d || !d->p || !d->texts || !d->ids) {
        gp_lg_dataset_destroy(d);
        GP_FAIL(GP_ERR_NO_MEMORY, "a dataset of %d prompts (%zu token ids): out of memory", n, n_ids);
    }
    *out = d;
    return GP_OK;
}

void gp_lg_dataset_destroy(gp_lg_dataset *d)
{
    if (!d)
        return;
    if (d->texts)
        for (int i = 0; i < d->n; i++)
            free(d->texts[i]);
    free(d->texts);
    free(d->p);
    free(d->ids);
    free(d);
}

int gp_lg_dataset_size(const gp_lg_dataset *d) { return d->n; }
gp_lg_prompt gp_lg_dataset_get(const gp_lg_dataset *d, int i) { return d->p[i]; }

/* An integer uniform over [lo, hi]. */
static int uniform_int(gp_rng *r, int lo, int hi)
{
    int v = lo + (int)floor(gp_rng_uniform(r) * ((double)hi - lo + 1.0));
    return v > hi ? hi : v;
}

static void random_ids(gp_rng *r, int vocab, int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)uniform_int(r, 0, vocab - 1);
}

static gp_status check_count(const char *flag, long v, long lo, long hi)
{
    if (v < lo || v > hi)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s %ld is out of range; allowed: [%ld, %ld]", flag, v, lo, hi);
    return GP_OK;
}

/* The length bounds of vLLM's random dataset: floor(len x (1 -+ r)), at least 1. */
static void len_bounds(int len, double r, int *lo, int *hi)
{
    *lo = (int)floor(len * (1.0 - r));
    *hi = (int)floor(len * (1.0 + r));
    if (*lo < 1)
        *lo = 1;
    if (*hi < *lo)
        *hi = *lo;
}

gp_status gp_lg_dataset_random(const gp_lg_random_params *p, gp_lg_dataset **out)
{
    GP_TRY(check_count("--num-prompts", p->num_prompts, 1, GP_LG_MAX_PROMPTS));
    GP_TRY(check_count("--random-input-len", p->input_len, 1, GP_LG_MAX_LEN));
    GP_TRY(check_count("--random-output-len", p->output_len, 1, GP_LG_MAX_LEN));
    GP_TRY(check_count("--vocab", p->vocab, 1, INT32_MAX));
    if (!(p->range_ratio >= 0.0 && p->range_ratio < 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "--random-range-ratio %g is out of range; allowed: [0, 1)", p->range_ratio);
    int in_lo, in_hi, out_lo, out_hi;
    len_bounds(p->input_len, p->range_ratio, &in_lo, &in_hi);
    len_bounds(p->output_len, p->range_ratio, &out_lo, &out_hi);
    gp_rng r;
    gp_rng_seed(&r, p->seed, 1);
    int *in_len = malloc((size_t)p->num_prompts * sizeof *in_len);
    if (!in_len)
        GP_FAIL(GP_ERR_NO_MEMORY, "--num-prompts %d: out of memory", p->num_prompts);
    size_t total = 0;
    for (int i = 0; i < p->num_prompts; i++) {
        in_len[i] = uniform_int(&r, in_lo, in_hi);
        total += (size_t)in_len[i];
    }
    gp_lg_dataset *d;
    gp_status st = alloc_dataset(p->num_prompts, total, &d);
    if (st != GP_OK) {
        free(in_len);
        return st;
    }
    size_t at = 0;
    for (int i = 0; i < p->num_prompts; i++) {
        random_ids(&r, p->vocab, d->ids + at, in_len[i]);
        d->p[i] = (gp_lg_prompt){.ids = d->ids + at, .n_ids = in_len[i], .max_tokens = uniform_int(&r, out_lo, out_hi),
                                 .group = -1};
        at += (size_t)in_len[i];
    }
    free(in_len);
    *out = d;
    return GP_OK;
}

gp_status gp_lg_dataset_shared_prefix(const gp_lg_shared_prefix_params *p, gp_lg_dataset **out)
{
    GP_TRY(check_count("--prefix-groups", p->groups, 1, GP_LG_MAX_PROMPTS));
    GP_TRY(check_count("--requests-per-group", p->per_group, 1, GP_LG_MAX_PROMPTS / p->groups));
    GP_TRY(check_count("--prefix-len", p->prefix_len, 1, GP_LG_MAX_LEN));
    GP_TRY(check_count("--question-len", p->question_len, 1, GP_LG_MAX_LEN));
    GP_TRY(check_count("--prefix-output-len", p->output_len, 1, GP_LG_MAX_LEN));
    GP_TRY(check_count("--vocab", p->vocab, 1, INT32_MAX));
    int n = p->groups * p->per_group, len = p->prefix_len + p->question_len;
    gp_lg_dataset *d;
    GP_TRY(alloc_dataset(n, (size_t)n * (size_t)len, &d));
    int *order = malloc((size_t)n * sizeof *order);
    if (!order) {
        gp_lg_dataset_destroy(d);
        GP_FAIL(GP_ERR_NO_MEMORY, "%d shared-prefix prompts: out of memory", n);
    }
    gp_rng r;
    gp_rng_seed(&r, p->seed, 1);
    for (int g = 0; g < p->groups; g++) {
        int32_t *first = d->ids + (size_t)g * p->per_group * len;
        random_ids(&r, p->vocab, first, p->prefix_len);
        for (int q = 0; q < p->per_group; q++) {
            int32_t *ids = first + (size_t)q * len;
            if (q)
                memcpy(ids, first, (size_t)p->prefix_len * sizeof *ids);
            random_ids(&r, p->vocab, ids + p->prefix_len, p->question_len);
        }
    }
    /* Fisher-Yates: the groups' requests interleave, as SGLang shuffles them. */
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = uniform_int(&r, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < n; i++)
        d->p[i] = (gp_lg_prompt){.ids = d->ids + (size_t)order[i] * len, .n_ids = len, .max_tokens = p->output_len,
                                 .group = order[i] / p->per_group};
    free(order);
    *out = d;
    return GP_OK;
}

/* ------------------------------------------------------------ JSONL */

typedef struct jsonl_line {
    json_t *prompt;
    int max_tokens;
} jsonl_line;

static gp_status parse_line(const char *path, long lineno, const char *text, size_t len, jsonl_line *out)
{
    static const char form[] = "each line is {\"prompt\": \"text\" or [token ids], \"max_tokens\": n >= 1}";
    json_error_t err;
    json_t *j = json_loadb(text, len, 0, &err);
    if (!j)
        GP_FAIL(GP_ERR_FORMAT, "%s:%ld: not JSON (%s, column %d); %s", path, lineno, err.text, err.column, form);
    gp_status st = GP_ERR_FORMAT;
    json_t *prompt = json_object_get(j, "prompt"), *mt = json_object_get(j, "max_tokens");
    if (!json_is_object(j)) {
        gp_set_error("%s:%ld: a JSON %s, not an object; %s", path, lineno, json_is_array(j) ? "array" : "value", form);
    } else if (!prompt) {
        gp_set_error("%s:%ld: no \"prompt\"; %s", path, lineno, form);
    } else if (!mt) {
        gp_set_error("%s:%ld: no \"max_tokens\"; %s", path, lineno, form);
    } else if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > GP_LG_MAX_LEN) {
        gp_set_error("%s:%ld: \"max_tokens\" must be an integer in [1, %d]; %s", path, lineno, GP_LG_MAX_LEN, form);
    } else if (json_is_string(prompt)) {
        st = json_string_length(prompt) ? GP_OK : GP_ERR_FORMAT;
        if (st != GP_OK)
            gp_set_error("%s:%ld: an empty \"prompt\"; %s", path, lineno, form);
    } else if (json_is_array(prompt) && json_array_size(prompt) > 0 && json_array_size(prompt) <= GP_LG_MAX_LEN) {
        st = GP_OK;
        size_t i;
        json_t *v;
        json_array_foreach(prompt, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                gp_set_error("%s:%ld: \"prompt\"[%zu] is not a token id (an integer in [0, %d]); %s", path, lineno,
                             i, INT32_MAX, form);
                st = GP_ERR_FORMAT;
                break;
            }
        }
    } else {
        gp_set_error("%s:%ld: \"prompt\" must be a non-empty string or array of at most %d token ids; %s", path,
                     lineno, GP_LG_MAX_LEN, form);
    }
    if (st != GP_OK) {
        json_decref(j);
        return st;
    }
    out->prompt = json_incref(prompt);
    out->max_tokens = (int)json_integer_value(mt);
    json_decref(j);
    return GP_OK;
}

static gp_status read_lines(const char *path, int limit, jsonl_line **lines, int *n_lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        GP_FAIL(GP_ERR_IO, "--dataset-path %s: %s", path, strerror(errno));
    jsonl_line *v = NULL;
    int n = 0;
    size_t cap = 0; /* bytes of v */
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t got;
    long lineno = 0;
    gp_status st = GP_OK;
    while ((limit == 0 || n < limit) && (got = getline(&buf, &bcap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--;
        size_t sp = 0;
        while (sp < len && (buf[sp] == ' ' || buf[sp] == '\t'))
            sp++;
        if (sp == len)
            continue;
        if (n == GP_LG_MAX_PROMPTS) {
            gp_set_error("%s:%ld: more than %d prompts", path, lineno, GP_LG_MAX_PROMPTS);
            st = GP_ERR_FORMAT;
            break;
        }
        jsonl_line *nv = gp_grow(v, &cap, (size_t)(n + 1) * sizeof *nv);
        if (!nv) {
            gp_set_error("%s: out of memory at line %ld", path, lineno);
            st = GP_ERR_NO_MEMORY;
            break;
        }
        v = nv;
        if ((st = parse_line(path, lineno, buf, len, &v[n])) != GP_OK)
            break;
        n++;
    }
    if (st == GP_OK && ferror(f)) {
        gp_set_error("--dataset-path %s: read error: %s", path, strerror(errno));
        st = GP_ERR_IO;
    }
    free(buf);
    fclose(f);
    if (st == GP_OK && n == 0) {
        gp_set_error("--dataset-path %s: no prompts in the file", path);
        st = GP_ERR_FORMAT;
    }
    if (st == GP_OK && limit > 0 && n < limit) {
        gp_set_error("--dataset-path %s holds %d prompts, fewer than --num-prompts %d", path, n, limit);
        st = GP_ERR_INVALID_ARG;
    }
    if (st != GP_OK) {
        for (int i = 0; i < n; i++)
            json_decref(v[i].prompt);
        free(v);
        return st;
    }
    *lines = v;
    *n_lines = n;
    return GP_OK;
}

gp_status gp_lg_dataset_jsonl(const char *path, int limit, gp_lg_dataset **out)
{
    if (limit < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "--num-prompts %d; allowed: >= 1", limit);
    jsonl_line *v;
    int n;
    GP_TRY(read_lines(path, limit, &v, &n));
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (json_is_array(v[i].prompt))
            total += json_array_size(v[i].prompt);
    gp_lg_dataset *d = NULL;
    gp_status st = alloc_dataset(n, total, &d);
    size_t at = 0;
    for (int i = 0; st == GP_OK && i < n; i++) {
        gp_lg_prompt *p = &d->p[i];
        p->max_tokens = v[i].max_tokens;
        p->group = -1;
        if (json_is_string(v[i].prompt)) {
            d->texts[i] = strdup(json_string_value(v[i].prompt));
            if (!d->texts[i]) {
                gp_set_error("%s: out of memory", path);
                st = GP_ERR_NO_MEMORY;
            }
            p->text = d->texts[i];
            continue;
        }
        p->ids = d->ids + at;
        p->n_ids = (int)json_array_size(v[i].prompt);
        for (int k = 0; k < p->n_ids; k++)
            d->ids[at + (size_t)k] = (int32_t)json_integer_value(json_array_get(v[i].prompt, (size_t)k));
        at += (size_t)p->n_ids;
    }
    for (int i = 0; i < n; i++)
        json_decref(v[i].prompt);
    free(v);
    if (st != GP_OK) {
        gp_lg_dataset_destroy(d);
        return st;
    }
    *out = d;
    return GP_OK;
}
