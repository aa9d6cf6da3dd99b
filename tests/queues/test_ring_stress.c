/* Two-thread checksum stress of the ring: blocking push/pop at small depths
 * (also across ck's counter wrap, and mixed with try_push/try_pop), checking
 * order, payload contents, the sum, and the wait/occupancy statistics. */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "ring_test_util.h"

#ifndef GP_QTEST_STRESS_N
#define GP_QTEST_STRESS_N 1000000u
#endif

static gp_ring *make_ring(unsigned depth, unsigned spin)
{
    gp_ring_params p = { depth, spin };
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(&p, &r), GP_OK);
    return r;
}

/* cmocka asserts only on the main thread; the workers record. */

typedef struct {
    gp_ring *r;
    uint64_t n;
    int prod_try, cons_try;  /* use try_push/try_pop + sched_yield instead of blocking */
    gp_status prod_status;   /* the first non-OK push, GP_OK if none */
    gp_status cons_status;   /* what ended the consumer's loop */
    uint64_t got, bad, first_bad_at, sum;
} qt_stress;

static uint64_t qt_mix(const gp_payload *p) { return p->seq * 31u + (uint64_t)p->resid.row_stride + (uint64_t)p->tok_count; }

static void *stress_producer(void *arg)
{
    qt_stress *c = arg;
    qt_pin_self(1);
    c->prod_status = GP_OK;
    for (uint64_t i = 0; i < c->n; i++) {
        gp_payload p = qt_payload(i);
        gp_status s;
        if (c->prod_try) {
            while ((s = gp_ring_try_push(c->r, &p)) == GP_SOFT_FULL)
                sched_yield();
        } else {
            s = gp_ring_push(c->r, &p);
        }
        if (s != GP_OK) {
            c->prod_status = s;
            break;
        }
    }
    gp_ring_close(c->r); /* done: the consumer drains, then gets GP_ERR_STATE */
    return NULL;
}

static void *stress_consumer(void *arg)
{
    qt_stress *c = arg;
    qt_pin_self(0);
    for (;;) {
        gp_payload p;
        gp_status s;
        if (c->cons_try) {
            while ((s = gp_ring_try_pop(c->r, &p)) == GP_SOFT_EMPTY)
                sched_yield();
        } else {
            s = gp_ring_pop(c->r, &p);
        }
        if (s != GP_OK) {
            c->cons_status = s;
            return NULL;
        }
        if (!qt_payload_ok(&p, c->got) && c->bad++ == 0)
            c->first_bad_at = c->got;
        c->sum += qt_mix(&p);
        c->got++;
    }
}

/* must_wait: also require that both sides waited. Only asserted where it
 * cannot miss: with capacity 1 and a million items, no wait on one side would
 * need a perfect alternation of the threads a million times over. */
static void run_stress(unsigned depth, unsigned spin, uint64_t n, unsigned start, int prod_try, int cons_try,
                       int must_wait)
{
    gp_ring *r = make_ring(depth, spin);
    qt_set_counters(r, start);
    qt_stress c = { .r = r, .n = n, .prod_try = prod_try, .cons_try = cons_try };
    double t0 = gp_now_s();
    pthread_t pt, ct;
    assert_int_equal(pthread_create(&ct, NULL, stress_consumer, &c), 0);
    assert_int_equal(pthread_create(&pt, NULL, stress_producer, &c), 0);
    int jp = qt_join(pt, 120), jc = qt_join(ct, 120);
    if (jp || jc) {
        gp_ring_close(r); /* let the stuck side out before failing */
        fail_msg("stress depth %u spin %u: %s did not finish", depth, spin, jp ? "producer" : "consumer");
    }
    double dt = gp_now_s() - t0;

    uint64_t want_sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        gp_payload p = qt_payload(i);
        want_sum += qt_mix(&p);
    }
    assert_int_equal(c.prod_status, GP_OK);
    assert_int_equal(c.cons_status, GP_ERR_STATE);
    if (c.bad)
        fail_msg("%llu payloads out of order or corrupted, first at pop %llu", (unsigned long long)c.bad,
                 (unsigned long long)c.first_bad_at);
    assert_int_equal(c.got, n);
    assert_int_equal(c.sum, want_sum);

    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    unsigned cap = depth - 1;
    print_message("depth %u spin %u%s%s: %llu items in %.2f s; push waits %llu (%llu sleeps, %.1f ms), "
                  "pop waits %llu (%llu sleeps, %.1f ms), mean occupancy %.2f\n",
                  depth, spin, prod_try ? " try_push" : "", cons_try ? " try_pop" : "", (unsigned long long)n, dt,
                  (unsigned long long)st.push_waits, (unsigned long long)st.push_sleeps, st.push_wait_ns * 1e-6,
                  (unsigned long long)st.pop_waits, (unsigned long long)st.pop_sleeps, st.pop_wait_ns * 1e-6,
                  (double)st.occupancy_sum / (double)n);
    assert_int_equal(st.pushes, n);
    assert_int_equal(st.pops, n);
    assert_true(st.occupancy_max <= cap);
    uint64_t hsum = 0, osum = 0;
    for (unsigned i = 0; i <= GP_RING_MAX_DEPTH; i++) {
        if (i > cap)
            assert_int_equal(st.occupancy_hist[i], 0);
        hsum += st.occupancy_hist[i];
        osum += (uint64_t)i * st.occupancy_hist[i];
    }
    assert_int_equal(hsum, n);
    assert_int_equal(osum, st.occupancy_sum);
    /* a blocking push waits exactly when it finds the ring full; try_push never waits */
    assert_int_equal(st.push_waits, prod_try ? 0 : st.occupancy_hist[cap]);
    if (cons_try)
        assert_int_equal(st.pop_waits, 0);
    assert_true(st.push_waits == 0 || st.push_wait_ns > 0);
    assert_true(st.pop_waits == 0 || st.pop_wait_ns > 0);
    if (must_wait) {
        assert_true(st.push_waits > 0);
        assert_true(st.pop_waits > 0);
    }
    assert_true(st.push_sleeps == 0 || st.push_waits > 0);
    assert_true(st.pop_sleeps == 0 || st.pop_waits > 0);
    gp_ring_destroy(r);
}

/* Capacity 1: nearly every call finds the ring full or empty and spins; a
 * few hundred of them per side also go to sleep. */
static void test_stress_million_depth2(void **state)
{
    (void)state;
    run_stress(2, 256, GP_QTEST_STRESS_N, 0, 0, 0, 1);
}

static void test_stress_depth4_default_spin(void **state)
{
    (void)state;
    run_stress(4, GP_RING_DEFAULT_SPIN, GP_QTEST_STRESS_N / 4, 0, 0, 0, 0);
}

/* Short or no spin: most waits go to the futex (a sleep/wake round trip costs
 * tens of microseconds, hence the smaller counts). */
static void test_stress_sleep_often(void **state)
{
    (void)state;
    run_stress(2, 32, GP_QTEST_STRESS_N / 20, 0, 0, 0, 0);
    run_stress(4, 0, GP_QTEST_STRESS_N / 50, 0, 0, 0, 0);
}

/* ck's counters cross UINT_MAX while both threads run. */
static void test_stress_across_counter_wrap(void **state)
{
    (void)state;
    run_stress(8, 64, GP_QTEST_STRESS_N / 5, UINT_MAX - (unsigned)(GP_QTEST_STRESS_N / 10), 0, 0, 0);
    run_stress(2, 0, GP_QTEST_STRESS_N / 100, UINT_MAX - 1000u, 0, 0, 0);
}

/* try_push must wake a consumer asleep in pop, and try_pop a producer asleep in push. */
static void test_stress_try_wakes_blocked(void **state)
{
    (void)state;
    run_stress(2, 8, GP_QTEST_STRESS_N / 20, 0, 1, 0, 0);
    run_stress(2, 8, GP_QTEST_STRESS_N / 20, 0, 0, 1, 0);
}

int gp_qtest_ring_stress(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_million_depth2),
        cmocka_unit_test(test_stress_depth4_default_spin),
        cmocka_unit_test(test_stress_sleep_often),
        cmocka_unit_test(test_stress_across_counter_wrap),
        cmocka_unit_test(test_stress_try_wakes_blocked),
    };
    return cmocka_run_group_tests_name("queues_ring_stress", tests, NULL, NULL);
}

#ifndef GP_QTEST_NO_MAIN
int main(void) { return gp_qtest_ring_stress(); }
#endif
