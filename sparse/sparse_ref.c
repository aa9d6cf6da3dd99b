/* CPU oracle of the sparse-input GEMV: the masking rule of gp_sparse.h in
 * double, unrounded. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "gp_sparse.h"

int gp_sparse_gemv_ref(gp_dtype dt, int B, int N, int K, const void *x_, const void *wt_, float t, float *y)
{
    const uint16_t *x = x_, *wt = wt_;
    double *acc = calloc((size_t)B * (size_t)N, sizeof *acc);
    int active = 0;
    for (int k = 0; k < K; k++) {
        int any = 0;
        for (int b = 0; b < B; b++) {
            float v = gp_half_to_f32(x[(size_t)b * K + k], dt);
            if (!(fabsf(v) > t))
                continue;
            any = 1;
            for (int n = 0; n < N && acc; n++)
                acc[(size_t)b * N + n] += (double)v * gp_half_to_f32(wt[(size_t)k * N + n], dt);
        }
        active += any;
    }
    for (size_t i = 0; i < (size_t)B * N; i++)
        y[i] = acc ? (float)acc[i] : NAN;
    free(acc);
    return active;
}
