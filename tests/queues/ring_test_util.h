/* Helpers shared by the ring tests: tagged payloads, white-box access to the
 * ring's ck counters and wait flags, and joins that cannot hang a test. */
#ifndef GP_RING_TEST_UTIL_H
#define GP_RING_TEST_UTIL_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp_ring_impl.h"

/* Every field derived from seq, so a lost, duplicated, reordered or torn
 * payload shows up as a field mismatch. */
static inline gp_payload qt_payload(uint64_t seq)
{
    gp_payload p;
    memset(&p, 0, sizeof p);
    p.tok_begin = (int32_t)(seq * 7u);
    p.tok_count = (int32_t)(seq & 1023u) + 1;
    p.layer = (int32_t)(seq % 80u);
    p.micro = (int32_t)(seq & 3u);
    p.x = gp_view_make((void *)(uintptr_t)(0x1000u + seq * 64u), p.tok_count, (int)(seq % 8191u) + 1,
                       GP_DTYPE_BF16, (int)(seq % 8u));
    p.resid = gp_view_make((void *)(uintptr_t)(~seq << 4), p.tok_count, 4096, GP_DTYPE_F32, GP_DEVICE_HOST);
    p.resid.row_stride = (int64_t)(seq * 0x9e3779b97f4a7c15ull >> 20);
    p.event = (void *)(uintptr_t)(seq ^ 0xabcdefull);
    p.seq = seq;
    return p;
}

static inline int qt_payload_ok(const gp_payload *p, uint64_t seq)
{
    gp_payload e = qt_payload(seq);
    return p->seq == e.seq && p->tok_begin == e.tok_begin && p->tok_count == e.tok_count &&
           p->layer == e.layer && p->micro == e.micro && gp_view_same(&p->x, &e.x) &&
           gp_view_same(&p->resid, &e.resid) && p->event == e.event;
}

/* Start ck_ring's free-running unsigned counters at v (ring empty), to test
 * their wrap past UINT_MAX without 2^32 operations. Quiescent ring only. */
static inline void qt_set_counters(gp_ring *r, unsigned v)
{
    r->ck.c_head = v;
    r->ck.p_tail = v;
    r->ck.p_head = v;
}

/* 0 once the thread has finished, -1 if it is still running after `seconds`. */
static inline int qt_join(pthread_t t, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)seconds;
    return pthread_timedjoin_np(t, NULL, &ts) == 0 ? 0 : -1;
}

/* 0 once the side owning w has announced it is about to sleep. */
static inline int qt_wait_sleeping(gp_ring_waiter *w, double seconds)
{
    double end = gp_now_s() + seconds;
    while (!atomic_load_explicit(&w->waiting, memory_order_acquire)) {
        if (gp_now_s() > end)
            return -1;
        usleep(200);
    }
    return 0;
}

/* CPU time consumed so far by thread t, in seconds. */
static inline double qt_thread_cpu(pthread_t t)
{
    clockid_t c;
    struct timespec ts;
    if (pthread_getcpuclockid(t, &c) != 0 || clock_gettime(c, &ts) != 0)
        return -1.0;
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Pin the calling thread to the k-th CPU it may run on, when it may run on
 * two or more. The stress tests pin producer and consumer apart: left alone,
 * the scheduler sometimes wakes both onto one CPU and keeps them there, and
 * then every wait becomes a futex round trip (a 0.2 s run took 16 s). */
static inline void qt_pin_self(int k)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2)
        return;
    int want = k % CPU_COUNT(&allowed);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || want-- > 0)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        return;
    }
}

#endif
