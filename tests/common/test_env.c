/* gp_env_int, the one parser of the library's environment variables: the
 * default when unset or empty, the value when it is an integer in range, and
 * an error naming the variable, the value and the range for anything else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_common.h"

#define VAR "GP_TEST_ENV_INT"

static void expect_refused(const char *value, const char *needle)
{
    setenv(VAR, value, 1);
    long out = 12345;
    assert_int_equal(gp_env_int(VAR, -5, 100, 7, &out), GP_ERR_INVALID_ARG);
    assert_int_equal(out, 12345); /* untouched */
    const char *m = gp_last_error();
    if (!strstr(m, VAR) || !strstr(m, "-5..100") || !strstr(m, needle))
        fail_msg("'%s': message '%s' lacks the variable, the range or '%s'", value, m, needle);
}

static void test_default(void **state)
{
    (void)state;
    long out = 0;
    unsetenv(VAR);
    assert_int_equal(gp_env_int(VAR, -5, 100, 7, &out), GP_OK);
    assert_int_equal(out, 7);
    setenv(VAR, "", 1);
    out = 0;
    assert_int_equal(gp_env_int(VAR, -5, 100, 7, &out), GP_OK);
    assert_int_equal(out, 7);
    unsetenv(VAR);
}

static void test_values(void **state)
{
    (void)state;
    static const struct { const char *s; long v; } ok[] = {
        { "0", 0 }, { "-5", -5 }, { "100", 100 }, { "42", 42 }, { "+3", 3 }, { " 9", 9 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        setenv(VAR, ok[i].s, 1);
        long out = -99;
        assert_int_equal(gp_env_int(VAR, -5, 100, 7, &out), GP_OK);
        assert_int_equal(out, ok[i].v);
    }
    unsetenv(VAR);
}

static void test_refused(void **state)
{
    (void)state;
    expect_refused("abc", "'abc'");
    expect_refused("12x", "'12x'");
    expect_refused("1.5", "'1.5'");
    expect_refused("9 ", "'9 '");
    expect_refused("-", "'-'");
    expect_refused("101", "'101'");
    expect_refused("-6", "'-6'");
    expect_refused("99999999999999999999999", "not an integer"); /* overflows long */
    unsetenv(VAR);
}

static void test_bad_calls(void **state)
{
    (void)state;
    long out;
    assert_int_equal(gp_env_int(NULL, 0, 1, 0, &out), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_env_int(VAR, 0, 1, 0, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_env_int(VAR, 0, 1, 2, &out), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "default 2"));
    assert_int_equal(gp_env_int(VAR, 3, 1, 2, &out), GP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests_name("gp_env_int", tests, NULL, NULL) ? 1 : 0;
}
