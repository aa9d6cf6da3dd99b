/* The host's 16-bit float conversions and the --dtype spelling: fp16 round
 * trips every value, rounds to nearest even (ties, subnormals, overflow to
 * infinity, NaN kept quiet), and the parser names what it refuses. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gp_common.h"

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_f16_round_trip_every_value(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
        uint16_t back = gp_f32_to_f16(gp_f16_to_f32((uint16_t)h));
        if (nan)
            assert_true((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu));
        else
            assert_int_equal(back, h);
    }
}

static void test_f16_rounding(void **state)
{
    (void)state;
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even 1. */
    assert_int_equal(gp_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(gp_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even upwards */
    assert_int_equal(gp_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(gp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(gp_f32_to_f16(65519.9f), 0x7bff);  /* below the halfway point to 65536 */
    assert_int_equal(gp_f32_to_f16(65520.0f), 0x7c00);  /* rounds past the largest finite: inf */
    assert_int_equal(gp_f32_to_f16(-1e9f), 0xfc00);
    assert_int_equal(gp_f32_to_f16(0x1p-24f), 0x0001);  /* the smallest subnormal */
    assert_int_equal(gp_f32_to_f16(0x1p-25f), 0x0000);  /* half of it: tie to even zero */
    assert_int_equal(gp_f32_to_f16(0x1.8p-25f), 0x0001);
    assert_int_equal(gp_f32_to_f16(-0.0f), 0x8000);
    uint16_t n = gp_f32_to_f16(bits_f(0x7fc00001u));
    assert_true((n & 0x7c00u) == 0x7c00u && (n & 0x200u));
    assert_true(isinf(gp_f16_to_f32(gp_f32_to_f16(INFINITY))));
}

static void test_round_to(void **state)
{
    (void)state;
    float x = 1.0f + 0x1p-9f; /* exact in fp16, not in bf16 */
    assert_true(gp_round_to(x, GP_DTYPE_F32) == x);
    assert_true(gp_round_to(x, GP_DTYPE_F16) == x);
    assert_true(gp_round_to(x, GP_DTYPE_BF16) == 1.0f);
    assert_true(gp_half_to_f32(gp_f32_to_half(3.0f, GP_DTYPE_F16), GP_DTYPE_F16) == 3.0f);
    assert_true(gp_dtype_is_half(GP_DTYPE_F16) && gp_dtype_is_half(GP_DTYPE_BF16));
    assert_false(gp_dtype_is_half(GP_DTYPE_F32));
}

static void test_dtype_parse(void **state)
{
    (void)state;
    gp_dtype d = GP_DTYPE_COUNT;
    assert_int_equal(gp_dtype_parse("fp16", 0, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_F16);
    assert_int_equal(gp_dtype_parse("bf16", 0, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_BF16);
    assert_int_equal(gp_dtype_parse("fp32", GP_DTYPE_ALLOW_F32, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_F32);
    assert_int_equal(gp_dtype_parse("fp32", 0, &d), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "'fp32'"));
    assert_non_null(strstr(gp_last_error(), "bf16, fp16"));
    assert_int_equal(gp_dtype_parse("float16", GP_DTYPE_ALLOW_F32 | GP_DTYPE_ALLOW_AUTO, &d), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "'float16'"));
    assert_non_null(strstr(gp_last_error(), "auto, bf16, fp16, fp32"));
    assert_int_equal(gp_dtype_parse("auto", GP_DTYPE_ALLOW_AUTO, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_AUTO);
    assert_int_equal(gp_dtype_parse("auto", 0, &d), GP_ERR_INVALID_ARG);
    /* any case, as safetensors and HF's configs spell them */
    assert_int_equal(gp_dtype_parse("BF16", 0, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_BF16);
    assert_int_equal(gp_dtype_parse("Fp16", 0, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_F16);
    assert_int_equal(gp_dtype_parse("FP32", GP_DTYPE_ALLOW_F32, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_F32);
    assert_int_equal(gp_dtype_parse("AUTO", GP_DTYPE_ALLOW_AUTO, &d), GP_OK);
    assert_int_equal(d, GP_DTYPE_AUTO);
    assert_string_equal(gp_dtype_flag_name(GP_DTYPE_F16), "fp16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_round_trip_every_value),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_round_to),
        cmocka_unit_test(test_dtype_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
