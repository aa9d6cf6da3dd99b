/* The tokenizers against HF tokenizers / tiktoken (expected.json made by
 * make_tokenizer_data.py): ids of every corpus line and of the whole corpus
 * file, with and without the post-processor, decode with and without special
 * tokens, and the streaming detokenizer adding up to the full decode.
 * Usage: test_tokenizer_hf [DATA_DIR CORPUS]; default the committed data. */
#include "gp_test.h"
#include "gp_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static const char *data_dir = GP_TEST_DATA_DIR "/tokenizer";
static const char *corpus_path = GP_TOKENIZER_CORPUS;
static json_t *expected;

static int32_t *json_ids(const json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

/* ids equal, or the first difference printed with the case's name */
static void check_ids(const char *what, size_t line, const int32_t *got, size_t n_got, const json_t *want_json)
{
    size_t n;
    int32_t *want = json_ids(want_json, &n);
    size_t i = 0;
    while (i < n && i < n_got && got[i] == want[i])
        i++;
    if (i < n || i < n_got) {
        print_error("%s line %zu: %zu ids, HF %zu; first difference at %zu: %d vs HF %d\n", what, line, n_got, n, i,
                    i < n_got ? (int)got[i] : -1, i < n ? (int)want[i] : -1);
        free(want);
        fail();
    }
    free(want);
}

static void check_text(const char *what, size_t line, const char *got, size_t n_got, const char *want)
{
    if (n_got != strlen(want) || memcmp(got, want, n_got)) {
        print_error("%s line %zu: decoded\n  '%.*s'\nHF:\n  '%s'\n", what, line, (int)n_got, got, want);
        fail();
    }
}

/* Push ids one by one; the pieces must add up to the full decode and never
 * show a replacement character the full decode does not have. */
static void check_stream(const gp_tokenizer *t, const char *what, size_t line, const int32_t *ids, size_t n,
                         bool skip, const char *full, size_t full_len)
{
    gp_detok *d = NULL;
    GP_CHECK_OK(gp_detok_create(t, skip, &d));
    char *acc = malloc(full_len + 1);
    assert_non_null(acc);
    size_t at = 0;
    bool full_has_fffd = strstr(full, "\xef\xbf\xbd") != NULL;
    for (size_t i = 0; i <= n; i++) {
        char *piece = NULL;
        size_t len = 0;
        if (i < n)
            GP_CHECK_OK(gp_detok_push(d, ids[i], &piece, &len));
        else
            GP_CHECK_OK(gp_detok_flush(d, &piece, &len));
        assert_int_equal(strlen(piece), len);
        if (!full_has_fffd && strstr(piece, "\xef\xbf\xbd")) {
            print_error("%s line %zu: piece %zu shows U+FFFD\n", what, line, i);
            fail();
        }
        if (at + len > full_len || memcmp(acc, full, at) || memcmp(full + at, piece, len)) {
            print_error("%s line %zu: streamed text departs from the decode at piece %zu\n", what, line, i);
            fail();
        }
        memcpy(acc + at, piece, len);
        at += len;
        free(piece);
    }
    assert_int_equal(at, full_len);
    free(acc);
    gp_detok_free(d);
}

static void check_case(const gp_tokenizer *t, const char *name, size_t line, const char *text, size_t text_len,
                       const json_t *c)
{
    int32_t *ids = NULL;
    size_t n = 0;
    GP_CHECK_OK(gp_tokenizer_encode(t, text, text_len, true, &ids, &n));
    check_ids(name, line, ids, n, json_object_get(c, "ids"));
    free(ids);
    GP_CHECK_OK(gp_tokenizer_encode(t, text, text_len, false, &ids, &n));
    check_ids(name, line, ids, n, json_object_get(c, "ids_plain"));
    free(ids);

    ids = json_ids(json_object_get(c, "ids"), &n);
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        size_t len = 0;
        const char *want = json_string_value(json_object_get(c, skip ? "decode_skip" : "decode"));
        GP_CHECK_OK(gp_tokenizer_decode(t, ids, n, skip, &out, &len));
        check_text(name, line, out, len, want);
        assert_int_equal(out[len], '\0');
        check_stream(t, name, line, ids, n, skip, out, len);
        free(out);
    }
    free(ids);
}

static void test_tokenizer(void **state)
{
    const char *name = *state;
    const json_t *e = json_object_get(expected, name);
    assert_non_null(e);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir, json_string_value(json_object_get(e, "file")));
    gp_tokenizer *t = NULL;
    GP_CHECK_OK(gp_tokenizer_load(path, &t));
    assert_int_equal(gp_tokenizer_vocab_size(t), json_integer_value(json_object_get(e, "vocab_size")));

    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(e, "lines"), i, c) {
        const json_t *tx = json_object_get(c, "text");
        check_case(t, name, i, json_string_value(tx), json_string_length(tx), c);
    }

    /* the whole file's exact bytes, trailing newline included */
    char *text = NULL;
    size_t len = 0;
    GP_CHECK_OK(gp_read_file(corpus_path, 1 << 20, &text, &len));
    int32_t *ids = NULL;
    size_t n = 0;
    GP_CHECK_OK(gp_tokenizer_encode(t, text, len, true, &ids, &n));
    check_ids(name, SIZE_MAX, ids, n, json_object_get(e, "whole"));
    char *out = NULL;
    size_t out_len = 0;
    GP_CHECK_OK(gp_tokenizer_decode(t, ids, n, false, &out, &out_len));
    check_text(name, SIZE_MAX, out, out_len, json_string_value(json_object_get(e, "whole_decode")));
    check_stream(t, name, SIZE_MAX, ids, n, false, out, out_len);
    free(out);
    free(ids);
    free(text);
    gp_tokenizer_free(t);
}

int main(int argc, char **argv)
{
    if (argc == 3) {
        data_dir = argv[1];
        corpus_path = argv[2];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.json", data_dir);
    json_error_t err;
    expected = json_load_file(path, 0, &err);
    if (!expected) {
        fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
        return 1;
    }
    struct CMUnitTest tests[8];
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(expected, key, v) {
        if (n == 8)
            break;
        tests[n++] = (struct CMUnitTest){.name = key, .test_func = test_tokenizer, .initial_state = (void *)key};
    }
    int rc = _cmocka_run_group_tests("tokenizer_hf", tests, n, NULL, NULL);
    json_decref(expected);
    return rc;
}
