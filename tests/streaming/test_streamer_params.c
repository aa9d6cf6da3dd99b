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
    /* pinned and on demand: refused alike by create, the budget check and the minimum */
    m.groups[3].pinned = m.groups[3].on_demand = 1;
    GP_CHECK_FAIL(gp_streamer_create(&p, &s), GP_ERR_INVALID_ARG, "group 3 (ffn 1) is both pinned and on demand");
    assert_null(s);
    GP_CHECK_FAIL(gp_streamer_check_budget(&p), GP_ERR_INVALID_ARG, "group 3 (ffn 1) is both pinned and on demand");
    uint64_t least = 0;
    GP_CHECK_FAIL(gp_streamer_min_budget(&p, &least), GP_ERR_INVALID_ARG,
                  "group 3 (ffn 1) is both pinned and on demand");
    m.groups[3].pinned = 0;
    GP_CHECK_OK(gp_streamer_min_budget(&p, &least));
    assert_int_equal(least, 50 + 400); /* on demand still needs its room when acquired */
    m.groups[3].on_demand = 0;
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

/* gp_streamer_check_budget: create's refusal without a backend or host
 * bytes, so a caller can refuse a budget before preparing the weights. */
static void test_check_budget(void **state)
{
    (void)state;
    st_model m;
    st_model_make(&m, 4, 100, 300, 50);
    for (int i = 0; i < m.n_groups; i++)
        m.groups[i].host = NULL;
    gp_streamer_params p = gp_streamer_default_params();
    p.groups = m.groups;
    p.n_groups = m.n_groups;
    p.order = m.order;
    p.n_order = m.n_order;
    p.budget_bytes = 449;
    GP_CHECK_FAIL(gp_streamer_check_budget(&p), GP_ERR_INVALID_ARG,
                  "gp_streamer_check_budget: budget 449 bytes is below the minimum working set of 450 bytes");
    assert_non_null(strstr(gp_last_error(), "pinned: head (50 bytes)"));
    assert_non_null(strstr(gp_last_error(), "attn 0 (100 bytes), ffn 0 (300 bytes)"));
    p.budget_bytes = 450;
    GP_CHECK_OK(gp_streamer_check_budget(&p));
    m.groups[2].bytes = 0;
    GP_CHECK_FAIL(gp_streamer_check_budget(&p), GP_ERR_INVALID_ARG, "group 2 (attn 1) has 0 bytes");
    GP_CHECK_FAIL(gp_streamer_check_budget(NULL), GP_ERR_INVALID_ARG, "params is NULL");
}

/* copy_label and copy_log: optional ops, wrapped around the sim here. */
#define LABELS_MAX 256
static struct {
    gp_stream_kind kind[LABELS_MAX];
    int layer[LABELS_MAX];
    int n;
    void *ref;
} g_labels;

static void rec_copy_label(void *be, gp_stream_kind kind, int layer)
{
    (void)be;
    if (g_labels.n < LABELS_MAX) {
        g_labels.kind[g_labels.n] = kind;
        g_labels.layer[g_labels.n] = layer;
    }
    g_labels.n++;
}

/* One entry per label so far, times made up from the index. */
static gp_status rec_copy_log(void *be, void *ref, gp_stream_copy *out, int cap, int *n)
{
    (void)be;
    g_labels.ref = ref;
    int k = 0;
    for (int i = g_labels.n > cap ? g_labels.n - cap : 0; i < g_labels.n && i < LABELS_MAX; i++, k++)
        out[k] = (gp_stream_copy){g_labels.kind[i], g_labels.layer[i], 1, (double)i, (double)i + 0.5};
    *n = k;
    return GP_OK;
}

static void test_copy_label_and_log(void **state)
{
    (void)state;
    memset(&g_labels, 0, sizeof g_labels);
    st_model m;
    st_model_make(&m, 4, 100, 300, 50);
    gp_sim_stream *x = st_sim(0);
    gp_stream_backend_ops ops = *gp_sim_stream_backend(x).ops;
    assert_null(ops.copy_label); /* the sim names nothing and keeps no log */
    assert_null(ops.copy_log);
    gp_streamer_params p = st_params(&m, x, 450, 1);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    gp_stream_copy log[8];
    int n = -1;
    GP_CHECK_FAIL(gp_streamer_copy_log(s, &m, log, 8, &n), GP_ERR_UNSUPPORTED, "keeps no copy log");
    assert_int_equal(n, 0);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    x = st_sim(0); /* a fresh copy log */
    ops = *gp_sim_stream_backend(x).ops;
    p = st_params(&m, x, 450, 1);
    ops.copy_label = rec_copy_label;
    ops.copy_log = rec_copy_log;
    p.backend.ops = &ops;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    /* every copy named by its group, the pinned head's at create included */
    void *cs = gp_sim_stream_compute(x, 0);
    for (int step = 0; step < 2; step++)
        for (int pos = 0; pos < m.n_order; pos++) {
            int g = m.order[pos];
            gp_status a = gp_streamer_advance(s, pos);
            assert_true(a == GP_OK || a == GP_SOFT_FULL);
            st_stage(s, x, g, cs, 1e-4);
        }
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    assert_true(r->n_log > m.n_groups); /* evictions: groups copied again */
    assert_int_equal(g_labels.n, r->n_log);
    for (int i = 0; i < r->n_log; i++) {
        const gp_stream_group *g = &m.groups[st_group_of(&m, r->log[i])];
        if (g_labels.kind[i] != g->kind || g_labels.layer[i] != g->layer)
            fail_msg("copy %d of %s %d was labelled %s %d", i, gp_stream_kind_name(g->kind), g->layer,
                     gp_stream_kind_name(g_labels.kind[i]), g_labels.layer[i]);
    }
    assert_int_equal(g_labels.kind[0], GP_STREAM_HEAD);
    assert_int_equal(g_labels.layer[0], -1);
    /* the log passes through, newest cap entries */
    GP_CHECK_OK(gp_streamer_copy_log(s, &m, log, 3, &n));
    assert_int_equal(n, 3);
    assert_ptr_equal(g_labels.ref, &m);
    assert_true(log[2].start_ms == (double)(g_labels.n - 1));
    GP_CHECK_FAIL(gp_streamer_copy_log(s, NULL, log, 3, &n), GP_ERR_INVALID_ARG, "ref (nil)");
    GP_CHECK_FAIL(gp_streamer_copy_log(s, &m, log, 0, &n), GP_ERR_INVALID_ARG, "cap 0");
    assert_int_equal(n, 0);
    st_consistent(s, x);
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
        cmocka_unit_test(test_check_budget),
        cmocka_unit_test(test_copy_label_and_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
