/* gp_weights_convert, the host side of converting weights while uploading
 * them (model/weights.c): F32, BF16 and F16 host values into BF16 or
 * F16, round to nearest even, bit for bit the common converters' results; a
 * copy for the same dtype; a finite value fp16 would turn into inf is
 * refused with a message naming the tensor, element and value and pointing
 * at --dtype bf16. Needs no GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* fp32 values that stress the rounding: random bit patterns within fp16's
 * range (subnormals and ties included), exact ties, and the edges. */
static float *sample_f32(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    static const float edges[] = { 0.0f, -0.0f, 65504.0f, -65504.0f, 65519.99f, -65519.99f, 6.1035156e-05f,
                                   5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1.0f + 1.0f / 2048,
                                   1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1e-30f, -3.0e-9f };
    const size_t ne = sizeof edges / sizeof edges[0];
    for (size_t i = 0; i < n; i++) {
        if (i < ne) {
            v[i] = edges[i];
            continue;
        }
        uint32_t bits = (uint32_t)mix(&seed);
        /* exponents 2^-30 .. 2^14: below and inside fp16's range (its top: the edges) */
        uint32_t e = 97u + (uint32_t)(mix(&seed) % 45u);
        bits = (bits & 0x807fffffu) | (e << 23);
        if (i % 7 == 0)
            bits &= 0xffffe000u; /* a tie or exact for fp16 */
        memcpy(&v[i], &bits, sizeof bits);
    }
    return v;
}

static void test_from_f32(void **state)
{
    (void)state;
    const size_t n = 1u << 20;
    float *v = sample_f32(n, 11);
    uint16_t *got = malloc(n * 2);
    assert_non_null(got);
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_BF16, v, GP_DTYPE_F32, n, "t"), GP_OK);
    for (size_t i = 0; i < n; i++)
        if (got[i] != gp_f32_to_bf16(v[i]))
            fail_msg("bf16 [%zu] %g: 0x%04x, want 0x%04x", i, (double)v[i], got[i], gp_f32_to_bf16(v[i]));
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_F16, v, GP_DTYPE_F32, n, "t"), GP_OK);
    for (size_t i = 0; i < n; i++)
        if (got[i] != gp_f32_to_f16(v[i]))
            fail_msg("fp16 [%zu] %g: 0x%04x, want 0x%04x", i, (double)v[i], got[i], gp_f32_to_f16(v[i]));
    /* the top of the range: 65519.99 rounds down to 65504, not to inf */
    assert_int_equal(got[4], 0x7bff);
    assert_int_equal(got[5], 0xfbff);
    /* a source off its alignment (a checkpoint's mapping may be): the same values */
    const size_t m = 4096;
    unsigned char *odd = malloc(m * sizeof(float) + 1);
    uint16_t *got2 = malloc(m * 2);
    assert_non_null(odd);
    assert_non_null(got2);
    memcpy(odd + 1, v, m * sizeof(float));
    assert_int_equal(gp_weights_convert(got2, GP_DTYPE_F16, odd + 1, GP_DTYPE_F32, m, "t"), GP_OK);
    assert_memory_equal(got2, got, m * 2);
    free(odd), free(got2);
    /* NaN stays NaN, an inf of the source stays inf (not a range error) */
    float special[3] = { NAN, INFINITY, -INFINITY };
    uint16_t out[3];
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, special, GP_DTYPE_F32, 3, "t"), GP_OK);
    assert_true((out[0] & 0x7c00u) == 0x7c00u && (out[0] & 0x3ffu));
    assert_int_equal(out[1], 0x7c00);
    assert_int_equal(out[2], 0xfc00);
    free(v), free(got);
}

static void test_between_halves(void **state)
{
    (void)state;
    const size_t n = 1u << 16; /* every 16-bit pattern */
    uint16_t *src = malloc(n * 2), *got = malloc(n * 2);
    assert_non_null(src);
    assert_non_null(got);
    for (size_t i = 0; i < n; i++)
        src[i] = (uint16_t)i;
    /* fp16 -> bf16: every value fits bf16's range; rounding of the mantissa */
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_BF16, src, GP_DTYPE_F16, n, "t"), GP_OK);
    for (size_t i = 0; i < n; i++) {
        float f = gp_f16_to_f32(src[i]);
        if (isnan(f))
            assert_true(isnan(gp_bf16_to_f32(got[i])));
        else if (got[i] != gp_f32_to_bf16(f))
            fail_msg("fp16 0x%04zx -> bf16 0x%04x, want 0x%04x", i, got[i], gp_f32_to_bf16(f));
    }
    /* bf16 -> fp16: only values within fp16's range (the others are refused below) */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        float f = gp_bf16_to_f32((uint16_t)i);
        if (!isfinite(f) || fabsf(f) <= 65504.0f)
            src[m++] = (uint16_t)i;
    }
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_F16, src, GP_DTYPE_BF16, m, "t"), GP_OK);
    for (size_t i = 0; i < m; i++) {
        float f = gp_bf16_to_f32(src[i]);
        if (isnan(f))
            assert_true(isnan(gp_f16_to_f32(got[i])));
        else if (got[i] != gp_f32_to_f16(f))
            fail_msg("bf16 0x%04x -> fp16 0x%04x, want 0x%04x", src[i], got[i], gp_f32_to_f16(f));
    }
    /* a 16-bit source off its alignment: the same values */
    unsigned char *odd = malloc(m * 2 + 1);
    uint16_t *got2 = malloc(m * 2);
    assert_non_null(odd);
    assert_non_null(got2);
    memcpy(odd + 1, src, m * 2);
    assert_int_equal(gp_weights_convert(got2, GP_DTYPE_F16, odd + 1, GP_DTYPE_BF16, m, "t"), GP_OK);
    assert_memory_equal(got2, got, m * 2);
    free(odd), free(got2);
    /* the same dtype: the bits, NaN payloads included */
    for (size_t i = 0; i < n; i++)
        src[i] = (uint16_t)i;
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_F16, src, GP_DTYPE_F16, n, "t"), GP_OK);
    assert_memory_equal(got, src, n * 2);
    assert_int_equal(gp_weights_convert(got, GP_DTYPE_BF16, src, GP_DTYPE_BF16, n, "t"), GP_OK);
    assert_memory_equal(got, src, n * 2);
    free(src), free(got);
}

static void test_fp16_range_refused(void **state)
{
    (void)state;
    float v[4] = { 1.0f, -2.0f, 65520.0f, 3.0f };
    uint16_t out[4];
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, v, GP_DTYPE_F32, 4, "layer 3 w_down"),
                     GP_ERR_UNSUPPORTED);
    const char *m = gp_last_error();
    assert_non_null(strstr(m, "layer 3 w_down"));
    assert_non_null(strstr(m, "element 2"));
    assert_non_null(strstr(m, "65520"));
    assert_non_null(strstr(m, "--dtype bf16"));
    v[2] = -1.0e6f;
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, v, GP_DTYPE_F32, 4, "embed"), GP_ERR_UNSUPPORTED);
    assert_non_null(strstr(gp_last_error(), "-1e+06"));
    /* bf16 takes it */
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_BF16, v, GP_DTYPE_F32, 4, "embed"), GP_OK);
    assert_int_equal(out[2], gp_f32_to_bf16(-1.0e6f));
    /* a bf16 source beyond fp16's range too */
    uint16_t b[2] = { gp_f32_to_bf16(1.0f), gp_f32_to_bf16(70000.0f) };
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, b, GP_DTYPE_BF16, 2, "lm_head"), GP_ERR_UNSUPPORTED);
    assert_non_null(strstr(gp_last_error(), "lm_head"));
}

static void test_bad_dtypes(void **state)
{
    (void)state;
    float v[1] = { 1.0f };
    uint16_t out[1];
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F32, v, GP_DTYPE_F32, 1, "x"), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "F32"));
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, v, GP_DTYPE_I8, 1, "x"), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "I8"));
    assert_int_equal(gp_weights_convert(out, GP_DTYPE_F16, v, GP_DTYPE_F32, 0, "x"), GP_OK);
    /* --dtype auto */
    gp_dtype d = GP_DTYPE_COUNT;
    assert_int_equal(gp_dtype_resolve_auto(GP_DTYPE_F16, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_F16);
    assert_int_equal(gp_dtype_resolve_auto(GP_DTYPE_BF16, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_BF16);
    assert_int_equal(gp_dtype_resolve_auto(GP_DTYPE_F32, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_BF16);
    assert_int_equal(gp_dtype_resolve_auto(GP_DTYPE_I32, &d), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "I32"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_f32),
        cmocka_unit_test(test_between_halves),
        cmocka_unit_test(test_fp16_range_refused),
        cmocka_unit_test(test_bad_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
