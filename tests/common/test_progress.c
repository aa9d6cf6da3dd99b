/* Progress: the one text of a phase's start, updates and end (bytes in the
 * total's unit, counts, the estimate of the rest), the throttle that keeps
 * updates to ten a second, and the host memory figure with its test hook. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_common.h"

static void expect_text(const gp_progress *p, const char *want)
{
    char buf[256];
    gp_progress_format(p, buf, sizeof buf);
    if (strcmp(buf, want))
        fail_msg("got '%s', wanted '%s'", buf, want);
}

static void test_format_bytes(void **state)
{
    (void)state;
    gp_progress p = {.event = GP_PROGRESS_START, .what = "synthesizing weights", .unit = "B",
                     .total = 16060000000ull};
    expect_text(&p, "synthesizing weights: 16.06 GB");
    p.event = GP_PROGRESS_UPDATE;
    p.done = 4015000000ull;
    p.elapsed_s = 4.0;
    expect_text(&p, "synthesizing weights: 4.01 of 16.06 GB (25%), 1.00 GB/s, 4.0 s, ~12.0 s left");
    p.event = GP_PROGRESS_END;
    p.done = p.total;
    p.elapsed_s = 100.0;
    expect_text(&p, "synthesizing weights: 16.06 GB in 1 min 40 s, 0.16 GB/s");
    p.done = 1000000000ull;
    expect_text(&p, "synthesizing weights: stopped at 1.00 of 16.06 GB after 1 min 40 s");
    /* a small total in its own unit */
    p = (gp_progress){.event = GP_PROGRESS_START, .what = "loading weights", .unit = "B", .total = 180860};
    expect_text(&p, "loading weights: 180.86 kB");
    char b[32];
    assert_string_equal(gp_format_bytes(4190000, b, sizeof b), "4.19 MB");
}

static void test_format_counts(void **state)
{
    (void)state;
    gp_progress p = {.event = GP_PROGRESS_UPDATE, .what = "calibrating", .unit = "tokens", .done = 300,
                     .total = 1024, .elapsed_s = 7500.0};
    expect_text(&p, "calibrating: 300 of 1024 tokens (29%), 0.04 tokens/s, 2 h 05 min, ~5 h 01 min left");
    p.elapsed_s = 0.0; /* no rate yet: no estimate */
    expect_text(&p, "calibrating: 300 of 1024 tokens (29%), 0.00 tokens/s, 0.0 s");
}

typedef struct seen {
    int start, update, end;
    uint64_t last_done;
} seen;

static void count(void *ctx, const gp_progress *p)
{
    seen *s = ctx;
    s->start += p->event == GP_PROGRESS_START;
    s->update += p->event == GP_PROGRESS_UPDATE;
    s->end += p->event == GP_PROGRESS_END;
    s->last_done = p->done;
}

static void test_throttle(void **state)
{
    (void)state;
    seen s = {0};
    gp_progress_cb cb = {count, &s};
    gp_progress_run r;
    gp_progress_begin(&r, &cb, "x", "tokens", 1000000);
    for (uint64_t i = 1; i <= 1000000; i++)
        gp_progress_update(&r, i);
    gp_progress_end(&r, 1000000);
    assert_int_equal(s.start, 1);
    assert_int_equal(s.end, 1);
    assert_int_equal(s.last_done, 1000000);
    /* a million updates in far less than 100 s: at most ten a second pass */
    assert_true(s.update < 1000);
    /* no callback: nothing happens */
    gp_progress_begin(&r, NULL, "x", "tokens", 10);
    gp_progress_update(&r, 5);
    gp_progress_end(&r, 10);
}

static void test_host_mem(void **state)
{
    (void)state;
    uint64_t b = 0;
    const char *how = NULL;
    unsetenv("GP_FAULT_MEM_AVAILABLE");
    assert_int_equal(gp_host_mem_available(&b, &how), GP_OK);
    assert_true(b > 0);
    assert_non_null(how);
    setenv("GP_FAULT_MEM_AVAILABLE", "123456", 1);
    assert_int_equal(gp_host_mem_available(&b, &how), GP_OK);
    assert_int_equal(b, 123456);
    assert_non_null(strstr(how, "GP_FAULT_MEM_AVAILABLE"));
    setenv("GP_FAULT_MEM_AVAILABLE", "12G", 1);
    assert_int_equal(gp_host_mem_available(&b, &how), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "GP_FAULT_MEM_AVAILABLE = '12G'"));
    unsetenv("GP_FAULT_MEM_AVAILABLE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_format_counts),
        cmocka_unit_test(test_throttle),
        cmocka_unit_test(test_host_mem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
