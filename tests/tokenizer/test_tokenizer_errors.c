/* The tokenizers' refusals: each names the bad value and what is allowed
 * (docs/RELIABILITY.md), and the lookups generate --prompt relies on. */
#include "gp_test.h"
#include "gp_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TOK_DIR GP_TEST_DATA_DIR "/tokenizer"

static char tmpdir[64];

static int make_tmp(void **state)
{
    return gp_test_tmpdir_make(tmpdir, sizeof tmpdir, "gp_tok");
}

static int remove_tmp(void **state)
{
    return gp_test_tmpdir_remove(tmpdir);
}

/* The Llama-3-style test tokenizer with one change made by edit, written to
 * a temporary file whose path is returned. */
static const char *edited_from(const char *src, const char *name, void (*edit)(json_t *root))
{
    static char path[256];
    json_error_t e;
    json_t *root = json_load_file(src, 0, &e);
    assert_non_null(root);
    edit(root);
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, name);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
    return path;
}

static const char *edited(const char *name, void (*edit)(json_t *root))
{
    return edited_from(TOK_DIR "/bl_llama3/tokenizer.json", name, edit);
}

static void set_wordpiece(json_t *r) { json_object_set_new(json_object_get(r, "model"), "type", json_string("WordPiece")); }
static void set_unigram(json_t *r) { json_object_set_new(json_object_get(r, "model"), "type", json_string("Unigram")); }
static void merges_one(json_t *r)
{
    json_t *m = json_object_get(json_object_get(r, "model"), "merges");
    json_array_set_new(m, 3, json_pack("[s]", "a"));
}
static void merges_three(json_t *r)
{
    json_t *m = json_object_get(json_object_get(r, "model"), "merges");
    json_array_set_new(m, 5, json_string("a b c"));
}
static void merges_unknown(json_t *r)
{
    json_t *m = json_object_get(json_object_get(r, "model"), "merges");
    json_array_set_new(m, 7, json_pack("[ss]", "zzqq", "a"));
}
static void merges_not_list(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_integer(3)); }
static void nfc(json_t *r) { json_object_set_new(r, "normalizer", json_pack("{ss}", "type", "NFC")); }
static void nfkc(json_t *r) { json_object_set_new(r, "normalizer", json_pack("{ss}", "type", "NFKC")); }
static void nfc_seq_lower(json_t *r)
{
    json_object_set_new(r, "normalizer", json_pack("{s:s,s:[{ss},{ss}]}", "type", "Sequence", "normalizers", "type",
                                                   "NFC", "type", "Lowercase"));
}
static void sp_prepend_bytelevel(json_t *r)
{
    json_object_set_new(r, "normalizer", json_pack("{s:s,s:[{ss,ss}]}", "type", "Sequence", "normalizers", "type",
                                                   "Prepend", "prepend", "\xe2\x96\x81"));
}
static void metaspace_after_bytelevel(json_t *r)
{
    json_t *pre = json_object_get(r, "pre_tokenizer");
    json_array_append_new(json_object_get(pre, "pretokenizers"),
                          json_pack("{ss,ss}", "type", "Metaspace", "replacement", "\xe2\x96\x81"));
}
static void metaspace_bad_scheme(json_t *r)
{
    json_object_set_new(r, "pre_tokenizer", json_pack("{ss,ss,ss}", "type", "Metaspace", "replacement",
                                                      "\xe2\x96\x81", "prepend_scheme", "sometimes"));
}
static void metaspace_bad_replacement(json_t *r)
{
    json_object_set_new(r, "pre_tokenizer", json_pack("{ss,ss}", "type", "Metaspace", "replacement", "_"));
}
static void sp_normalized_added(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 0), "normalized", json_true());
}
static void sp_metaspace_decoder_never(json_t *r)
{
    json_object_set_new(r, "decoder", json_pack("{ss,ss,ss}", "type", "Metaspace", "replacement", "\xe2\x96\x81",
                                                "prepend_scheme", "never"));
}
static void sp_decoder_strip_only(json_t *r)
{
    json_object_set_new(r, "decoder", json_pack("{ss,ss,si,si}", "type", "Strip", "content", " ", "start", 1,
                                                "stop", 0));
}

static void test_model_types(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_FAIL(gp_tokenizer_load(edited("wp", set_wordpiece), &t), GP_ERR_UNSUPPORTED, "model type 'WordPiece'");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("ug", set_unigram), &t), GP_ERR_UNSUPPORTED, "model type 'Unigram'");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("nfkc", nfkc), &t), GP_ERR_UNSUPPORTED,
                  "normalizer 'NFKC' is not supported; supported: NFC");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("nfcl", nfc_seq_lower), &t), GP_ERR_UNSUPPORTED,
                  "normalizer step 'Lowercase'");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("spbl", sp_prepend_bytelevel), &t), GP_ERR_UNSUPPORTED,
                  "normalizer step 'Prepend' with a ByteLevel pre_tokenizer");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("msbl", metaspace_after_bytelevel), &t), GP_ERR_UNSUPPORTED,
                  "pre_tokenizer Metaspace after 'ByteLevel'");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("mss", metaspace_bad_scheme), &t), GP_ERR_FORMAT,
                  "prepend_scheme 'sometimes' is unknown; allowed: first, always, never");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("msr", metaspace_bad_replacement), &t), GP_ERR_UNSUPPORTED,
                  "Metaspace with replacement '_' is not supported");
    GP_CHECK_FAIL(gp_tokenizer_load(edited_from(TOK_DIR "/sp_llama2/tokenizer.json", "spn", sp_normalized_added), &t),
                  GP_ERR_UNSUPPORTED, "normalized true");
    GP_CHECK_FAIL(gp_tokenizer_load(edited_from(TOK_DIR "/sp_llama2/tokenizer.json", "spd", sp_decoder_strip_only), &t),
                  GP_ERR_UNSUPPORTED, "decoder 'Strip' is not supported with a SentencePiece-style tokenizer");
    assert_null(t);
    /* supported now: NFC on a byte-level BPE (Qwen2), the Metaspace decoder */
    GP_CHECK_OK(gp_tokenizer_load(edited("nfc", nfc), &t));
    gp_tokenizer_free(t);
    GP_CHECK_OK(gp_tokenizer_load(edited_from(TOK_DIR "/sp_llama2/tokenizer.json", "spm", sp_metaspace_decoder_never),
                                  &t));
    int32_t ids[] = {gp_tokenizer_token_id(t, "\xe2\x96\x81")};
    char *text = NULL;
    size_t len = 0;
    assert_true(ids[0] >= 0);
    GP_CHECK_OK(gp_tokenizer_decode(t, ids, 1, false, &text, &len));
    assert_string_equal(text, " "); /* prepend_scheme never: the first ▁ is a space too */
    free(text);
    gp_tokenizer_free(t);
}

/* NFC changes the text before it is split, yet invalid UTF-8 is still
 * named by its offset in the user's text. */
static void test_nfc_offsets(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_OK(gp_tokenizer_load(edited("nfc2", nfc), &t));
    int32_t *ids = NULL;
    size_t n = 0;
    /* e + U+0301 composes to one character before the bad byte at offset 5 */
    GP_CHECK_FAIL(gp_tokenizer_encode(t, "e\xcc\x81" "ab\xff", 6, false, &ids, &n), GP_ERR_INVALID_ARG, "offset 5");
    assert_null(ids);
    /* the decomposed and the composed é encode alike */
    int32_t *ids2 = NULL;
    size_t n2 = 0;
    GP_CHECK_OK(gp_tokenizer_encode(t, "caf\x65\xcc\x81", 6, false, &ids, &n));
    GP_CHECK_OK(gp_tokenizer_encode(t, "caf\xc3\xa9", 5, false, &ids2, &n2));
    assert_int_equal(n, n2);
    assert_memory_equal(ids, ids2, n * sizeof *ids);
    free(ids);
    free(ids2);
    gp_tokenizer_free(t);
}

static void test_bad_merges(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_FAIL(gp_tokenizer_load(edited("m1", merges_one), &t), GP_ERR_FORMAT, "model.merges[3]");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("m3", merges_three), &t), GP_ERR_FORMAT,
                  "model.merges[5] \"a b c\" is not two tokens");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("mu", merges_unknown), &t), GP_ERR_FORMAT,
                  "model.merges[7]: 'zzqq' is not in the vocabulary");
    GP_CHECK_FAIL(gp_tokenizer_load(edited("mn", merges_not_list), &t), GP_ERR_FORMAT, "model.merges must be a list");
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_files(void **state)
{
    gp_tokenizer *t = NULL;
    char path[256];
    /* neither file: both named */
    GP_CHECK_FAIL(gp_tokenizer_load_dir(tmpdir, &t), GP_ERR_NOT_FOUND, "looked for");
    assert_non_null(strstr(gp_last_error(), "/tokenizer.json"));
    assert_non_null(strstr(gp_last_error(), "/tokenizer.model"));
    /* a SentencePiece protobuf (what Llama 2 ships as tokenizer.model) */
    static const char proto[] = "\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02";
    snprintf(path, sizeof path, "%s/tokenizer.model", tmpdir);
    write_file(path, proto, sizeof proto - 1);
    GP_CHECK_FAIL(gp_tokenizer_load_dir(tmpdir, &t), GP_ERR_UNSUPPORTED, "SentencePiece protobuf");
    assert_non_null(strstr(gp_last_error(), "tiktoken"));
    unlink(path);
    /* a tiktoken file with a bad line */
    write_file(path, "IQ== 0\nIg== x1\n", 15);
    GP_CHECK_FAIL(gp_tokenizer_load(path, &t), GP_ERR_FORMAT, "line 2");
    write_file(path, "IQ== 0\n", 7);
    GP_CHECK_FAIL(gp_tokenizer_load(path, &t), GP_ERR_FORMAT, "no token for the single byte 0x00");
    unlink(path);
    snprintf(path, sizeof path, "%s/broken.json", tmpdir);
    write_file(path, "{\"model\": ", 10);
    GP_CHECK_FAIL(gp_tokenizer_load(path, &t), GP_ERR_FORMAT, "invalid JSON");
    GP_CHECK_FAIL(gp_tokenizer_load("/nonexistent/tokenizer.json", &t), GP_ERR_NOT_FOUND, "/nonexistent/tokenizer.json");
    /* the directory form prefers tokenizer.json */
    GP_CHECK_OK(gp_tokenizer_load_dir(TOK_DIR "/bl_llama3", &t));
    gp_tokenizer_free(t);
}

static void test_encode_decode_errors(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_OK(gp_tokenizer_load(TOK_DIR "/bl_llama3/tokenizer.json", &t));
    int32_t *ids = NULL;
    size_t n = 0;
    GP_CHECK_FAIL(gp_tokenizer_encode(t, "abc\xff" "def", 7, true, &ids, &n), GP_ERR_INVALID_ARG, "offset 3");
    GP_CHECK_FAIL(gp_tokenizer_encode(t, "ab\xe2\x82", 4, true, &ids, &n), GP_ERR_INVALID_ARG, "offset 2");
    GP_CHECK_FAIL(gp_tokenizer_encode(t, "\xed\xa0\x80", 3, true, &ids, &n), GP_ERR_INVALID_ARG, "offset 0");
    assert_null(ids);
    GP_CHECK_OK(gp_tokenizer_encode(t, "", 0, true, &ids, &n));
    assert_int_equal(n, 1); /* BOS only, as HF */
    free(ids);
    int32_t v = gp_tokenizer_vocab_size(t);
    int32_t bad[] = {5, v, 7};
    char *text = NULL;
    size_t len = 0;
    char want[96];
    snprintf(want, sizeof want, "token id %d (position 1) is outside the vocabulary; allowed: [0, %d]", v, v - 1);
    GP_CHECK_FAIL(gp_tokenizer_decode(t, bad, 3, false, &text, &len), GP_ERR_INVALID_ARG, want);
    int32_t neg = -1;
    GP_CHECK_FAIL(gp_tokenizer_decode(t, &neg, 1, false, &text, &len), GP_ERR_INVALID_ARG, "token id -1");
    gp_detok *d = NULL;
    GP_CHECK_OK(gp_detok_create(t, true, &d));
    GP_CHECK_FAIL(gp_detok_push(d, v + 5, &text, &len), GP_ERR_INVALID_ARG, "outside the vocabulary");
    gp_detok_free(d);
    gp_tokenizer_free(t);
}

static void test_lookups(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_OK(gp_tokenizer_load(TOK_DIR "/bl_llama3/tokenizer.json", &t));
    int32_t bos = gp_tokenizer_token_id(t, "<|begin_of_text|>");
    assert_true(bos >= 0);
    assert_int_equal(gp_tokenizer_bos_id(t), bos);
    assert_true(gp_tokenizer_token_id(t, "<|eot_id|>") >= 0);
    assert_int_equal(gp_tokenizer_token_id(t, "<|no_such|>"), -1);
    assert_true(gp_tokenizer_token_id(t, "\xc4\xa0") >= 0); /* "Ġ": the space byte as the file spells it */
    /* special text is one token; skip_special drops it on decode */
    int32_t *ids = NULL;
    size_t n = 0;
    GP_CHECK_OK(gp_tokenizer_encode(t, "a<|eot_id|>", 11, false, &ids, &n));
    assert_int_equal(ids[n - 1], gp_tokenizer_token_id(t, "<|eot_id|>"));
    char *text = NULL;
    size_t len = 0;
    GP_CHECK_OK(gp_tokenizer_decode(t, ids, n, true, &text, &len));
    assert_string_equal(text, "a");
    free(text);
    free(ids);
    gp_tokenizer_free(t);

    GP_CHECK_OK(gp_tokenizer_load(TOK_DIR "/sp_llama2/tokenizer.json", &t));
    assert_int_equal(gp_tokenizer_bos_id(t), 1);
    assert_int_equal(gp_tokenizer_token_id(t, "<0x0A>"), 3 + 10);
    gp_tokenizer_free(t);

    GP_CHECK_OK(gp_tokenizer_load(TOK_DIR "/tiktoken/tokenizer.model", &t));
    assert_int_equal(gp_tokenizer_bos_id(t), -1);
    assert_int_equal(gp_tokenizer_token_id(t, "a"), 'a');
    gp_tokenizer_free(t);
}

/* A character split across tokens: nothing of it shows until it is whole,
 * and a stream cut inside it ends in one U+FFFD, as HF shows it. */
static void test_stream_partial(void **state)
{
    gp_tokenizer *t = NULL;
    GP_CHECK_OK(gp_tokenizer_load(TOK_DIR "/tiktoken/tokenizer.model", &t));
    int32_t bytes[] = {0xf0, 0x9f, 0xa4, 0x96}; /* U+1F916 as single-byte tokens (rank = byte) */
    gp_detok *d = NULL;
    GP_CHECK_OK(gp_detok_create(t, false, &d));
    char *p = NULL;
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        GP_CHECK_OK(gp_detok_push(d, bytes[i], &p, &len));
        assert_int_equal(len, 0);
        free(p);
    }
    GP_CHECK_OK(gp_detok_push(d, bytes[3], &p, &len));
    assert_string_equal(p, "\xf0\x9f\xa4\x96");
    free(p);
    GP_CHECK_OK(gp_detok_push(d, bytes[0], &p, &len));
    free(p);
    GP_CHECK_OK(gp_detok_flush(d, &p, &len));
    assert_string_equal(p, "\xef\xbf\xbd");
    free(p);
    gp_detok_free(d);
    gp_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_types),
        cmocka_unit_test(test_nfc_offsets),
        cmocka_unit_test(test_bad_merges),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_encode_decode_errors),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_stream_partial),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
