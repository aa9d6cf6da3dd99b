/* The device half of --sm-splits with the H100's numbers (132 SMs in 15
 * groups of 8, 12 remainder SMs) and smaller devices: obtained sizes, every
 * refusal naming the split and the allowed values, duplicates after
 * expansion, sweep and the default set, seq first; and the workload presets
 * scaled to a smaller GPU while B:C from the command line stays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gp_case_study.h"

static const gp_sm_info H100 = { 132, 8, 8, 15 };
static const gp_sm_info SM78 = { 78, 8, 8, 0 }; /* 9 x 8 + 6 */
static const gp_sm_info TINY = { 12, 8, 8, 0 }; /* one group: no split */

static gp_cs_options with_splits(const char *list)
{
    gp_cs_options o;
    char *argv[] = { "decode_pipeline_case_study", "--sm-splits", (char *)list, NULL };
    FILE *devnull = fopen("/dev/null", "w");
    int rc = gp_cs_parse_args(list ? 3 : 1, argv, &o, devnull, devnull);
    fclose(devnull);
    if (rc != 0)
        fail_msg("--sm-splits %s: parse returned %d", list, rc);
    return o;
}

static int resolve(const char *list, const gp_sm_info *info, gp_split_side side, gp_split_plan *plans, int cap)
{
    gp_cs_options o = with_splits(list);
    int n = -1;
    gp_status st = gp_cs_resolve_splits(&o, info, side, plans, cap, &n);
    if (st != GP_OK)
        fail_msg("--sm-splits %s: %s: %s", list ? list : "(default)", gp_status_str(st), gp_last_error());
    return n;
}

static void resolve_bad(const char *list, const gp_sm_info *info, const char *n1, const char *n2)
{
    gp_cs_options o = with_splits(list);
    gp_split_plan plans[GP_CS_MAX_SPLITS + 1];
    int n = -1;
    gp_clear_error();
    gp_status st = gp_cs_resolve_splits(&o, info, GP_SPLIT_SIDE_F, plans, GP_CS_MAX_SPLITS + 1, &n);
    if (st != GP_ERR_INVALID_ARG)
        fail_msg("--sm-splits %s: got %s, expected invalid argument", list, gp_status_str(st));
    if (n1 && !strstr(gp_last_error(), n1))
        fail_msg("--sm-splits %s: message lacks '%s': %s", list, n1, gp_last_error());
    if (n2 && !strstr(gp_last_error(), n2))
        fail_msg("--sm-splits %s: message lacks '%s': %s", list, n2, gp_last_error());
}

static void assert_seq(const gp_split_plan *p)
{
    assert_int_equal(p->attn_sms, 0);
    assert_int_equal(p->ffn_sms, 0);
    assert_int_equal(p->attn_groups, 0);
}

static void test_valid(void **state)
{
    (void)state;
    gp_split_plan p[8];
    int n = resolve("56:76,72,40:92,seq", &H100, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 4);
    assert_seq(&p[0]);
    assert_int_equal(p[1].attn_sms, 56);
    assert_int_equal(p[1].ffn_sms, 76);
    assert_int_equal(p[2].attn_sms, 72); /* the shorthand: F gets the rest */
    assert_int_equal(p[2].ffn_sms, 60);
    assert_int_equal(p[3].attn_sms, 40);
    assert_int_equal(p[3].ffn_sms, 92);
    for (int i = 1; i < n; i++) {
        assert_int_equal(p[i].attn_sms + p[i].ffn_sms, 132);
        assert_int_equal(p[i].granularity, 8);
        assert_int_equal(p[i].remainder, 12);
    }
    /* the edges: one group for A, one group plus the remainder for F */
    n = resolve("8,112:20", &H100, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 3);
    assert_int_equal(p[1].ffn_sms, 124);
    assert_int_equal(p[2].attn_sms, 112);
    /* remainder on A: A is 12 + 8k */
    n = resolve("44", &H100, GP_SPLIT_SIDE_A, p, 8);
    assert_int_equal(n, 2);
    assert_int_equal(p[1].attn_sms, 44);
    assert_int_equal(p[1].ffn_sms, 88);
    /* seq alone: only the reference row */
    n = resolve("seq", &H100, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 1);
    assert_seq(&p[0]);
}

static void test_refused(void **state)
{
    (void)state;
    resolve_bad("50:82", &H100, "--sm-splits 50:82", "allowed 8, 16, ..., 112");
    resolve_bad("50", &H100, "--sm-splits 50:", "granularity 8");
    resolve_bad("56:80", &H100, "56:80", "more than the device's 132 SMs");
    resolve_bad("56:60", &H100, "56:60", "fewer than the device's 132 SMs");
    resolve_bad("140", &H100, "140", "more than the device's 132 SMs");
    resolve_bad("4:128", &H100, "4:128", "below the minimum");
    resolve_bad("120:12", &H100, "120:12", "allowed 8, 16, ..., 112");
    resolve_bad("120:12", &H100, "leaves F only the 12 remainder SMs", NULL);
    /* every SM to attention: the message says what is wrong with it */
    resolve_bad("132", &H100, "--sm-splits 132: every SM to attention leaves none for FFN", "allowed 8, 16, ..., 112");
    /* (132:0 and 0 never get here: the parser refuses a count of 0, test_cs_cli) */
    resolve_bad("56:76,50", &H100, "--sm-splits 50", "allowed");
    /* a device too small to split refuses every named split */
    resolve_bad("8", &TINY, "--sm-splits 8", "no split");
    resolve_bad("sweep", &TINY, "sweep", "no split");
}

static void test_duplicates_after_expansion(void **state)
{
    (void)state;
    resolve_bad("56,56:76", &H100, "56 and 56:76", "the same split");
    resolve_bad("72:60,seq,72", &H100, "72:60 and 72", "give each split once");
    resolve_bad("sweep,56:76", &H100, "56:76", "already part of sweep");
    resolve_bad("64,sweep", &H100, "64", "sweep");
}

static void test_sweep(void **state)
{
    (void)state;
    gp_split_plan p[GP_CS_MAX_SPLITS + 1];
    int n = resolve("sweep", &H100, GP_SPLIT_SIDE_F, p, GP_CS_MAX_SPLITS + 1);
    assert_int_equal(n, 15); /* seq + 14 splits: A = 8 .. 112, remainder on F */
    assert_seq(&p[0]);
    for (int i = 1; i < n; i++) {
        assert_int_equal(p[i].attn_sms, 8 * i);
        assert_int_equal(p[i].ffn_sms, 132 - 8 * i);
        assert_int_equal(p[i].remainder_side, GP_SPLIT_SIDE_F);
    }
    /* seq named beside sweep changes nothing */
    assert_int_equal(resolve("seq,sweep", &H100, GP_SPLIT_SIDE_F, p, GP_CS_MAX_SPLITS + 1), 15);
    /* remainder on A: A = 20 .. 124 */
    n = resolve("sweep", &H100, GP_SPLIT_SIDE_A, p, GP_CS_MAX_SPLITS + 1);
    assert_int_equal(n, 15);
    assert_int_equal(p[1].attn_sms, 20);
    assert_int_equal(p[14].attn_sms, 124);

    /* too little room is an error, not a silent cut */
    gp_cs_options o = with_splits("sweep");
    gp_clear_error();
    assert_int_equal(gp_cs_resolve_splits(&o, &H100, GP_SPLIT_SIDE_F, p, 4, &n), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "14 splits"));
}

static void test_default_set(void **state)
{
    (void)state;
    gp_split_plan p[8];
    int n = resolve(NULL, &H100, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 4);
    assert_seq(&p[0]);
    assert_int_equal(p[1].attn_sms, 40);
    assert_int_equal(p[2].attn_sms, 56);
    assert_int_equal(p[3].attn_sms, 72);
    assert_int_equal(p[3].ffn_sms, 60);
    /* 78 SMs: the same shares rounded to groups of 8 (23.6 -> 24, 33.1 -> 32, 42.5 -> 40) */
    n = resolve(NULL, &SM78, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 4);
    assert_int_equal(p[1].attn_sms, 24);
    assert_int_equal(p[2].attn_sms, 32);
    assert_int_equal(p[3].attn_sms, 40);
    assert_int_equal(p[3].ffn_sms, 38);
    /* a small device where the shares collide keeps each split once */
    static const gp_sm_info SM24 = { 24, 8, 8, 0 }; /* 3 groups: A 8 or 16 */
    n = resolve(NULL, &SM24, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 3);
    assert_int_equal(p[1].attn_sms, 8);
    assert_int_equal(p[2].attn_sms, 16);
    /* no split possible: the reference alone */
    n = resolve(NULL, &TINY, GP_SPLIT_SIDE_F, p, 8);
    assert_int_equal(n, 1);
    assert_seq(&p[0]);
}

/* ------------------------------------------------------------ workloads */

static gp_cs_options with_workloads(const char *list)
{
    gp_cs_options o;
    char *argv[] = { "decode_pipeline_case_study", "--workload", (char *)list, NULL };
    FILE *devnull = fopen("/dev/null", "w");
    int rc = gp_cs_parse_args(list ? 3 : 1, argv, &o, devnull, devnull);
    fclose(devnull);
    if (rc != 0)
        fail_msg("--workload %s: parse returned %d", list, rc);
    return o;
}

static void test_scale_unchanged_on_h100(void **state)
{
    (void)state;
    const double gib[] = { 79.2, 139.8 }; /* H100 80GB, H200 */
    for (int i = 0; i < 2; i++) {
        gp_cs_options o = with_workloads(NULL), before = o;
        char note[512] = "x";
        gp_cs_scale_workloads(&o, 132, gib[i], note, sizeof note);
        assert_string_equal(note, "");
        assert_int_equal(o.n_workloads, before.n_workloads);
        for (int k = 0; k < o.n_workloads; k++) {
            assert_int_equal(o.workloads[k].B, before.workloads[k].B);
            assert_int_equal(o.workloads[k].C, before.workloads[k].C);
            assert_string_equal(o.workloads[k].label, before.workloads[k].label);
        }
    }
}

static void test_scale_smaller_device(void **state)
{
    (void)state;
    gp_cs_options o = with_workloads("small,large,512:384,2048:384");
    char note[512];
    gp_cs_scale_workloads(&o, 78, 40.0, note, sizeof note);
    /* small is latency-bound at B = 8 and its 1 GiB of KV fits: unchanged */
    assert_int_equal(o.workloads[0].B, 8);
    assert_int_equal(o.workloads[0].C, 1024);
    /* large: 78/132 of the compute gives B 600; the KV cache beside the
     * 15 GiB of llama3-8b weights in 90% of 40 GiB holds 384 x (384 + 64) */
    assert_string_equal(o.workloads[1].label, "large");
    assert_int_equal(o.workloads[1].B, 384);
    assert_int_equal(o.workloads[1].C, 384);
    assert_int_equal(o.workloads[1].B % 8, 0);
    /* B:C from the command line is never changed, even where it cannot fit */
    assert_int_equal(o.workloads[2].B, 512);
    assert_int_equal(o.workloads[2].C, 384);
    assert_int_equal(o.workloads[3].B, 2048);
    assert_int_equal(o.workloads[3].C, 384);
    assert_non_null(strstr(note, "large 1024:384 -> 384:384"));
    assert_non_null(strstr(note, "78 SMs"));
    assert_non_null(strstr(note, "40.0 GiB"));
    assert_non_null(strstr(note, "run as given"));
    assert_null(strstr(note, "small 8:1024"));

    /* fewer SMs only (an H100 PCIe: 114 SMs, 80 GB): B follows the SMs */
    o = with_workloads(NULL);
    gp_cs_scale_workloads(&o, 114, 79.2, note, sizeof note);
    assert_int_equal(o.workloads[0].B, 8);
    assert_int_equal(o.workloads[1].B, 880); /* 1024 x 114 / 132 = 884 -> 880 */
    assert_int_equal(o.workloads[1].C, 384);
    assert_non_null(strstr(note, "fewer SMs"));

    /* a smaller model leaves memory for everything: only the SM scaling */
    o = with_workloads(NULL);
    snprintf(o.model, sizeof o.model, "tiny");
    gp_cs_scale_workloads(&o, 78, 40.0, note, sizeof note);
    assert_int_equal(o.workloads[1].B, 600);

    /* user workloads only: nothing to say */
    o = with_workloads("64:2048");
    gp_cs_scale_workloads(&o, 78, 40.0, note, sizeof note);
    assert_int_equal(o.workloads[0].B, 64);
    assert_string_equal(note, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_duplicates_after_expansion),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_default_set),
        cmocka_unit_test(test_scale_unchanged_on_h100),
        cmocka_unit_test(test_scale_smaller_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
