/* greenpipe's OpenAI-compatible HTTP front: request bodies parsed and
 * checked into generation requests, responses and server-sent-event chunks
 * formatted, and the server (libmicrohttpd) that routes them to a serving
 * core. */
#ifndef GP_HTTP_H
#define GP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_chat.h"
#include "gp_common.h"
#include "gp_serve.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ requests */

typedef enum gp_api_kind { GP_API_COMPLETION = 0, GP_API_CHAT = 1 } gp_api_kind;

/* An OpenAI-style error object and the HTTP status it goes with. */
typedef struct gp_api_error {
    int status;         /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type;   /* "invalid_request_error", "authentication_error", "not_found_error",
                           "rate_limit_error", "server_error", ... */
    char param[64];     /* the offending field ("max_tokens", "messages[2].role"); "" when none */
    char message[512];  /* names the bad value and what is allowed */
} gp_api_error;
/* {"error": {"message", "type", "param" (null when none), "code" (the status)}}; malloc'd. */
char *gp_api_error_json(const gp_api_error *e);
void gp_api_error_set(gp_api_error *e, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* What a body is checked against before any work. */
typedef struct gp_api_limits {
    const char *model;  /* the served model's id: any other "model" is a 400 (NULL: any name) */
    int vocab;          /* token ids in prompts lie in [0, vocab) */
    int max_context;    /* max_tokens <= max_context - 1 (the prompt's own length is the core's check) */
    int max_stops;      /* most stop strings (default 16) */
} gp_api_limits;

/* A parsed /v1/completions or /v1/chat/completions body. Unknown fields are
 * ignored as OpenAI does; known fields of the wrong type or range are 400s,
 * and a known field given as null counts as not given. Every string points
 * into json, which the request owns. */
typedef struct gp_api_request {
    gp_api_kind kind;
    /* completions: the prompt as text or as token ids (exactly one set); a
     * one-element array (["text"] or [[ids]]) is that one prompt */
    const char *prompt_text;
    size_t prompt_len;
    int32_t *prompt_ids;
    int n_prompt_ids;
    /* chat: the messages */
    gp_chat_msg *messages;
    size_t n_messages;
    int max_tokens;        /* chat: max_completion_tokens, else max_tokens, else 0 (up to the context's
                              end); completions: max_tokens, else OpenAI's default of 16 */
    gp_sample_params sample; /* temperature default 1 as OpenAI; top_p 1; top_k 0 (vLLM's field); min_p 0 */
    uint64_t seed;
    bool seed_given;
    const char **stops;    /* "stop": a string or an array of strings, each non-empty */
    int n_stops;
    bool stream;
    bool include_usage;    /* stream_options.include_usage: a last chunk with usage and no choices */
    bool ignore_eos;       /* vLLM's extension */
    bool return_token_ids; /* vLLM's extension: each choice also carries "token_ids", the ids generated */
    void *json;            /* the parsed body (json_t *), owned */
} gp_api_request;
#define GP_API_COMPLETION_DEFAULT_MAX_TOKENS 16

/* Parse and check body[len] of kind against lim. GP_OK, or GP_ERR_INVALID_ARG
 * with err filled (status 400: malformed JSON, wrong types, unknown model,
 * max_tokens beyond the context, out-of-range sampling values, n != 1, ...;
 * the table is docs/RELIABILITY.md's), or GP_ERR_NO_MEMORY (status 500);
 * gp_last_error() holds err's message too. On failure out holds nothing. */
gp_status gp_api_parse(gp_api_kind kind, const char *body, size_t len, const gp_api_limits *lim,
                       gp_api_request *out, gp_api_error *err);
void gp_api_request_free(gp_api_request *r);

/* ------------------------------------------------------------ responses (malloc'd JSON text) */
/* Text of any bytes is accepted: invalid UTF-8 becomes U+FFFD (JSON must be
 * UTF-8). NULL only when out of memory. ids (may be NULL): the choice also
 * carries "token_ids" (vLLM's return_token_ids), the ids the text came from
 * (a model without a tokenizer streams ids alone). */
typedef struct gp_api_ids {
    const int32_t *ids;
    int n;
} gp_api_ids;

/* A whole (non-streamed) response: "text_completion" with choices[0].text, or
 * "chat.completion" with choices[0].message {role: assistant, content}. */
char *gp_api_response_json(gp_api_kind kind, const char *id, const char *model, long long created,
                           const char *text, size_t len, const char *finish_reason, const gp_serve_usage *u,
                           const gp_api_ids *ids);
/* One stream chunk ("text_completion" / "chat.completion.chunk"): the text
 * delta (chat: the first chunk's delta also has role "assistant"; a later
 * empty delta is {}), finish_reason NULL while running, and "usage" where u
 * is not NULL. text NULL: the chunk that stream_options.include_usage asks
 * for after the last one, "choices": [] and usage u. */
char *gp_api_chunk_json(gp_api_kind kind, const char *id, const char *model, long long created, bool first,
                        const char *text, size_t len, const char *finish_reason, const gp_serve_usage *u,
                        const gp_api_ids *ids);
/* GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by": "greenpipe",
 * "max_model_len", "vocab_size"}]} (vocab_size: the ids a token-id prompt may hold, for load generators). */
char *gp_api_models_json(const char *model, long long created, int max_context, int vocab);
/* GET /metrics in Prometheus' text format (version 0.0.4), names prefixed
 * "greenpipe:" and labelled model_name as vLLM's (Content-Type
 * "text/plain; version=0.0.4; charset=utf-8"). Histogram bounds are taken up
 * to the first that is not above the one before (or not above 0). */
char *gp_api_metrics_text(const gp_serve_stats *st, const char *model);

/* ------------------------------------------------------------ server */

typedef struct gp_http_params {
    const char *host;      /* address to bind; default "127.0.0.1" */
    int port;              /* default 8000; 0: an ephemeral port (gp_http_port tells which) */
    const char *api_key;   /* NULL (default): no authentication; else "Authorization: Bearer KEY" on /v1/ */
    size_t max_body;       /* request body bytes at most (413 beyond); default 4 MiB */
    int timeout_s;         /* a connection idle this long (a slow or half-sent request) is closed; default 30 */
    int max_connections;   /* default 1024 */
} gp_http_params;
gp_http_params gp_http_default_params(void);

typedef struct gp_http gp_http; /* opaque */
/* Listen at once: /health answers 503 and /v1/ routes 503 until a core is set. */
gp_status gp_http_start(const gp_http_params *p, gp_http **out);
int gp_http_port(const gp_http *h);
/* The core that serves from now on (borrowed until gp_http_stop). */
void gp_http_set_core(gp_http *h, gp_serve *core);
/* Stop listening, end every connection (their requests cancelled). NULL is fine. */
void gp_http_stop(gp_http *h);

#ifdef __cplusplus
}
#endif
#endif
