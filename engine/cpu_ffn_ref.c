/* CPU references of the CPU-assisted FFN's kernels, and the step activity it
 * hands the hot-set tracker. */
#include <math.h>
#include <string.h>

#include "cpu_ffn_kernels.h"

void gp_cpu_ffn_mask_ref(gp_dtype dt, const void *x_, float t, void *y_, int n)
{
    const uint16_t *x = x_;
    uint16_t *y = y_;
    for (int i = 0; i < n; i++)
        y[i] = fabsf(gp_half_to_f32(x[i], dt)) > t ? x[i] : 0;
}

void gp_cpu_ffn_add_ref(float *acc, const float *y, int n)
{
    for (int i = 0; i < n; i++)
        acc[i] += y[i];
}

void gp_cpu_ffn_activity(gp_dtype dt, const void *act_, int B, int H, const int *slots, float t,
                         const int *cold, const uint8_t *cold_flags, int n_cold, int ffn, uint8_t *active)
{
    const uint16_t *act = act_;
    memset(active, 0, (size_t)ffn);
    for (int s = 0; s < H; s++) {
        uint8_t any = 0;
        for (int b = 0; b < B && !any; b++)
            any = fabsf(gp_half_to_f32(act[(size_t)b * H + s], dt)) > t;
        active[slots[s]] = any;
    }
    for (int i = 0; i < n_cold; i++)
        active[cold[i]] = cold_flags[i] != 0;
}
