/* CPU oracle of the engine GEMM: y[M][N] = x[M][K] . w[N][K]^T in double,
 * from the same bf16 or fp16 inputs the device reads. */
#include <stdlib.h>

#include "kernels.h"

void gp_gemm_ref(gp_dtype dt, int M, int N, int K, const void *x_, const void *w_, double *y)
{
    const uint16_t *x = x_, *w = w_;
    if (M <= 0 || N <= 0 || K <= 0 || !x || !w || !y)
        return;
    /* widen once: the inner loop then runs on floats; a product of two bf16
     * values is exact in float (8 + 8 significant bits), of two fp16 values
     * too (11 + 11 <= 24), the sum is double */
    float *xf = malloc((size_t)M * (size_t)K * sizeof *xf); /* [M][K] */
    float *wf = malloc((size_t)K * sizeof *wf);             /* one row of w: [K] */
    if (!xf || !wf) {
        free(xf), free(wf);
        for (size_t i = 0; i < (size_t)M * (size_t)N; i++)
            y[i] = 0.0 / 0.0; /* NaN: the comparison will fail loudly */
        return;
    }
    for (size_t i = 0; i < (size_t)M * (size_t)K; i++)
        xf[i] = gp_half_to_f32(x[i], dt);
    for (int n = 0; n < N; n++) {
        const uint16_t *wr = w + (size_t)n * (size_t)K;
        for (int k = 0; k < K; k++)
            wf[k] = gp_half_to_f32(wr[k], dt);
        for (int m = 0; m < M; m++) {
            const float *xr = xf + (size_t)m * (size_t)K;
            double a0 = 0, a1 = 0, a2 = 0, a3 = 0; /* four chains: latency, not accuracy */
            int k = 0;
            for (; k + 4 <= K; k += 4) {
                a0 += (double)(xr[k] * wf[k]);
                a1 += (double)(xr[k + 1] * wf[k + 1]);
                a2 += (double)(xr[k + 2] * wf[k + 2]);
                a3 += (double)(xr[k + 3] * wf[k + 3]);
            }
            for (; k < K; k++)
                a0 += (double)(xr[k] * wf[k]);
            y[(size_t)m * (size_t)N + (size_t)n] = (a0 + a1) + (a2 + a3);
        }
    }
    free(xf), free(wf);
}
