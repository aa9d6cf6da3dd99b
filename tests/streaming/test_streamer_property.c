/* Random models, execution orders, budgets and prefetch depths (fixed seed)
 * run on the simulated copy engine: at every instant the budget holds, no
 * group in use is evicted, and no memory is reused before its last reader. */
#include "stream_test_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

#define HOLD_MAX 4

static void run_trial(int trial)
{
    st_model m;
    int layers = 1 + (int)rnd(8);
    st_model_make(&m, layers, 1, 1, 1);
    for (int i = 0; i < m.n_groups; i++) {
        m.groups[i].bytes = 1000 * (1 + rnd(4)); /* sizes differ: frees as well as hand-overs */
        m.groups[i].pinned = i == m.n_groups - 1 || rnd(10) == 0;
    }
    /* A random order, groups may repeat or be missing. */
    m.n_order = 1 + (int)rnd(3 * (uint32_t)m.n_groups);
    for (int i = 0; i < m.n_order; i++)
        m.order[i] = (int)rnd((uint32_t)m.n_groups);
    int window = 1 + (int)rnd(HOLD_MAX);
    gp_sim_stream *x0 = st_sim(0);
    gp_streamer_params p = st_params(&m, x0, 0, (int)rnd(5));
    if (p.prefetch_depth > m.n_order)
        p.prefetch_depth = m.n_order;
    p.min_window = window;
    p.keep_resident = (int)rnd(2); /* kept groups must leave the window its room */
    p.chunk_bytes = 1024;
    uint64_t minb = 0, total = 0;
    GP_CHECK_OK(gp_streamer_min_budget(&p, &minb));
    for (int i = 0; i < m.n_groups; i++)
        total += m.groups[i].bytes;
    gp_sim_stream_destroy(x0);
    uint64_t budget = minb + (rnd(3) == 0 ? 0 : rnd((uint32_t)(total - minb + 1)));
    gp_sim_stream *x = st_sim(budget);
    p.budget_bytes = budget;
    p.backend = gp_sim_stream_backend(x);
    gp_streamer *s = NULL;
    GP_CHECK_OK(gp_streamer_create(&p, &s));
    /* Stages hold up to window groups at once (the current one and the
     * window - 1 before it), on streams by kind, as the pipelined runner's
     * A and F sides do. */
    int held[HOLD_MAX];
    void *held_slot[HOLD_MAX], *held_stream[HOLD_MAX];
    int n_held = 0;
    for (int step = 0; step < 3; step++)
        for (int pos = 0; pos < m.n_order; pos++) {
            gp_status st = gp_streamer_advance(s, pos);
            if (st != GP_OK && st != GP_SOFT_FULL)
                fail_msg("trial %d: advance(%d) -> %s: %s", trial, pos, gp_status_str(st), gp_last_error());
            st_consistent(s, x);
            if (n_held == window) { /* the oldest stage ends */
                assert_ptr_equal(gp_streamer_slot(s, held[0]), held_slot[0]);
                GP_CHECK_OK(gp_streamer_release(s, held[0], held_stream[0]));
                n_held--;
                memmove(held, held + 1, (size_t)n_held * sizeof *held);
                memmove(held_slot, held_slot + 1, (size_t)n_held * sizeof *held_slot);
                memmove(held_stream, held_stream + 1, (size_t)n_held * sizeof *held_stream);
            }
            int g = m.order[pos];
            void *stream = gp_sim_stream_compute(x, (int)m.groups[g].kind);
            st = gp_streamer_acquire(s, g, stream);
            if (st != GP_OK)
                fail_msg("trial %d (budget %llu, min %llu, window %d, D %d): acquire(%d) at %d -> %s: %s", trial,
                         (unsigned long long)budget, (unsigned long long)minb, window, p.prefetch_depth, g, pos,
                         gp_status_str(st), gp_last_error());
            void *slot = gp_streamer_slot(s, g);
            assert_non_null(slot);
            gp_sim_stream_read(x, stream, slot, 1e-4 * (1 + rnd(50)));
            held[n_held] = g;
            held_slot[n_held] = slot;
            held_stream[n_held] = stream;
            n_held++;
            /* Every held group is still where its stage found it. */
            for (int h = 0; h < n_held; h++) {
                assert_ptr_equal(gp_streamer_slot(s, held[h]), held_slot[h]);
                assert_true(gp_streamer_in_use(s, held[h]) > 0);
            }
            st_consistent(s, x);
        }
    for (int h = 0; h < n_held; h++)
        GP_CHECK_OK(gp_streamer_release(s, held[h], held_stream[h]));
    for (int i = 0; i < m.n_groups; i++)
        assert_int_equal(gp_streamer_in_use(s, i), 0);
    st_consistent(s, x);
    assert_true(gp_sim_stream_report_get(x)->peak_bytes <= budget);
    gp_streamer_destroy(s);
    assert_int_equal(gp_sim_stream_report_get(x)->live_slots, 0);
    assert_int_equal(gp_sim_stream_report_get(x)->live_markers, 0);
    gp_sim_stream_destroy(x);
}

static void test_random(void **state)
{
    for (int t = 0; t < 2000; t++)
        run_trial(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
