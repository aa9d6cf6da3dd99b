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

void gp_sparse_proj_shape(const gp_config *cfg, gp_sparse_proj p, int *N, int *K)
{
    const int q = cfg->n_heads * cfg->head_dim;
    switch (p) {
    case GP_SPARSE_QKV: *N = gp_config_qkv_rows(cfg), *K = cfg->hidden; break;
    case GP_SPARSE_O: *N = cfg->hidden, *K = q; break;
    case GP_SPARSE_GATE_UP: *N = 2 * cfg->ffn, *K = cfg->hidden; break;
    default: *N = cfg->hidden, *K = cfg->ffn; break;
    }
}

void gp_sparse_density(const gp_config *cfg, const long *active, long calls, double *per,
                       double mean[GP_SPARSE_PROJ_COUNT], double *weight_bytes)
{
    const int L = cfg->n_layers, P = GP_SPARSE_PROJ_COUNT;
    int out[GP_SPARSE_PROJ_COUNT], width[GP_SPARSE_PROJ_COUNT]; /* N and K: an input's row of W^T is N wide */
    for (int p = 0; p < P; p++)
        gp_sparse_proj_shape(cfg, (gp_sparse_proj)p, &out[p], &width[p]);
    double bytes = 0.0;
    for (int p = 0; p < P; p++)
        mean[p] = 0.0;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < P; p++) {
            double d = calls > 0 ? (double)active[l * P + p] / ((double)calls * width[p]) : 0.0;
            if (per)
                per[l * P + p] = d;
            mean[p] += d / L;
            bytes += d * width[p] * (double)out[p] * 2.0;
        }
    if (weight_bytes)
        *weight_bytes = bytes;
}
