/* Shared by the fuzz targets: the libFuzzer entry point and the checks every
 * target makes (a failure must be an error status with a message). */
#ifndef GP_FUZZ_TARGET_H
#define GP_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gp_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* abort() is what libFuzzer and the replay test both report as a crash, with
 * the input that caused it. */
#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz check failed: %s: ", #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A parser returned s after gp_clear_error(): an error must be negative (a
 * parser has no soft outcomes) and must have left a message. */
static inline void fuzz_check_failure(gp_status s, const char *who)
{
    const char *msg = gp_last_error();
    FUZZ_REQUIRE(s < 0, "%s returned %d (%s), not an error status", who, (int)s, gp_status_str(s));
    FUZZ_REQUIRE(msg && msg[0], "%s returned %d (%s) without a gp_last_error() message", who,
                 (int)s, gp_status_str(s));
}

#endif
