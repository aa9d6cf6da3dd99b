/* The weight-streaming manager refuses bad parameters and budgets below the
 * minimum working set with messages naming the groups and their bytes. */
#include "stream_test_util.h"

/* 4 layers of attn 100 + ffn 300 bytes and a pinned head of 50: the
 * heaviest window of 2 is attn l + ffn l (400), so 450 in all. */
static void test_min_budget(void **state)
{
    st_model m;
    st_model_make(&m, 4, 100, 300, 50);
    gp_sim_stream *x = st_sim(0);
    gp_streamer_params p = st_params(&m, x, 0, 1);
    uint64_t b = 0;
    GP_CHECK_OK(gp_streamer_min_budget(&p, &b));
    assert_int_equal(b, 450);
    p.min_window = 3; /* ffn 0, attn 1, ffn 1 */
    GP_CHECK_OK(gp_streamer_min_budget(&p, &b));
    assert_int_equal(b, 50 + 700);
    p.min_window = 100; /* more than the order: every unpinned group once */
    GP_CHECK_OK(gp_streamer_min_budget(&p, &b));
    assert_int_equal(b, 50 + 4 * 400);
    /* A group twice in a window needs one slot. */
    m.order[1] = 0;
    p.min_window = 2;
    GP_CHECK_OK(gp_streamer_min_budget(&p, &b));
    assert_int_equal(b, 50 + 400);
    gp_sim_stream_destroy(x);
}

static void test_budget_refused(void **state)
{
    st_model m;
    st_model_make(&m, 4, 100, 300, 50);
    gp_sim_stream *x = st_sim(0);
    gp_streamer_params p = st_params(&m, x, 449, 1);
    gp_streamer *s = (gp_streamer *)&m; /* must be reset to NULL */
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "budget 449 bytes");
    assert_null(s);
    const char *msg = gp_last_error();
    assert_non_null(strstr(msg, "minimum working set of 450 bytes"));
    assert_non_null(strstr(msg, "head (50 bytes)"));
    assert_non_null(strstr(msg, "attn 0 (100 bytes)"));
    assert_non_null(strstr(msg, "ffn 0 (300 bytes)"));
    /* Nothing allocated on the way out. */
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 0);
    assert_int_equal(gp_sim_stream_report_get(x)->live_markers, 0);
    /* Below the pinned groups alone. */
    p.budget_bytes = 10;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "pinned: head (50 bytes)");
    /* Exactly the minimum is enough, and the pinned head is resident. */
    p.budget_bytes = 450;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    assert_true(gp_streamer_resident(s, 8));
    assert_false(gp_streamer_resident(s, 0));
    assert_int_equal(gp_streamer_device_bytes(s), 50);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 0);
    assert_int_equal(gp_sim_stream_report_get(x)->live_markers, 0);
    gp_sim_stream_destroy(x);
}

/* A single group larger than the budget left by the pinned ones. */
static void test_group_too_big(void **state)
{
    st_model m;
    st_model_make(&m, 2, 100, 5000, 50);
    gp_sim_stream *x = st_sim(0);
    gp_streamer_params p = st_params(&m, x, 1000, 0);
    p.min_window = 1;
    gp_streamer *s = NULL;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "ffn 0 (5000 bytes)");
    assert_non_null(strstr(gp_last_error(), "5050 bytes"));
    gp_sim_stream_destroy(x);
}

static void test_bad_params(void **state)
{
    st_model m;
    st_model_make(&m, 2, 100, 300, 50);
    gp_sim_stream *x = st_sim(0);
    gp_streamer *s = NULL;
    gp_streamer_params p = st_params(&m, x, 1 << 20, 1);
    GP_CHECK_FAIL(gp_streamer_create(NULL, &s), GP_ERR_INVALID_ARG, "params is NULL");
    GP_CHECK_FAIL(gp_streamer_create(&p, NULL), GP_ERR_INVALID_ARG, "out is NULL");
    m.order[2] = 99;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "order[2] = 99");
    m.order[2] = 2;
    m.groups[1].bytes = 0;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "group 1 (ffn 0) has 0 bytes");
    m.groups[1].bytes = 300;
    m.groups[3].kind = (gp_stream_kind)7;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "group 3 has kind 7");
    m.groups[3].kind = GP_STREAM_FFN;
    p.prefetch_depth = -1;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "prefetch depth -1");
    p.prefetch_depth = 1;
    p.chunk_bytes = 0;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "chunk_bytes is 0");
    p.chunk_bytes = 1 << 20;
    p.min_window = 0;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "min_window 0");
    p.min_window = 2;
    p.n_order = 0;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "0 positions");
    p.n_order = m.n_order;
    gp_stream_backend_ops ops = *gp_sim_stream_backend(x).ops;
    ops.copy_h2d = NULL;
    p.backend.ops = &ops;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "backend ops incomplete");
    p.backend.ops = NULL;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "backend ops NULL");
    p.backend = gp_sim_stream_backend(x);
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    /* Calls with bad arguments refuse without touching state. */
    GP_CHECK_FAIL(gp_streamer_acquire(s, 5, gp_sim_stream_compute(x, 0)), GP_ERR_INVALID_ARG,
                  "group 5 out of range (0 to 4)");
    GP_CHECK_FAIL(gp_streamer_advance(s, 5), GP_ERR_INVALID_ARG, "position 5 out of range");
    GP_CHECK_FAIL(gp_streamer_unmark(s, 0, NULL), GP_ERR_STATE, "released more often than marked");
    GP_CHECK_FAIL(gp_streamer_wait_ready(s, 0, gp_sim_stream_compute(x, 0)), GP_ERR_STATE,
                  "is not resident");
    GP_CHECK_FAIL(gp_streamer_release(s, 0, NULL), GP_ERR_INVALID_ARG, "stream is NULL");
    st_consistent(s, x);
    assert_string_equal(gp_stream_kind_name(GP_STREAM_FFN), "ffn");
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_budget),
        cmocka_unit_test(test_budget_refused),
        cmocka_unit_test(test_group_too_big),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
