/* $GP_PDL, read once per process (common/device_pdl.c): a value other than
 * 0 or 1 is an error of gp_pdl_check naming the variable, and the launches
 * then go without programmatic dependencies. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_device.h"

static void test_bad_value(void **state)
{
    (void)state;
    setenv("GP_PDL", "2", 1); /* before the first read: the process keeps what it read */
    assert_int_equal(gp_pdl_check(), GP_ERR_INVALID_ARG);
    const char *m = gp_last_error();
    if (!strstr(m, "GP_PDL") || !strstr(m, "0..1"))
        fail_msg("message '%s' lacks the variable or the range", m);
    assert_int_equal(gp_pdl_enabled(), 0);
    setenv("GP_PDL", "1", 1); /* read once: still refused */
    assert_int_equal(gp_pdl_check(), GP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bad_value)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
