/* The profile a default run follows: the shipped H100 profile parses and
 * says where its figures came from; it applies only to the device it names
 * (name, SM count, compute capability); there its measurement gives the
 * best-known row (24:108 qkvo-f M=2, tuned GEMMs, on the large workload),
 * elsewhere its cold-start rule; and a broken profile is refused naming the
 * file and the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_case_study.h"

#define HAS(text, part)                                                                                            \
    do {                                                                                                           \
        if (!strstr((text), (part)))                                                                               \
            fail_msg("\"%s\" does not mention \"%s\"", (text), (part));                                            \
    } while (0)

static const gp_sm_info H100 = {.sm_count = 132, .min_partition = 8, .alignment = 8, .groups = 15};
static const gp_cs_device H100_DEV = {.name = "NVIDIA H100 80GB HBM3", .sm_count = 132, .cc_major = 9};
static const gp_cs_workload LARGE = {.B = 1024, .C = 384, .label = "large"};
static const gp_cs_workload SMALL = {.B = 8, .C = 1024, .label = "small"};
static gp_config g_cfg;
static char g_dir[256];

static int setup(void **state)
{
    if (gp_config_preset("llama3-8b", &g_cfg) != GP_OK)
        return -1;
    return gp_test_tmpdir_make(g_dir, sizeof g_dir, "gp_cs_profile");
}

static int teardown(void **state)
{
    return gp_test_tmpdir_remove(g_dir);
}

static gp_cs_tuning *shipped(void)
{
    gp_cs_tuning *t = NULL;
    GP_CHECK_OK(gp_cs_tuning_read(GP_CS_SHIPPED_PROFILE, &t));
    return t;
}

static void test_shipped_parses(void **state)
{
    gp_cs_tuning *t = shipped();
    assert_string_equal(gp_cs_tuning_name(t), "h100-sxm");
    HAS(gp_cs_tuning_source(t), "docs/PERFORMANCE.md");
    HAS(gp_cs_tuning_source(t), "b15143d");
    HAS(gp_cs_tuning_source(t), "2026-11-22");
    gp_cs_tuning_free(t);
}

static void test_device_match(void **state)
{
    gp_cs_tuning *t = shipped();
    char why[256];
    assert_true(gp_cs_tuning_device_matches(t, &H100_DEV, why, sizeof why));
    gp_cs_device d = H100_DEV;
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    assert_false(gp_cs_tuning_device_matches(t, &d, why, sizeof why));
    HAS(why, "NVIDIA H200");
    d = H100_DEV;
    d.sm_count = 114; /* a PCIe part under the same name would differ here */
    assert_false(gp_cs_tuning_device_matches(t, &d, why, sizeof why));
    HAS(why, "114 SMs");
    d = H100_DEV;
    d.cc_minor = 1;
    assert_false(gp_cs_tuning_device_matches(t, &d, why, sizeof why));
    HAS(why, "compute capability 9.1");
    assert_false(gp_cs_tuning_device_matches(NULL, &d, NULL, 0));
    gp_cs_tuning_free(t);
}

/* On the H100: the measured 1.03x configuration for large, seq for small. */
static void test_best_known(void **state)
{
    gp_cs_tuning *t = shipped();
    gp_cs_profile_choice c;
    GP_CHECK_OK(gp_cs_profile_choose(t, &H100_DEV, &g_cfg, &H100, &LARGE, &c));
    assert_true(c.best_known);
    assert_true(c.row);
    assert_false(c.choice.seq);
    assert_int_equal(c.choice.attn_sms, 24);
    assert_int_equal(c.choice.M, 2);
    assert_int_equal(c.choice.depth, 4);
    assert_int_equal(c.choice.placement, GP_PLACE_QKVO_F);
    assert_int_equal(c.choice.gemm_tune, 16);
    assert_string_equal(c.tag, "best-known (h100-sxm)");
    HAS(c.note, "large");
    HAS(c.note, "39.330 ms");
    GP_CHECK_OK(gp_cs_profile_choose(t, &H100_DEV, &g_cfg, &H100, &SMALL, &c));
    assert_true(c.best_known);
    assert_true(c.choice.seq);
    assert_false(c.row);
    HAS(c.note, "seq");
    gp_cs_tuning_free(t);
}

/* Another GPU of the same SM count: the rule, which the measured points
 * put at the same split for large and at seq for small; an unmeasured
 * workload on the H100 gets the rule too. */
static void test_cold_start(void **state)
{
    gp_cs_tuning *t = shipped();
    gp_cs_device d = H100_DEV;
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    gp_cs_profile_choice c;
    GP_CHECK_OK(gp_cs_profile_choose(t, &d, &g_cfg, &H100, &LARGE, &c));
    assert_false(c.best_known);
    assert_true(c.row);
    assert_string_equal(c.tag, "cold-start rule");
    assert_int_equal(c.choice.attn_sms, 24);
    assert_int_equal(c.choice.M, 2);
    assert_int_equal(c.choice.placement, GP_PLACE_QKVO_F);
    assert_int_equal(c.choice.gemm_tune, 16);
    HAS(c.note, "NVIDIA H200");
    GP_CHECK_OK(gp_cs_profile_choose(t, &d, &g_cfg, &H100, &SMALL, &c));
    assert_false(c.row);
    assert_true(c.choice.seq);
    /* a smaller GPU: the rule's share rounded to its own partitions */
    gp_sm_info small_gpu = {.sm_count = 66, .min_partition = 8, .alignment = 8, .groups = 8};
    d.sm_count = 66;
    GP_CHECK_OK(gp_cs_profile_choose(t, &d, &g_cfg, &small_gpu, &LARGE, &c));
    assert_true(c.row);
    assert_true(c.choice.attn_sms % 8 == 0 && c.choice.attn_sms >= 8 && c.choice.attn_sms < 66);
    /* the H100 itself, on a workload the profile did not measure */
    gp_cs_workload w = {.B = 4, .C = 64, .label = "4:64"};
    GP_CHECK_OK(gp_cs_profile_choose(t, &H100_DEV, &g_cfg, &H100, &w, &c));
    assert_false(c.best_known);
    assert_string_equal(c.tag, "cold-start rule");
    HAS(c.note, "no measurement of this workload");
    /* another model shape: its measurements do not apply */
    gp_config tiny;
    GP_CHECK_OK(gp_config_preset("tiny", &tiny));
    GP_CHECK_OK(gp_cs_profile_choose(t, &H100_DEV, &tiny, &H100, &LARGE, &c));
    assert_false(c.best_known);
    gp_cs_tuning_free(t);
}

/* The shipped file with one substitution, written to name, then read. */
static gp_status read_edited(const char *from, const char *to, const char *name, gp_cs_tuning **t)
{
    char *text = NULL;
    size_t n = 0;
    GP_CHECK_OK(gp_read_file(GP_CS_SHIPPED_PROFILE, (size_t)1 << 20, &text, &n));
    char *at = strstr(text, from);
    if (!at)
        fail_msg("the shipped profile has no \"%s\" to edit", from);
    char path[300];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    fclose(f);
    free(text);
    return gp_cs_tuning_read(path, t);
}

static void bad_edit(const char *from, const char *to, const char *name, const char *field)
{
    gp_cs_tuning *t = NULL;
    gp_status st = read_edited(from, to, name, &t);
    if (st == GP_OK)
        fail_msg("%s: read although %s was broken", name, field);
    assert_null(t);
    HAS(gp_last_error(), name);
    HAS(gp_last_error(), field);
}

static void test_bad_profiles(void **state)
{
    bad_edit("\"names\": [", "\"nomen\": [", "no_names.json", "device.names");
    bad_edit("\"compute_capability\": \"9.0\"", "\"compute_capability\": \"nine\"", "bad_cc.json",
             "device.compute_capability");
    bad_edit("\"sm_count\": 132,\n  \"compute", "\"sm_count\": \"132\",\n  \"compute", "bad_sms.json",
             "device.sm_count");
    bad_edit("\"commit\": \"b15143d\",\n  \"date\"", "\"date\"", "no_commit.json", "source.commit");
    bad_edit("\"gemm_tune\": 16,\n   \"ms\"", "\"gemm_tune\": 99999,\n   \"ms\"", "bad_tune.json", "best[0].gemm_tune");
    bad_edit("\"name\": \"h100-sxm\"", "\"name\": 7", "bad_name.json", "name");
    bad_edit("\"placement\": \"qkvo-f\"", "\"placement\": \"qkvo-x\"", "bad_place.json", "best[0].placement");
    /* a profile without device or source (an --autotune profile) reads, and
     * applies to no device: its rows follow the rule */
    gp_cs_tuning *t = NULL;
    GP_CHECK_OK(read_edited("\"device\": {", "\"device_unused\": {", "no_device.json", &t));
    assert_false(gp_cs_tuning_device_matches(t, &H100_DEV, NULL, 0));
    gp_cs_profile_choice c;
    GP_CHECK_OK(gp_cs_profile_choose(t, &H100_DEV, &g_cfg, &H100, &LARGE, &c));
    assert_false(c.best_known);
    assert_string_equal(c.tag, "cold-start rule");
    gp_cs_tuning_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_parses),
        cmocka_unit_test(test_device_match),
        cmocka_unit_test(test_best_known),
        cmocka_unit_test(test_cold_start),
        cmocka_unit_test(test_bad_profiles),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
