/* The tuning profile: written rows read back, the best measured configuration
 * per workload, a cold-start rule consistent with the data (splits where they
 * won, seq where they lost), the measurement chosen over the rule for a
 * workload the profile holds, seq everywhere when no split wins, and errors
 * naming the file and the field for missing, corrupt or incomplete
 * profiles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <jansson.h>
#include <math.h>
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
static gp_config g_cfg;
static char g_dir[256];

static int setup(void **state)
{
    if (gp_config_preset("llama3-8b", &g_cfg) != GP_OK)
        return -1;
    return gp_test_tmpdir_make(g_dir, sizeof g_dir, "gp_cs_tuning");
}

static int teardown(void **state)
{
    return gp_test_tmpdir_remove(g_dir);
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
}

static gp_cs_meta meta(void)
{
    gp_cs_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.gpu, sizeof m.gpu, "NVIDIA H100 80GB HBM3");
    m.sm_count = 132;
    snprintf(m.driver, sizeof m.driver, "580.00");
    snprintf(m.cuda, sizeof m.cuda, "13.0");
    snprintf(m.commit, sizeof m.commit, "test");
    snprintf(m.model, sizeof m.model, "llama3-8b");
    snprintf(m.timestamp, sizeof m.timestamp, "2026-01-01T00:00:00Z");
    return m;
}

/* rows written as a profile to name in the test folder, and read back. */
static gp_cs_tuning *profile_of(const gp_cs_row *rows, int n, const char *name)
{
    gp_cs_meta m = meta();
    char path[300];
    path_of(path, sizeof path, name);
    GP_CHECK_OK(gp_cs_tuning_write(path, &m, &g_cfg, rows, n));
    gp_cs_tuning *t;
    GP_CHECK_OK(gp_cs_tuning_read(path, &t));
    return t;
}

/* a = 0: the seq row. ms < 0: a failed row. */
static gp_cs_row row(const char *wl, int B, int C, int a, int M, unsigned depth, double ms)
{
    gp_cs_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.workload, sizeof r.workload, "%s", wl);
    r.B = B;
    r.C = C;
    r.seq = a == 0;
    if (a > 0)
        r.split = (gp_split_info){.a_req = a, .f_req = 132 - a, .a_got = a, .f_got = 132 - a, .partitioned = true,
                                  .unit = "SMs"};
    else
        r.split = (gp_split_info){.a_got = 132, .f_got = 132, .unit = "SMs"};
    r.M = a > 0 ? M : 1;
    r.depth = depth;
    r.rebalance = GP_REBALANCE_OFF;
    r.ok = ms > 0;
    if (r.ok) {
        r.ms_median = r.ms_min = r.ms_max = ms;
        r.tokens_per_s = B / (ms / 1e3);
        r.n_samples = 5;
    } else {
        snprintf(r.error, sizeof r.error, "cuBLAS: CUBLAS_STATUS_EXECUTION_FAILED on the %d-SM partition", a);
    }
    return r;
}

/* Workloads: "large" (B=1024, C=384) and "2048:192" where splits win at A =
 * 48 and 40, "small" (B=8, C=1024) where seq wins (the measured pattern of
 * docs/ARCHITECTURE.md §6). */
static int mixed_rows(gp_cs_row *r)
{
    int n = 0;
    r[n++] = row("large", 1024, 384, 0, 1, 4, 36.0);
    r[n++] = row("large", 1024, 384, 40, 2, 4, 34.5);
    r[n++] = row("large", 1024, 384, 48, 2, 4, 33.0);
    r[n++] = row("large", 1024, 384, 48, 4, 4, 33.8);
    r[n++] = row("large", 1024, 384, 56, 2, 8, 35.0);
    r[n++] = row("large", 1024, 384, 112, 2, 4, -1);
    r[n] = row("large", 1024, 384, 64, 2, 4, 20.0); /* the rebalancer's row: not a static split */
    r[n++].rebalance = GP_REBALANCE_MODEL;
    r[n++] = row("2048:192", 2048, 192, 0, 1, 4, 40.0);
    r[n++] = row("2048:192", 2048, 192, 40, 2, 8, 38.0);
    r[n++] = row("2048:192", 2048, 192, 56, 2, 8, 39.5);
    r[n++] = row("small", 8, 1024, 0, 1, 4, 9.2);
    r[n++] = row("small", 8, 1024, 48, 2, 4, 12.0);
    r[n++] = row("small", 8, 1024, 64, 2, 4, 11.5);
    return n;
}

static void test_round_trip(void **state)
{
    gp_cs_row rows[32];
    int n = mixed_rows(rows);
    gp_cs_meta m = meta();
    char path[300];
    path_of(path, sizeof path, "mixed.json");
    GP_CHECK_OK(gp_cs_tuning_write(path, &m, &g_cfg, rows, n));

    /* the file: every row, error rows with their reason, a best entry per
     * workload, the rule documented */
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "format")), "greenpipe-tuning");
    json_t *jrows = json_object_get(root, "rows");
    assert_int_equal(json_array_size(jrows), n);
    json_t *failed = json_array_get(jrows, 5);
    assert_false(json_is_true(json_object_get(failed, "ok")));
    HAS(json_string_value(json_object_get(failed, "error")), "CUBLAS_STATUS_EXECUTION_FAILED");
    assert_true(json_is_number(json_object_get(json_array_get(jrows, 2), "tokens_per_s")));
    json_t *jbest = json_object_get(root, "best");
    assert_int_equal(json_array_size(jbest), 3);
    json_t *b0 = json_array_get(jbest, 0);
    assert_false(json_is_true(json_object_get(b0, "seq")));
    assert_int_equal(json_integer_value(json_object_get(b0, "attn_sms")), 48);
    assert_true(fabs(json_number_value(json_object_get(b0, "speedup_vs_seq")) - 36.0 / 33.0) < 1e-9);
    assert_true(json_is_true(json_object_get(json_array_get(jbest, 2), "seq")));
    json_t *jrule = json_object_get(root, "rule");
    assert_true(strlen(json_string_value(json_object_get(jrule, "doc"))) > 200);
    assert_true(json_is_true(json_object_get(jrule, "split")));
    assert_int_equal(json_integer_value(json_object_get(jrule, "training_errors")), 0);
    double th = json_number_value(json_object_get(jrule, "threshold"));
    printf("  rule: split if headroom >= %.3f, share = %.4f + %.4f * attn_frac\n", th,
           json_number_value(json_object_get(json_object_get(jrule, "share"), "k0")),
           json_number_value(json_object_get(json_object_get(jrule, "share"), "k1")));
    json_decref(root);

    gp_cs_tuning *t;
    GP_CHECK_OK(gp_cs_tuning_read(path, &t));
    gp_cs_choice rule, best;
    bool found;
    /* measured workloads: the best measured, and a rule that agrees with it */
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 1024, 384, &rule, &best, &found));
    assert_true(found);
    assert_false(best.seq);
    assert_int_equal(best.attn_sms, 48);
    assert_int_equal(best.M, 2);
    assert_int_equal(best.depth, 4);
    assert_true(fabs(best.ms - 33.0) < 1e-9);
    assert_true(fabs(best.attn_share - 48.0 / 132) < 1e-9);
    assert_false(rule.seq);
    assert_int_equal(rule.attn_sms, 48); /* two winners, a line through both */
    assert_int_equal(rule.M, 2);
    assert_int_equal(rule.depth, 4);
    assert_true(rule.ms == 0);
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 2048, 192, &rule, &best, &found));
    assert_true(found && !best.seq && best.attn_sms == 40 && best.depth == 8);
    assert_true(!rule.seq && rule.attn_sms == 40 && rule.depth == 8);
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 8, 1024, &rule, &best, &found));
    assert_true(found && best.seq && best.attn_sms == 0 && best.M == 1);
    assert_true(fabs(best.ms - 9.2) < 1e-9);
    assert_true(rule.seq);
    /* an unmeasured workload: a rule choice only, a valid split */
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 4096, 512, &rule, &best, &found));
    assert_false(found);
    printf("  rule for B=4096 C=512: %s A=%d M=%d depth %u\n", rule.seq ? "seq" : "split", rule.attn_sms, rule.M,
           rule.depth);
    assert_false(rule.seq); /* more headroom than any measured winner */
    assert_true(rule.attn_sms >= 8 && rule.attn_sms <= 112 && rule.attn_sms % 8 == 0);
    gp_split_plan pl;
    GP_CHECK_OK(gp_split_plan_make(&H100, (gp_split_req){rule.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &pl));
    /* small batch, short context: below the threshold like "small" */
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 16, 512, &rule, &best, &found));
    assert_false(found);
    assert_true(rule.seq);
    /* another device: the measurements do not carry over, the rule does */
    gp_sm_info a100 = {.sm_count = 108, .min_partition = 4, .alignment = 2, .groups = 0};
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &a100, 1024, 384, &rule, &best, &found));
    assert_false(found);
    assert_false(rule.seq);
    GP_CHECK_OK(gp_split_plan_make(&a100, (gp_split_req){rule.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &pl));
    /* another model: likewise */
    gp_config small;
    GP_CHECK_OK(gp_config_preset("llama3.2-1b", &small));
    GP_CHECK_OK(gp_cs_tuning_pick(t, &small, &H100, 1024, 384, &rule, &best, &found));
    assert_false(found);
    /* bad workload */
    assert_int_equal(gp_cs_tuning_pick(t, &g_cfg, &H100, 0, 384, &rule, &best, &found), GP_ERR_INVALID_ARG);
    HAS(gp_last_error(), "B=0");
    gp_cs_tuning_free(t);
}

/* No split beats seq anywhere: every best is seq, the rule is seq for every
 * workload, measured or not. */
static void test_seq_wins(void **state)
{
    gp_cs_row rows[8];
    int n = 0;
    rows[n++] = row("small", 8, 1024, 0, 1, 4, 9.2);
    rows[n++] = row("small", 8, 1024, 48, 2, 4, 16.1);
    rows[n++] = row("large", 1024, 384, 0, 1, 4, 32.9);
    rows[n++] = row("large", 1024, 384, 48, 2, 4, 36.3);
    rows[n++] = row("large", 1024, 384, 56, 2, 4, 32.9); /* a tie is not a win */
    gp_cs_meta m = meta();
    char path[300];
    path_of(path, sizeof path, "seq.json");
    GP_CHECK_OK(gp_cs_tuning_write(path, &m, &g_cfg, rows, n));
    json_t *root = json_load_file(path, 0, NULL);
    assert_non_null(root);
    json_t *jrule = json_object_get(root, "rule");
    assert_false(json_is_true(json_object_get(jrule, "split")));
    assert_true(json_is_null(json_object_get(jrule, "threshold")));
    json_decref(root);
    gp_cs_tuning *t;
    GP_CHECK_OK(gp_cs_tuning_read(path, &t));
    const int wl[4][2] = {{8, 1024}, {1024, 384}, {4096, 512}, {64, 2048}};
    for (int i = 0; i < 4; i++) {
        gp_cs_choice rule, best;
        bool found;
        GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, wl[i][0], wl[i][1], &rule, &best, &found));
        assert_true(rule.seq);
        assert_int_equal(rule.attn_sms, 0);
        assert_int_equal(found, i < 2);
        if (found)
            assert_true(best.seq);
    }
    gp_cs_tuning_free(t);
}

/* A measured pattern: the split wins on large (1024:384) but loses on
 * 1024:256, whose model headroom is higher, so no threshold separates them
 * and the cold-start rule splits 1024:256 too. The profile's choice for a
 * workload it measured is the measurement (seq there); the rule still
 * serves workloads it did not measure. */
static void test_choose_measured_over_rule(void **state)
{
    gp_cs_row rows[8];
    int n = 0;
    rows[n++] = row("large", 1024, 384, 0, 1, 4, 40.6);
    rows[n++] = row("large", 1024, 384, 24, 2, 4, 39.3);
    rows[n++] = row("1024:256", 1024, 256, 0, 1, 4, 35.3);
    rows[n++] = row("1024:256", 1024, 256, 24, 2, 4, 37.4);
    gp_cs_tuning *t = profile_of(rows, n, "choose.json");
    gp_cs_choice rule, best, use;
    bool found, measured;
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 1024, 256, &rule, &best, &found));
    assert_false(rule.seq); /* the rule misclassifies it */
    assert_true(found && best.seq);
    GP_CHECK_OK(gp_cs_tuning_choose(t, &g_cfg, &H100, 1024, 256, &use, &measured));
    assert_true(measured && use.seq);
    GP_CHECK_OK(gp_cs_tuning_choose(t, &g_cfg, &H100, 1024, 384, &use, &measured));
    assert_true(measured && !use.seq && use.attn_sms == 24 && use.M == 2);
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 2048, 512, &rule, &best, &found));
    GP_CHECK_OK(gp_cs_tuning_choose(t, &g_cfg, &H100, 2048, 512, &use, &measured));
    assert_false(measured || found);
    assert_true(use.seq == rule.seq && use.attn_sms == rule.attn_sms && use.M == rule.M);
    assert_int_equal(gp_cs_tuning_choose(t, &g_cfg, &H100, 2048, 512, NULL, &measured), GP_ERR_INVALID_ARG);
    gp_cs_tuning_free(t);
}

/* A workload without a seq row: its best split is kept but says nothing about
 * whether splits pay; a workload where nothing ran has no best. */
static void test_partial(void **state)
{
    gp_cs_row rows[4];
    int n = 0;
    rows[n++] = row("large", 1024, 384, 48, 2, 4, 33.0);
    rows[n++] = row("large", 1024, 384, 56, 2, 4, 34.0);
    rows[n++] = row("broken", 512, 512, 48, 2, 4, -1);
    gp_cs_tuning *t = profile_of(rows, n, "partial.json");
    gp_cs_choice rule, best;
    bool found;
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 1024, 384, &rule, &best, &found));
    assert_true(found && !best.seq && best.attn_sms == 48);
    assert_true(rule.seq); /* no workload showed a split beating seq */
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 512, 512, &rule, &best, &found));
    assert_false(found);
    gp_cs_tuning_free(t);
    /* zero rows is a valid, empty profile: seq everywhere */
    t = profile_of(NULL, 0, "partial.json");
    GP_CHECK_OK(gp_cs_tuning_pick(t, &g_cfg, &H100, 1024, 384, &rule, &best, &found));
    assert_true(rule.seq && !found);
    gp_cs_tuning_free(t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_errors(void **state)
{
    gp_cs_tuning *t = (gp_cs_tuning *)&t;
    char path[300];
    /* missing */
    path_of(path, sizeof path, "absent.json");
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_IO);
    assert_null(t);
    HAS(gp_last_error(), path);
    HAS(gp_last_error(), "No such file");
    /* corrupt */
    path_of(path, sizeof path, "corrupt.json");
    write_file(path, "{\"format\": \"greenpipe-tuning\", \"version\": 1,\n  \"rows\": [ 1, 2,");
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    HAS(gp_last_error(), path);
    HAS(gp_last_error(), "not valid JSON (line");
    /* JSON, but not a profile */
    write_file(path, "{\"traceEvents\": []}");
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    HAS(gp_last_error(), path);
    HAS(gp_last_error(), "not a greenpipe tuning profile");
    write_file(path, "[1, 2]");
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    /* a profile missing a field names it */
    gp_cs_row rows[32];
    int n = mixed_rows(rows);
    gp_cs_meta m = meta();
    path_of(path, sizeof path, "cut.json");
    GP_CHECK_OK(gp_cs_tuning_write(path, &m, &g_cfg, rows, n));
    json_t *root = json_load_file(path, 0, NULL);
    json_object_del(json_object_get(json_object_get(root, "rule"), "share"), "k0");
    json_dump_file(root, path, 0);
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    HAS(gp_last_error(), path);
    HAS(gp_last_error(), "rule.share.k0 missing or not a number");
    json_object_set_new(json_object_get(json_object_get(root, "rule"), "share"), "k0", json_real(0));
    json_object_set_new(json_array_get(json_object_get(root, "best"), 1), "M", json_integer(9));
    json_dump_file(root, path, 0);
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    HAS(gp_last_error(), "best[1].M is 9: allowed 1..4");
    json_object_set_new(root, "version", json_integer(7));
    json_dump_file(root, path, 0);
    assert_int_equal(gp_cs_tuning_read(path, &t), GP_ERR_FORMAT);
    HAS(gp_last_error(), "version 7");
    json_decref(root);
    /* unwritable */
    assert_int_equal(gp_cs_tuning_write("/nonexistent-dir/tuning.json", &m, &g_cfg, rows, n), GP_ERR_IO);
    HAS(gp_last_error(), "/nonexistent-dir/tuning.json");
    assert_int_equal(gp_cs_tuning_write(NULL, &m, &g_cfg, rows, n), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_cs_tuning_write(path, &m, &g_cfg, NULL, 3), GP_ERR_INVALID_ARG);
    gp_cs_tuning_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_seq_wins),
        cmocka_unit_test(test_choose_measured_over_rule),
        cmocka_unit_test(test_partial),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
