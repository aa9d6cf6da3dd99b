/* The line each report ends with per workload: the fastest row against seq
 * of the same run (a split only when strictly faster; seq's win is said as
 * such, with the best split's loss), failed seq or failed rows, and the
 * markdown, JSON and CSV reports carrying it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_case_study.h"
#include "test_cs_fixtures.h"

#define HAS(text, part)                                                                                            \
    do {                                                                                                           \
        if (!strstr((text), (part)))                                                                               \
            fail_msg("\"%s\" does not mention \"%s\"", (text), (part));                                            \
    } while (0)

static gp_cs_row seq_row(const char *wl, int B, int C, double ms)
{
    gp_cs_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.workload, sizeof r.workload, "%s", wl);
    r.B = B;
    r.C = C;
    r.seq = true;
    r.M = 1;
    r.ok = ms > 0;
    r.ms_median = ms;
    r.split.unit = "SMs";
    return r;
}

static gp_cs_row split_row(const char *wl, int B, int C, int a, double ms, const char *tag)
{
    gp_cs_row r = seq_row(wl, B, C, ms);
    r.seq = false;
    r.M = 2;
    r.depth = 4;
    r.placement = GP_PLACE_QKVO_F;
    r.split = (gp_split_info){a, 132 - a, a, 132 - a, true, "SMs"};
    snprintf(r.tag, sizeof r.tag, "%s", tag);
    return r;
}

static void text_of(const gp_cs_row *rows, int n, int which, char *buf, size_t len)
{
    gp_cs_winner w[4];
    int k = gp_cs_winners(rows, n, w, 4);
    assert_true(which < k);
    gp_cs_winner_text(&w[which], rows, buf, len);
}

static void test_split_wins(void **state)
{
    gp_cs_row rows[] = {seq_row("large", 1024, 384, 40.57), split_row("large", 1024, 384, 40, 43.6, ""),
                        split_row("large", 1024, 384, 24, 39.33, "best-known (h100-sxm)")};
    gp_cs_winner w[4];
    assert_int_equal(gp_cs_winners(rows, 3, w, 4), 1);
    assert_int_equal(w[0].row, 2);
    assert_int_equal(w[0].seq_row, 0);
    assert_int_equal(w[0].best_split_row, 2);
    assert_float_equal(w[0].speedup, 40.57 / 39.33, 1e-12);
    char t[512];
    gp_cs_winner_text(&w[0], rows, t, sizeof t);
    assert_string_equal(t, "large (1024:384): 24:108 qkvo-f M=2 depth 4 [best-known (h100-sxm)], 39.330 ms, "
                           "1.03x seq (40.570 ms)");
}

/* Losses are said honestly: seq wins, and the best split's speedup is below 1. */
static void test_seq_wins(void **state)
{
    gp_cs_row rows[] = {seq_row("small", 8, 1024, 6.81), split_row("small", 8, 1024, 56, 7.74, ""),
                        seq_row("large", 1024, 384, 40.0), split_row("large", 1024, 384, 24, 40.0, "")};
    gp_cs_winner w[4];
    assert_int_equal(gp_cs_winners(rows, 4, w, 4), 2);
    assert_int_equal(w[0].row, 0);
    assert_int_equal(w[1].row, 2); /* a tie is no win for the split */
    char t[512];
    gp_cs_winner_text(&w[0], rows, t, sizeof t);
    assert_string_equal(t, "small (8:1024): seq, 6.810 ms (1.00x); no split beat it, the fastest was 56:76 qkvo-f "
                           "M=2 depth 4 at 7.740 ms, 0.88x seq");
    text_of(rows, 1, 0, t, sizeof t);
    HAS(t, "no split row ran");
}

static void test_failures(void **state)
{
    gp_cs_row rows[] = {seq_row("a", 8, 16, -1), split_row("a", 8, 16, 24, 5.0, ""), seq_row("b", 4, 16, -1),
                        split_row("b", 4, 16, 24, -1, "")};
    char t[512];
    text_of(rows, 4, 0, t, sizeof t);
    assert_string_equal(t, "a (8:16): 24:108 qkvo-f M=2 depth 4, 5.000 ms; no speedup: the seq row failed");
    text_of(rows, 4, 1, t, sizeof t);
    assert_string_equal(t, "b (4:16): no winner: every configuration failed");
    gp_cs_winner w[1];
    assert_int_equal(gp_cs_winners(rows, 4, w, 1), 1); /* capped, not overrun */
    assert_int_equal(gp_cs_winners(NULL, 4, w, 1), 0);
}

/* The markdown ends with the winner lines; JSON has "winners"; CSV marks
 * the winning row in its winner column. */
static void test_reports(void **state)
{
    gp_cs_row rows[FX_ROWS];
    gp_cs_meta m;
    fx_rows(rows);
    fx_meta(&m);
    snprintf(rows[4].tag, sizeof rows[4].tag, "best-known (h100-sxm)");
    char *md = NULL;
    size_t md_len = 0;
    FILE *f = open_memstream(&md, &md_len);
    gp_cs_write_markdown(f, &m, rows, FX_ROWS);
    fclose(f);
    HAS(md, "| 40:92 [best-known (h100-sxm)] |");
    const char *tail = strstr(md, "\nWinners");
    assert_non_null(tail);
    assert_null(strstr(tail, "Notes:")); /* the winners come last */
    HAS(tail, "- Winner, small (8:1024): seq, 9.250 ms (1.00x); no split beat it, the fastest was 56:76 qkvo-a "
              "M=2 depth 4 rebalanced at 10.250 ms, 0.90x seq\n");
    HAS(tail, "- Winner, large, \"custom\" (1024:384): 40:92 qkvo-a M=1 depth 4 [best-known (h100-sxm)], 33.250 ms, "
              "1.09x seq (36.250 ms)\n");
    free(md);

    char path[256];
    fx_tmp(path, sizeof path, "winners.json");
    GP_CHECK_OK(gp_cs_write_json(path, &m, rows, FX_ROWS));
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    assert_non_null(root);
    json_t *w = json_object_get(root, "winners");
    assert_int_equal(json_array_size(w), 2);
    json_t *w1 = json_array_get(w, 1);
    assert_int_equal(json_integer_value(json_object_get(w1, "row")), 4);
    assert_false(json_is_true(json_object_get(w1, "seq_wins")));
    assert_string_equal(json_string_value(json_object_get(w1, "tag")), "best-known (h100-sxm)");
    assert_float_equal(json_real_value(json_object_get(w1, "speedup_vs_seq")), 36.25 / 33.25, 1e-9);
    assert_true(json_is_true(json_object_get(json_array_get(w, 0), "seq_wins")));
    json_decref(root);
    unlink(path);

    fx_tmp(path, sizeof path, "winners.csv");
    GP_CHECK_OK(gp_cs_write_csv(path, &m, rows, FX_ROWS));
    char *csv = fx_slurp(path);
    assert_non_null(csv);
    HAS(csv, ",attn_kernel,tag,gemm_tune,winner,gpu,");
    HAS(csv, ",stream,best-known (h100-sxm),0,1,"); /* row 4 won large */
    HAS(csv, ",cudacore_pipe,,0,1,");             /* the small seq row won small */
    free(csv);
    unlink(path);
    fx_free(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_wins),
        cmocka_unit_test(test_seq_wins),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
