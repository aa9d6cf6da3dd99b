/* Single-thread validation in the style of ck's ring tests: tagged sequence
 * numbers against a model FIFO, soft statuses exactly at capacity and empty,
 * occupancy statistics, and ck's unsigned counters wrapping past UINT_MAX. */
#define _GNU_SOURCE
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ring_test_util.h"

static gp_ring *make_ring(unsigned depth)
{
    gp_ring_params p = { depth, 8 };
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(&p, &r), GP_OK);
    return r;
}

/* Fill to capacity, check the soft full status exactly there, drain in order,
 * check the soft empty status; `start` places ck's counters first. */
static void fill_and_drain(gp_ring *r, unsigned start, uint64_t *seq)
{
    unsigned cap = gp_ring_capacity(r);
    qt_set_counters(r, start);
    gp_payload p, got;
    for (unsigned i = 0; i < cap; i++) {
        p = qt_payload(*seq + i);
        assert_int_equal(gp_ring_try_push(r, &p), GP_OK);
        assert_int_equal(gp_ring_size(r), i + 1);
    }
    p = qt_payload(999999);
    assert_int_equal(gp_ring_try_push(r, &p), GP_SOFT_FULL);
    assert_int_equal(gp_ring_size(r), cap);
    for (unsigned i = 0; i < cap; i++) {
        assert_int_equal(gp_ring_try_pop(r, &got), GP_OK);
        if (!qt_payload_ok(&got, *seq + i))
            fail_msg("start %u: pop %u got seq %llu, want %llu", start, i, (unsigned long long)got.seq,
                     (unsigned long long)(*seq + i));
    }
    assert_int_equal(gp_ring_try_pop(r, &got), GP_SOFT_EMPTY);
    *seq += cap;
}

static void test_full_and_empty_exactly(void **state)
{
    (void)state;
    for (unsigned d = 2; d <= GP_RING_MAX_DEPTH; d *= 2) {
        gp_ring *r = make_ring(d);
        uint64_t seq = 0;
        gp_payload got;
        assert_int_equal(gp_ring_try_pop(r, &got), GP_SOFT_EMPTY);
        fill_and_drain(r, 0, &seq);
        gp_ring_stats st;
        gp_ring_stats_get(r, &st);
        assert_int_equal(st.pushes, d - 1);
        assert_int_equal(st.pops, d - 1);
        assert_int_equal(st.push_waits + st.pop_waits, 0); /* try_* never wait */
        assert_int_equal(st.occupancy_max, d - 2);
        for (unsigned i = 0; i <= GP_RING_MAX_DEPTH; i++)
            assert_int_equal(st.occupancy_hist[i], i < d - 1 ? 1 : 0);
        assert_int_equal(st.occupancy_sum, (uint64_t)(d - 1) * (d - 2) / 2);
        gp_ring_destroy(r);
    }
}

/* Random pushes and pops against a model FIFO: every status and every payload
 * must agree with the model. */
static void model_run(gp_ring *r, unsigned start, unsigned ops, unsigned seed)
{
    unsigned cap = gp_ring_capacity(r);
    qt_set_counters(r, start);
    gp_ring_stats_reset(r);
    uint64_t head = 0, tail = 0, occ_sum = 0; /* model: seqs [head, tail) are queued */
    unsigned x = seed;
    for (unsigned i = 0; i < ops; i++) {
        x = x * 1103515245u + 12345u;
        /* bias changes every 256 ops so the ring sweeps from empty to full */
        int push = ((x >> 16) % 100) < (((i >> 8) & 1) ? 70u : 30u);
        gp_payload p;
        if (push) {
            p = qt_payload(tail);
            gp_status s = gp_ring_try_push(r, &p);
            if (tail - head == cap) {
                assert_int_equal(s, GP_SOFT_FULL);
            } else {
                assert_int_equal(s, GP_OK);
                occ_sum += tail - head;
                tail++;
            }
        } else {
            gp_status s = gp_ring_try_pop(r, &p);
            if (tail == head) {
                assert_int_equal(s, GP_SOFT_EMPTY);
            } else {
                assert_int_equal(s, GP_OK);
                if (!qt_payload_ok(&p, head))
                    fail_msg("start %u op %u: got seq %llu, want %llu", start, i, (unsigned long long)p.seq,
                             (unsigned long long)head);
                head++;
            }
        }
        assert_int_equal(gp_ring_size(r), (unsigned)(tail - head));
    }
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, tail);
    assert_int_equal(st.pops, head);
    assert_int_equal(st.occupancy_sum, occ_sum);
    uint64_t hsum = 0;
    for (unsigned i = 0; i <= cap; i++)
        hsum += st.occupancy_hist[i];
    assert_int_equal(hsum, tail);
}

static void test_model_fifo(void **state)
{
    (void)state;
    const unsigned depths[] = { 2, 4, 8, 64 };
    for (size_t k = 0; k < sizeof depths / sizeof depths[0]; k++) {
        gp_ring *r = make_ring(depths[k]);
        model_run(r, 0, 200000, 1u + (unsigned)k);
        gp_ring_destroy(r);
    }
}

/* ck_ring's c_head/p_tail/p_head are unsigned ints that run freely and are
 * masked on use; start them just below UINT_MAX and cross the wrap. */
static void test_counter_wrap(void **state)
{
    (void)state;
    const unsigned depths[] = { 2, 4, 8, 4096 };
    for (size_t k = 0; k < sizeof depths / sizeof depths[0]; k++) {
        unsigned d = depths[k];
        gp_ring *r = make_ring(d);
        uint64_t seq = 0;
        /* every placement of the wrap inside a full ring, then a few laps */
        for (unsigned back = 0; back <= d + 1 && back < 64; back++)
            fill_and_drain(r, UINT_MAX - back, &seq);
        fill_and_drain(r, UINT_MAX - d / 2, &seq);
        for (int lap = 0; lap < 3; lap++)
            fill_and_drain(r, r->ck.c_head, &seq); /* keep going from where it is */
        model_run(r, UINT_MAX - 500, 20000, 7u + (unsigned)k);
        /* the counters really wrapped: they are now small again */
        assert_true(r->ck.c_head < 1000000u);
        assert_int_equal(r->ck.c_head, r->ck.p_tail - gp_ring_size(r));
        gp_ring_destroy(r);
    }
}

static void test_reopen_empties_keeps_stats(void **state)
{
    (void)state;
    gp_ring *r = make_ring(8);
    gp_payload p = qt_payload(1), got;
    assert_int_equal(gp_ring_try_push(r, &p), GP_OK);
    assert_int_equal(gp_ring_try_push(r, &p), GP_OK);
    gp_ring_reopen(r);
    assert_int_equal(gp_ring_size(r), 0);
    assert_int_equal(gp_ring_try_pop(r, &got), GP_SOFT_EMPTY);
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, 2);
    gp_ring_stats_reset(r);
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, 0);
    assert_int_equal(st.occupancy_hist[0] + st.occupancy_hist[1], 0);
    gp_ring_destroy(r);
}

int gp_qtest_ring_fifo(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_and_empty_exactly),
        cmocka_unit_test(test_model_fifo),
        cmocka_unit_test(test_counter_wrap),
        cmocka_unit_test(test_reopen_empties_keeps_stats),
    };
    return cmocka_run_group_tests_name("queues_ring_fifo", tests, NULL, NULL);
}

#ifndef GP_QTEST_NO_MAIN
int main(void) { return gp_qtest_ring_fifo(); }
#endif
