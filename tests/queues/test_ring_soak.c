/* Soak test of the rings: millions of payloads through ring sets of several
 * depths, with seeded random delays on both sides and many closes (by the
 * producer, the consumer or a third thread) and reopens, checking that nothing
 * is lost, duplicated, reordered or torn across them. Ten million payloads
 * took 8-9 s on the 2-core CI machine when idle, 68 s with both cores busy. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ring_test_util.h"

/* Payloads delivered over all configurations. The TSan build compiles in a
 * smaller count; GP_SOAK_TOTAL and GP_SOAK_SEED in the environment override
 * both (the seed repeats the delays and segment plan, not the interleaving). */
#ifndef GP_QTEST_SOAK_TOTAL
#define GP_QTEST_SOAK_TOTAL 10000000ull
#endif
#define SOAK_MAX_RINGS 4
#define SOAK_JOIN_S 120.0

/* splitmix64: one independent stream per thread and segment from one seed. */
static uint64_t soak_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct soak_rng {
    uint64_t s;
    unsigned scale, left; /* the current delay phase and ops left in it */
} soak_rng;

static uint64_t soak_next(soak_rng *g)
{
    g->s += 0x9e3779b97f4a7c15ull;
    return soak_mix(g->s);
}

/* Mostly short spins, now and then a yield, rarely a microsecond sleep (in
 * practice tens of microseconds: timer slack). The spin length is scaled by a
 * phase redrawn every few thousand ops, so each side is in turn the slower
 * one and the ring runs both full and empty. */
static void soak_delay(soak_rng *g)
{
    if (g->left-- == 0) {
        uint64_t x = soak_next(g);
        g->scale = (unsigned)(x & 3u);
        g->left = 1024u + (unsigned)((x >> 8) & 4095u);
    }
    uint64_t x = soak_next(g);
    unsigned r = (unsigned)(x & 0xffffu);
    if (r < 4) {
        usleep(1);
    } else if (r < 36) {
        sched_yield();
    } else {
        unsigned n = (unsigned)((x >> 16) & 63u) >> (2u * (3u - g->scale)); /* 0, 0..3, 0..15 or 0..63 */
        for (unsigned i = 0; i < n; i++)
            ck_pr_stall();
    }
}

/* Order-sensitive hash over every field of a payload, so a torn or altered
 * record changes it even where the sequence number survives. */
static uint64_t soak_hash(uint64_t h, const gp_payload *p)
{
    uint64_t f[10] = { (uint64_t)(uint32_t)p->tok_begin, (uint64_t)(uint32_t)p->tok_count,
                       (uint64_t)(uint32_t)p->layer,     (uint64_t)(uint32_t)p->micro,
                       (uint64_t)(uintptr_t)p->x.data,   (uint64_t)(uintptr_t)p->resid.data,
                       (uint64_t)p->resid.row_stride,    (uint64_t)(uint32_t)p->x.cols,
                       (uint64_t)(uintptr_t)p->event,    p->seq };
    for (int i = 0; i < 10; i++)
        h = soak_mix(h ^ f[i]);
    return h;
}

typedef enum soak_closer { BY_PRODUCER, BY_CONSUMER, BY_OTHER } soak_closer;
static const char *const soak_closer_name[] = { "producer", "consumer", "third thread" };

/* One segment: threads started on reopened rings, ended by one close. Sequence
 * numbers and hashes carry over from segment to segment, per ring. */
typedef struct soak_seg {
    gp_ring_set *set;
    int n_rings;
    uint64_t len;            /* payloads the producer pushes before it closes */
    soak_closer closer;
    uint64_t cons_close_at;  /* BY_CONSUMER: pops before the consumer closes */
    soak_rng rng_p, rng_c;
    _Atomic uint64_t pushed; /* producer progress, read by the third-thread closer */

    /* producer, per ring: next seq, hash after / before the last push, pushes */
    uint64_t p_seq[SOAK_MAX_RINGS], p_hash[SOAK_MAX_RINGS], p_hash_prev[SOAK_MAX_RINGS], p_ok[SOAK_MAX_RINGS];
    gp_status p_status;      /* the first non-OK push, GP_OK if none */

    /* consumer, per ring: next expected seq, hash, pops, the status that ended it */
    uint64_t c_seq[SOAK_MAX_RINGS], c_hash[SOAK_MAX_RINGS], c_got[SOAK_MAX_RINGS];
    gp_status c_end[SOAK_MAX_RINGS];
    uint64_t c_bad;          /* payloads with the wrong seq/layer/micro */
    int bad_ring;
    uint64_t bad_want, bad_seq;
} soak_seg;

static void *soak_producer(void *arg)
{
    soak_seg *g = arg;
    qt_pin_self(1);
    g->p_status = GP_OK;
    for (uint64_t i = 0; i < g->len; i++) {
        int l = (int)(i % (uint64_t)g->n_rings);
        uint64_t x = soak_next(&g->rng_p), y = soak_next(&g->rng_p);
        gp_payload p;
        memset(&p, 0, sizeof p);
        p.tok_begin = (int32_t)(x & 0x7fffffff);
        p.tok_count = (int32_t)((x >> 32) & 1023u) + 1;
        p.layer = l;
        p.micro = (int32_t)(g->p_seq[l] & 3u);
        p.x = gp_view_make((void *)(uintptr_t)y, p.tok_count, (int)(y & 0xffffu) + 1, GP_DTYPE_BF16, 0);
        p.resid = gp_view_make((void *)(uintptr_t)(x ^ y), p.tok_count, 4096, GP_DTYPE_F32, 0);
        p.resid.row_stride = (int64_t)(y * 0x2545f4914f6cdd1dull >> 24);
        p.event = (void *)(uintptr_t)~x;
        p.seq = g->p_seq[l];
        soak_delay(&g->rng_p);
        gp_status s = gp_ring_push(gp_ring_set_get(g->set, l), &p);
        if (s != GP_OK) {
            g->p_status = s;
            break;
        }
        g->p_hash_prev[l] = g->p_hash[l];
        g->p_hash[l] = soak_hash(g->p_hash[l], &p);
        g->p_seq[l]++;
        g->p_ok[l]++;
        atomic_store_explicit(&g->pushed, i + 1, memory_order_relaxed);
    }
    /* Done or failed: close, as the runner's producer does (idempotent). */
    gp_ring_set_close(g->set);
    return NULL;
}

static void *soak_consumer(void *arg)
{
    soak_seg *g = arg;
    qt_pin_self(0);
    int live = g->n_rings;
    uint64_t pops = 0;
    for (uint64_t i = 0; live > 0; i++) {
        int l = (int)(i % (uint64_t)g->n_rings);
        if (g->c_end[l] != GP_OK)
            continue; /* this ring ended: closed and drained */
        if (g->closer == BY_CONSUMER && pops == g->cons_close_at)
            gp_ring_set_close(g->set); /* a failing consumer; it still drains below */
        gp_payload p;
        gp_status s = gp_ring_pop(gp_ring_set_get(g->set, l), &p);
        if (s != GP_OK) {
            g->c_end[l] = s;
            live--;
            continue;
        }
        if ((p.seq != g->c_seq[l] || p.layer != l || p.micro != (int32_t)(p.seq & 3u)) && g->c_bad++ == 0) {
            g->bad_ring = l;
            g->bad_want = g->c_seq[l];
            g->bad_seq = p.seq;
        }
        g->c_hash[l] = soak_hash(g->c_hash[l], &p);
        g->c_seq[l]++;
        g->c_got[l]++;
        pops++;
        soak_delay(&g->rng_c);
    }
    return NULL;
}

typedef struct soak_cfg {
    unsigned depth, spin;
    int rings;
    unsigned share_pm; /* share of the total, per mille */
} soak_cfg;

typedef struct soak_totals {
    uint64_t delivered, abandoned, segments, by[3];
} soak_totals;

static uint64_t soak_seed(void)
{
    static uint64_t seed;
    static int have;
    if (!have) {
        const char *e = getenv("GP_SOAK_SEED");
        seed = e ? strtoull(e, NULL, 0) : soak_mix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
        have = 1;
    }
    return seed;
}

static uint64_t soak_total(void)
{
    const char *e = getenv("GP_SOAK_TOTAL");
    return e ? strtoull(e, NULL, 0) : GP_QTEST_SOAK_TOTAL;
}

/* Checks one finished segment and carries the per-ring state to the next. */
static void soak_check_segment(const soak_cfg *c, soak_seg *g, soak_totals *t)
{
    if (g->c_bad)
        fail_msg("depth %u: %" PRIu64 " payloads out of order or corrupted; first on ring %d: wanted seq %" PRIu64
                 ", got %" PRIu64,
                 c->depth, g->c_bad, g->bad_ring, g->bad_want, g->bad_seq);
    uint64_t pushed = 0;
    for (int l = 0; l < g->n_rings; l++) {
        gp_ring *r = gp_ring_set_get(g->set, l);
        assert_int_equal(g->c_end[l], GP_ERR_STATE);
        assert_true(gp_ring_is_closed(r));
        assert_true(g->p_ok[l] >= g->c_got[l]);
        /* Only a push racing with a close by another thread may land after the
         * consumer found the ring closed and empty, and only one per ring: the
         * producer's next push sees the close (gp_queues.h). */
        uint64_t lost = g->p_ok[l] - g->c_got[l];
        if (lost > (g->closer == BY_PRODUCER ? 0u : 1u))
            fail_msg("depth %u ring %d (closed by the %s): %" PRIu64 " payloads pushed, %" PRIu64 " popped",
                     c->depth, l, soak_closer_name[g->closer], g->p_ok[l], g->c_got[l]);
        assert_int_equal(g->c_seq[l] + lost, g->p_seq[l]);
        assert_int_equal(g->c_hash[l], lost ? g->p_hash_prev[l] : g->p_hash[l]);
        assert_int_equal(gp_ring_size(r), lost); /* both sides joined: exact */
        pushed += g->p_ok[l];
        t->delivered += g->c_got[l];
        t->abandoned += lost;
        /* The next segment resends what was abandoned: reopen discards it. */
        g->p_seq[l] = g->c_seq[l];
        g->p_hash[l] = g->c_hash[l];
        g->p_ok[l] = g->c_got[l] = 0;
        g->c_end[l] = GP_OK;
    }
    if (g->closer == BY_PRODUCER) {
        assert_int_equal(g->p_status, GP_OK);
        assert_int_equal(pushed, g->len);
    } else {
        assert_true(g->p_status == GP_OK || g->p_status == GP_ERR_STATE);
        assert_true(g->p_status == GP_ERR_STATE || pushed == g->len);
    }
    t->segments++;
    t->by[g->closer]++;
    gp_ring_set_reopen(g->set);
}

static void soak_run(const soak_cfg *c, int index)
{
    uint64_t target = (soak_total() * c->share_pm + 999u) / 1000u;
    if (target < 1000)
        target = 1000;
    soak_rng plan = { soak_mix(soak_seed() + (uint64_t)index), 0, 0 };
    gp_ring_params prm = { c->depth, c->spin };
    soak_seg *g = calloc(1, sizeof *g);
    assert_non_null(g);
    assert_int_equal(gp_ring_set_create(c->rings, &prm, &g->set), GP_OK);
    g->n_rings = c->rings;
    /* Long enough segments to reach steady state, short enough for a few
     * hundred closes per configuration. */
    uint64_t mean = target / 200u < 64u ? 64u : target / 200u;
    if (mean > 50000u)
        mean = 50000u;

    soak_totals t = { 0 };
    double t0 = gp_now_s();
    while (t.delivered < target) {
        uint64_t x = soak_next(&plan);
        g->len = (x & 15u) == 0 ? (x >> 4) % 4u : 1u + (x >> 8) % (2u * mean); /* some of 0..3 */
        unsigned k = (unsigned)((x >> 40) % 20u);
        g->closer = k < 14 ? BY_PRODUCER : k < 17 ? BY_CONSUMER : BY_OTHER;
        g->cons_close_at = g->len ? (x >> 48) % g->len : 0;
        uint64_t other_at = g->len ? (x >> 20) % g->len : 0;
        g->rng_p.s = soak_next(&plan);
        g->rng_c.s = soak_next(&plan);
        atomic_store_explicit(&g->pushed, 0, memory_order_relaxed);

        pthread_t pt, ct;
        assert_int_equal(pthread_create(&ct, NULL, soak_consumer, g), 0);
        assert_int_equal(pthread_create(&pt, NULL, soak_producer, g), 0);
        if (g->closer == BY_OTHER) {
            /* Close from this thread once the producer is about that far in
             * (or done, in which case the close is a no-op). */
            double end = gp_now_s() + SOAK_JOIN_S;
            while (atomic_load_explicit(&g->pushed, memory_order_relaxed) < other_at &&
                   !gp_ring_is_closed(gp_ring_set_get(g->set, 0)) && gp_now_s() < end)
                usleep(20);
            gp_ring_set_close(g->set);
        }
        int jp = qt_join(pt, SOAK_JOIN_S), jc = qt_join(ct, SOAK_JOIN_S);
        if (jp || jc) {
            gp_ring_set_close(g->set); /* let the stuck side out before failing */
            fail_msg("depth %u spin %u: the %s did not finish a segment of %" PRIu64 " payloads within %.0f s "
                     "(seed 0x%016" PRIx64 ")",
                     c->depth, c->spin, jp ? "producer" : "consumer", g->len, SOAK_JOIN_S, soak_seed());
        }
        soak_check_segment(c, g, &t);
    }
    double dt = gp_now_s() - t0;

    /* The statistics survive reopen: every push and pop of the run. */
    uint64_t pushes = 0, pops = 0, push_waits = 0, pop_waits = 0, sleeps = 0;
    for (int l = 0; l < c->rings; l++) {
        gp_ring_stats st;
        gp_ring_stats_get(gp_ring_set_get(g->set, l), &st);
        assert_true(st.occupancy_max <= c->depth - 1);
        pushes += st.pushes;
        pops += st.pops;
        push_waits += st.push_waits;
        pop_waits += st.pop_waits;
        sleeps += st.push_sleeps + st.pop_sleeps;
    }
    assert_int_equal(pushes, t.delivered + t.abandoned);
    assert_int_equal(pops, t.delivered);
    print_message("depth %4u spin %4u rings %d: %9" PRIu64 " payloads in %6.2f s (%5.2f M/s), %4" PRIu64
                  " segments closed by producer/consumer/third %" PRIu64 "/%" PRIu64 "/%" PRIu64
                  ", %" PRIu64 " abandoned in a close race; waits push %" PRIu64 " pop %" PRIu64 ", sleeps %" PRIu64
                  "\n",
                  c->depth, c->spin, c->rings, t.delivered, dt, t.delivered / dt * 1e-6, t.segments, t.by[0], t.by[1],
                  t.by[2], t.abandoned, push_waits, pop_waits, sleeps);
    gp_ring_set_destroy(g->set);
    free(g);
}

/* Depths from the smallest to the largest allowed. The default spin only with
 * the default depth: a long spin is what makes the test slow on a loaded
 * machine, where the other side is often off the CPU. Spins of 16 and 0 send
 * most waits to the futex (costly, hence the small shares). */
static const soak_cfg soak_cfgs[] = {
    { 2, 256, 1, 250 },
    { 4, GP_RING_DEFAULT_SPIN, 3, 250 },
    { 16, 64, 4, 200 },
    { 256, 256, 2, 200 },
    { 4096, 1024, 1, 65 },
    { 8, 16, 2, 30 },
    { 2, 0, 1, 5 },
};

static void test_soak(void **state)
{
    const soak_cfg *c = *state;
    soak_run(c, (int)(c - soak_cfgs));
}

int gp_qtest_ring_soak(void)
{
    print_message("queues_ring_soak: %" PRIu64 " payloads, seed 0x%016" PRIx64
                  " (set GP_SOAK_SEED to repeat the delays, GP_SOAK_TOTAL to change the count)\n",
                  soak_total(), soak_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[0]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[1]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[2]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[3]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[4]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[5]),
        cmocka_unit_test_prestate(test_soak, (void *)&soak_cfgs[6]),
    };
    return cmocka_run_group_tests_name("queues_ring_soak", tests, NULL, NULL);
}

#ifndef GP_QTEST_NO_MAIN
int main(void) { return gp_qtest_ring_soak(); }
#endif
