/* Request bodies of /v1/completions and /v1/chat/completions parsed with
 * jansson and checked, field by field, before any work: each refusal is a
 * 400 naming the JSON field, the value or type given and what is allowed. */
#include "gp_http.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD_REQUEST 400
#define INVALID "invalid_request_error"

typedef struct parse_ctx {
    json_t *root;
    const gp_api_limits *lim;
    gp_api_request *out;
    gp_api_error *err;
} parse_ctx;

static const char *kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

/* A field of the wrong JSON type: what came and what is allowed. */
static bool bad_type(parse_ctx *c, const char *field, const json_t *v, const char *allowed)
{
    gp_api_error_set(c->err, BAD_REQUEST, INVALID, field, "%s: got %s; allowed: %s", field, kind_of(v), allowed);
    return false;
}

/* The field's value, or NULL when absent or null (OpenAI's clients send
 * null for a field left unset). */
static json_t *field(parse_ctx *c, const char *key)
{
    json_t *v = json_object_get(c->root, key);
    return json_is_null(v) ? NULL : v;
}

static bool get_bool(parse_ctx *c, const json_t *obj, const char *key, const char *name, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v))
        return bad_type(c, name, v, "true or false");
    *out = json_is_true(v);
    return true;
}

/* A number in [lo, hi] (lo excluded when lo_open); range names the range
 * and its meaning for the message. */
static bool get_number(parse_ctx *c, const char *key, double lo, bool lo_open, double hi, const char *range,
                       double *out)
{
    json_t *v = field(c, key);
    if (!v)
        return true;
    if (!json_is_number(v))
        return bad_type(c, key, v, range);
    double x = json_number_value(v);
    if (x > hi || x < lo || (lo_open && x == lo)) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, key, "%s: %g is out of range; allowed: %s", key, x, range);
        return false;
    }
    *out = x;
    return true;
}

/* An integer in [lo, hi]; *given says whether it was there. */
static bool get_int(parse_ctx *c, const char *key, long long lo, long long hi, const char *range, long long *out,
                    bool *given)
{
    json_t *v = field(c, key);
    *given = v != NULL;
    if (!v)
        return true;
    if (!json_is_integer(v))
        return bad_type(c, key, v, range);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, key, "%s: %lld is out of range; allowed: %s", key, x, range);
        return false;
    }
    *out = x;
    return true;
}

static bool parse_model(parse_ctx *c)
{
    json_t *v = field(c, "model");
    if (!v)
        return true;
    if (!json_is_string(v))
        return bad_type(c, "model", v, "a string naming the served model");
    if (c->lim->model && strcmp(json_string_value(v), c->lim->model) != 0) {
        /* 404 with model_not_found would be OpenAI's; vLLM and the issue ask 400. */
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "model",
                         "model: '%.128s' is not served here; allowed: '%s' (or leave \"model\" out)",
                         json_string_value(v), c->lim->model);
        return false;
    }
    return true;
}

static bool parse_max_tokens(parse_ctx *c)
{
    const int max = c->lim->max_context - 1;
    char range[160];
    snprintf(range, sizeof range, "an integer in [1, %d] (the context of %d tokens holds the prompt, "
             "at least 1 token, and the answer)", max, c->lim->max_context);
    long long v = 0;
    bool given = false;
    const char *key = "max_tokens";
    /* The chat field that replaces max_tokens wins, as in vLLM. */
    if (c->out->kind == GP_API_CHAT && field(c, "max_completion_tokens"))
        key = "max_completion_tokens";
    if (!get_int(c, key, 1, max, range, &v, &given))
        return false;
    if (given)
        c->out->max_tokens = (int)v;
    else if (c->out->kind == GP_API_COMPLETION)
        c->out->max_tokens = GP_API_COMPLETION_DEFAULT_MAX_TOKENS < max ? GP_API_COMPLETION_DEFAULT_MAX_TOKENS : max;
    return true;
}

static bool parse_sampling(parse_ctx *c)
{
    gp_sample_params *s = &c->out->sample;
    char temp_range[64];
    snprintf(temp_range, sizeof temp_range, "a number in [0, %g] (0: greedy)", GP_SAMPLE_MAX_TEMPERATURE);
    if (!get_number(c, "temperature", 0.0, false, GP_SAMPLE_MAX_TEMPERATURE, temp_range, &s->temperature) ||
        !get_number(c, "top_p", 0.0, true, 1.0, "a number in (0, 1] (1: off)", &s->top_p) ||
        !get_number(c, "min_p", 0.0, false, 1.0, "a number in [0, 1] (0: off)", &s->min_p))
        return false;

    char k_range[96];
    snprintf(k_range, sizeof k_range, "-1 or 0 (off), or an integer in [1, %d] (the vocabulary)", c->lim->vocab);
    long long k = 0;
    bool given;
    if (!get_int(c, "top_k", -1, c->lim->vocab, k_range, &k, &given))
        return false;
    s->top_k = k < 0 ? 0 : (int)k;

    long long seed = 0;
    if (!get_int(c, "seed", LLONG_MIN, LLONG_MAX, "an integer", &seed, &c->out->seed_given))
        return false;
    c->out->seed = (uint64_t)seed;

    /* Penalties change the distribution; ignoring them would give answers
     * the client did not ask for. */
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < sizeof penalties / sizeof penalties[0]; i++) {
        double p = 0.0;
        if (!get_number(c, penalties[i], -HUGE_VAL, false, HUGE_VAL,
                        "0 (greenpipe has no presence or frequency penalty)", &p))
            return false;
        if (p != 0.0) {
            gp_api_error_set(c->err, BAD_REQUEST, INVALID, penalties[i],
                             "%s: %g is not supported; allowed: 0 (greenpipe has no presence or frequency penalty)",
                             penalties[i], p);
            return false;
        }
    }
    json_t *bias = field(c, "logit_bias");
    if (bias && !(json_is_object(bias) && json_object_size(bias) == 0)) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "logit_bias",
                         "logit_bias: %s is not supported; allowed: null or {} (greenpipe has no logit bias)",
                         json_is_object(bias) ? "a non-empty object" : kind_of(bias));
        return false;
    }
    return true;
}

static bool parse_stops(parse_ctx *c)
{
    json_t *v = field(c, "stop");
    if (!v)
        return true;
    char allowed[128];
    snprintf(allowed, sizeof allowed, "a non-empty string, or an array of at most %d non-empty strings",
             c->lim->max_stops);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return bad_type(c, "stop", v, allowed);
    if (n > (size_t)c->lim->max_stops) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "stop", "stop: %zu strings; allowed: %s", n, allowed);
        return false;
    }
    if (n == 0)
        return true;
    c->out->stops = malloc(n * sizeof *c->out->stops);
    if (!c->out->stops) {
        gp_api_error_set(c->err, 500, "server_error", NULL, "out of memory for %zu stop strings", n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        char name[32];
        if (json_is_array(v))
            snprintf(name, sizeof name, "stop[%zu]", i);
        else
            snprintf(name, sizeof name, "stop");
        if (!json_is_string(s))
            return bad_type(c, name, s, allowed);
        if (json_string_length(s) == 0) {
            gp_api_error_set(c->err, BAD_REQUEST, INVALID, name, "%s: the string is empty; allowed: %s", name,
                             allowed);
            return false;
        }
        c->out->stops[c->out->n_stops++] = json_string_value(s);
    }
    return true;
}

/* Fields whose other values ask for what greenpipe does not do. */
static bool parse_unsupported(parse_ctx *c)
{
    long long x = 1;
    bool given;
    if (!get_int(c, "n", 1, 1, "1 (one choice per request)", &x, &given) ||
        !get_int(c, "best_of", 1, 1, "1 (one candidate per request)", &x, &given))
        return false;
    bool echo = false;
    if (!get_bool(c, c->root, "echo", "echo", &echo))
        return false;
    if (echo) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "echo", "echo: true is not supported; allowed: false");
        return false;
    }
    json_t *lp = field(c, "logprobs");
    if (lp && !json_is_false(lp)) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "logprobs",
                         "logprobs: %s is not supported; allowed: null or false (greenpipe returns no logprobs)",
                         kind_of(lp));
        return false;
    }
    return true;
}

static bool parse_stream(parse_ctx *c)
{
    if (!get_bool(c, c->root, "stream", "stream", &c->out->stream))
        return false;
    json_t *so = field(c, "stream_options");
    if (!so)
        return true;
    if (!json_is_object(so))
        return bad_type(c, "stream_options", so, "an object {\"include_usage\": true or false}");
    if (!c->out->stream) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "stream_options",
                         "stream_options: given without \"stream\": true; allowed: only with streaming");
        return false;
    }
    return get_bool(c, so, "include_usage", "stream_options.include_usage", &c->out->include_usage);
}

static bool parse_prompt_ids(parse_ctx *c, json_t *a, const char *name)
{
    size_t n = json_array_size(a);
    if (n > INT32_MAX) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt", "%s: %zu token ids; allowed: at most %d", name,
                         n, INT32_MAX);
        return false;
    }
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) {
        gp_api_error_set(c->err, 500, "server_error", NULL, "out of memory for %zu prompt token ids", n);
        return false;
    }
    c->out->prompt_ids = ids;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(a, i);
        if (!json_is_integer(t)) {
            char allowed[64];
            snprintf(allowed, sizeof allowed, "a token id, an integer in [0, %d]", c->lim->vocab - 1);
            gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt", "%s[%zu]: got %s; allowed: %s", name, i,
                             kind_of(t), allowed);
            return false;
        }
        long long id = json_integer_value(t);
        if (id < 0 || id >= c->lim->vocab) {
            gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt",
                             "%s[%zu]: token %lld is outside the vocabulary; allowed: [0, %d]", name, i, id,
                             c->lim->vocab - 1);
            return false;
        }
        ids[i] = (int32_t)id;
    }
    c->out->n_prompt_ids = (int)n;
    return true;
}

static bool parse_prompt(parse_ctx *c)
{
    static const char allowed[] = "a non-empty string, or a non-empty array of token ids (one prompt per request)";
    json_t *p = field(c, "prompt");
    if (!p) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt", "prompt: missing; allowed: %s", allowed);
        return false;
    }
    const char *name = "prompt";
    /* A batch of one ("prompt": ["text"] or [[ids]]) is that prompt. */
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        p = json_array_get(p, 0);
        name = "prompt[0]";
    }
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) {
            gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt", "%s: the string is empty; allowed: %s", name,
                             allowed);
            return false;
        }
        c->out->prompt_text = json_string_value(p);
        c->out->prompt_len = json_string_length(p);
        return true;
    }
    if (!json_is_array(p))
        return bad_type(c, "prompt", p, allowed);
    size_t n = json_array_size(p);
    if (n == 0) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt", "%s: the array is empty; allowed: %s", name,
                         allowed);
        return false;
    }
    json_t *first = json_array_get(p, 0);
    if (json_is_string(first) || json_is_array(first)) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, "prompt",
                         "prompt: an array of %zu %s is %zu prompts; allowed: %s", n,
                         json_is_string(first) ? "strings" : "arrays", n, allowed);
        return false;
    }
    return parse_prompt_ids(c, p, name);
}

static bool parse_messages(parse_ctx *c)
{
    json_t *m = json_object_get(c->root, "messages");
    gp_clear_error();
    if (gp_chat_messages_from_json(m, &c->out->messages, &c->out->n_messages) == GP_OK)
        return true;
    /* The chat library's message opens with the path it names
     * ("messages[2].role: ..."): that path is the param. */
    const char *msg = gp_last_error();
    char param[64] = "messages";
    size_t k = strcspn(msg, ":");
    if (strncmp(msg, "messages", 8) == 0 && msg[k] == ':' && k < sizeof param)
        snprintf(param, sizeof param, "%.*s", (int)k, msg);
    gp_api_error_set(c->err, BAD_REQUEST, INVALID, param, "%s", msg);
    return false;
}

static bool parse_body(parse_ctx *c, const char *body, size_t len)
{
    if (len == 0) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, NULL, "the body is empty; allowed: a JSON object");
        return false;
    }
    /* jansson skips a NUL byte after a value instead of refusing it. */
    const char *nul = memchr(body, '\0', len);
    if (nul) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, NULL,
                         "the body holds a NUL byte at offset %zu; allowed: JSON text", (size_t)(nul - body));
        return false;
    }
    json_error_t je;
    c->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!c->root) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, NULL, "invalid JSON at line %d column %d: %s", je.line,
                         je.column, je.text);
        return false;
    }
    c->out->json = c->root;
    if (!json_is_object(c->root)) {
        gp_api_error_set(c->err, BAD_REQUEST, INVALID, NULL, "the body is %s; allowed: a JSON object",
                         kind_of(c->root));
        return false;
    }
    return true;
}

gp_status gp_api_parse(gp_api_kind kind, const char *body, size_t len, const gp_api_limits *lim,
                       gp_api_request *out, gp_api_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->sample.temperature = 1.0;
    out->sample.top_p = 1.0;
    parse_ctx c = {.lim = lim, .out = out, .err = err};
    if (kind != GP_API_COMPLETION && kind != GP_API_CHAT) {
        gp_api_error_set(err, 500, "server_error", NULL, "gp_api_parse: kind %d; allowed: completion or chat",
                         (int)kind);
        GP_FAIL(GP_ERR_INVALID_ARG, "%s", err->message);
    }
    bool ok = parse_body(&c, body ? body : "", body ? len : 0) && parse_model(&c) &&
              (kind == GP_API_CHAT ? parse_messages(&c) : parse_prompt(&c)) && parse_max_tokens(&c) &&
              parse_sampling(&c) && parse_stops(&c) && parse_stream(&c) && parse_unsupported(&c) &&
              get_bool(&c, c.root, "ignore_eos", "ignore_eos", &out->ignore_eos) &&
              get_bool(&c, c.root, "return_token_ids", "return_token_ids", &out->return_token_ids);
    if (ok)
        return GP_OK;
    gp_api_request_free(out);
    gp_set_error("%s", err->message);
    return err->status == 500 ? GP_ERR_NO_MEMORY : GP_ERR_INVALID_ARG;
}

void gp_api_request_free(gp_api_request *r)
{
    if (!r)
        return;
    free(r->prompt_ids);
    free(r->messages);
    free(r->stops);
    json_decref((json_t *)r->json);
    memset(r, 0, sizeof *r);
}
