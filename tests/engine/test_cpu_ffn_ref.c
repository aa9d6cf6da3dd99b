/* The host side of the CPU-assisted FFN (engine/cpu_ffn_kernels.h, no GPU):
 * the masking rule and fp32 add the device kernels are held to, and the
 * step activity built from the hot neurons' SwiGLU rows and the cold
 * neurons' flags, in both 16-bit dtypes. */
#include "gp_test.h"

#include <math.h>

#include "cpu_ffn_kernels.h"

static uint64_t g_rng = 5;

static void test_mask(void **state)
{
    (void)state;
    const gp_dtype dts[2] = {GP_DTYPE_BF16, GP_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        const gp_dtype dt = dts[d];
        uint16_t x[8], y[8];
        const float v[8] = {0.5f, -0.5f, 0.25f, -0.2f, 0.0f, -0.0f, 3.0f, 0.2f};
        for (int i = 0; i < 8; i++)
            x[i] = gp_f32_to_half(v[i], dt);
        memset(y, 0xff, sizeof y);
        /* t at an element's value: that element drops (|x| > t, strictly) */
        const float t = gp_half_to_f32(x[2], dt);
        gp_cpu_ffn_mask_ref(dt, x, t, y, 8);
        for (int i = 0; i < 8; i++) {
            const int keep = fabsf(gp_half_to_f32(x[i], dt)) > t;
            assert_int_equal(y[i], keep ? x[i] : 0);
        }
        assert_int_equal(y[0], x[0]);
        assert_int_equal(y[1], x[1]);
        assert_int_equal(y[2], 0);
        assert_int_equal(y[5], 0); /* -0 becomes +0 */
        /* t 0 keeps every nonzero value, in place */
        gp_cpu_ffn_mask_ref(dt, x, 0.0f, x, 8);
        for (int i = 0; i < 8; i++)
            assert_int_equal(x[i], v[i] == 0.0f ? 0 : gp_f32_to_half(v[i], dt));
    }
}

static void test_add(void **state)
{
    (void)state;
    float acc[5] = {1.0f, 2.0f, -3.0f, 1e30f, 0.0f}, y[5] = {0.5f, -2.0f, 1e-8f, 1e30f, -0.0f};
    const float want[5] = {1.5f, 0.0f, -3.0f + 1e-8f, 2e30f, 0.0f};
    gp_cpu_ffn_add_ref(acc, y, 5);
    for (int i = 0; i < 5; i++)
        assert_true(acc[i] == want[i]);
}

/* Random activity against a direct count: hot slots map to their neurons,
 * cold flags to theirs, everything else 0. */
static void test_activity(void **state)
{
    (void)state;
    enum { F = 40, H = 16, NC = F - H, MB = 16 };
    const gp_dtype dts[2] = {GP_DTYPE_BF16, GP_DTYPE_F16};
    for (int d = 0; d < 2; d++)
        for (int B = 1; B <= MB; B += 5) {
            const gp_dtype dt = dts[d];
            int perm[F];
            for (int j = 0; j < F; j++)
                perm[j] = j;
            for (int j = F - 1; j > 0; j--) { /* a random split into slots and a cold list */
                int k = (int)(gp_test_uniform(&g_rng) * (j + 1));
                int t = perm[j];
                perm[j] = perm[k], perm[k] = t;
            }
            const int *slots = perm, *cold = perm + H;
            uint16_t act[MB * H];
            uint8_t flags[NC], active[F];
            const float t = 0.3f;
            for (int i = 0; i < B * H; i++) /* mostly below t, so some slots stay inactive */
                act[i] = gp_f32_to_half((float)(gp_test_uniform(&g_rng) - 0.5) * 0.65f, dt);
            for (int i = 0; i < NC; i++)
                flags[i] = gp_test_uniform(&g_rng) < 0.5 ? (uint8_t)(1 + (i % 3)) : 0; /* nonzero counts as 1 */
            memset(active, 7, sizeof active);
            gp_cpu_ffn_activity(dt, act, B, H, slots, t, cold, flags, NC, F, active);
            int n_hot = 0;
            for (int s = 0; s < H; s++) {
                int any = 0;
                for (int b = 0; b < B; b++)
                    any |= fabsf(gp_half_to_f32(act[b * H + s], dt)) > t;
                assert_int_equal(active[slots[s]], any);
                n_hot += any;
            }
            for (int i = 0; i < NC; i++)
                assert_int_equal(active[cold[i]], flags[i] != 0);
            if ((B == 6 || B == 11) && !(n_hot > 0 && n_hot < H)) /* this seed's draws */
                fail_msg("%s B %d: %d of %d slots active: the draw tests nothing", gp_dtype_name(dt), B, n_hot, H);
        }
    /* neurons in neither list stay 0 */
    uint8_t active[4];
    const int slots[1] = {2};
    uint16_t a = gp_f32_to_half(1.0f, GP_DTYPE_BF16);
    memset(active, 9, sizeof active);
    gp_cpu_ffn_activity(GP_DTYPE_BF16, &a, 1, 1, slots, 0.0f, NULL, NULL, 0, 4, active);
    assert_int_equal(active[0], 0);
    assert_int_equal(active[1], 0);
    assert_int_equal(active[2], 1);
    assert_int_equal(active[3], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_activity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
