/* What every cmocka test of the project shares: a check that a call
 * returned GP_OK, failing the test with the status and the library's own
 * message (gp_last_error) so a failure says why without a debugger. */
#ifndef GP_TEST_H
#define GP_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gp_common.h"

/* expr must return GP_OK. */
#define GP_CHECK_OK(expr)                                                                        \
    do {                                                                                         \
        gp_status gp_check_s_ = (expr);                                                          \
        if (gp_check_s_ != GP_OK)                                                                \
            fail_msg("%s -> %s: %s", #expr, gp_status_str(gp_check_s_), gp_last_error());        \
    } while (0)

#endif
