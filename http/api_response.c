/* OpenAI-shaped JSON out: error objects, whole responses, stream chunks and
 * the model list, built with jansson. */
#include "api_impl.h"
#include "gp_http.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gp_api_error_set(gp_api_error *e, int status, const char *type, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* A JSON string of s[len], whatever its bytes: invalid UTF-8 is replaced by
 * U+FFFD first, since json_stringn refuses it (it would return NULL and the
 * whole response would be lost). NULL only when out of memory. */
static json_t *text_json(const char *s, size_t len)
{
    size_t n;
    char *fixed = gp_api_utf8_fix(s ? s : "", s ? len : 0, &n);
    if (!fixed)
        return NULL;
    json_t *v = json_stringn(fixed, n);
    free(fixed);
    return v;
}

static json_t *str_or_null(const char *s)
{
    return s ? text_json(s, strlen(s)) : json_null();
}

/* The object to text; NULL when it or any part of it failed (out of
 * memory: json_pack and the setters take NULL values as failures). */
static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}

char *gp_api_error_json(const gp_api_error *e)
{
    return dump(json_pack("{s:{s:o, s:o, s:o, s:i}}", "error", "message", text_json(e->message, strlen(e->message)),
                          "type", str_or_null(e->type ? e->type : "server_error"), "param",
                          e->param[0] ? text_json(e->param, strlen(e->param)) : json_null(), "code", e->status));
}

static json_t *usage_json(const gp_serve_usage *u)
{
    if (!u)
        return json_null();
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens, "completion_tokens",
                     u->completion_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", u->cached_tokens);
}

/* The fields every response and chunk opens with. */
static json_t *head_json(const char *id, const char *object, const char *model, long long created)
{
    return json_pack("{s:o, s:s, s:I, s:o}", "id", str_or_null(id), "object", object, "created",
                     (json_int_t)created, "model", str_or_null(model));
}

/* One choice: {"index": 0, key: content, "logprobs": null, "finish_reason"},
 * and "token_ids" with ids. */
static json_t *choice_json(const char *key, json_t *content, const char *finish_reason, const gp_api_ids *ids)
{
    json_t *c = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, key, content, "logprobs", "finish_reason",
                          str_or_null(finish_reason));
    if (c && ids) {
        json_t *a = json_array();
        for (int i = 0; a && i < ids->n; i++)
            if (json_array_append_new(a, json_integer(ids->ids[i])) != 0) {
                json_decref(a);
                a = NULL;
            }
        if (json_object_set_new(c, "token_ids", a) != 0) {
            json_decref(c);
            c = NULL;
        }
    }
    return c;
}

char *gp_api_response_json(gp_api_kind kind, const char *id, const char *model, long long created,
                           const char *text, size_t len, const char *finish_reason, const gp_serve_usage *u,
                           const gp_api_ids *ids)
{
    bool chat = kind == GP_API_CHAT;
    json_t *o = head_json(id, chat ? "chat.completion" : "text_completion", model, created);
    json_t *content = chat ? json_pack("{s:s, s:o}", "role", "assistant", "content", text_json(text, len))
                           : text_json(text, len);
    json_t *choice = choice_json(chat ? "message" : "text", content, finish_reason, ids);
    if (!o || json_object_set_new(o, "choices", json_pack("[o]", choice)) != 0 ||
        json_object_set_new(o, "usage", usage_json(u)) != 0) {
        json_decref(o);
        return NULL;
    }
    return dump(o);
}

char *gp_api_chunk_json(gp_api_kind kind, const char *id, const char *model, long long created, bool first,
                        const char *text, size_t len, const char *finish_reason, const gp_serve_usage *u,
                        const gp_api_ids *ids)
{
    bool chat = kind == GP_API_CHAT;
    json_t *o = head_json(id, chat ? "chat.completion.chunk" : "text_completion", model, created);
    json_t *choices;
    if (!text) {
        choices = json_array();
    } else if (chat) {
        json_t *delta = json_object();
        if (delta && ((first && json_object_set_new(delta, "role", json_string("assistant")) != 0) ||
                      ((first || len > 0) && json_object_set_new(delta, "content", text_json(text, len)) != 0))) {
            json_decref(delta);
            delta = NULL;
        }
        choices = json_pack("[o]", choice_json("delta", delta, finish_reason, ids));
    } else {
        choices = json_pack("[o]", choice_json("text", text_json(text, len), finish_reason, ids));
    }
    if (!o || json_object_set_new(o, "choices", choices) != 0 ||
        (u && json_object_set_new(o, "usage", usage_json(u)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return dump(o);
}

char *gp_api_models_json(const char *model, long long created, int max_context, int vocab)
{
    return dump(json_pack("{s:s, s:[{s:o, s:s, s:I, s:s, s:i, s:i}]}", "object", "list", "data", "id",
                          str_or_null(model), "object", "model", "created", (json_int_t)created, "owned_by",
                          "greenpipe", "max_model_len", max_context, "vocab_size", vocab));
}
