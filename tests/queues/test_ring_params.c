/* gp_ring parameter validation (depth, spin, set size), the documented
 * capacity, and the NULL-argument contract of the public calls. */
#define _GNU_SOURCE
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gp_queues.h"

static void expect_bad_depth(unsigned depth)
{
    gp_ring_params p = gp_ring_default_params();
    p.depth = depth;
    gp_ring *r = (gp_ring *)0x1;
    gp_clear_error();
    assert_int_equal(gp_ring_create(&p, &r), GP_ERR_INVALID_ARG);
    assert_null(r);
    char want[64];
    snprintf(want, sizeof want, "depth %u ", depth);
    const char *msg = gp_last_error();
    if (!strstr(msg, want) || !strstr(msg, "power of two from 2 to 4096"))
        fail_msg("depth %u: message does not name the value and the rule: \"%s\"", depth, msg);
}

static void test_bad_depths(void **state)
{
    (void)state;
    const unsigned bad[] = { 0, 1, 3, 5, 6, 7, 12, 100, 4095, 4097, 5000, 8192, 1u << 31, UINT_MAX };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad_depth(bad[i]);
}

static void test_capacity_is_depth_minus_one(void **state)
{
    (void)state;
    for (unsigned d = 2; d <= GP_RING_MAX_DEPTH; d *= 2) {
        gp_ring_params p = { d, 16 };
        gp_ring *r = NULL;
        assert_int_equal(gp_ring_create(&p, &r), GP_OK);
        assert_int_equal(gp_ring_depth(r), d);
        assert_int_equal(gp_ring_capacity(r), d - 1);
        assert_int_equal(gp_ring_size(r), 0);
        gp_ring_stats st;
        gp_ring_stats_get(r, &st);
        assert_int_equal(st.capacity, d - 1);
        gp_ring_destroy(r);
    }
}

static void test_defaults(void **state)
{
    (void)state;
    gp_ring_params p = gp_ring_default_params();
    assert_int_equal(p.depth, 4);
    assert_int_equal(p.spin, GP_RING_DEFAULT_SPIN);
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(NULL, &r), GP_OK); /* NULL params: the defaults */
    assert_int_equal(gp_ring_capacity(r), 3);
    assert_false(gp_ring_is_closed(r));
    gp_ring_destroy(r);
}

static void test_bad_spin_and_out(void **state)
{
    (void)state;
    gp_ring_params p = { 4, GP_RING_MAX_SPIN + 1 };
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(&p, &r), GP_ERR_INVALID_ARG);
    char want[64];
    snprintf(want, sizeof want, "spin %u", GP_RING_MAX_SPIN + 1);
    assert_non_null(strstr(gp_last_error(), want));
    p.spin = 0; /* sleep at once: allowed */
    assert_int_equal(gp_ring_create(&p, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_create(&p, &r), GP_OK);
    gp_ring_destroy(r);
}

static void test_null_arguments(void **state)
{
    (void)state;
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(NULL, &r), GP_OK);
    gp_payload pl = { 0 };
    assert_int_equal(gp_ring_try_push(NULL, &pl), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_try_push(r, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_try_pop(NULL, &pl), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_try_pop(r, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_push(NULL, &pl), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_push(r, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_pop(NULL, &pl), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_pop(r, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_ring_capacity(NULL), 0);
    gp_ring_stats st;
    st.pushes = 99;
    gp_ring_stats_get(NULL, &st);
    assert_int_equal(st.pushes, 0);
    gp_ring_stats_get(r, NULL);
    gp_ring_close(NULL);
    gp_ring_reopen(NULL);
    gp_ring_stats_reset(NULL);
    gp_ring_destroy(NULL);
    gp_ring_destroy(r);
}

static void test_ring_set(void **state)
{
    (void)state;
    gp_ring_set *s = (gp_ring_set *)0x1;
    assert_int_equal(gp_ring_set_create(0, NULL, &s), GP_ERR_INVALID_ARG);
    assert_null(s);
    assert_non_null(strstr(gp_last_error(), "0 rings"));
    assert_int_equal(gp_ring_set_create(-3, NULL, &s), GP_ERR_INVALID_ARG);
    gp_ring_params bad = { 6, 0 };
    assert_int_equal(gp_ring_set_create(4, &bad, &s), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "depth 6 "));

    gp_ring_params p = { 8, 100 };
    assert_int_equal(gp_ring_set_create(3, &p, &s), GP_OK);
    assert_int_equal(gp_ring_set_count(s), 3);
    for (int i = 0; i < 3; i++) {
        gp_ring *r = gp_ring_set_get(s, i);
        assert_non_null(r);
        assert_int_equal(gp_ring_capacity(r), 7);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(r, gp_ring_set_get(s, j));
    }
    assert_null(gp_ring_set_get(s, 3));
    assert_non_null(strstr(gp_last_error(), "ring 3 out of range"));
    assert_null(gp_ring_set_get(s, -1));
    assert_null(gp_ring_set_get(NULL, 0));
    gp_ring_set_close(s);
    for (int i = 0; i < 3; i++)
        assert_true(gp_ring_is_closed(gp_ring_set_get(s, i)));
    gp_ring_set_reopen(s);
    for (int i = 0; i < 3; i++)
        assert_false(gp_ring_is_closed(gp_ring_set_get(s, i)));
    gp_ring_set_destroy(s);
    gp_ring_set_destroy(NULL);
    assert_int_equal(gp_ring_set_count(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_depths),      cmocka_unit_test(test_capacity_is_depth_minus_one),
        cmocka_unit_test(test_defaults),        cmocka_unit_test(test_bad_spin_and_out),
        cmocka_unit_test(test_null_arguments),  cmocka_unit_test(test_ring_set),
    };
    return cmocka_run_group_tests_name("queues_ring_params", tests, NULL, NULL);
}
