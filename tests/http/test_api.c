/* The OpenAI request parser and response formatter: every class of bad
 * request (status, param, message), good requests of both kinds, and each
 * response, chunk, model list and metrics text parsed back. */
#include "gp_test.h"

#include <jansson.h>

#include "api_impl.h"
#include "gp_http.h"

static const gp_api_limits lim = {.model = "tiny", .vocab = 256, .max_context = 128, .max_stops = 4};

/* body must be refused with 400, param (NULL: none) and every needle in
 * the message, and its error object must carry the same. */
static void expect_bad_kind(gp_api_kind kind, const char *body, const char *param, const char *n1, const char *n2)
{
    gp_api_request r;
    gp_api_error e;
    gp_status s = gp_api_parse(kind, body, strlen(body), &lim, &r, &e);
    if (s != GP_ERR_INVALID_ARG)
        fail_msg("%s: status %s, expected a refusal", body, gp_status_str(s));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    if (strcmp(e.param, param ? param : "") != 0)
        fail_msg("%s: param '%s', expected '%s' (%s)", body, e.param, param ? param : "", e.message);
    if (!strstr(e.message, n1) || (n2 && !strstr(e.message, n2)))
        fail_msg("%s: message '%s' lacks '%s' or '%s'", body, e.message, n1, n2 ? n2 : "");
    assert_string_equal(gp_last_error(), e.message);
    assert_null(r.json);

    char *js = gp_api_error_json(&e);
    assert_non_null(js);
    json_error_t je;
    json_t *o = json_loads(js, 0, &je);
    assert_non_null(o);
    json_t *err = json_object_get(o, "error");
    assert_true(json_is_object(err));
    assert_string_equal(json_string_value(json_object_get(err, "message")), e.message);
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    assert_int_equal(json_integer_value(json_object_get(err, "code")), 400);
    json_t *p = json_object_get(err, "param");
    if (param)
        assert_string_equal(json_string_value(p), param);
    else
        assert_true(json_is_null(p));
    json_decref(o);
    free(js);
}

static void expect_bad(const char *body, const char *param, const char *n1, const char *n2)
{
    expect_bad_kind(GP_API_COMPLETION, body, param, n1, n2);
}

static void expect_bad_chat(const char *body, const char *param, const char *n1, const char *n2)
{
    expect_bad_kind(GP_API_CHAT, body, param, n1, n2);
}

static void parse_ok(gp_api_kind kind, const char *body, gp_api_request *r)
{
    gp_api_error e;
    gp_status s = gp_api_parse(kind, body, strlen(body), &lim, r, &e);
    if (s != GP_OK)
        fail_msg("%s: refused: %d %s (param '%s')", body, e.status, e.message, e.param);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_bad("", NULL, "the body is empty", "a JSON object");
    expect_bad("{\"prompt\": \"hi\",", NULL, "invalid JSON at line 1 column", NULL);
    expect_bad("{\"prompt\":\n \"hi\" \"x\"}", NULL, "invalid JSON at line 2 column", NULL);
    expect_bad("[1, 2]", NULL, "the body is an array", "allowed: a JSON object");
    expect_bad("\"text\"", NULL, "the body is a string", NULL);
    expect_bad("{\"prompt\": \"a\", \"prompt\": \"b\"}", NULL, "invalid JSON", "duplicate");
    expect_bad("{\"prompt\": \"\xff\"}", NULL, "invalid JSON", NULL);
    expect_bad("{\"prompt\": \"a\\u0000b\"}", NULL, "invalid JSON", NULL);
    static const char nul_body[] = "{\"prompt\": \"hi\"}\0";
    gp_api_request r;
    gp_api_error e;
    assert_int_equal(gp_api_parse(GP_API_COMPLETION, nul_body, sizeof nul_body - 1, &lim, &r, &e),
                     GP_ERR_INVALID_ARG);
    assert_non_null(strstr(e.message, "NUL byte at offset 16"));
    assert_int_equal(gp_api_parse(GP_API_COMPLETION, NULL, 0, &lim, &r, &e), GP_ERR_INVALID_ARG);
}

static void test_prompt(void **state)
{
    (void)state;
    expect_bad("{}", "prompt", "prompt: missing", "one prompt per request");
    expect_bad("{\"prompt\": null}", "prompt", "prompt: missing", NULL);
    expect_bad("{\"prompt\": 5}", "prompt", "prompt: got an integer", "array of token ids");
    expect_bad("{\"prompt\": \"\"}", "prompt", "prompt: the string is empty", NULL);
    expect_bad("{\"prompt\": []}", "prompt", "prompt: the array is empty", NULL);
    expect_bad("{\"prompt\": [\"a\", \"b\"]}", "prompt", "array of 2 strings is 2 prompts", "one prompt per request");
    expect_bad("{\"prompt\": [[1], [2], [3]]}", "prompt", "array of 3 arrays is 3 prompts", NULL);
    expect_bad("{\"prompt\": [1, \"a\"]}", "prompt", "prompt[1]: got a string", "[0, 255]");
    expect_bad("{\"prompt\": [1, 2.5]}", "prompt", "prompt[1]: got a number", NULL);
    expect_bad("{\"prompt\": [1, 256]}", "prompt", "token 256 is outside the vocabulary", "[0, 255]");
    expect_bad("{\"prompt\": [-1]}", "prompt", "prompt[0]: token -1 is outside", NULL);
    expect_bad("{\"prompt\": [[7, 300]]}", "prompt", "prompt[0][1]: token 300", NULL);
    expect_bad("{\"prompt\": [\"\"]}", "prompt", "prompt[0]: the string is empty", NULL);
}

static void test_fields(void **state)
{
    (void)state;
    expect_bad("{\"prompt\": \"hi\", \"model\": \"gpt-4\"}", "model", "'gpt-4' is not served here", "'tiny'");
    expect_bad("{\"prompt\": \"hi\", \"model\": 3}", "model", "model: got an integer", NULL);
    expect_bad("{\"prompt\": \"hi\", \"max_tokens\": 128}", "max_tokens", "128 is out of range", "[1, 127]");
    expect_bad("{\"prompt\": \"hi\", \"max_tokens\": 0}", "max_tokens", "0 is out of range", "[1, 127]");
    expect_bad("{\"prompt\": \"hi\", \"max_tokens\": -5}", "max_tokens", "-5 is out of range", NULL);
    expect_bad("{\"prompt\": \"hi\", \"max_tokens\": \"10\"}", "max_tokens", "max_tokens: got a string",
               "an integer in [1, 127]");
    expect_bad("{\"prompt\": \"hi\", \"max_tokens\": 1.5}", "max_tokens", "got a number with a fraction", NULL);
    expect_bad("{\"prompt\": \"hi\", \"temperature\": -0.5}", "temperature", "temperature: -0.5 is out of range",
               "[0, 100] (0: greedy)");
    expect_bad("{\"prompt\": \"hi\", \"temperature\": 101}", "temperature", "101 is out of range", NULL);
    expect_bad("{\"prompt\": \"hi\", \"temperature\": \"hot\"}", "temperature", "temperature: got a string",
               "a number in [0, 100]");
    expect_bad("{\"prompt\": \"hi\", \"temperature\": 1e999}", NULL, "invalid JSON", NULL);
    expect_bad("{\"prompt\": \"hi\", \"top_p\": 0}", "top_p", "top_p: 0 is out of range", "(0, 1]");
    expect_bad("{\"prompt\": \"hi\", \"top_p\": 1.01}", "top_p", "1.01 is out of range", NULL);
    expect_bad("{\"prompt\": \"hi\", \"top_k\": -2}", "top_k", "top_k: -2 is out of range",
               "-1 or 0 (off), or an integer in [1, 256]");
    expect_bad("{\"prompt\": \"hi\", \"top_k\": 257}", "top_k", "257 is out of range", NULL);
    expect_bad("{\"prompt\": \"hi\", \"top_k\": 2.0}", "top_k", "top_k: got a number", NULL);
    expect_bad("{\"prompt\": \"hi\", \"min_p\": 1.5}", "min_p", "min_p: 1.5 is out of range", "[0, 1]");
    expect_bad("{\"prompt\": \"hi\", \"seed\": \"7\"}", "seed", "seed: got a string", "an integer");
    expect_bad("{\"prompt\": \"hi\", \"seed\": 1.5}", "seed", "seed: got a number", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stream\": \"yes\"}", "stream", "stream: got a string", "true or false");
    expect_bad("{\"prompt\": \"hi\", \"stream\": true, \"stream_options\": []}", "stream_options",
               "stream_options: got an array", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stream_options\": {\"include_usage\": true}}", "stream_options",
               "without \"stream\": true", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
               "stream_options.include_usage", "stream_options.include_usage: got an integer", NULL);
    expect_bad("{\"prompt\": \"hi\", \"ignore_eos\": 1}", "ignore_eos", "ignore_eos: got an integer", NULL);
}

static void test_stops(void **state)
{
    (void)state;
    expect_bad("{\"prompt\": \"hi\", \"stop\": 5}", "stop", "stop: got an integer",
               "at most 4 non-empty strings");
    expect_bad("{\"prompt\": \"hi\", \"stop\": \"\"}", "stop", "stop: the string is empty", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stop\": [\"a\", \"\"]}", "stop[1]", "stop[1]: the string is empty", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stop\": [\"a\", 3]}", "stop[1]", "stop[1]: got an integer", NULL);
    expect_bad("{\"prompt\": \"hi\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", "stop", "stop: 5 strings",
               "at most 4");
}

static void test_unsupported(void **state)
{
    (void)state;
    expect_bad("{\"prompt\": \"hi\", \"n\": 2}", "n", "n: 2 is out of range", "1 (one choice per request)");
    expect_bad("{\"prompt\": \"hi\", \"best_of\": 3}", "best_of", "best_of: 3 is out of range", NULL);
    expect_bad("{\"prompt\": \"hi\", \"echo\": true}", "echo", "echo: true is not supported", "false");
    expect_bad("{\"prompt\": \"hi\", \"logprobs\": 2}", "logprobs", "logprobs: an integer is not supported",
               "null or false");
    expect_bad("{\"prompt\": \"hi\", \"logprobs\": true}", "logprobs", "logprobs: a boolean is not supported",
               NULL);
    expect_bad("{\"prompt\": \"hi\", \"presence_penalty\": 0.5}", "presence_penalty",
               "presence_penalty: 0.5 is not supported", "allowed: 0");
    expect_bad("{\"prompt\": \"hi\", \"frequency_penalty\": -1}", "frequency_penalty",
               "frequency_penalty: -1 is not supported", NULL);
    expect_bad("{\"prompt\": \"hi\", \"frequency_penalty\": \"x\"}", "frequency_penalty", "got a string", NULL);
    expect_bad("{\"prompt\": \"hi\", \"presence_penalty\": 3}", "presence_penalty",
               "presence_penalty: 3 is not supported", NULL);
    expect_bad("{\"prompt\": \"hi\", \"logit_bias\": {\"5\": 10}}", "logit_bias",
               "logit_bias: a non-empty object is not supported", NULL);
}

static void test_chat_bad(void **state)
{
    (void)state;
    expect_bad_chat("{}", "messages", "messages: missing", NULL);
    expect_bad_chat("{\"messages\": \"hi\"}", "messages", "messages: a string", NULL);
    expect_bad_chat("{\"messages\": []}", "messages", "the array is empty", NULL);
    expect_bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", "
                    "\"content\": \"b\"}]}",
                    "messages[1].role", "messages[1].role: 'tool' is not supported", "\"assistant\"");
    expect_bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
                    "messages[0].content", "messages[0].content: an array", NULL);
    expect_bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_completion_tokens\": 500}",
                    "max_completion_tokens", "max_completion_tokens: 500 is out of range", "[1, 127]");
    expect_bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"temperature\": -1}",
                    "temperature", "temperature: -1 is out of range", NULL);
    expect_bad_chat("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"model\": \"x\"}", "model",
                    "'x' is not served here", NULL);
}

static void test_completion_ok(void **state)
{
    (void)state;
    gp_api_request r;
    parse_ok(GP_API_COMPLETION, "{\"prompt\": \"Hello\"}", &r);
    assert_int_equal(r.kind, GP_API_COMPLETION);
    assert_int_equal(r.prompt_len, 5);
    assert_memory_equal(r.prompt_text, "Hello", 5);
    assert_null(r.prompt_ids);
    assert_int_equal(r.max_tokens, GP_API_COMPLETION_DEFAULT_MAX_TOKENS);
    assert_true(r.sample.temperature == 1.0 && r.sample.top_p == 1.0 && r.sample.top_k == 0 &&
                r.sample.min_p == 0.0);
    assert_false(r.seed_given || r.stream || r.include_usage || r.ignore_eos);
    assert_int_equal(r.n_stops, 0);
    gp_api_request_free(&r);
    assert_null(r.json);

    parse_ok(GP_API_COMPLETION,
             "{\"model\": \"tiny\", \"prompt\": [1, 2, 255], \"max_tokens\": 127, \"temperature\": 0, "
             "\"top_p\": 0.9, \"top_k\": -1, \"min_p\": 0.05, \"seed\": -1, \"stop\": [\"\\n\", \"END\"], "
             "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true, \"n\": 1, "
             "\"echo\": false, \"logprobs\": null, \"best_of\": 1, \"presence_penalty\": 0, "
             "\"frequency_penalty\": 0.0, \"user\": 42, \"logit_bias\": {}, \"suffix\": null, "
             "\"unknown_field\": {\"x\": [1]}}",
             &r);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[0], 1);
    assert_int_equal(r.prompt_ids[2], 255);
    assert_null(r.prompt_text);
    assert_int_equal(r.max_tokens, 127);
    assert_true(r.sample.temperature == 0.0 && r.sample.top_p == 0.9 && r.sample.top_k == 0 &&
                r.sample.min_p == 0.05);
    assert_true(r.seed_given);
    assert_true(r.seed == UINT64_MAX);
    assert_int_equal(r.n_stops, 2);
    assert_string_equal(r.stops[0], "\n");
    assert_string_equal(r.stops[1], "END");
    assert_true(r.stream && r.include_usage && r.ignore_eos);
    gp_api_request_free(&r);

    /* One-element batches, a single stop string, nulls as absent, top_k on. */
    parse_ok(GP_API_COMPLETION,
             "{\"prompt\": [\"Hi\"], \"stop\": \"x\", \"max_tokens\": null, \"temperature\": null, "
             "\"top_k\": 40, \"stream\": false}",
             &r);
    assert_int_equal(r.prompt_len, 2);
    assert_int_equal(r.n_stops, 1);
    assert_string_equal(r.stops[0], "x");
    assert_int_equal(r.max_tokens, GP_API_COMPLETION_DEFAULT_MAX_TOKENS);
    assert_true(r.sample.temperature == 1.0);
    assert_int_equal(r.sample.top_k, 40);
    gp_api_request_free(&r);
    parse_ok(GP_API_COMPLETION, "{\"prompt\": [[9, 8]], \"stop\": []}", &r);
    assert_int_equal(r.n_prompt_ids, 2);
    assert_int_equal(r.prompt_ids[1], 8);
    assert_int_equal(r.n_stops, 0);
    gp_api_request_free(&r);
    gp_api_request_free(NULL);
}

static void test_chat_ok(void **state)
{
    (void)state;
    gp_api_request r;
    parse_ok(GP_API_CHAT,
             "{\"model\": \"tiny\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
             "{\"role\": \"user\", \"content\": \"Hi\"}], \"stream\": true}",
             &r);
    assert_int_equal(r.kind, GP_API_CHAT);
    assert_int_equal(r.n_messages, 2);
    assert_int_equal(r.messages[0].role, GP_CHAT_SYSTEM);
    assert_int_equal(r.messages[1].role, GP_CHAT_USER);
    assert_int_equal(r.messages[1].len, 2);
    assert_memory_equal(r.messages[1].content, "Hi", 2);
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.stream);
    assert_null(r.prompt_text);
    assert_null(r.prompt_ids);
    gp_api_request_free(&r);

    /* max_completion_tokens wins over max_tokens, as in vLLM. */
    parse_ok(GP_API_CHAT,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_tokens\": 5, "
             "\"max_completion_tokens\": 7}",
             &r);
    assert_int_equal(r.max_tokens, 7);
    gp_api_request_free(&r);
    parse_ok(GP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_tokens\": 5}", &r);
    assert_int_equal(r.max_tokens, 5);
    gp_api_request_free(&r);
}

static json_t *load(char *text)
{
    assert_non_null(text);
    json_error_t je;
    json_t *o = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!o)
        fail_msg("not JSON (%s): %s", je.text, text);
    free(text);
    return o;
}

static void check_head(json_t *o, const char *id, const char *object)
{
    assert_string_equal(json_string_value(json_object_get(o, "id")), id);
    assert_string_equal(json_string_value(json_object_get(o, "object")), object);
    assert_int_equal(json_integer_value(json_object_get(o, "created")), 1700000000);
    assert_string_equal(json_string_value(json_object_get(o, "model")), "tiny");
}

static json_t *choice0(json_t *o)
{
    json_t *c = json_object_get(o, "choices");
    assert_int_equal(json_array_size(c), 1);
    json_t *ch = json_array_get(c, 0);
    assert_int_equal(json_integer_value(json_object_get(ch, "index")), 0);
    assert_true(json_is_null(json_object_get(ch, "logprobs")));
    return ch;
}

static void check_usage(json_t *u, int p, int c, int cached)
{
    assert_true(json_is_object(u));
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), p);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), c);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), p + c);
    json_t *d = json_object_get(u, "prompt_tokens_details");
    assert_int_equal(json_integer_value(json_object_get(d, "cached_tokens")), cached);
}

static void test_responses(void **state)
{
    (void)state;
    const gp_serve_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2};
    json_t *o = load(gp_api_response_json(GP_API_COMPLETION, "cmpl-1", "tiny", 1700000000, "abc", 3, "length", &u, NULL));
    check_head(o, "cmpl-1", "text_completion");
    json_t *ch = choice0(o);
    assert_string_equal(json_string_value(json_object_get(ch, "text")), "abc");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    check_usage(json_object_get(o, "usage"), 5, 3, 2);
    json_decref(o);

    o = load(gp_api_response_json(GP_API_CHAT, "chatcmpl-2", "tiny", 1700000000, "Hi \"x\"\n", 7, "stop", &u, NULL));
    check_head(o, "chatcmpl-2", "chat.completion");
    ch = choice0(o);
    json_t *m = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Hi \"x\"\n");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    check_usage(json_object_get(o, "usage"), 5, 3, 2);
    json_decref(o);
}

static void test_chunks(void **state)
{
    (void)state;
    const gp_serve_usage u = {.prompt_tokens = 4, .completion_tokens = 9, .cached_tokens = 0};
    /* completions: text deltas, finish_reason null until the last */
    json_t *o = load(gp_api_chunk_json(GP_API_COMPLETION, "cmpl-3", "tiny", 1700000000, true, "ab", 2, NULL, NULL, NULL));
    check_head(o, "cmpl-3", "text_completion");
    json_t *ch = choice0(o);
    assert_string_equal(json_string_value(json_object_get(ch, "text")), "ab");
    assert_true(json_is_null(json_object_get(ch, "finish_reason")));
    assert_null(json_object_get(o, "usage"));
    json_decref(o);
    o = load(gp_api_chunk_json(GP_API_COMPLETION, "cmpl-3", "tiny", 1700000000, false, "", 0, "stop", &u, NULL));
    ch = choice0(o);
    assert_string_equal(json_string_value(json_object_get(ch, "text")), "");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    check_usage(json_object_get(o, "usage"), 4, 9, 0);
    json_decref(o);

    /* chat: role in the first delta only, {} for an empty later delta */
    o = load(gp_api_chunk_json(GP_API_CHAT, "chatcmpl-4", "tiny", 1700000000, true, "", 0, NULL, NULL, NULL));
    check_head(o, "chatcmpl-4", "chat.completion.chunk");
    json_t *d = json_object_get(choice0(o), "delta");
    assert_string_equal(json_string_value(json_object_get(d, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(d, "content")), "");
    json_decref(o);
    o = load(gp_api_chunk_json(GP_API_CHAT, "chatcmpl-4", "tiny", 1700000000, false, "Hel", 3, NULL, NULL, NULL));
    d = json_object_get(choice0(o), "delta");
    assert_null(json_object_get(d, "role"));
    assert_string_equal(json_string_value(json_object_get(d, "content")), "Hel");
    json_decref(o);
    o = load(gp_api_chunk_json(GP_API_CHAT, "chatcmpl-4", "tiny", 1700000000, false, "", 0, "length", NULL, NULL));
    ch = choice0(o);
    assert_int_equal(json_object_size(json_object_get(ch, "delta")), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_decref(o);

    /* the include_usage chunk: no choices, usage */
    o = load(gp_api_chunk_json(GP_API_CHAT, "chatcmpl-4", "tiny", 1700000000, false, NULL, 0, NULL, &u, NULL));
    check_head(o, "chatcmpl-4", "chat.completion.chunk");
    assert_true(json_is_array(json_object_get(o, "choices")));
    assert_int_equal(json_array_size(json_object_get(o, "choices")), 0);
    check_usage(json_object_get(o, "usage"), 4, 9, 0);
    json_decref(o);
}

static void test_models_and_errors(void **state)
{
    (void)state;
    json_t *o = load(gp_api_models_json("tiny", 1700000000, 128, 256));
    assert_string_equal(json_string_value(json_object_get(o, "object")), "list");
    json_t *d = json_object_get(o, "data");
    assert_int_equal(json_array_size(d), 1);
    json_t *m = json_array_get(d, 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "tiny");
    assert_string_equal(json_string_value(json_object_get(m, "object")), "model");
    assert_int_equal(json_integer_value(json_object_get(m, "created")), 1700000000);
    assert_string_equal(json_string_value(json_object_get(m, "owned_by")), "greenpipe");
    assert_int_equal(json_integer_value(json_object_get(m, "max_model_len")), 128);
    assert_int_equal(json_integer_value(json_object_get(m, "vocab_size")), 256);
    json_decref(o);

    gp_api_error e;
    gp_api_error_set(&e, 429, "rate_limit_error", NULL, "the queue holds %d requests", 1024);
    o = load(gp_api_error_json(&e));
    json_t *err = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "the queue holds 1024 requests");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "rate_limit_error");
    assert_true(json_is_null(json_object_get(err, "param")));
    assert_int_equal(json_integer_value(json_object_get(err, "code")), 429);
    json_decref(o);
    /* a message quoting bad bytes still makes an error object */
    gp_api_error_set(&e, 400, "invalid_request_error", "model", "model: '%s' is not served", "\xc3(");
    o = load(gp_api_error_json(&e));
    err = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "model: '\xEF\xBF\xBD(' is not served");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "model");
    json_decref(o);
}

static void check_fix(const char *in, size_t n, const char *want, size_t want_len)
{
    size_t len;
    char *out = gp_api_utf8_fix(in, n, &len);
    assert_non_null(out);
    assert_int_equal(len, want_len);
    assert_memory_equal(out, want, len);
    assert_int_equal(out[len], '\0');
    free(out);
}

#define FFFD "\xEF\xBF\xBD"
/* Literals with their sizes, NUL bytes inside included. */
#define CHECK_FIX(in, want) check_fix(in, sizeof in - 1, want, sizeof want - 1)
static void test_utf8(void **state)
{
    (void)state;
    CHECK_FIX("", "");
    CHECK_FIX("h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    CHECK_FIX("a\xFF" "b", "a" FFFD "b");
    CHECK_FIX("\x80\x80", FFFD FFFD);                     /* lone continuations: one each */
    CHECK_FIX("\xE2\x82", FFFD);                           /* a cut character: one */
    CHECK_FIX("\xE2\x82x", FFFD "x");
    CHECK_FIX("\xF0\x9F\x98", FFFD);
    CHECK_FIX("\xC0\xAF", FFFD FFFD);                      /* overlong */
    CHECK_FIX("\xE0\x80\x80", FFFD FFFD FFFD);             /* overlong 3-byte */
    CHECK_FIX("\xED\xA0\x80", FFFD FFFD FFFD);             /* a surrogate */
    CHECK_FIX("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD);    /* beyond U+10FFFF */
    CHECK_FIX("\xF5", FFFD);
    CHECK_FIX("a\0b", "a\0b");

    /* Text with any bytes still makes every response, with U+FFFD in place. */
    const gp_serve_usage u = {1, 1, 0};
    json_t *o = load(gp_api_response_json(GP_API_COMPLETION, "cmpl-5", "tiny", 1700000000, "ok\xE2\x82", 4, "stop",
                                          &u, NULL));
    assert_string_equal(json_string_value(json_object_get(choice0(o), "text")), "ok" FFFD);
    json_decref(o);
    o = load(gp_api_chunk_json(GP_API_CHAT, "chatcmpl-6", "tiny", 1700000000, false, "\xFF\xFE", 2, NULL, NULL, NULL));
    assert_string_equal(json_string_value(json_object_get(json_object_get(choice0(o), "delta"), "content")),
                        FFFD FFFD);
    json_decref(o);
    o = load(gp_api_chunk_json(GP_API_COMPLETION, "cmpl-7", "tiny", 1700000000, false, "a\0b", 3, NULL, NULL, NULL));
    json_t *t = json_object_get(choice0(o), "text");
    assert_int_equal(json_string_length(t), 3);
    json_decref(o);
}

/* The value of the sample line that begins with prefix (name and labels). */
static double sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    }
    fail_msg("no sample '%s' in:\n%s", prefix, text);
    return 0;
}

static void test_metrics(void **state)
{
    (void)state;
    gp_serve_stats st;
    memset(&st, 0, sizeof st);
    st.running = 3;
    st.waiting = 7;
    st.kv_blocks_used = 25;
    st.kv_blocks_total = 100;
    st.prompt_tokens = 1000;
    st.generation_tokens = 250;
    st.preemptions = 2;
    st.prefix_query_tokens = 800;
    st.prefix_hit_tokens = 400;
    st.requests_finished[GP_SERVE_STOP] = 5;
    st.requests_finished[GP_SERVE_LENGTH] = 6;
    st.requests_finished[GP_SERVE_CANCELLED] = 1;
    st.uptime_seconds = 10;
    const double le[] = {0.01, 0.1, 1.0};
    for (int i = 0; i < 3; i++) {
        st.ttft.le[i] = le[i];
        st.ttft.bucket[i] = i + 1;
    }
    st.ttft.count = 4;
    st.ttft.sum = 2.5;
    char *t = gp_api_metrics_text(&st, "my \"model\"\\x\n");
    assert_non_null(t);
#define L "{model_name=\"my \\\"model\\\"\\\\x\\n\""
    assert_non_null(strstr(t, "# HELP greenpipe:num_requests_running "));
    assert_non_null(strstr(t, "# TYPE greenpipe:num_requests_running gauge\n"));
    assert_non_null(strstr(t, "# TYPE greenpipe:prompt_tokens_total counter\n"));
    assert_non_null(strstr(t, "# TYPE greenpipe:time_to_first_token_seconds histogram\n"));
    assert_true(sample(t, "greenpipe:num_requests_running" L "}") == 3);
    assert_true(sample(t, "greenpipe:num_requests_waiting" L "}") == 7);
    assert_true(sample(t, "greenpipe:kv_cache_usage_perc" L "}") == 0.25);
    assert_true(sample(t, "greenpipe:prompt_tokens_total" L "}") == 1000);
    assert_true(sample(t, "greenpipe:generation_tokens_total" L "}") == 250);
    assert_true(sample(t, "greenpipe:num_preemptions_total" L "}") == 2);
    assert_true(sample(t, "greenpipe:prefix_cache_queries_total" L "}") == 800);
    assert_true(sample(t, "greenpipe:prefix_cache_hits_total" L "}") == 400);
    assert_true(sample(t, "greenpipe:request_success_total" L ",finished_reason=\"stop\"}") == 5);
    assert_true(sample(t, "greenpipe:request_success_total" L ",finished_reason=\"length\"}") == 6);
    assert_true(sample(t, "greenpipe:request_success_total" L ",finished_reason=\"abort\"}") == 1);
    assert_true(sample(t, "greenpipe:avg_generation_throughput_toks_per_s" L "}") == 25);
    assert_true(sample(t, "greenpipe:time_to_first_token_seconds_bucket" L ",le=\"0.01\"}") == 1);
    assert_true(sample(t, "greenpipe:time_to_first_token_seconds_bucket" L ",le=\"1\"}") == 3);
    assert_true(sample(t, "greenpipe:time_to_first_token_seconds_bucket" L ",le=\"+Inf\"}") == 4);
    assert_true(sample(t, "greenpipe:time_to_first_token_seconds_sum" L "}") == 2.5);
    assert_true(sample(t, "greenpipe:time_to_first_token_seconds_count" L "}") == 4);
    assert_true(sample(t, "greenpipe:e2e_request_latency_seconds_count" L "}") == 0);
    assert_true(sample(t, "greenpipe:time_per_output_token_seconds_bucket" L ",le=\"+Inf\"}") == 0);
#undef L
    /* Every line is a comment or a sample "name{labels} value", and ends the text with a newline. */
    assert_int_equal(t[strlen(t) - 1], '\n');
    for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
        const char *end = strchr(l, '\n');
        assert_non_null(end);
        if (*l == '#')
            continue;
        assert_true(strncmp(l, "greenpipe:", 10) == 0);
        const char *sp = end;
        while (sp > l && sp[-1] != ' ')
            sp--;
        assert_true(sp > l && sp[-2] == '}');
    }
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed),   cmocka_unit_test(test_prompt),
        cmocka_unit_test(test_fields),      cmocka_unit_test(test_stops),
        cmocka_unit_test(test_unsupported), cmocka_unit_test(test_chat_bad),
        cmocka_unit_test(test_completion_ok), cmocka_unit_test(test_chat_ok),
        cmocka_unit_test(test_responses),   cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_models_and_errors), cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
