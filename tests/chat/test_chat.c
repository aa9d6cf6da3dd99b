/* Chat templates against HF transformers: every rendering of
 * tests/chat/expected.json byte for byte (and its refusals), the token ids of
 * the rendered text on the committed test tokenizers, detection of the real
 * chat_template strings (tests/chat/templates.json), the refusals with their
 * messages, and the delta of a new turn. Data: tests/chat/make_chat_data.py. */
#include "gp_test.h"
#include "gp_chat.h"
#include "gp_tokenizer.h"

#include <jansson.h>
#include <unistd.h>

#define CHAT_DIR GP_CHAT_DATA_DIR
#define TOK_DIR GP_TEST_DATA_DIR "/tokenizer"

static json_t *expected, *templates;
static char tmpdir[64];

static int setup(void **state)
{
    json_error_t e;
    expected = json_load_file(CHAT_DIR "/expected.json", 0, &e);
    templates = json_load_file(CHAT_DIR "/templates.json", 0, &e);
    if (!expected || !templates) {
        fprintf(stderr, "cannot read the chat test data in %s: %s\n", CHAT_DIR, e.text);
        return -1;
    }
    return gp_test_tmpdir_make(tmpdir, sizeof tmpdir, "gp_chat");
}

static int teardown(void **state)
{
    json_decref(expected);
    json_decref(templates);
    return gp_test_tmpdir_remove(tmpdir);
}

static json_t *conversation(size_t i)
{
    return json_object_get(json_array_get(json_object_get(expected, "conversations"), i), "messages");
}

static const char *conversation_name(size_t i)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(expected, "conversations"), i), "name"));
}

/* Each expected rendering: the same text, or a refusal where HF raised. */
static void render_matches_hf(void **state)
{
    const char *name;
    json_t *tv;
    size_t n_checked = 0;
    json_object_foreach(json_object_get(expected, "templates"), name, tv) {
        const gp_chat_template *t;
        GP_CHECK_OK(gp_chat_template_by_name(name, &t));
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(tv, "renders"), i, c) {
            size_t ci = json_integer_value(json_object_get(c, "conversation"));
            bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
            gp_chat_msg *msgs;
            size_t n;
            GP_CHECK_OK(gp_chat_messages_from_json(conversation(ci), &msgs, &n));
            char *text = NULL;
            size_t len = 0;
            gp_clear_error();
            gp_status s = gp_chat_render(t, msgs, n, agp, &text, &len);
            json_t *want = json_object_get(c, "text");
            if (want) {
                if (s != GP_OK)
                    fail_msg("%s on %s (agp %d): %s", name, conversation_name(ci), agp, gp_last_error());
                if (len != json_string_length(want) || memcmp(text, json_string_value(want), len) != 0)
                    fail_msg("%s on %s (agp %d):\n got  '%s'\n want '%s'", name, conversation_name(ci), agp, text,
                             json_string_value(want));
                assert_int_equal(strlen(text), len);
            } else {
                const char *err = json_string_value(json_object_get(c, "error"));
                if (s != GP_ERR_INVALID_ARG)
                    fail_msg("%s on %s: HF refused (%s) but greenpipe gave %s", name, conversation_name(ci), err,
                             gp_status_str(s));
                if (!strstr(gp_last_error(), err))
                    fail_msg("%s on %s: message '%s' lacks HF's '%s'", name, conversation_name(ci), gp_last_error(),
                             err);
            }
            free(text);
            free(msgs);
            n_checked++;
        }
    }
    assert_true(n_checked >= 8 * 20);
}

/* The rendered text, tokenized with special tokens parsed and no BOS added,
 * gives the ids apply_chat_template(tokenize=True) gets. */
static void ids_match_hf(void **state)
{
    const char *name;
    json_t *tv;
    json_object_foreach(json_object_get(expected, "templates"), name, tv) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", TOK_DIR, json_string_value(json_object_get(tv, "tokenizer")));
        gp_tokenizer *tok;
        GP_CHECK_OK(gp_tokenizer_load_dir(path, &tok));
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(tv, "renders"), i, c) {
            json_t *want = json_object_get(c, "ids"), *text = json_object_get(c, "text");
            if (!want)
                continue;
            int32_t *ids;
            size_t n;
            GP_CHECK_OK(gp_tokenizer_encode(tok, json_string_value(text), json_string_length(text), false, &ids, &n));
            bool same = n == json_array_size(want);
            for (size_t k = 0; same && k < n; k++)
                same = ids[k] == json_integer_value(json_array_get(want, k));
            if (!same)
                fail_msg("%s on %s: ids differ from HF's (%zu vs %zu ids)", name,
                         conversation_name(json_integer_value(json_object_get(c, "conversation"))), n,
                         json_array_size(want));
            free(ids);
        }
        gp_tokenizer_free(tok);
    }
}

/* Every real chat_template string: the family it is, or refused with the
 * supported names. */
static void detect_real_templates(void **state)
{
    const char *key;
    json_t *v;
    int supported = 0, refused = 0;
    json_object_foreach(templates, key, v) {
        const char *text = json_string_value(json_object_get(v, "template"));
        const char *want = json_string_value(json_object_get(v, "greenpipe"));
        const gp_chat_template *t = NULL;
        gp_clear_error();
        gp_status s = gp_chat_template_detect(text, &t);
        if (want) {
            if (s != GP_OK)
                fail_msg("%s: %s", key, gp_last_error());
            assert_string_equal(gp_chat_template_name(t), want);
            supported++;
        } else {
            if (s != GP_ERR_UNSUPPORTED)
                fail_msg("%s: expected a refusal, got %s (%s)", key, gp_status_str(s), t ? gp_chat_template_name(t) : "");
            assert_non_null(strstr(gp_last_error(), gp_chat_template_names()));
            assert_non_null(strstr(gp_last_error(), "--chat-template NAME"));
            refused++;
        }
    }
    assert_int_equal(supported, 8);
    assert_true(refused >= 4);
    const gp_chat_template *t;
    GP_CHECK_FAIL(gp_chat_template_detect("{{ messages[0]['content'] }}", &t), GP_ERR_UNSUPPORTED,
                  "none of the markers");
    GP_CHECK_FAIL(gp_chat_template_detect(json_string_value(json_object_get(json_object_get(templates, "gemma"),
                                                                            "template")), &t),
                  GP_ERR_UNSUPPORTED, "Gemma");
    GP_CHECK_FAIL(gp_chat_template_detect(json_string_value(json_object_get(json_object_get(templates, "llama3.2"),
                                                                            "template")), &t),
                  GP_ERR_UNSUPPORTED, "strftime_now");
    GP_CHECK_FAIL(gp_chat_template_detect(json_string_value(json_object_get(
                                              json_object_get(templates, "mistral-v0.1-2023"), "template")), &t),
                  GP_ERR_UNSUPPORTED, "2023 Mistral");
    GP_CHECK_FAIL(gp_chat_template_detect("{{ '<|im_start|>system\\nYou are Bob.<|im_end|>\\n' }}<|im_start|>", &t),
                  GP_ERR_UNSUPPORTED, "default system message");
}

static void by_name(void **state)
{
    const gp_chat_template *t;
    GP_CHECK_OK(gp_chat_template_by_name("LLAMA3", &t));
    assert_string_equal(gp_chat_template_name(t), "llama3");
    assert_string_equal(gp_chat_template_bos_text(t), "<|begin_of_text|>");
    assert_string_equal(gp_chat_template_eot_text(t), "<|eot_id|>");
    GP_CHECK_OK(gp_chat_template_by_name("Qwen2.5", &t));
    assert_string_equal(gp_chat_template_bos_text(t), "");
    const char *const *stops = gp_chat_template_stop_texts(t);
    assert_string_equal(stops[0], "<|im_end|>");
    assert_string_equal(stops[1], "<|endoftext|>");
    assert_null(stops[2]);
    GP_CHECK_OK(gp_chat_template_by_name("mistral-v3", &t));
    assert_string_equal(gp_chat_template_eot_text(t), "</s>");
    GP_CHECK_FAIL(gp_chat_template_by_name("vicuna", &t), GP_ERR_INVALID_ARG,
                  "--chat-template 'vicuna' is not a template greenpipe has. supported: llama3, llama3.1, chatml");
    /* every name by_name lists is one it takes, and each eot is a stop */
    char names[256];
    snprintf(names, sizeof names, "%s", gp_chat_template_names());
    int count = 0;
    for (char *save, *p = strtok_r(names, ", ", &save); p; p = strtok_r(NULL, ", ", &save), count++) {
        GP_CHECK_OK(gp_chat_template_by_name(p, &t));
        assert_string_equal(gp_chat_template_stop_texts(t)[0], gp_chat_template_eot_text(t));
    }
    assert_int_equal(count, 8);
}

/* render(all) == render(before the reply) + reply + delta wherever a delta is
 * given, and the templates that keep earlier turns give one for the common
 * conversation. */
static void delta_turn(void **state)
{
    const char *incremental[] = {"llama3", "llama3.1", "chatml", "qwen2", "qwen2.5", "mistral", "llama2"};
    size_t n_conv = json_array_size(json_object_get(expected, "conversations"));
    for (size_t ti = 0; ti < 8; ti++) {
        char names[256];
        snprintf(names, sizeof names, "%s", gp_chat_template_names());
        char *save, *p = strtok_r(names, ", ", &save);
        for (size_t k = 0; k < ti; k++)
            p = strtok_r(NULL, ", ", &save);
        const gp_chat_template *t;
        GP_CHECK_OK(gp_chat_template_by_name(p, &t));
        bool want_incremental = false;
        for (size_t k = 0; k < sizeof incremental / sizeof *incremental; k++)
            want_incremental |= strcmp(p, incremental[k]) == 0;
        for (size_t ci = 0; ci < n_conv; ci++) {
            gp_chat_msg *msgs;
            size_t n;
            GP_CHECK_OK(gp_chat_messages_from_json(conversation(ci), &msgs, &n));
            if (n < 3 || msgs[n - 1].role != GP_CHAT_USER || msgs[n - 2].role != GP_CHAT_ASSISTANT) {
                char *d;
                size_t dl;
                GP_CHECK_FAIL(gp_chat_render_delta(t, msgs, n, &d, &dl), GP_ERR_INVALID_ARG,
                              "must end with an assistant reply and a new user message");
                free(msgs);
                continue;
            }
            char *full, *prev, *d;
            size_t nf, np, dl;
            gp_status s = gp_chat_render_delta(t, msgs, n, &d, &dl);
            if (s == GP_OK) {
                GP_CHECK_OK(gp_chat_render(t, msgs, n, true, &full, &nf));
                GP_CHECK_OK(gp_chat_render(t, msgs, n - 2, true, &prev, &np));
                const char *lead = gp_chat_template_reply_lead(t);
                size_t nl = strlen(lead);
                assert_int_equal(np + nl + msgs[n - 2].len + dl, nf);
                assert_memory_equal(full, prev, np);
                assert_memory_equal(full + np, lead, nl);
                assert_memory_equal(full + np + nl, msgs[n - 2].content, msgs[n - 2].len);
                assert_memory_equal(full + np + nl + msgs[n - 2].len, d, dl);
                assert_int_equal(strlen(d), dl);
                /* the delta starts by closing the reply (llama2: " </s>") */
                const char *eot = gp_chat_template_eot_text(t);
                assert_memory_equal(d + (strcmp(p, "llama2") == 0), eot, strlen(eot));
                free(full);
                free(prev);
                free(d);
            } else {
                assert_int_equal(s, GP_ERR_UNSUPPORTED);
                assert_non_null(strstr(gp_last_error(), "prefill it into a fresh sequence"));
                if (want_incremental && strcmp(conversation_name(ci), "multi_turn") == 0)
                    fail_msg("%s: no delta for multi_turn: %s", p, gp_last_error());
            }
            /* mistral-v3 moves the system message into the new turn */
            if (strcmp(conversation_name(ci), "multi_turn") == 0 && !want_incremental)
                assert_int_equal(s, GP_ERR_UNSUPPORTED);
            if (strcmp(conversation_name(ci), "multi_no_system") == 0 && s != GP_OK)
                fail_msg("%s: no delta for multi_no_system: %s", p, gp_last_error());
            free(msgs);
        }
    }
    /* what a session sees: the second turn's delta for llama3 */
    const gp_chat_template *t;
    GP_CHECK_OK(gp_chat_template_by_name("llama3", &t));
    gp_chat_msg m[3] = {{GP_CHAT_USER, "Hi", 2}, {GP_CHAT_ASSISTANT, "Hello!", 6}, {GP_CHAT_USER, "Bye", 3}};
    char *d;
    size_t dl;
    GP_CHECK_OK(gp_chat_render_delta(t, m, 3, &d, &dl));
    assert_string_equal(d, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(d);
    GP_CHECK_OK(gp_chat_template_by_name("qwen2", &t));
    GP_CHECK_OK(gp_chat_render_delta(t, m, 3, &d, &dl));
    assert_string_equal(d, "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    free(d);
    GP_CHECK_OK(gp_chat_template_by_name("mistral", &t));
    assert_string_equal(gp_chat_template_reply_lead(t), " ");
    GP_CHECK_OK(gp_chat_render_delta(t, m, 3, &d, &dl));
    assert_string_equal(d, "</s> [INST] Bye [/INST]");
    free(d);
}

static void render_refusals(void **state)
{
    const gp_chat_template *t;
    GP_CHECK_OK(gp_chat_template_by_name("chatml", &t));
    char *text;
    size_t len;
    gp_chat_msg bad = {GP_CHAT_USER, "a\xff", 2};
    GP_CHECK_FAIL(gp_chat_render(t, &bad, 1, true, &text, &len), GP_ERR_INVALID_ARG,
                  "not valid UTF-8 (byte 0xFF at offset 1)");
    GP_CHECK_FAIL(gp_chat_render(t, &bad, 0, true, &text, &len), GP_ERR_INVALID_ARG, "no messages");
    gp_chat_msg role = {(gp_chat_role)7, "x", 1};
    GP_CHECK_FAIL(gp_chat_render(t, &role, 1, true, &text, &len), GP_ERR_INVALID_ARG, "role 7");
    /* NUL bytes inside content are content: the length counts */
    gp_chat_msg nul = {GP_CHAT_USER, "a\0b", 3};
    GP_CHECK_OK(gp_chat_render(t, &nul, 1, false, &text, &len));
    assert_int_equal(len, strlen("<|im_start|>user\na") + 2 + strlen("<|im_end|>\n"));
    free(text);
}

static void messages_json(void **state)
{
    gp_chat_msg *m;
    size_t n;
    json_t *v = json_loads("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"tool\",\"content\":\"x\"}]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG,
                  "messages[1].role: 'tool' is not supported. allowed: \"system\", \"user\", \"assistant\"");
    json_decref(v);
    v = json_loads("[{\"role\":\"assistant\",\"content\":null}]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG,
                  "messages[0].content: null. allowed: a string");
    json_decref(v);
    v = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG, "messages[0].content: an array");
    json_decref(v);
    v = json_loads("[{\"content\":\"x\"}]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG, "messages[0].role: missing");
    json_decref(v);
    v = json_loads("[3]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG, "messages[0]: a number");
    json_decref(v);
    v = json_loads("[]", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG, "empty");
    json_decref(v);
    v = json_loads("{}", 0, NULL);
    GP_CHECK_FAIL(gp_chat_messages_from_json(v, &m, &n), GP_ERR_INVALID_ARG, "an object, not an array");
    json_decref(v);
    v = json_loads("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"a\\u0000b\"}]", JSON_ALLOW_NUL, NULL);
    GP_CHECK_OK(gp_chat_messages_from_json(v, &m, &n));
    assert_int_equal(n, 2);
    assert_int_equal(m[0].role, GP_CHAT_SYSTEM);
    assert_int_equal(m[1].len, 3);
    free(m);
    json_decref(v);
}

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

static void load_dir(void **state)
{
    const gp_chat_template *t;
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_NOT_FOUND,
                  "neither tokenizer_config.json with a chat_template nor chat_template.jinja. choose one with "
                  "--chat-template NAME (supported: llama3");
    write_file("tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_NOT_FOUND, "--chat-template NAME");
    json_t *cfg = json_object();
    json_object_set(cfg, "chat_template", json_object_get(json_object_get(templates, "qwen2"), "template"));
    char *s = json_dumps(cfg, 0);
    write_file("tokenizer_config.json", s);
    free(s);
    GP_CHECK_OK(gp_chat_template_load_dir(tmpdir, &t));
    assert_string_equal(gp_chat_template_name(t), "qwen2");
    /* the list form: "default" is taken, not the first */
    json_t *list = json_pack("[{s:s,s:s},{s:s,s:O}]", "name", "tool_use", "template", "<|im_start|>", "name",
                             "default", "template", json_object_get(json_object_get(templates, "llama3"), "template"));
    json_object_set_new(cfg, "chat_template", list);
    s = json_dumps(cfg, 0);
    write_file("tokenizer_config.json", s);
    free(s);
    GP_CHECK_OK(gp_chat_template_load_dir(tmpdir, &t));
    assert_string_equal(gp_chat_template_name(t), "llama3");
    json_array_remove(list, 1);
    s = json_dumps(cfg, 0);
    write_file("tokenizer_config.json", s);
    free(s);
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_FORMAT, "without a template named 'default'");
    json_object_set_new(cfg, "chat_template", json_integer(3));
    s = json_dumps(cfg, 0);
    write_file("tokenizer_config.json", s);
    free(s);
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_FORMAT, "neither a string nor a list");
    json_object_set(cfg, "chat_template", json_object_get(json_object_get(templates, "gemma"), "template"));
    s = json_dumps(cfg, 0);
    write_file("tokenizer_config.json", s);
    free(s);
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_UNSUPPORTED, "Gemma markers");
    json_decref(cfg);
    /* no chat_template in the config: chat_template.jinja beside it */
    write_file("tokenizer_config.json", "{}");
    write_file("chat_template.jinja",
               json_string_value(json_object_get(json_object_get(templates, "mistral-v3"), "template")));
    GP_CHECK_OK(gp_chat_template_load_dir(tmpdir, &t));
    assert_string_equal(gp_chat_template_name(t), "mistral-v3");
    remove_file("chat_template.jinja");
    write_file("tokenizer_config.json", "{");
    GP_CHECK_FAIL(gp_chat_template_load_dir(tmpdir, &t), GP_ERR_FORMAT, "not JSON");
    remove_file("tokenizer_config.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(render_matches_hf), cmocka_unit_test(ids_match_hf),
        cmocka_unit_test(detect_real_templates), cmocka_unit_test(by_name),
        cmocka_unit_test(delta_turn), cmocka_unit_test(render_refusals),
        cmocka_unit_test(messages_json), cmocka_unit_test(load_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
