/* The weight-streaming manager on the simulated copy engine: LRU eviction,
 * prefetch in execution order, memory reused only after its last readers,
 * error paths that drop their marks, and statistics that add up. */
#include "stream_test_util.h"

#define MS 1e-3

/* Six layers of 100-byte groups, room for the pinned head and three. */
static void test_lru(void **state)
{
    st_model m;
    st_model_make(&m, 6, 100, 100, 10);
    gp_sim_stream *x = st_sim(310);
    gp_streamer_params p = st_params(&m, x, 310, 0);
    p.min_window = 3;
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    void *a = gp_sim_stream_compute(x, 0);
    for (int g = 0; g < 3; g++)
        st_stage(s, x, g, a, MS);
    st_stage(s, x, 0, a, MS); /* a hit: group 0 is now the most recently used */
    st_stage(s, x, 3, a, MS); /* evicts 1, the least recently used */
    assert_true(gp_streamer_resident(s, 0));
    assert_false(gp_streamer_resident(s, 1));
    assert_true(gp_streamer_resident(s, 2));
    assert_true(gp_streamer_resident(s, 3));
    st_stage(s, x, 4, a, MS); /* evicts 2 */
    assert_false(gp_streamer_resident(s, 2));
    assert_true(gp_streamer_resident(s, 0));
    gp_streamer_stats st;
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 5);
    assert_true(gp_streamer_resident(s, 12)); /* pinned, never a victim */
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* Groups of two sizes: a victim of another size is freed and the next one
 * tried; the slots of the sim and the manager's bytes stay equal. */
static void test_lru_sizes(void **state)
{
    st_model m;
    st_model_make(&m, 3, 100, 300, 10);
    gp_sim_stream *x = st_sim(410);
    gp_streamer_params p = st_params(&m, x, 410, 0);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    void *a = gp_sim_stream_compute(x, 0);
    st_stage(s, x, 0, a, MS); /* attn 0 */
    st_stage(s, x, 1, a, MS); /* ffn 0: 410 held */
    st_stage(s, x, 3, a, MS); /* ffn 1 (300): attn 0 freed, then ffn 0's slot passed on */
    assert_false(gp_streamer_resident(s, 0));
    assert_false(gp_streamer_resident(s, 1));
    assert_true(gp_streamer_resident(s, 3));
    assert_int_equal(gp_streamer_device_bytes(s), 310);
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 2);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* Prefetch issues the next D groups of the order, in that order, and never
 * evicts one of the window to make room for another. */
static void test_prefetch_order(void **state)
{
    st_model m;
    st_model_make(&m, 4, 100, 100, 10); /* order: a0 f0 a1 f1 a2 f2 a3 f3 head */
    gp_sim_stream *x = st_sim(10 + 400);
    gp_streamer_params p = st_params(&m, x, 410, 3);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    void *a = gp_sim_stream_compute(x, 0);
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    GP_CHECK_OK(gp_streamer_advance(s, 0));
    assert_int_equal(r->n_log, 4); /* head at create, then f0 a1 f1 */
    assert_int_equal(st_group_of(&m, r->log[1]), 1);
    assert_int_equal(st_group_of(&m, r->log[2]), 2);
    assert_int_equal(st_group_of(&m, r->log[3]), 3);
    st_stage(s, x, 0, a, MS); /* demand miss: a0 */
    GP_CHECK_OK(gp_streamer_advance(s, 1)); /* a2 needs room: a0 goes, not f0..f1 of the window */
    assert_int_equal(st_group_of(&m, r->log[r->n_log - 1]), 4);
    assert_false(gp_streamer_resident(s, 0));
    for (int g = 1; g <= 4; g++)
        assert_true(gp_streamer_resident(s, g));
    st_stage(s, x, 1, a, MS);
    gp_streamer_stats st;
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.prefetches, 4);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 1);
    /* Wrapping into the next step: from f3 (7), head (pinned) then a0, f0. */
    GP_CHECK_OK(gp_streamer_advance(s, 7));
    assert_int_equal(st_group_of(&m, r->log[r->n_log - 1]), 0);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    /* Room for two: the third prefetch would have to evict the window. */
    x = st_sim(210);
    p = st_params(&m, x, 210, 3);
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    r = gp_sim_stream_report_get(x);
    assert_int_equal(gp_streamer_advance(s, 0), GP_SOFT_FULL);
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.prefetches, 2); /* f0 a1 */
    assert_int_equal(st.prefetch_skipped, 1);
    assert_int_equal(st_group_of(&m, r->log[r->n_log - 1]), 2);
    /* f1 next: the window f0..a2 holds all that is resident */
    assert_int_equal(gp_streamer_advance(s, 1), GP_SOFT_FULL);
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.evictions, 0);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* Memory passes to the next group only after every last reader finished:
 * the copy into it starts after the latest read, on every stream, including
 * more reader streams than a group tracks separately. */
static void test_reuse_after_readers(void **state)
{
    st_model m;
    st_model_make(&m, 2, 100, 100, 10);
    gp_sim_stream *x = st_sim(110);
    gp_streamer_params p = st_params(&m, x, 110, 0);
    p.min_window = 1;
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    void *s0 = gp_sim_stream_compute(x, 0);
    st_stage(s, x, 0, s0, 5 * MS);
    void *slot0 = gp_streamer_slot(s, 0);
    st_stage(s, x, 1, gp_sim_stream_compute(x, 1), MS);
    assert_ptr_equal(gp_streamer_slot(s, 1), slot0); /* the slot passed on */
    assert_true(r->last_copy_start >= 5 * MS);
    /* The stage on stream 1 waited for the copy: its read began after it. */
    assert_true(gp_sim_stream_time(x, gp_sim_stream_compute(x, 1)) >= r->last_copy_end + MS);
    /* Six reader streams of group 1, the longest on the fifth. */
    for (int i = 0; i < 6; i++)
        st_stage(s, x, 1, gp_sim_stream_compute(x, 2 + i), (i == 4 ? 40 : 1 + i) * MS);
    double latest = 0;
    for (int i = 0; i < GP_SIM_STREAM_MAX_STREAMS; i++)
        latest = fmax(latest, gp_sim_stream_time(x, gp_sim_stream_compute(x, i)));
    st_stage(s, x, 0, s0, MS);
    assert_true(r->last_copy_start >= latest);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    assert_int_equal(r->live_markers, 0);
    assert_int_equal(r->live_slots, 0);
    gp_sim_stream_destroy(x);
}

/* Failed allocations and copies drop the stage's mark and leave the books
 * and the device in agreement; the next try succeeds. */
static void test_error_paths(void **state)
{
    st_model m;
    st_model_make(&m, 3, 100, 100, 10);
    gp_sim_stream *x = st_sim(210);
    gp_streamer_params p = st_params(&m, x, 210, 1);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    void *a = gp_sim_stream_compute(x, 0);
    gp_sim_stream_fail_alloc(x, 1);
    GP_CHECK_FAIL(gp_streamer_acquire(s, 0, a), GP_ERR_DEVICE_MEMORY, "injected allocation failure");
    assert_int_equal(gp_streamer_in_use(s, 0), 0);
    assert_false(gp_streamer_resident(s, 0));
    st_consistent(s, x);
    gp_sim_stream_fail_copy(x, 1);
    GP_CHECK_FAIL(gp_streamer_acquire(s, 0, a), GP_ERR_CUDA, "injected copy failure");
    assert_int_equal(gp_streamer_in_use(s, 0), 0);
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 1); /* the head's only */
    st_consistent(s, x);
    st_stage(s, x, 0, a, MS);
    st_stage(s, x, 1, a, MS);
    /* A failed copy into a slot taken from a victim: the victim is gone, the
     * slot freed after its readers. */
    gp_sim_stream_fail_copy(x, 1);
    GP_CHECK_FAIL(gp_streamer_acquire(s, 2, a), GP_ERR_CUDA, "injected copy failure");
    assert_int_equal(gp_streamer_in_use(s, 2), 0);
    assert_false(gp_streamer_resident(s, 2));
    assert_false(gp_streamer_resident(s, 0));
    st_consistent(s, x);
    /* A prefetch's failure is the advance's, with nothing marked. */
    gp_sim_stream_fail_copy(x, 1);
    GP_CHECK_FAIL(gp_streamer_advance(s, 1), GP_ERR_CUDA, "injected copy failure");
    st_consistent(s, x);
    /* No room: both slots held by stages; the third acquire is refused with
     * what holds the memory, and its own mark dropped. */
    GP_CHECK_OK(gp_streamer_acquire(s, 0, a));
    GP_CHECK_OK(gp_streamer_acquire(s, 1, a));
    GP_CHECK_FAIL(gp_streamer_acquire(s, 2, a), GP_ERR_DEVICE_MEMORY, "in use by stages (attn 0");
    assert_int_equal(gp_streamer_in_use(s, 2), 0);
    GP_CHECK_OK(gp_streamer_release(s, 0, a));
    GP_CHECK_OK(gp_streamer_release(s, 1, a));
    st_stage(s, x, 2, a, MS);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 0);
    gp_sim_stream_destroy(x);
}

/* Steps of 8 layers on an A and an F stream, two weights windows of
 * budget: bytes streamed are the loads' bytes, the achieved rate is the
 * sim's 55 GB/s less its per-chunk cost, and prefetch cuts the stalls. */
static double run_steps(int depth, int steps, int check_rate)
{
    const uint64_t MiB = 1ull << 20;
    st_model m;
    st_model_make(&m, 8, 96 * MiB, 352 * MiB, 1000 * MiB);
    uint64_t budget = 1000 * MiB + 2 * 448 * MiB;
    gp_sim_stream *x = st_sim(budget);
    gp_streamer_params p = st_params(&m, x, budget, depth);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    void *sa = gp_sim_stream_compute(x, 0), *sf = gp_sim_stream_compute(x, 1);
    double waited = 0.0;
    for (int step = 0; step < steps; step++) {
        uint64_t copies0 = gp_sim_stream_report_get(x)->copies;
        int acquires = 0;
        for (int pos = 0; pos < m.n_order; pos++) {
            /* The host issues each stage when the previous one ends, so only
             * prefetched copies overlap compute. */
            gp_sim_stream_host_at(x, gp_sim_stream_time(x, sa));
            gp_status st = gp_streamer_advance(s, pos);
            assert_true(st == GP_OK || st == GP_SOFT_FULL);
            int g = m.order[pos];
            void *stream = m.groups[g].kind == GP_STREAM_FFN ? sf : sa;
            st_stage(s, x, g, stream, 4 * MS);
            acquires++;
            /* F's stage follows A's of the layer, A's the previous F's. */
            double t = fmax(gp_sim_stream_time(x, sa), gp_sim_stream_time(x, sf));
            gp_sim_stream_read(x, sa, NULL, t - gp_sim_stream_time(x, sa));
            gp_sim_stream_read(x, sf, NULL, t - gp_sim_stream_time(x, sf));
        }
        gp_streamer_stats st;
        GP_CHECK_OK(gp_streamer_stats_get(s, &st, 1));
        assert_int_equal(st.hits + st.misses, acquires);
        assert_int_equal(st.loads, st.misses + st.prefetches);
        assert_int_equal(st.loads, gp_sim_stream_report_get(x)->copies - copies0);
        uint64_t bytes = 0;
        const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
        for (uint64_t i = copies0; i < r->copies; i++)
            bytes += m.groups[st_group_of(&m, r->log[i])].bytes;
        assert_int_equal(st.bytes_streamed, bytes);
        assert_true(st.peak_device_bytes <= budget);
        if (check_rate && st.loads > 0) {
            /* 32 MiB chunks at 55 GB/s take 610 us; 3 us per chunk is 0.5% */
            assert_true(st.gbps > 55.0 * 0.99 && st.gbps <= 55.0);
        }
        for (int k = 0; k < GP_STREAM_KIND_COUNT; k++)
            waited += st.waited_s[k];
    }
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
    return waited;
}

static void test_stats(void **state)
{
    double w0 = run_steps(0, 3, 1), w2 = run_steps(2, 3, 1);
    print_message("stalls: %.2f ms without prefetch, %.2f ms with D = 2\n", w0 * 1e3, w2 * 1e3);
    assert_true(w0 > 0.0);
    assert_true(w2 < w0);
}

/* keep_resident: the budget beyond the head and a reserve of (window + D)
 * largest groups holds groups for good, spread over the order; a cycle then
 * streams only the others, and prefetch passes over the kept ones. */
static void test_keep_resident(void **state)
{
    st_model m;
    st_model_make(&m, 8, 100, 100, 10); /* 16 groups of 100 */
    /* reserve (1 + 2) * 100; 10 head; 600 spare: six kept */
    const uint64_t budget = 10 + 300 + 600;
    gp_sim_stream *x = st_sim(budget);
    gp_streamer_params p = st_params(&m, x, budget, 2);
    p.min_window = 1;
    p.keep_resident = 1;
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    gp_streamer_stats st;
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.kept_groups, 6);
    assert_int_equal(st.kept_bytes, 600);
    assert_int_equal(gp_streamer_device_bytes(s), 610);
    /* spread: no two streamed runs longer than three groups */
    int run = 0, longest = 0;
    for (int g = 0; g < 16; g++) {
        run = gp_streamer_resident(s, g) ? 0 : run + 1;
        longest = run > longest ? run : longest;
    }
    assert_true(longest <= 3);
    void *a = gp_sim_stream_compute(x, 0);
    for (int step = 0; step < 4; step++)
        for (int g = 0; g < 16; g++) {
            GP_CHECK_OK(gp_streamer_acquire(s, g, a));
            gp_sim_stream_read(x, a, gp_streamer_slot(s, g), MS);
            GP_CHECK_OK(gp_streamer_release(s, g, a));
            gp_status ps = gp_streamer_advance(s, g);
            assert_true(ps == GP_OK || ps == GP_SOFT_FULL);
            st_consistent(s, x);
        }
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    /* ten streamed groups a step, and the last advance's two of the next */
    assert_int_equal(st.bytes_streamed, 4 * 1000 + 200);
    assert_int_equal(st.kept_groups, 6);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    /* The whole model fits: everything kept, nothing streams after create. */
    x = st_sim(2000);
    p = st_params(&m, x, 2000, 2);
    p.keep_resident = 1;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 1));
    assert_int_equal(st.kept_groups, 16);
    for (int g = 0; g < 16; g++)
        st_stage(s, x, g, gp_sim_stream_compute(x, 0), MS);
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.bytes_streamed, 0);
    assert_int_equal(st.hits, 16);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    /* At the minimum working set nothing is kept: plain LRU. */
    x = st_sim(110);
    p = st_params(&m, x, 110, 2);
    p.min_window = 1;
    p.keep_resident = 1;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.kept_groups, 0);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* Prefetch counts streamed groups: pinned ones between are passed over. */
static void test_prefetch_skips_pinned(void **state)
{
    st_model m;
    st_model_make(&m, 4, 100, 100, 10);
    m.groups[1].pinned = m.groups[2].pinned = 1; /* f0 and a1 */
    gp_sim_stream *x = st_sim(10 + 200 + 200);
    gp_streamer_params p = st_params(&m, x, 410, 2);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    int before = r->n_log;
    GP_CHECK_OK(gp_streamer_advance(s, 0)); /* a0: then f1 and a2, past f0 and a1 */
    assert_int_equal(r->n_log, before + 2);
    assert_int_equal(st_group_of(&m, r->log[before]), 3);
    assert_int_equal(st_group_of(&m, r->log[before + 1]), 4);
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* 4 layers of attn 100 + ffn 300 and a head of 10, the ffn groups on
 * demand: the CPU-assisted FFN's decode steps acquire only the attn ones. */
static void st_model_ffn_on_demand(st_model *m)
{
    st_model_make(m, 4, 100, 300, 10);
    for (int l = 0; l < 4; l++)
        m->groups[2 * l + 1].on_demand = 1;
}

/* keep_resident never keeps an on-demand group, however large the budget,
 * and spreads the spare bytes over the others only. */
static void test_on_demand_not_kept(void **state)
{
    st_model m;
    st_model_ffn_on_demand(&m);
    gp_sim_stream *x = st_sim(4000);
    gp_streamer_params p = st_params(&m, x, 4000, 2); /* everything fits twice over */
    p.keep_resident = 1;
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    gp_streamer_stats st;
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.kept_groups, 4);
    assert_int_equal(st.kept_bytes, 400);
    assert_int_equal(gp_streamer_device_bytes(s), 410);
    for (int l = 0; l < 4; l++) {
        assert_true(gp_streamer_resident(s, 2 * l));
        assert_false(gp_streamer_resident(s, 2 * l + 1));
    }
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    /* Every attn group fits beside a window (2) of ffn groups: all kept, as
     * nothing but the on-demand groups streams, and they are never
     * prefetched, so the reserve of (window + D) largest groups is not needed. */
    x = st_sim(10 + 400 + 600);
    p = st_params(&m, x, 10 + 400 + 600, 2);
    p.keep_resident = 1;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.kept_groups, 4);
    void *a = gp_sim_stream_compute(x, 0);
    for (int step = 0; step < 2; step++) /* a prefill step: every group, in order */
        for (int g = 0; g < 8; g++) {
            st_stage(s, x, g, a, 1e-3);
            gp_status ps = gp_streamer_advance(s, g);
            assert_true(ps == GP_OK || ps == GP_SOFT_FULL);
            st_consistent(s, x);
        }
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.prefetches, 0);
    assert_int_equal(st.bytes_streamed, 2 * 1200); /* the ffn groups, by their acquires */
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);

    /* A byte less: the full reserve again, and the spare is spread over the
     * attn groups alone (its share of their bytes, not of all bytes). */
    x = st_sim(10 + 400 + 600 - 1);
    p = st_params(&m, x, 10 + 400 + 600 - 1, 0);
    p.keep_resident = 1; /* reserve (2 + 0) * 300: 399 spare, three of the four attn groups */
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_int_equal(st.kept_groups, 3);
    assert_int_equal(st.kept_bytes, 300);
    for (int l = 0; l < 4; l++)
        assert_false(gp_streamer_resident(s, 2 * l + 1));
    st_consistent(s, x);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

/* Decode steps acquire only the attn groups: prefetch passes over the ffn
 * groups (D counts attn groups only) and never copies one; an acquire of an
 * ffn group is a miss that loads it, and LRU evicts it later. */
static void test_on_demand_not_prefetched(void **state)
{
    st_model m;
    st_model_ffn_on_demand(&m);
    const uint64_t budget = 10 + 300 + 300; /* the head, then three attn and an ffn, or six attn */
    gp_sim_stream *x = st_sim(budget);
    gp_streamer_params p = st_params(&m, x, budget, 2);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    int before = r->n_log;
    GP_CHECK_OK(gp_streamer_advance(s, 0)); /* a0: then a1 and a2, past f0 and f1 */
    assert_int_equal(r->n_log, before + 2);
    assert_int_equal(st_group_of(&m, r->log[before]), 2);
    assert_int_equal(st_group_of(&m, r->log[before + 1]), 4);
    void *a = gp_sim_stream_compute(x, 0);
    for (int step = 0; step < 3; step++)
        for (int g = 0; g < 8; g += 2) {
            st_stage(s, x, g, a, 1e-3);
            gp_status ps = gp_streamer_advance(s, g);
            assert_true(ps == GP_OK || ps == GP_SOFT_FULL);
            st_consistent(s, x);
        }
    for (int i = before; i < r->n_log; i++)
        assert_int_equal(st_group_of(&m, r->log[i]) % 2, 0);
    gp_streamer_stats st;
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 1));
    assert_int_equal(st.loads, 4); /* the four attn groups fit: each loaded once */
    assert_int_equal(st.bytes_streamed, 400);
    for (int l = 0; l < 4; l++)
        assert_false(gp_streamer_resident(s, 2 * l + 1));

    /* A prefill step acquires ffn 1: a miss that evicts an attn group. */
    GP_CHECK_OK(gp_streamer_acquire(s, 3, a));
    assert_non_null(gp_streamer_slot(s, 3));
    gp_sim_stream_read(x, a, gp_streamer_slot(s, 3), 1e-3);
    GP_CHECK_OK(gp_streamer_release(s, 3, a));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 1));
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.loads, 1);
    assert_int_equal(st.bytes_streamed, 300);
    assert_int_equal(st.evictions, 1);
    assert_true(gp_streamer_resident(s, 3));
    st_consistent(s, x);
    /* Decode again: ffn 1 becomes the least recently used and goes. */
    for (int step = 0; step < 2; step++)
        for (int g = 0; g < 8; g += 2) {
            st_stage(s, x, g, a, 1e-3);
            gp_status ps = gp_streamer_advance(s, g);
            assert_true(ps == GP_OK || ps == GP_SOFT_FULL);
            st_consistent(s, x);
        }
    assert_false(gp_streamer_resident(s, 3));
    GP_CHECK_OK(gp_streamer_stats_get(s, &st, 0));
    assert_true(st.evictions >= 1);
    assert_int_equal(gp_sim_stream_report_get(x)->copies, 1 + 4 + 1 + st.loads);
    gp_streamer_destroy(s);
    gp_sim_stream_destroy(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_lru_sizes),
        cmocka_unit_test(test_prefetch_order),
        cmocka_unit_test(test_reuse_after_readers),
        cmocka_unit_test(test_error_paths),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_keep_resident),
        cmocka_unit_test(test_prefetch_skips_pinned),
        cmocka_unit_test(test_on_demand_not_kept),
        cmocka_unit_test(test_on_demand_not_prefetched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
