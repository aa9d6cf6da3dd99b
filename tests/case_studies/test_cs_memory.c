/* The checks decode_pipeline_case_study makes before allocating, without a
 * GPU: a workload whose weights (or their --vram-budget) + KV cache +
 * activations exceed the GPU's free memory is refused naming both byte counts
 * and the parts; the batch
 * sizes of an uneven micro-batch split are named in the report's notes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gp_case_study.h"

#define GIB (1024ull * 1024ull * 1024ull)

static void test_fits(void **state)
{
    (void)state;
    gp_cs_memory m = { .weights = 15 * GIB, .kv_cache = 5 * GIB, .activations = GIB, .pairs = 64ull << 20 };
    uint64_t sum = 21 * GIB + (64ull << 20);
    assert_int_equal(gp_cs_memory_check("w", &m, sum, 80 * GIB), GP_OK); /* exactly full fits */
    assert_int_equal(gp_cs_memory_check("w", &m, 79 * GIB, 80 * GIB), GP_OK);
    gp_cs_memory zero = { 0 };
    assert_int_equal(gp_cs_memory_check(NULL, &zero, 0, 0), GP_OK);
}

static void test_refused(void **state)
{
    (void)state;
    gp_cs_memory m = { .weights = 16060522496ull, .kv_cache = 6 * GIB, .activations = GIB / 2, .pairs = 0 };
    uint64_t sum = 16060522496ull + 6 * GIB + GIB / 2;
    gp_clear_error();
    assert_int_equal(gp_cs_memory_check("--workload large (B 1024, C 384) on model llama3-8b", &m, sum - 1,
                                        24 * GIB), GP_ERR_DEVICE_MEMORY);
    const char *e = gp_last_error();
    char want[256];
    snprintf(want, sizeof want, "--workload large (B 1024, C 384) on model llama3-8b needs %llu bytes",
             (unsigned long long)sum);
    if (!strstr(e, want))
        fail_msg("message lacks '%s': %s", want, e);
    snprintf(want, sizeof want, "but the GPU has %llu bytes", (unsigned long long)(sum - 1));
    if (!strstr(e, want))
        fail_msg("message lacks '%s': %s", want, e);
    assert_non_null(strstr(e, "weights 14.96 + KV cache 6.00 + activations and workspaces 0.50"));
    assert_non_null(strstr(e, "free of 25769803776 (24.00 GiB)"));

    assert_null(strstr(e, "--vram-budget"));

    /* streamed weights: the budget stands where the weights were, and says so */
    gp_cs_memory st = { .weights = 8 * GIB, .weights_streamed = true, .kv_cache = 6 * GIB, .activations = GIB / 2 };
    assert_int_equal(gp_cs_memory_check("w", &st, 14 * GIB + GIB / 2, 80 * GIB), GP_OK);
    assert_int_equal(gp_cs_memory_check("w", &st, 14 * GIB, 24 * GIB), GP_ERR_DEVICE_MEMORY);
    if (!strstr(gp_last_error(), "weights (the --vram-budget) 8.00 + KV cache 6.00 + activations and workspaces 0.50"))
        fail_msg("the streamed weights' line: %s", gp_last_error());

    /* a sum past 64 bits is an error of its own, not a wrapped small number */
    gp_cs_memory huge = { .weights = UINT64_MAX, .kv_cache = 1 };
    assert_int_equal(gp_cs_memory_check("x", &huge, UINT64_MAX, UINT64_MAX), GP_ERR_OVERFLOW);
    assert_non_null(strstr(gp_last_error(), "overflow"));
    assert_int_equal(gp_cs_memory_check("x", NULL, 1, 1), GP_ERR_INVALID_ARG);
}

static gp_cs_options opts(const char *workloads, const char *micro)
{
    gp_cs_options o;
    char *argv[] = { "decode_pipeline_case_study", "--workload", (char *)workloads, "--micro-batches",
                     (char *)micro, NULL };
    FILE *devnull = fopen("/dev/null", "w");
    int rc = gp_cs_parse_args(5, argv, &o, devnull, devnull);
    fclose(devnull);
    if (rc != 0)
        fail_msg("--workload %s --micro-batches %s: parse returned %d", workloads, micro, rc);
    return o;
}

static void test_micro_note(void **state)
{
    (void)state;
    char note[512];
    gp_cs_options o = opts("small,large", "1,2,4");
    gp_cs_micro_note(&o, note, sizeof note);
    assert_string_equal(note, ""); /* 8 and 1024 split evenly */

    o = opts("large,10:64", "1,3,4");
    gp_cs_micro_note(&o, note, sizeof note);
    assert_string_equal(note, "large: B 1024 with M 3: micro-batches of 342+341+341 rows; "
                              "10:64: B 10 with M 3: micro-batches of 4+3+3 rows; "
                              "10:64: B 10 with M 4: micro-batches of 3+3+2+2 rows "
                              "(M does not divide B: the first B mod M get one row more).");
    /* too small a buffer drops whole sentences, never cuts one */
    char small[60];
    gp_cs_micro_note(&o, small, sizeof small);
    assert_string_equal(small, "large: B 1024 with M 3: micro-batches of 342+341+341 rows");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_micro_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
