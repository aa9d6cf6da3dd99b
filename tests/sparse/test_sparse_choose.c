/* The per-step sparse/dense choice: the crossover density from timings
 * (a line through two sparse points against the dense time, its clamps and
 * the unusable timings) and the pick rule (unmeasured, below, above, the
 * probe). */
#include "gp_test.h"

#include "gp_sparse.h"

static void test_crossover(void **state)
{
    (void)state;
    /* sparse: 1 ms fixed + 4 ms at density 1 (5 ms), 3 ms at 0.5; dense 4 ms: 1 + 4d = 4 at d = 0.75 */
    assert_float_equal(gp_sparse_crossover(4.0f, 5.0f, 3.0f, 0.5f), 0.75f, 1e-6);
    /* the measured B = 8 shape: sparse 1.45x dense at full density, 0.6x at 0.25 */
    float d = gp_sparse_crossover(1.0f, 1.45f, 0.6f, 0.25f);
    assert_true(d > 0.5f && d < 0.7f);
    /* the sparse kernel not slower at full density: always sparse */
    assert_float_equal(gp_sparse_crossover(5.0f, 5.0f, 3.0f, 0.5f), 1.0f, 0);
    assert_float_equal(gp_sparse_crossover(5.0f, 4.0f, 3.0f, 0.5f), 1.0f, 0);
    /* dense below even the fixed part: never sparse */
    assert_float_equal(gp_sparse_crossover(0.5f, 5.0f, 3.0f, 0.5f), 0.0f, 0);
    /* no gain from fewer inputs (noise) and slower at full density: dense */
    assert_float_equal(gp_sparse_crossover(1.0f, 2.0f, 2.1f, 0.5f), 0.0f, 0);
    /* unusable timings keep the calibration's choice (sparse) */
    const float bad[][4] = {{0, 5, 3, 0.5f}, {4, -1, 3, 0.5f}, {4, 5, 0, 0.5f}, {4, 5, 3, 0},
                            {4, 5, 3, 1},    {NAN, 5, 3, 0.5f}, {4, INFINITY, 3, 0.5f}, {4, 5, 3, NAN}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_float_equal(gp_sparse_crossover(bad[i][0], bad[i][1], bad[i][2], bad[i][3]), 1.0f, 0);
}

static void test_pick(void **state)
{
    (void)state;
    assert_true(gp_sparse_pick(0.7f, -1.0f, 0, 16));  /* unmeasured: measure */
    assert_true(gp_sparse_pick(0.7f, 0.5f, 0, 16));   /* below the crossover */
    assert_false(gp_sparse_pick(0.7f, 0.7f, 0, 16));  /* at it: dense */
    assert_false(gp_sparse_pick(0.7f, 0.99f, 15, 16));
    assert_true(gp_sparse_pick(0.7f, 0.99f, 16, 16)); /* the probe */
    assert_true(gp_sparse_pick(0.7f, 0.99f, 1, 1));   /* probe 1: every other step */
    assert_true(gp_sparse_pick(1.0f, 0.999f, 0, 16)); /* crossover 1: always sparse */
    assert_false(gp_sparse_pick(0.0f, 0.0f, 0, 16));  /* crossover 0: dense even at no activity */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_crossover), cmocka_unit_test(test_pick)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
