/* Tests of the safetensors parser: well-formed files, one test per broken
 * rule (status and message), and every truncation / random damage of a
 * valid file. Each test states its header literally. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_model.h"
#include "st_builder.h"

#define LABEL "t.safetensors"

static const uint8_t zeros[64];

/* Parse header + data; returns the status, *out the file on success. */
static gp_status parse(const char *header, const void *data, size_t dlen, uint8_t **buf,
                       gp_st_file **out)
{
    size_t len;
    *buf = st_make(header, data, dlen, &len);
    gp_clear_error();
    return gp_st_parse(*buf, len, LABEL, out);
}

/* The parse must fail with want, and the message must hold the label and
 * each given fragment (NULL-terminated list). */
static void expect_fail_buf(const uint8_t *buf, size_t len, gp_status want, ...)
{
    gp_st_file *f = (gp_st_file *)0x1;
    gp_clear_error();
    gp_status s = gp_st_parse(buf, len, LABEL, &f);
    const char *msg = gp_last_error();
    if (s != want)
        print_error("status %d (%s), wanted %d; message: %s\n", s, gp_status_str(s), want, msg);
    assert_int_equal(s, want);
    assert_null(f);
    assert_non_null(strstr(msg, LABEL));
    va_list ap;
    va_start(ap, want);
    for (const char *frag; (frag = va_arg(ap, const char *));) {
        if (!strstr(msg, frag))
            print_error("message lacks '%s': %s\n", frag, msg);
        assert_non_null(strstr(msg, frag));
    }
    va_end(ap);
}

#define EXPECT_FAIL(header, data, dlen, want, ...)                                                 \
    do {                                                                                           \
        size_t len_;                                                                               \
        uint8_t *b_ = st_make(header, data, dlen, &len_);                                          \
        expect_fail_buf(b_, len_, want, __VA_ARGS__, NULL);                                        \
        free(b_);                                                                                  \
    } while (0)

/* ------------------------------------------------------------ happy paths */

static void test_single_tensor(void **state)
{
    const float v[4] = {1.0f, -2.5f, 3.25f, 1e-3f};
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, v, sizeof v, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 1);
    const gp_st_tensor *t = gp_st_get(f, 0);
    assert_string_equal(t->name, "w");
    assert_int_equal(t->dtype, GP_DTYPE_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(t->begin, 0);
    assert_int_equal(t->end, 16);
    assert_ptr_equal(t->data, buf + 8 + strlen(h));
    assert_memory_equal(t->data, v, sizeof v);
    assert_ptr_equal(gp_st_find(f, "w"), t);
    assert_null(gp_st_find(f, "x"));
    assert_null(gp_st_get(f, 1));
    gp_st_free(f);
    free(buf);
}

static void test_all_dtypes(void **state)
{
    static const struct { const char *name; gp_dtype d; size_t size; } dts[] = {
        {"F32", GP_DTYPE_F32, 4},   {"F16", GP_DTYPE_F16, 2},         {"BF16", GP_DTYPE_BF16, 2},
        {"F64", GP_DTYPE_F64, 8},   {"I64", GP_DTYPE_I64, 8},         {"I32", GP_DTYPE_I32, 4},
        {"I16", GP_DTYPE_I16, 2},   {"I8", GP_DTYPE_I8, 1},           {"U8", GP_DTYPE_U8, 1},
        {"BOOL", GP_DTYPE_BOOL, 1}, {"F8_E4M3", GP_DTYPE_F8_E4M3, 1}, {"F8_E5M2", GP_DTYPE_F8_E5M2, 1},
    };
    const size_t n = sizeof dts / sizeof dts[0];
    char h[2048];
    size_t at = 0, off = 0;
    at += (size_t)snprintf(h + at, sizeof h - at, "{");
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(gp_dtype_name(dts[i].d), dts[i].name);
        assert_int_equal(gp_dtype_size(dts[i].d), dts[i].size);
        at += (size_t)snprintf(h + at, sizeof h - at,
                               "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", dts[i].name, dts[i].name, off, off + 3 * dts[i].size);
        off += 3 * dts[i].size;
    }
    snprintf(h + at, sizeof h - at, "}");
    uint8_t data[256] = {0};
    assert_true(off <= sizeof data);
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, data, off, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), n);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "t_%s", dts[i].name);
        const gp_st_tensor *t = gp_st_find(f, name);
        assert_non_null(t);
        assert_int_equal(t->dtype, dts[i].d);
        assert_int_equal(t->end - t->begin, 3 * dts[i].size);
    }
    assert_string_equal(gp_dtype_name((gp_dtype)99), "unknown");
    assert_int_equal(gp_dtype_size((gp_dtype)99), 0);
    gp_st_free(f);
    free(buf);
}

static void test_metadata(void **state)
{
    const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, "\x01\x02", 2, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 1);
    assert_null(gp_st_find(f, "__metadata__"));
    assert_int_equal(gp_st_find(f, "a")->data[1], 2);
    gp_st_free(f);
    free(buf);
}

static void test_padded_header(void **state)
{
    /* The reference writer pads the header with spaces to 8-byte alignment. */
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}       ";
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, "\x07", 1, &buf, &f), GP_OK);
    assert_int_equal(gp_st_find(f, "a")->data[0], 7);
    gp_st_free(f);
    free(buf);
}

static void test_unaligned_data(void **state)
{
    /* Header of odd length (padded to 1 mod 4): the F32 tensor at data
     * offset 1 lands 2 bytes past a 4-byte boundary of the malloc'd buffer. */
    char h[256] = "{\"f\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[1,13]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"h\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[13,17]}}";
    while (strlen(h) % 4 != 1)
        strcat(h, " ");
    uint8_t data[17];
    const float fv[3] = {1.5f, -2.25f, 1024.0f};
    const gp_bf16 hv[2] = {0x3f80, 0xc000};
    data[0] = 9;
    memcpy(data + 1, fv, sizeof fv);
    memcpy(data + 13, hv, sizeof hv);
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(strlen(h) % 2, 1);
    assert_int_equal(parse(h, data, sizeof data, &buf, &f), GP_OK);
    const gp_st_tensor *t = gp_st_find(f, "f");
    assert_int_not_equal((uintptr_t)t->data % 4, 0);
    for (int i = 0; i < 3; i++) {
        float x;
        memcpy(&x, t->data + 4 * i, 4);
        assert_true(x == fv[i]);
    }
    t = gp_st_find(f, "h");
    for (int i = 0; i < 2; i++) {
        gp_bf16 x;
        memcpy(&x, t->data + 2 * i, 2);
        assert_int_equal(x, hv[i]);
    }
    assert_int_equal(gp_st_find(f, "b")->data[0], 9);
    gp_st_free(f);
    free(buf);
}

static void test_zero_tensors(void **state)
{
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse("{}", NULL, 0, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 0);
    assert_null(gp_st_find(f, "a"));
    assert_null(gp_st_get(f, 0));
    gp_st_free(f);
    free(buf);
    assert_int_equal(parse("{\"__metadata__\":{}}  ", NULL, 0, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 0);
    gp_st_free(f);
    free(buf);
}

static void test_scalar_and_empty_shapes(void **state)
{
    const char *h = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
                    "\"z\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, zeros, 4, &buf, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 3);
    assert_int_equal(gp_st_find(f, "s")->ndim, 0);
    assert_int_equal(gp_st_find(f, "e")->shape[1], 5);
    gp_st_free(f);
    free(buf);
}

static void test_sorted_by_name(void **state)
{
    const char *h = "{\"zeta\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"alpha\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                    "\"mid\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}";
    uint8_t *buf;
    gp_st_file *f = NULL;
    assert_int_equal(parse(h, "ZAM", 3, &buf, &f), GP_OK);
    assert_string_equal(gp_st_get(f, 0)->name, "alpha");
    assert_string_equal(gp_st_get(f, 1)->name, "mid");
    assert_string_equal(gp_st_get(f, 2)->name, "zeta");
    assert_int_equal(gp_st_find(f, "alpha")->data[0], 'A');
    assert_int_equal(gp_st_find(f, "zeta")->data[0], 'Z');
    assert_int_equal(gp_st_find(f, "mid")->data[0], 'M');
    assert_null(gp_st_find(f, "beta"));
    gp_st_free(f);
    free(buf);
}

static void test_bad_arguments(void **state)
{
    gp_st_file *f;
    assert_int_equal(gp_st_parse(NULL, 0, LABEL, &f), GP_ERR_FORMAT);
    assert_int_equal(gp_st_parse(zeros, 16, LABEL, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_st_count(NULL), 0);
    assert_null(gp_st_get(NULL, 0));
    assert_null(gp_st_find(NULL, "a"));
    gp_st_free(NULL);
}

/* ------------------------------------------------------ corrupt-file matrix */

#define ONE_U8 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}"

static void test_short_file(void **state)
{
    expect_fail_buf(zeros, 5, GP_ERR_FORMAT, "5 bytes", "shorter than", NULL);
    expect_fail_buf(zeros, 0, GP_ERR_FORMAT, "shorter than", NULL);
}

static void test_header_length_past_end(void **state)
{
    size_t len;
    uint8_t *b = st_make_raw(1000, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "truncated header", "1000", NULL);
    free(b);
}

static void test_header_length_huge(void **state)
{
    size_t len;
    uint8_t *b = st_make_raw(UINT64_C(1) << 63, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "9223372036854775808", "cap", NULL);
    free(b);
    b = st_make_raw(UINT64_MAX, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "cap", NULL);
    free(b);
}

static void test_header_length_over_cap(void **state)
{
    size_t len;
    uint8_t *b = st_make_raw((uint64_t)GP_ST_MAX_HEADER + 1, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "exceeds", "cap", NULL);
    free(b);
}

static void test_truncated_header(void **state)
{
    size_t len;
    uint8_t *b = st_make(ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, 8 + 20, GP_ERR_FORMAT, "truncated header", NULL);
    free(b);
}

static void test_not_json(void **state)
{
    EXPECT_FAIL("{\"a\": {\"dtype\": ", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("hello", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("{} x", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
}

static void test_json_array(void **state)
{
    EXPECT_FAIL("[1, 2]", zeros, 0, GP_ERR_FORMAT, "array", "object");
}

static void test_offset_past_end(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", zeros, 4,
                GP_ERR_FORMAT, "tensor 'w'", "[0, 8)", "past the end");
}

static void test_overlap(void **state)
{
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                zeros, 12, GP_ERR_FORMAT, "'a' [0, 8)", "'b' [4, 12)", "overlap");
    /* Same begin: the shorter one sorts first. */
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                zeros, 8, GP_ERR_FORMAT, "'a'", "'b'", "overlap");
}

static void test_gap(void **state)
{
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
                zeros, 12, GP_ERR_FORMAT, "gap", "[4, 8)", "'a'", "'b'");
    EXPECT_FAIL("{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", zeros, 8,
                GP_ERR_FORMAT, "gap", "[0, 4)", "'b'");
}

static void test_trailing_bytes(void **state)
{
    EXPECT_FAIL(ONE_U8, zeros, 6, GP_ERR_FORMAT, "trailing bytes", "[4, 6)", "'a'");
    EXPECT_FAIL("{}", zeros, 3, GP_ERR_FORMAT, "3 bytes", "no tensor");
}

static void test_wrong_size_for_shape(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", zeros, 8,
                GP_ERR_FORMAT, "tensor 'w'", "wrong size for shape", "12");
}

static void test_negative_dim(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}", zeros, 16,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0", "non-negative");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", zeros, 8,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", zeros, 8,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
}

static void test_size_overflow(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8],"
                "\"data_offsets\":[0,4]}}",
                zeros, 4, GP_ERR_OVERFLOW, "tensor 'w'", "overflow");
    /* Element count fits, bytes do not. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                "\"data_offsets\":[0,4]}}",
                zeros, 4, GP_ERR_OVERFLOW, "tensor 'w'", "overflow");
}

static void test_too_many_dims(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                zeros, 1, GP_ERR_FORMAT, "tensor 'w'", "9 dims");
}

static void test_unknown_dtype(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "unknown dtype 'F4'", "BF16", "F8_E5M2");
    EXPECT_FAIL("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "'dtype' is not a string");
}

static void test_duplicate_name(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                zeros, 2, GP_ERR_FORMAT, "duplicate tensor name 'w'");
    /* Long names (jansson's own message drops them) and escapes. */
    EXPECT_FAIL("{\"model.layers.0.mlp.up_proj.weight\":"
                "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                "\"model.layers.0.mlp.up_proj.weight\":"
                "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}",
                zeros, 3, GP_ERR_FORMAT,
                "duplicate tensor name 'model.layers.0.mlp.up_proj.weight'");
    EXPECT_FAIL("{\"q\\\"x\\\\\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"q\\\"x\\\\\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                zeros, 2, GP_ERR_FORMAT, "duplicate tensor name 'q\"x\\'");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                zeros, 1, GP_ERR_FORMAT, "duplicate key 'dtype'");
}

static void test_missing_data_offsets(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", zeros, 1, GP_ERR_FORMAT,
                "tensor 'w'", "missing 'data_offsets'");
    EXPECT_FAIL("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1, GP_ERR_FORMAT,
                "tensor 'w'", "missing 'dtype'");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", zeros, 1, GP_ERR_FORMAT,
                "tensor 'w'", "missing 'shape'");
}

static void test_begin_after_end(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", zeros, 4,
                GP_ERR_FORMAT, "tensor 'w'", "[4, 0) are reversed");
}

static void test_bad_entry_fields(void **state)
{
    EXPECT_FAIL("{\"w\":[1,2]}", zeros, 0, GP_ERR_FORMAT, "tensor 'w'", "not an object");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "unexpected key 'x'");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "'shape' is not an array");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "two integers");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "non-negative");
    /* Larger than any JSON integer jansson holds. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
                zeros, 1, GP_ERR_FORMAT, "not valid JSON");
}

static void test_bad_metadata(void **state)
{
    EXPECT_FAIL("{\"__metadata__\":{\"format\":1}}", zeros, 0, GP_ERR_FORMAT, "__metadata__",
                "'format'", "not a string");
    EXPECT_FAIL("{\"__metadata__\":[\"pt\"]}", zeros, 0, GP_ERR_FORMAT, "__metadata__", "object");
}

/* ------------------------------------------------------- hostile headers */

/* Hostile inputs: each must end in an error status whose message names the
 * file, and none may make the parser allocate by a size it read. */

static void test_header_length_edges(void **state)
{
    size_t len;
    /* One byte more than the file holds. */
    uint8_t *b = st_make_raw(strlen(ONE_U8) + 4 + 1, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "truncated header", "only 57 bytes follow", NULL);
    free(b);
    /* Exactly the cap is allowed as a length, but the file is short. */
    b = st_make_raw(GP_ST_MAX_HEADER, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "truncated header", "104857600", NULL);
    free(b);
    /* 2^32: wraps to 0 in a 32-bit size_t. */
    b = st_make_raw(UINT64_C(1) << 32, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "4294967296", "cap", NULL);
    free(b);
    /* Zero-length header: no JSON at all. */
    b = st_make_raw(0, ONE_U8, zeros, 4, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "not valid JSON", NULL);
    free(b);
    /* Only the length field, claiming one byte. */
    b = st_make_raw(1, "", NULL, 0, &len);
    expect_fail_buf(b, len, GP_ERR_FORMAT, "truncated header", "only 0 bytes", NULL);
    free(b);
}

static void test_offsets_near_int64_max(void **state)
{
    /* The largest offsets JSON can carry: past the data, never allocated. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807],"
                "\"data_offsets\":[0,9223372036854775807]}}",
                zeros, 4, GP_ERR_FORMAT, "tensor 'w'", "past the end", "(4 bytes)");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
                "\"data_offsets\":[9223372036854775807,9223372036854775807]}}",
                zeros, 4, GP_ERR_FORMAT, "tensor 'w'", "past the end");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                "\"data_offsets\":[9223372036854775807,0]}}",
                zeros, 4, GP_ERR_FORMAT, "tensor 'w'", "reversed");
    /* Offsets must be integers: floats, strings, 2^64 - 1. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0.0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "non-negative integers");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[\"0\",\"1\"]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "non-negative integers");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}",
                zeros, 1, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"0\":1}}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "two integers");
}

static void test_absurd_shapes(void **state)
{
    /* 2^40 elements: the size is checked against the offsets, not allocated. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1048576,1048576],\"data_offsets\":[0,8]}}",
                zeros, 8, GP_ERR_FORMAT, "tensor 'w'", "wrong size", "1099511627776");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1048576,1048576],"
                "\"data_offsets\":[0,1099511627776]}}",
                zeros, 8, GP_ERR_FORMAT, "tensor 'w'", "past the end");
    /* Product of dims overflows 64 bits only at the fourth factor. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[65536,65536,65536,65536],"
                "\"data_offsets\":[0,0]}}",
                zeros, 0, GP_ERR_OVERFLOW, "tensor 'w'", "overflows");
    /* A zero dim empties the tensor even after huge ones... */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904],\"data_offsets\":[0,4]}}",
                zeros, 4, GP_ERR_FORMAT, "tensor 'w'", "wrong size", "needs 0");
    /* ...but overflow before it is still an overflow. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4,0],\"data_offsets\":[0,0]}}",
                zeros, 0, GP_ERR_OVERFLOW, "tensor 'w'", "overflows");
    /* A zero-sized tensor may not claim bytes, nor sit inside another one. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", zeros, 4,
                GP_ERR_FORMAT, "tensor 'w'", "wrong size");
    EXPECT_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                zeros, 4, GP_ERR_FORMAT, "'z' [2, 2)", "overlap");
    /* Entries that are not integers. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[-9223372036854775807],\"data_offsets\":[0,0]}}",
                zeros, 0, GP_ERR_FORMAT, "tensor 'w'", "shape entry 0", "non-negative");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,[2]],\"data_offsets\":[0,2]}}", zeros, 2,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 1");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[null],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0,1000]}}", zeros, 0,
                GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":null,\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "'shape' is not an array");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]}}",
                zeros, 1, GP_ERR_FORMAT, "not valid JSON");
}

static void test_absurd_dtypes(void **state)
{
    EXPECT_FAIL("{\"w\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "unknown dtype ''");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4,
                GP_ERR_FORMAT, "tensor 'w'", "unknown dtype 'f32'");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32 \",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4,
                GP_ERR_FORMAT, "tensor 'w'", "unknown dtype 'F32 '");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4,
                GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("{\"w\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "'dtype' is not a string");
    EXPECT_FAIL("{\"w\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1,
                GP_ERR_FORMAT, "tensor 'w'", "'dtype' is not a string");
    /* A 4000-character dtype: the message is cut to fit but keeps the file name. */
    char h[4200];
    int at = snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"");
    memset(h + at, 'X', 4000);
    snprintf(h + at + 4000, sizeof h - (size_t)at - 4000, "\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    EXPECT_FAIL(h, zeros, 1, GP_ERR_FORMAT, "tensor 'w'", "unknown dtype 'XXXX");
}

static void test_not_an_object(void **state)
{
    /* jansson takes only arrays and objects at the top level. */
    EXPECT_FAIL("\"w\"", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("3", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("null", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("true", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    EXPECT_FAIL("[]", zeros, 0, GP_ERR_FORMAT, "must be an object");
    EXPECT_FAIL("[{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}]", zeros, 1,
                GP_ERR_FORMAT, "must be an object");
    EXPECT_FAIL("{\"w\":\"U8\"}", zeros, 0, GP_ERR_FORMAT, "tensor 'w'", "not an object");
    EXPECT_FAIL("{\"w\":null}", zeros, 0, GP_ERR_FORMAT, "tensor 'w'", "not an object");
    /* Binary junk and a NUL inside the header. */
    EXPECT_FAIL("\xff\xfe{}", zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    size_t len;
    uint8_t *b = st_make("{\"a\":{}}", NULL, 0, &len);
    b[8 + 3] = '\0';
    expect_fail_buf(b, len, GP_ERR_FORMAT, "not valid JSON", NULL);
    free(b);
    /* jansson alone skips a NUL right after a number and would accept this
     * (tests/fuzz/regressions/safetensors/nul_after_number.safetensors). */
    b = st_make("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4#]}}", "abcd", 4, &len);
    uint8_t *u = memchr(b + 8, '#', len - 8);
    *u = '\0';
    expect_fail_buf(b, len, GP_ERR_FORMAT, "not valid JSON", "NUL byte at byte 50", NULL);
    free(b);
}

/* "[[[...]]]" (or objects) nested depth deep, inside prefix/suffix. */
static char *nested(const char *prefix, int depth, int objects, const char *suffix)
{
    size_t n = strlen(prefix) + strlen(suffix) + (size_t)depth * 6 + 2; /* "1" and the NUL */
    char *s = malloc(n);
    assert_non_null(s);
    size_t at = (size_t)sprintf(s, "%s", prefix);
    for (int i = 0; i < depth; i++)
        at += (size_t)sprintf(s + at, "%s", objects ? "{\"a\":" : "[");
    at += (size_t)sprintf(s + at, "1");
    for (int i = 0; i < depth; i++)
        s[at++] = objects ? '}' : ']';
    sprintf(s + at, "%s", suffix);
    return s;
}

static void test_deep_nesting(void **state)
{
    /* Beyond jansson's depth limit (2048): refused before any recursion
     * could exhaust the stack. */
    char *h = nested("", 100000, 0, "");
    EXPECT_FAIL(h, zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    free(h);
    h = nested("{\"__metadata__\":", 5000, 1, "}");
    EXPECT_FAIL(h, zeros, 0, GP_ERR_FORMAT, "not valid JSON");
    free(h);
    /* Within the limit, the checks still apply at every place. */
    h = nested("{\"__metadata__\":{\"x\":", 1000, 1, "}}");
    EXPECT_FAIL(h, zeros, 0, GP_ERR_FORMAT, "__metadata__", "'x'", "not a string");
    free(h);
    h = nested("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1],\"shape\":", 1000, 0, "}}");
    EXPECT_FAIL(h, zeros, 1, GP_ERR_FORMAT, "tensor 'w'", "shape entry 0");
    free(h);
    h = nested("{\"w\":", 1000, 1, "}");
    EXPECT_FAIL(h, zeros, 0, GP_ERR_FORMAT, "tensor 'w'", "unexpected key 'a'");
    free(h);
}

static void test_more_duplicates(void **state)
{
    EXPECT_FAIL("{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", zeros, 0, GP_ERR_FORMAT,
                "duplicate key 'format'");
    EXPECT_FAIL("{\"__metadata__\":{},\"__metadata__\":{}}", zeros, 0, GP_ERR_FORMAT,
                "duplicate tensor name '__metadata__'");
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}}",
                zeros, 1, GP_ERR_FORMAT, "duplicate key 'shape'");
    /* The same name spelled with an escape is the same key. */
    EXPECT_FAIL("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"\\u0077\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                zeros, 2, GP_ERR_FORMAT, "duplicate tensor name 'w'");
}

static void test_many_tensors(void **state)
{
    /* 20000 one-byte tensors, listed in reverse: sorting and tiling stay
     * n log n, and every one is found. */
    enum { N = 20000 };
    st_builder *b = st_builder_new();
    for (int i = N - 1; i >= 0; i--) {
        char name[32];
        const int64_t one[1] = {1};
        uint8_t v = (uint8_t)i;
        snprintf(name, sizeof name, "t%05d", i);
        st_builder_add(b, name, "U8", 1, one, &v, 1);
    }
    size_t len;
    uint8_t *buf = st_builder_finish(b, &len);
    gp_st_file *f = NULL;
    assert_int_equal(gp_st_parse(buf, len, LABEL, &f), GP_OK);
    assert_int_equal(gp_st_count(f), N);
    assert_string_equal(gp_st_get(f, 0)->name, "t00000");
    const gp_st_tensor *t = gp_st_find(f, "t12345");
    assert_non_null(t);
    assert_int_equal(t->data[0], (uint8_t)12345);
    gp_st_free(f);
    free(buf);
}

/* ------------------------------------------------------------ robustness */

static uint8_t *small_valid_file(size_t *len)
{
    st_builder *b = st_builder_new();
    const float f[6] = {1, 2, 3, 4, 5, 6};
    const uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    const int64_t s23[2] = {2, 3}, s3[1] = {3}, s0[1] = {0};
    st_builder_add(b, "model.a.weight", "F32", 2, s23, f, sizeof f);
    st_builder_add(b, "model.b.weight", "F16", 1, s3, h, sizeof h);
    st_builder_add(b, "model.c.weight", "U8", 1, s0, f, 0);
    st_builder_add(b, "model.d.weight", "U8", 1, s3, "abc", 3);
    return st_builder_finish(b, len);
}

static void test_every_truncation(void **state)
{
    size_t len;
    uint8_t *full = small_valid_file(&len);
    gp_st_file *f = NULL;
    assert_int_equal(gp_st_parse(full, len, LABEL, &f), GP_OK);
    assert_int_equal(gp_st_count(f), 4);
    gp_st_free(f);
    for (size_t n = 0; n < len; n++) {
        uint8_t *p = malloc(n ? n : 1); /* exact size, so overreads hit the allocator's guard */
        assert_non_null(p);
        memcpy(p, full, n);
        f = (gp_st_file *)0x1;
        gp_status s = gp_st_parse(n ? p : NULL, n, LABEL, &f);
        assert_int_not_equal(s, GP_OK);
        assert_null(f);
        assert_non_null(strstr(gp_last_error(), LABEL));
        free(p);
    }
    free(full);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random byte damage must never crash; whatever parses must still tile. */
static void test_random_damage(void **state)
{
    size_t len;
    uint8_t *full = small_valid_file(&len);
    uint64_t seed = 42;
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *p = malloc(len);
        assert_non_null(p);
        memcpy(p, full, len);
        int flips = 1 + (int)(rng_next(&seed) % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = rng_next(&seed) % len;
            /* Mostly printable JSON characters, sometimes any byte. */
            static const char pool[] = "{}[]\",:0123456789-e. aFUI";
            p[at] = (rng_next(&seed) & 1) ? (uint8_t)pool[rng_next(&seed) % (sizeof pool - 1)]
                                           : (uint8_t)rng_next(&seed);
        }
        size_t cut = (rng_next(&seed) % 4 == 0) ? rng_next(&seed) % (len + 1) : len;
        gp_st_file *f = NULL;
        if (gp_st_parse(p, cut, LABEL, &f) == GP_OK) {
            ok++;
            uint64_t total = 0;
            for (size_t i = 0; i < gp_st_count(f); i++) {
                const gp_st_tensor *t = gp_st_get(f, i);
                assert_true(t->data >= p + 8 && t->data + (t->end - t->begin) <= p + cut);
                total += t->end - t->begin;
                if (i)
                    assert_true(strcmp(gp_st_get(f, i - 1)->name, t->name) < 0);
            }
            size_t hl = 0;
            for (int b = 7; b >= 0; b--)
                hl = (hl << 8) | p[b];
            assert_int_equal(total, cut - 8 - hl);
            gp_st_free(f);
        }
        free(p);
    }
    print_message("random damage: %d of 20000 damaged files still parsed\n", ok);
    free(full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_tensor),
        cmocka_unit_test(test_all_dtypes),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_padded_header),
        cmocka_unit_test(test_unaligned_data),
        cmocka_unit_test(test_zero_tensors),
        cmocka_unit_test(test_scalar_and_empty_shapes),
        cmocka_unit_test(test_sorted_by_name),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_short_file),
        cmocka_unit_test(test_header_length_past_end),
        cmocka_unit_test(test_header_length_huge),
        cmocka_unit_test(test_header_length_over_cap),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_json_array),
        cmocka_unit_test(test_offset_past_end),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_trailing_bytes),
        cmocka_unit_test(test_wrong_size_for_shape),
        cmocka_unit_test(test_negative_dim),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_too_many_dims),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_duplicate_name),
        cmocka_unit_test(test_missing_data_offsets),
        cmocka_unit_test(test_begin_after_end),
        cmocka_unit_test(test_bad_entry_fields),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_header_length_edges),
        cmocka_unit_test(test_offsets_near_int64_max),
        cmocka_unit_test(test_absurd_shapes),
        cmocka_unit_test(test_absurd_dtypes),
        cmocka_unit_test(test_not_an_object),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_more_duplicates),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_random_damage),
    };
    return cmocka_run_group_tests_name("st_safetensors", tests, NULL, NULL);
}
