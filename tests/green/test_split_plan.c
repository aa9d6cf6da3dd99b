/* The split planner without a GPU: what each side obtains on the H100 (132
 * SMs, partitions of 8) and other shapes, the remainder side, every refusal
 * with the value and the allowed values in its message, the enumeration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "gp_green.h"

/* The H100's numbers as measured (docs/ARCHITECTURE.md §6): the driver cuts 15
 * groups of 8, not 16, and leaves 12 SMs over. The other shapes leave groups
 * 0 (floor division), as a fallback without the driver's count does. */
static const gp_sm_info H100 = { 132, 8, 8, 15 };     /* SXM: 15 x 8 + 12 */
static const gp_sm_info H100_PCIE = { 114, 8, 8, 0 }; /* 14 x 8 + 2 */
static const gp_sm_info SM78 = { 78, 8, 8, 0 };       /* 9 x 8 + 6 */
static const gp_sm_info MIN16 = { 132, 16, 8, 0 };    /* 8 x 16 + 4 */
static const gp_sm_info EXACT = { 128, 8, 8, 0 };     /* 16 x 8, no remainder */
static const gp_sm_info A100 = { 108, 4, 2, 0 };      /* 27 x 4 */
static const gp_sm_info H100_FLOOR = { 132, 8, 8, 0 }; /* 16 x 8 + 4 if the GPCs allowed it */

static gp_split_req req(int a, int f)
{
    gp_split_req r = { a, f };
    return r;
}

static gp_split_plan plan_ok(const gp_sm_info *info, int a, int f, gp_split_side side)
{
    gp_split_plan p;
    memset(&p, 0xab, sizeof p);
    gp_status st = gp_split_plan_make(info, req(a, f), side, &p);
    if (st != GP_OK)
        fail_msg("plan %d:%d on %d SMs (%d/%d), side %d -> %s: %s", a, f, info->sm_count,
                 info->min_partition, info->alignment, (int)side, gp_status_str(st),
                 gp_last_error());
    assert_int_equal(p.attn_sms + p.ffn_sms, info->sm_count);
    assert_int_equal(p.attn_groups + p.ffn_groups, p.n_groups);
    assert_true(p.attn_groups >= 1 && p.ffn_groups >= 1);
    return p;
}

/* The request must fail with GP_ERR_INVALID_ARG and a message holding every
 * needle (NULL-terminated). */
static void plan_bad(const gp_sm_info *info, int a, int f, gp_split_side side, ...)
{
    gp_split_plan p;
    gp_clear_error();
    gp_status st = gp_split_plan_make(info, req(a, f), side, &p);
    if (st != GP_ERR_INVALID_ARG)
        fail_msg("plan %d:%d on %d SMs, side %d -> %s, expected invalid argument", a, f,
                 info->sm_count, (int)side, gp_status_str(st));
    va_list ap;
    va_start(ap, side);
    for (const char *needle; (needle = va_arg(ap, const char *)) != NULL;)
        if (!strstr(gp_last_error(), needle))
            fail_msg("plan %d:%d: message '%s' lacks '%s'", a, f, gp_last_error(), needle);
    va_end(ap);
}

static void test_h100_valid(void **state)
{
    (void)state;
    assert_int_equal(gp_split_granularity(&H100), 8);
    gp_split_plan p = plan_ok(&H100, 56, 76, GP_SPLIT_SIDE_F);
    assert_int_equal(p.granularity, 8);
    assert_int_equal(p.n_groups, 15);
    assert_int_equal(p.remainder, 12);
    assert_int_equal(p.remainder_side, GP_SPLIT_SIDE_F);
    assert_int_equal(p.attn_groups, 7);
    assert_int_equal(p.ffn_groups, 8);
    assert_int_equal(p.attn_sms, 56);
    assert_int_equal(p.ffn_sms, 76); /* 64 + 12 */

    gp_split_plan q = plan_ok(&H100, 56, GP_SPLIT_REST, GP_SPLIT_SIDE_F); /* shorthand */
    assert_memory_equal(&p, &q, sizeof p);

    p = plan_ok(&H100, 8, 124, GP_SPLIT_SIDE_F);
    assert_int_equal(p.attn_groups, 1);
    assert_int_equal(p.ffn_groups, 14);
    p = plan_ok(&H100, 112, 20, GP_SPLIT_SIDE_F); /* the largest A: F keeps one group + 12 */
    assert_int_equal(p.attn_groups, 14);
    assert_int_equal(p.ffn_groups, 1);
    assert_int_equal(p.ffn_sms, 20);
}

/* With the remainder on A, A is 8k + 12 and F a multiple of 8. */
static void test_h100_remainder_on_a(void **state)
{
    (void)state;
    gp_split_plan p = plan_ok(&H100, 60, 72, GP_SPLIT_SIDE_A);
    assert_int_equal(p.remainder_side, GP_SPLIT_SIDE_A);
    assert_int_equal(p.attn_groups, 6);
    assert_int_equal(p.ffn_groups, 9);
    assert_int_equal(p.attn_sms, 60);
    assert_int_equal(p.ffn_sms, 72);
    p = plan_ok(&H100, 20, GP_SPLIT_REST, GP_SPLIT_SIDE_A);
    assert_int_equal(p.attn_groups, 1);
    assert_int_equal(p.ffn_sms, 112);
    p = plan_ok(&H100, 124, 8, GP_SPLIT_SIDE_A);
    assert_int_equal(p.ffn_groups, 1);

    /* 56:76 is valid with the remainder on F only. */
    plan_bad(&H100, 56, 76, GP_SPLIT_SIDE_A, "attention SMs 56: not the 12 remainder SMs plus a "
             "multiple of the partition granularity 8; allowed 20, 28, ..., 124 (A gets the 12 "
             "remainder SMs)", NULL);
    plan_bad(&H100, 12, 120, GP_SPLIT_SIDE_A, "attention SMs 12: only the 12 remainder SMs, "
             "without a full partition of 8", "allowed 20, 28, ..., 124", NULL);
    plan_bad(&H100, 8, 124, GP_SPLIT_SIDE_A, "attention SMs 8: below the minimum partition of 8 "
             "SMs plus the 12 remainder SMs", NULL);
    plan_bad(&H100, 132, GP_SPLIT_REST, GP_SPLIT_SIDE_A, "attention SMs 132: leaves F 0 SMs, "
             "below the minimum partition of 8", NULL);
}

static void test_h100_invalid(void **state)
{
    (void)state;
    const char *allowed = "allowed 8, 16, ..., 112 (F gets the 12 remainder SMs)";
    plan_bad(&H100, 50, 82, GP_SPLIT_SIDE_F, "attention SMs 50: not a multiple of the partition "
             "granularity 8; allowed 8, 16, ..., 112 (F gets the 12 remainder SMs)", NULL);
    plan_bad(&H100, 50, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 50: not a multiple",
             allowed, NULL);
    /* 120:12 would leave F the remainder alone, which has no co-scheduling
     * guarantee and is not a partition by itself. */
    plan_bad(&H100, 120, 12, GP_SPLIT_SIDE_F, "attention SMs 120: leaves F only the 12 remainder "
             "SMs, without a full partition of 8", allowed, NULL);
    plan_bad(&H100, 120, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 120", "only the 12 "
             "remainder", NULL);
    plan_bad(&H100, 128, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 128: leaves F 4 SMs, "
             "fewer than one partition of 8 plus the 12 remainder SMs", NULL);
    /* zero and negative */
    plan_bad(&H100, 0, 132, GP_SPLIT_SIDE_F, "attention SMs 0: must be positive", allowed, NULL);
    plan_bad(&H100, -8, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs -8: must be positive",
             NULL);
    plan_bad(&H100, 56, 0, GP_SPLIT_SIDE_F, "FFN SMs 0: must be positive", "allowed 20, 28, ..., "
             "124 (F gets the 12 remainder SMs)", NULL);
    plan_bad(&H100, 56, -76, GP_SPLIT_SIDE_F, "FFN SMs -76: must be positive", NULL);
    /* over the device */
    plan_bad(&H100, 140, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 140: more than the "
             "device's 132 SMs", allowed, NULL);
    plan_bad(&H100, 56, 200, GP_SPLIT_SIDE_F, "FFN SMs 200: more than the device's 132 SMs",
             NULL);
    plan_bad(&H100, 64, 76, GP_SPLIT_SIDE_F, "attention SMs 64 + FFN SMs 76 = 140: more than the "
             "device's 132 SMs; A + F must equal 132", NULL);
    /* SMs left idle */
    plan_bad(&H100, 56, 64, GP_SPLIT_SIDE_F, "attention SMs 56 + FFN SMs 64 = 120: fewer than "
             "the device's 132 SMs, 12 would sit idle; A + F must equal 132", "allowed A 8, 16, ..., 112 "
             "(F gets the 12 remainder SMs)", NULL);
    /* below the minimum partition */
    plan_bad(&H100, 4, 128, GP_SPLIT_SIDE_F, "attention SMs 4: below the minimum partition of 8 "
             "SMs", allowed, NULL);
    /* bad side, bad info, NULL plan */
    plan_bad(&H100, 56, 76, (gp_split_side)7, "remainder side 7", NULL);
    gp_sm_info zero = { 0, 8, 8, 0 }, neg = { 132, -8, 8, 0 };
    gp_sm_info many = { 132, 8, 8, 17 }, negg = { 132, 8, 8, -1 };
    plan_bad(&many, 56, 76, GP_SPLIT_SIDE_F, "groups 17: allowed 0", ".. 16", NULL);
    plan_bad(&negg, 56, 76, GP_SPLIT_SIDE_F, "groups -1", NULL);
    plan_bad(&zero, 56, 76, GP_SPLIT_SIDE_F, "sm_count 0", "must be positive", NULL);
    plan_bad(&neg, 56, 76, GP_SPLIT_SIDE_F, "min_partition -8", NULL);
    assert_int_equal(gp_split_granularity(&zero), 0);
    assert_int_equal(gp_split_granularity(NULL), 0);
    assert_int_equal(gp_split_plan_make(NULL, req(56, 76), GP_SPLIT_SIDE_F, NULL),
                     GP_ERR_INVALID_ARG);
    gp_split_plan p;
    assert_int_equal(gp_split_plan_make(NULL, req(56, 76), GP_SPLIT_SIDE_F, &p),
                     GP_ERR_INVALID_ARG);
}

/* H100 PCIe (114 SMs), a 78-SM part, minimum 16 with alignment 8, an exact
 * multiple, an Ampere-like 4/2, and devices too small to split. */
static void test_other_shapes(void **state)
{
    (void)state;
    gp_split_plan p = plan_ok(&H100_PCIE, 56, 58, GP_SPLIT_SIDE_F);
    assert_int_equal(p.n_groups, 14);
    assert_int_equal(p.remainder, 2);
    assert_int_equal(p.ffn_groups, 7);
    plan_bad(&H100_PCIE, 56, 76, GP_SPLIT_SIDE_F, "= 132: more than the device's 114 SMs", NULL);
    plan_bad(&H100_PCIE, 108, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 108", "allowed 8, 16, "
             "..., 104 (F gets the 2 remainder SMs)", NULL);
    p = plan_ok(&H100_PCIE, 10, 104, GP_SPLIT_SIDE_A);
    assert_int_equal(p.attn_groups, 1);

    p = plan_ok(&SM78, 32, 46, GP_SPLIT_SIDE_F);
    assert_int_equal(p.n_groups, 9);
    assert_int_equal(p.remainder, 6);
    plan_bad(&SM78, 72, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 72: leaves F only the 6 "
             "remainder SMs", "allowed 8, 16, ..., 64 (F gets the 6 remainder SMs)", NULL);

    assert_int_equal(gp_split_granularity(&MIN16), 16);
    p = plan_ok(&MIN16, 64, 68, GP_SPLIT_SIDE_F);
    assert_int_equal(p.granularity, 16);
    assert_int_equal(p.n_groups, 8);
    assert_int_equal(p.remainder, 4);
    assert_int_equal(p.attn_groups, 4);
    plan_bad(&MIN16, 8, 124, GP_SPLIT_SIDE_F, "attention SMs 8: below the minimum partition of "
             "16 SMs; allowed 16, 32, ..., 112 (F gets the 4 remainder SMs)", NULL);
    plan_bad(&MIN16, 56, 76, GP_SPLIT_SIDE_F, "attention SMs 56: not a multiple of the partition "
             "granularity 16", NULL);
    gp_sm_info min12 = { 132, 12, 8, 0 }; /* the driver rounds 12 up to the alignment */
    assert_int_equal(gp_split_granularity(&min12), 16);

    p = plan_ok(&EXACT, 120, 8, GP_SPLIT_SIDE_F); /* no remainder: F may be one group */
    assert_int_equal(p.remainder, 0);
    assert_int_equal(p.ffn_sms, 8);
    p = plan_ok(&EXACT, 120, 8, GP_SPLIT_SIDE_A); /* the side switch changes nothing */
    assert_int_equal(p.attn_sms, 120);
    plan_bad(&EXACT, 12, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 12: not a multiple of "
             "the partition granularity 8; allowed 8, 16, ..., 120 (no remainder SMs)", NULL);
    plan_bad(&EXACT, 128, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "attention SMs 128: leaves F 0 SMs, "
             "below the minimum partition of 8 SMs", NULL);

    assert_int_equal(gp_split_granularity(&A100), 4);
    p = plan_ok(&A100, 52, 56, GP_SPLIT_SIDE_F);
    assert_int_equal(p.n_groups, 27);
    plan_bad(&A100, 2, 106, GP_SPLIT_SIDE_F, "attention SMs 2: below the minimum partition of 4",
             NULL);

    gp_sm_info two = { 16, 8, 8, 0 }, three = { 24, 8, 8, 0 }, four = { 32, 8, 8, 0 };
    gp_sm_info one = { 12, 8, 8, 0 }, gpc = { 32, 8, 8, 1 }; /* gpc: the driver found 1 group */
    p = plan_ok(&two, 8, 8, GP_SPLIT_SIDE_F);
    plan_bad(&two, 16, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "allowed 8 (no remainder SMs)", NULL);
    plan_bad(&three, 4, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "allowed 8, 16 (no remainder SMs)", NULL);
    plan_bad(&four, 4, GP_SPLIT_REST, GP_SPLIT_SIDE_F, "allowed 8, 16, 24 (no remainder SMs)",
             NULL);
    plan_bad(&one, 8, 4, GP_SPLIT_SIDE_F, "a device of 12 SMs holds 1 partition(s) of 8 SMs",
             "no split into A and F is possible", NULL);
    plan_bad(&gpc, 8, 24, GP_SPLIT_SIDE_F, "a device of 32 SMs holds 1 partition(s)", NULL);

    /* Floor division on 132 SMs would give 16 groups and 4 over: the driver's
     * count is what makes 120:12 invalid on the real H100. */
    p = plan_ok(&H100_FLOOR, 120, 12, GP_SPLIT_SIDE_F);
    assert_int_equal(p.n_groups, 16);
    assert_int_equal(p.remainder, 4);
    assert_int_equal(p.ffn_groups, 1);
    plan_bad(&H100, 120, 12, GP_SPLIT_SIDE_F, "only the 12 remainder SMs", NULL);
}

static void test_enumerate(void **state)
{
    (void)state;
    gp_split_plan all[32];
    int n = -1;
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_F, NULL, 0, &n), GP_OK);
    assert_int_equal(n, 14);
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_F, all, 32, &n), GP_OK);
    assert_int_equal(n, 14);
    for (int i = 0; i < n; i++) {
        assert_int_equal(all[i].attn_sms, 8 * (i + 1));
        assert_int_equal(all[i].ffn_sms, 132 - 8 * (i + 1));
        gp_split_plan p = plan_ok(&H100, all[i].attn_sms, all[i].ffn_sms, GP_SPLIT_SIDE_F);
        assert_memory_equal(&p, &all[i], sizeof p);
    }
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_A, all, 32, &n), GP_OK);
    assert_int_equal(n, 14);
    assert_int_equal(all[0].attn_sms, 20);
    assert_int_equal(all[13].attn_sms, 124);
    assert_int_equal(all[13].ffn_sms, 8);

    /* Every request the planner accepts is one of the enumerated splits. */
    const gp_sm_info *shapes[] = { &H100, &H100_PCIE, &SM78, &MIN16, &EXACT, &A100, &H100_FLOOR };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int side = 0; side < 2; side++) {
            int total = 0, accepted = 0;
            assert_int_equal(gp_split_enumerate(shapes[s], (gp_split_side)side, all, 32, &total),
                             GP_OK);
            for (int a = -1; a <= shapes[s]->sm_count + 1; a++) {
                gp_split_plan p;
                if (gp_split_plan_make(shapes[s], req(a, GP_SPLIT_REST), (gp_split_side)side, &p)
                    != GP_OK)
                    continue;
                assert_true(accepted < total);
                assert_memory_equal(&p, &all[accepted], sizeof p);
                accepted++;
            }
            assert_int_equal(accepted, total);
            int groups = shapes[s]->groups ? shapes[s]->groups
                                           : shapes[s]->sm_count / gp_split_granularity(shapes[s]);
            assert_int_equal(total, groups - 1);
        }
    }

    /* cap below the total writes cap plans and still reports the total */
    memset(all, 0, sizeof all);
    assert_int_equal(gp_split_enumerate(&SM78, GP_SPLIT_SIDE_F, all, 3, &n), GP_OK);
    assert_int_equal(n, 8);
    assert_int_equal(all[2].attn_sms, 24);
    assert_int_equal(all[3].attn_sms, 0);

    gp_sm_info one = { 12, 8, 8, 0 };
    assert_int_equal(gp_split_enumerate(&one, GP_SPLIT_SIDE_F, all, 32, &n), GP_ERR_INVALID_ARG);
    assert_int_equal(n, 0);
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_F, NULL, 4, &n), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_F, all, -1, &n), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_split_enumerate(&H100, GP_SPLIT_SIDE_F, all, 32, NULL),
                     GP_ERR_INVALID_ARG);
}

static void parse_bad(const char *text, const char *needle)
{
    gp_split_req r;
    gp_clear_error();
    assert_int_equal(gp_split_parse(text, &r), GP_ERR_INVALID_ARG);
    if (!strstr(gp_last_error(), needle))
        fail_msg("parse '%s': message '%s' lacks '%s'", text, gp_last_error(), needle);
}

/* The guess without green contexts follows the driver documentation's
 * per-architecture minimum and alignment, and plans like the driver's own. */
static void test_info_guess(void **state)
{
    (void)state;
    gp_sm_info h = gp_sm_info_guess(132, 9);
    assert_int_equal(h.sm_count, 132);
    assert_int_equal(h.min_partition, 8);
    assert_int_equal(h.alignment, 8);
    assert_int_equal(h.groups, 0);
    assert_int_equal(gp_split_granularity(&h), 8);
    gp_sm_info a = gp_sm_info_guess(108, 8);
    assert_int_equal(a.min_partition, 4);
    assert_int_equal(a.alignment, 2);
    assert_int_equal(gp_split_granularity(&a), 4);
    gp_sm_info v = gp_sm_info_guess(80, 7);
    assert_int_equal(v.min_partition, 2);
    assert_int_equal(v.alignment, 2);
}

static void test_parse(void **state)
{
    (void)state;
    gp_split_req r;
    assert_int_equal(gp_split_parse("56:76", &r), GP_OK);
    assert_int_equal(r.attn_sms, 56);
    assert_int_equal(r.ffn_sms, 76);
    assert_int_equal(gp_split_parse("56", &r), GP_OK);
    assert_int_equal(r.attn_sms, 56);
    assert_int_equal(r.ffn_sms, GP_SPLIT_REST);
    /* parsed, then refused by the planner with the value named */
    assert_int_equal(gp_split_parse("-8", &r), GP_OK);
    assert_int_equal(r.attn_sms, -8);
    assert_int_equal(gp_split_parse("56:0", &r), GP_OK);
    plan_bad(&H100, r.attn_sms, r.ffn_sms, GP_SPLIT_SIDE_F, "FFN SMs 0", NULL);

    parse_bad("", "split \"\": expected A:F or A");
    parse_bad("abc", "split \"abc\"");
    parse_bad("56:", "split \"56:\"");
    parse_bad(":76", "split \":76\"");
    parse_bad("56:76:1", "split \"56:76:1\"");
    parse_bad("56x", "split \"56x\"");
    parse_bad("56:-1", "FFN SMs -1: must be positive");
    parse_bad("99999999999:8", "split \"99999999999:8\"");
    assert_int_equal(gp_split_parse(NULL, &r), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_split_parse("56", NULL), GP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h100_valid),
        cmocka_unit_test(test_h100_remainder_on_a),
        cmocka_unit_test(test_h100_invalid),
        cmocka_unit_test(test_other_shapes),
        cmocka_unit_test(test_enumerate),
        cmocka_unit_test(test_info_guess),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests_name("green split planning", tests, NULL, NULL);
}
