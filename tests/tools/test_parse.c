/* Tests of the command-line parsers: every accepted form and every rejected
 * one, with the message naming the bad value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gp_tools.h"

static void expect_error(gp_status st, const char *needle)
{
    assert_int_equal(st, GP_ERR_INVALID_ARG);
    if (!strstr(gp_last_error(), needle))
        fail_msg("message '%s' does not mention '%s'", gp_last_error(), needle);
}

static void test_long(void **state)
{
    (void)state;
    long v = 0;
    assert_int_equal(gp_parse_long("42", 1, 100, "--steps", &v), GP_OK);
    assert_int_equal(v, 42);
    expect_error(gp_parse_long("abc", 1, 100, "--steps", &v), "'abc' is not an integer");
    expect_error(gp_parse_long("4x", 1, 100, "--steps", &v), "--steps");
    expect_error(gp_parse_long("", 1, 100, "--steps", &v), "empty");
    expect_error(gp_parse_long("0", 1, 100, "--steps", &v), "[1, 100]");
    expect_error(gp_parse_long("101", 1, 100, "--steps", &v), "out of range");
    expect_error(gp_parse_long("99999999999999999999", 1, 100, "--steps", &v), "out of range");
    expect_error(gp_parse_long(" 5", 1, 100, "--steps", &v), "not an integer");
}

/* A path: refused when empty or when it is the next flag. */
static void test_long_list(void **state)
{
    (void)state;
    long v[3];
    int n = -1;
    assert_int_equal(gp_parse_long_list("8,64,1", 1, 64, "--batch", v, 3, &n), GP_OK);
    assert_int_equal(n, 3);
    assert_true(v[0] == 8 && v[1] == 64 && v[2] == 1);
    assert_int_equal(gp_parse_long_list("5", 1, 64, "--batch", v, 3, &n), GP_OK);
    assert_int_equal(n, 1);
    expect_error(gp_parse_long_list("1,2,3,4", 1, 64, "--batch", v, 3, &n), "up to 3");
    expect_error(gp_parse_long_list("1,,2", 1, 64, "--batch", v, 3, &n), "'1,,2'");
    expect_error(gp_parse_long_list("1,", 1, 64, "--batch", v, 3, &n), "comma-separated");
    expect_error(gp_parse_long_list("", 1, 64, "--batch", v, 3, &n), "empty list");
    expect_error(gp_parse_long_list("1,65", 1, 64, "--batch", v, 3, &n), "65 is out of range");
    expect_error(gp_parse_long_list("1,x", 1, 64, "--batch", v, 3, &n), "'x' is not an integer");
}

static void test_path(void **state)
{
    (void)state;
    assert_int_equal(gp_parse_path("out.json", "--out"), GP_OK);
    assert_int_equal(gp_parse_path("-", "--out"), GP_OK); /* a file named "-" is a path */
    assert_int_equal(gp_parse_path("--steps", "--out"), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "--out '--steps': looks like a flag, not a file"));
    assert_int_equal(gp_parse_path("", "--out"), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "--out '': empty path; allowed: a file path"));
    assert_int_equal(gp_parse_path(NULL, "--out"), GP_ERR_INVALID_ARG);
}

static void test_size(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(gp_parse_size("4G", "--vram-budget", &v), GP_OK);
    assert_true(v == 4ull << 30);
    assert_int_equal(gp_parse_size("512M", "--vram-budget", &v), GP_OK);
    assert_true(v == 512ull << 20);
    assert_int_equal(gp_parse_size("16g", "--vram-budget", &v), GP_OK);
    assert_true(v == 16ull << 30);
    assert_int_equal(gp_parse_size("3k", "--vram-budget", &v), GP_OK);
    assert_true(v == 3072);
    assert_int_equal(gp_parse_size("2T", "--vram-budget", &v), GP_OK);
    assert_true(v == 2ull << 40);
    assert_int_equal(gp_parse_size("1073741824", "--vram-budget", &v), GP_OK);
    assert_true(v == 1073741824ull);
    assert_int_equal(gp_parse_size("16777215T", "--vram-budget", &v), GP_OK);
    assert_true(v == 16777215ull << 40);
    expect_error(gp_parse_size("", "--vram-budget", &v), "--vram-budget: '' is not a size");
    expect_error(gp_parse_size("G", "--vram-budget", &v), "'G' is not a size");
    /* IEC names binary, SI names decimal, any case */
    assert_int_equal(gp_parse_size("4GiB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(gp_parse_size("4gib", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 4ull << 30);
    assert_int_equal(gp_parse_size("3KiB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 3ull << 10);
    assert_int_equal(gp_parse_size("2TiB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 2ull << 40);
    assert_int_equal(gp_parse_size("512MiB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(gp_parse_size("4GB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 4000000000ull);
    assert_int_equal(gp_parse_size("4gb", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 4000000000ull);
    assert_int_equal(gp_parse_size("1MB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 1000000ull);
    assert_int_equal(gp_parse_size("7kB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 7000ull);
    assert_int_equal(gp_parse_size("2TB", "--vram-budget", &v), GP_OK);
    assert_int_equal(v, 2000000000000ull);
    expect_error(gp_parse_size("4Q", "--vram-budget", &v), "'4Q' is not a size; expected");
    expect_error(gp_parse_size("4GiBs", "--vram-budget", &v), "'4GiBs'");
    expect_error(gp_parse_size("4Gi", "--vram-budget", &v), "'4Gi'");
    expect_error(gp_parse_size("4B", "--vram-budget", &v), "'4B'");
    expect_error(gp_parse_size("18446744073709552TB", "--vram-budget", &v), "out of range");
    expect_error(gp_parse_size("4 G", "--vram-budget", &v), "'4 G'");
    expect_error(gp_parse_size("1.5G", "--vram-budget", &v), "'1.5G'");
    expect_error(gp_parse_size("-4G", "--vram-budget", &v), "'-4G'");
    expect_error(gp_parse_size(" 4G", "--vram-budget", &v), "' 4G'");
    expect_error(gp_parse_size("4X", "--vram-budget", &v), "KB, MB, GB, TB (decimal");
    expect_error(gp_parse_size("0", "--vram-budget", &v), "zero");
    expect_error(gp_parse_size("0G", "--vram-budget", &v), "zero");
    expect_error(gp_parse_size("16777216T", "--vram-budget", &v), "out of range");
    expect_error(gp_parse_size("99999999999999999999", "--vram-budget", &v), "out of range");
}

static void test_double(void **state)
{
    (void)state;
    double v = -1;
    assert_int_equal(gp_parse_double("0.7", "--top-p", &v), GP_OK);
    assert_true(v == 0.7);
    assert_int_equal(gp_parse_double("1e-3", "--temperature", &v), GP_OK);
    assert_true(v == 1e-3);
    assert_int_equal(gp_parse_double("0", "--temperature", &v), GP_OK);
    assert_true(v == 0.0);
    expect_error(gp_parse_double("", "--top-p", &v), "--top-p: '' is not a number");
    expect_error(gp_parse_double(" 1", "--top-p", &v), "not a number");
    expect_error(gp_parse_double("0.5x", "--top-p", &v), "'0.5x' is not a finite decimal number");
    expect_error(gp_parse_double("nan", "--top-p", &v), "not a finite");
    expect_error(gp_parse_double("inf", "--temperature", &v), "not a finite");
    expect_error(gp_parse_double("0x1p-2", "--temperature", &v), "not a finite decimal");
    expect_error(gp_parse_double("1e999", "--temperature", &v), "not a finite");
    expect_error(gp_parse_double("1e-999", "--temperature", &v), "out of range");
}

static void test_u64(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(gp_parse_u64("18446744073709551615", "--seed", &v), GP_OK);
    assert_true(v == UINT64_MAX);
    expect_error(gp_parse_u64("-1", "--seed", &v), "--seed");
    expect_error(gp_parse_u64("18446744073709551616", "--seed", &v), "out of range");
    expect_error(gp_parse_u64("1.5", "--seed", &v), "not a non-negative integer");
}

static void test_prompts_ok(void **state)
{
    (void)state;
    gp_prompts p;
    assert_int_equal(gp_parse_prompts("5,17,42;11, 400 ,2", &p), GP_OK);
    assert_int_equal(p.n_seqs, 2);
    assert_int_equal(p.lens[0], 3);
    assert_int_equal(p.lens[1], 3);
    assert_int_equal(p.offsets[1], 3);
    const int32_t want[] = {5, 17, 42, 11, 400, 2};
    assert_memory_equal(p.ids, want, sizeof want);
    gp_prompts_free(&p);

    assert_int_equal(gp_parse_prompts("7", &p), GP_OK);
    assert_int_equal(p.n_seqs, 1);
    assert_int_equal(p.ids[0], 7);
    gp_prompts_free(&p);

    assert_int_equal(gp_parse_prompts("2147483647;0", &p), GP_OK);
    assert_int_equal(p.ids[0], 2147483647);
    gp_prompts_free(&p);
}

static void test_prompts_bad(void **state)
{
    (void)state;
    gp_prompts p;
    expect_error(gp_parse_prompts("", &p), "empty");
    expect_error(gp_parse_prompts("1,2;", &p), "sequence 1 is empty");
    expect_error(gp_parse_prompts(";1", &p), "sequence 0 is empty");
    expect_error(gp_parse_prompts("1,,2", &p), "empty token id");
    expect_error(gp_parse_prompts("1,x", &p), "'x'");
    expect_error(gp_parse_prompts("1,-3", &p), "'-3'");
    expect_error(gp_parse_prompts("2147483648", &p), "too large");
    expect_error(gp_parse_prompts("99999999999999", &p), "too large");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_long_list),
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_path),
        cmocka_unit_test(test_double),
        cmocka_unit_test(test_prompts_ok),
        cmocka_unit_test(test_prompts_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
