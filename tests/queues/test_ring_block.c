/* One blocked call at a time: the futex sleep path (visible in the wait stats,
 * costing no CPU) and close waking a blocked consumer or producer. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ring_test_util.h"

static gp_ring *make_ring(unsigned depth, unsigned spin)
{
    gp_ring_params p = { depth, spin };
    gp_ring *r = NULL;
    assert_int_equal(gp_ring_create(&p, &r), GP_OK);
    return r;
}

typedef struct {
    gp_ring *r;
    int push;         /* 1: push `p`, 0: pop into `p` */
    gp_payload p;
    gp_status status;
} qt_call;

static void *blocking_call(void *arg)
{
    qt_call *c = arg;
    c->status = c->push ? gp_ring_push(c->r, &c->p) : gp_ring_pop(c->r, &c->p);
    return NULL;
}

static pthread_t start_call(qt_call *c)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocking_call, c), 0);
    return t;
}

static void join_or_fail(gp_ring *r, pthread_t t, const char *what)
{
    if (qt_join(t, 10) != 0) {
        gp_ring_close(r);
        qt_join(t, 10);
        fail_msg("%s: the blocked call did not return within 10 s", what);
    }
}

/* A consumer that sleeps on an empty ring, then a push wakes it. The sleep
 * shows in pop_wait_ns and costs (almost) no CPU. */
static void test_sleep_path_pop(void **state)
{
    (void)state;
    gp_ring *r = make_ring(4, 64);
    qt_call c = { .r = r, .push = 0 };
    pthread_t t = start_call(&c);
    assert_int_equal(qt_wait_sleeping(&r->cons_wait, 10), 0);
    double cpu0 = qt_thread_cpu(t);
    usleep(100 * 1000);
    double cpu1 = qt_thread_cpu(t);
    gp_payload p = qt_payload(42);
    assert_int_equal(gp_ring_push(r, &p), GP_OK);
    join_or_fail(r, t, "pop");
    assert_int_equal(c.status, GP_OK);
    assert_true(qt_payload_ok(&c.p, 42));
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    print_message("pop slept %.1f ms (%llu sleeps), its thread used %.3f ms CPU meanwhile\n",
                  st.pop_wait_ns * 1e-6, (unsigned long long)st.pop_sleeps, (cpu1 - cpu0) * 1e3);
    assert_int_equal(st.pops, 1);
    assert_int_equal(st.pop_waits, 1);
    assert_true(st.pop_sleeps >= 1);
    assert_true(st.pop_wait_ns >= 100u * 1000 * 1000);
    assert_true(cpu0 >= 0 && cpu1 - cpu0 < 0.02); /* asleep, not spinning */
    gp_ring_destroy(r);
}

/* A producer that sleeps on a full ring, then a pop wakes it. */
static void test_sleep_path_push(void **state)
{
    (void)state;
    gp_ring *r = make_ring(2, 64);
    gp_payload p0 = qt_payload(0), got;
    assert_int_equal(gp_ring_try_push(r, &p0), GP_OK);
    qt_call c = { .r = r, .push = 1, .p = qt_payload(1) };
    pthread_t t = start_call(&c);
    assert_int_equal(qt_wait_sleeping(&r->prod_wait, 10), 0);
    double cpu0 = qt_thread_cpu(t);
    usleep(100 * 1000);
    double cpu1 = qt_thread_cpu(t);
    assert_int_equal(gp_ring_try_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 0));
    join_or_fail(r, t, "push");
    assert_int_equal(c.status, GP_OK);
    assert_int_equal(gp_ring_try_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 1));
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, 2);
    assert_int_equal(st.push_waits, 1);
    assert_true(st.push_sleeps >= 1);
    assert_true(st.push_wait_ns >= 100u * 1000 * 1000);
    assert_int_equal(st.occupancy_hist[0], 1);
    assert_int_equal(st.occupancy_hist[1], 1); /* the blocked push found the ring full */
    assert_int_equal(st.occupancy_max, 1);
    assert_true(cpu0 >= 0 && cpu1 - cpu0 < 0.02);
    gp_ring_destroy(r);
}

static void test_close_wakes_blocked_consumer(void **state)
{
    (void)state;
    gp_ring *r = make_ring(4, 64);
    qt_call c = { .r = r, .push = 0 };
    pthread_t t = start_call(&c);
    assert_int_equal(qt_wait_sleeping(&r->cons_wait, 10), 0);
    gp_ring_close(r);
    join_or_fail(r, t, "pop");
    assert_int_equal(c.status, GP_ERR_STATE);
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pops, 0);
    assert_int_equal(st.pop_waits, 1);
    gp_ring_destroy(r);
}

static void test_close_wakes_blocked_producer(void **state)
{
    (void)state;
    gp_ring *r = make_ring(4, 64);
    for (uint64_t i = 0; i < 3; i++) {
        gp_payload p = qt_payload(i);
        assert_int_equal(gp_ring_push(r, &p), GP_OK);
    }
    qt_call c = { .r = r, .push = 1, .p = qt_payload(3) };
    pthread_t t = start_call(&c);
    assert_int_equal(qt_wait_sleeping(&r->prod_wait, 10), 0);
    gp_ring_close(r);
    join_or_fail(r, t, "push");
    assert_int_equal(c.status, GP_ERR_STATE);
    /* what was pushed before the close is still delivered, in order */
    gp_payload got;
    for (uint64_t i = 0; i < 3; i++) {
        assert_int_equal(gp_ring_pop(r, &got), GP_OK);
        assert_true(qt_payload_ok(&got, i));
    }
    assert_int_equal(gp_ring_pop(r, &got), GP_ERR_STATE);
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, 3);
    assert_int_equal(st.push_waits, 1);
    gp_ring_destroy(r);
}

/* Statuses around a close on one thread, and reopen. Waits on a closed ring
 * return at once (a hang here is caught by the timed join). */
static void test_close_statuses_and_reopen(void **state)
{
    (void)state;
    gp_ring *r = make_ring(8, 0);
    gp_payload p, got;
    for (uint64_t i = 0; i < 3; i++) {
        p = qt_payload(i);
        assert_int_equal(gp_ring_try_push(r, &p), GP_OK);
    }
    gp_ring_close(r);
    gp_ring_close(r); /* idempotent */
    assert_true(gp_ring_is_closed(r));
    p = qt_payload(99);
    assert_int_equal(gp_ring_try_push(r, &p), GP_ERR_STATE);
    assert_int_equal(gp_ring_push(r, &p), GP_ERR_STATE);
    assert_int_equal(gp_ring_try_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 0));
    assert_int_equal(gp_ring_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 1));
    assert_int_equal(gp_ring_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 2));
    assert_int_equal(gp_ring_try_pop(r, &got), GP_ERR_STATE);
    qt_call c = { .r = r, .push = 0 };
    pthread_t t = start_call(&c);
    join_or_fail(r, t, "pop on a closed, drained ring");
    assert_int_equal(c.status, GP_ERR_STATE);

    gp_ring_reopen(r);
    assert_false(gp_ring_is_closed(r));
    assert_int_equal(gp_ring_try_pop(r, &got), GP_SOFT_EMPTY);
    p = qt_payload(5);
    assert_int_equal(gp_ring_push(r, &p), GP_OK);
    assert_int_equal(gp_ring_pop(r, &got), GP_OK);
    assert_true(qt_payload_ok(&got, 5));
    gp_ring_stats st;
    gp_ring_stats_get(r, &st);
    assert_int_equal(st.pushes, 4); /* kept across the reopen */
    assert_int_equal(st.pops, 4);
    gp_ring_destroy(r);
}

int gp_qtest_ring_block(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sleep_path_pop),
        cmocka_unit_test(test_sleep_path_push),
        cmocka_unit_test(test_close_wakes_blocked_consumer),
        cmocka_unit_test(test_close_wakes_blocked_producer),
        cmocka_unit_test(test_close_statuses_and_reopen),
    };
    return cmocka_run_group_tests_name("queues_ring_block", tests, NULL, NULL);
}

#ifndef GP_QTEST_NO_MAIN
int main(void) { return gp_qtest_ring_block(); }
#endif
