/* libFuzzer target for gp_api_parse: the first byte picks the endpoint (low
 * bit 1, as in 'c': /v1/chat/completions; 0, as in 'p': /v1/completions),
 * the rest is the request body. A refusal must be a 400 naming what was
 * wrong, with an error object that is valid JSON; a request that parses
 * must hold only values the serving core accepts, and its text must make a
 * response that is valid JSON. */
#include <jansson.h>
#include <string.h>

#include "fuzz_target.h"
#include "gp_http.h"

static const gp_api_limits lim = {.model = "tiny", .vocab = 256, .max_context = 128, .max_stops = 4};

/* s must be text that jansson reads back (any bytes went in). */
static void check_json(char *s, const char *what)
{
    FUZZ_REQUIRE(s != NULL, "%s: no JSON text", what);
    json_error_t je;
    json_t *o = json_loads(s, JSON_ALLOW_NUL, &je);
    FUZZ_REQUIRE(o != NULL, "%s is not JSON (%s): %s", what, je.text, s);
    json_decref(o);
    free(s);
}

static void check_refusal(gp_status s, const gp_api_error *e, const gp_api_request *r)
{
    fuzz_check_failure(s, "gp_api_parse");
    FUZZ_REQUIRE(s == GP_ERR_INVALID_ARG || s == GP_ERR_NO_MEMORY, "status %d", (int)s);
    FUZZ_REQUIRE(e->status == (s == GP_ERR_INVALID_ARG ? 400 : 500), "HTTP status %d for %s", e->status,
                 gp_status_str(s));
    FUZZ_REQUIRE(e->type && e->message[0], "an error without a type or message");
    FUZZ_REQUIRE(strcmp(e->message, gp_last_error()) == 0, "message '%s' is not gp_last_error()", e->message);
    FUZZ_REQUIRE(!r->json && !r->prompt_ids && !r->messages && !r->stops, "a refused request kept memory");
    check_json(gp_api_error_json(e), "the error object");
}

static void check_request(const gp_api_request *r, gp_api_kind kind)
{
    FUZZ_REQUIRE(r->kind == kind, "kind %d", (int)r->kind);
    const char *text = NULL;
    size_t len = 0;
    if (kind == GP_API_CHAT) {
        FUZZ_REQUIRE(r->n_messages >= 1 && r->messages, "%zu messages", r->n_messages);
        FUZZ_REQUIRE(!r->prompt_text && !r->prompt_ids, "a chat with a prompt");
        text = r->messages[r->n_messages - 1].content;
        len = r->messages[r->n_messages - 1].len;
    } else {
        FUZZ_REQUIRE((r->prompt_text != NULL) != (r->prompt_ids != NULL), "not exactly one prompt form");
        FUZZ_REQUIRE(r->prompt_text ? r->prompt_len > 0 : r->n_prompt_ids > 0, "an empty prompt");
        for (int i = 0; i < r->n_prompt_ids; i++)
            FUZZ_REQUIRE(r->prompt_ids[i] >= 0 && r->prompt_ids[i] < lim.vocab, "token %d", (int)r->prompt_ids[i]);
        text = r->prompt_text;
        len = r->prompt_len;
    }
    FUZZ_REQUIRE(r->max_tokens >= 0 && r->max_tokens <= lim.max_context - 1, "max_tokens %d", r->max_tokens);
    const gp_sample_params *p = &r->sample;
    FUZZ_REQUIRE(p->temperature >= 0 && p->temperature <= GP_SAMPLE_MAX_TEMPERATURE, "temperature %g",
                 p->temperature);
    FUZZ_REQUIRE(p->top_p > 0 && p->top_p <= 1, "top_p %g", p->top_p);
    FUZZ_REQUIRE(p->top_k >= 0 && p->top_k <= lim.vocab, "top_k %d", p->top_k);
    FUZZ_REQUIRE(p->min_p >= 0 && p->min_p <= 1, "min_p %g", p->min_p);
    FUZZ_REQUIRE(r->n_stops >= 0 && r->n_stops <= lim.max_stops, "%d stops", r->n_stops);
    for (int i = 0; i < r->n_stops; i++)
        FUZZ_REQUIRE(r->stops[i] && r->stops[i][0], "stop %d is empty", i);
    FUZZ_REQUIRE(!r->include_usage || r->stream, "include_usage without stream");
    gp_serve_usage u = {1, 1, 0};
    if (text)
        check_json(gp_api_response_json(kind, "cmpl-fuzz", lim.model, 0, text, len, "stop", &u, NULL), "the response");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    gp_api_kind kind = (data[0] & 1) ? GP_API_CHAT : GP_API_COMPLETION;
    /* Any bytes as generated text, as a tokenizer's pieces can be. */
    check_json(gp_api_chunk_json(kind, "cmpl-fuzz", lim.model, 0, true, (const char *)data, size, NULL, NULL, NULL),
               "a chunk of the input's bytes");
    gp_api_request r;
    gp_api_error e;
    gp_clear_error();
    gp_status s = gp_api_parse(kind, (const char *)data + 1, size - 1, &lim, &r, &e);
    if (s != GP_OK) {
        check_refusal(s, &e, &r);
        return 0;
    }
    FUZZ_REQUIRE(memchr(data + 1, '\0', size - 1) == NULL, "accepted a body with a NUL byte");
    check_request(&r, kind);
    gp_api_request_free(&r);
    return 0;
}
