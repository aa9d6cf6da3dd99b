/* What every cmocka test of the project shares: checks of a call's status
 * that fail the test with the status and the library's own message
 * (gp_last_error), so a failure says why without a debugger. */
#ifndef GP_TEST_H
#define GP_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "gp_common.h"

/* expr must return GP_OK. */
#define GP_CHECK_OK(expr)                                                                        \
    do {                                                                                         \
        gp_status gp_check_s_ = (expr);                                                          \
        if (gp_check_s_ != GP_OK)                                                                \
            fail_msg("%s -> %s: %s", #expr, gp_status_str(gp_check_s_), gp_last_error());        \
    } while (0)

/* expr must fail with status s and a message containing needle: a refusal
 * is only useful if it says what was wrong. */
#define GP_CHECK_FAIL(expr, s, needle)                                                           \
    do {                                                                                         \
        gp_clear_error();                                                                        \
        gp_status gp_check_s_ = (expr);                                                          \
        if (gp_check_s_ != (s))                                                                  \
            fail_msg("%s -> %s, expected %s (%s)", #expr, gp_status_str(gp_check_s_),            \
                     gp_status_str(s), gp_last_error());                                         \
        if (!strstr(gp_last_error(), (needle)))                                                  \
            fail_msg("%s: message '%s' lacks '%s'", #expr, gp_last_error(), (needle));           \
    } while (0)

/* How far a logits vector (or any vector) is from a reference:
 * max|a - ref| / max|ref| (max|a - ref| when ref is all zeros); infinite
 * when a difference is NaN, so a poisoned value always fails a tolerance. */
static inline double gp_test_rel_err(const float *a, const float *ref, int n)
{
    double md = 0.0, mr = 0.0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return isnan(md) ? INFINITY : mr > 0.0 ? md / mr : md;
}

/* Uniform in [0, 1) from a splitmix64 stream: the tests' seeded data. */
static inline double gp_test_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* A fresh directory /tmp/<tag>_XXXXXX into buf (a fixture's setup: 0 on
 * success, -1 otherwise), and its removal with everything in it (teardown). */
static inline int gp_test_tmpdir_make(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/%s_XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}
static inline int gp_test_tmpdir_remove(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
