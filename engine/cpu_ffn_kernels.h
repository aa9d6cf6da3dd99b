/* The small kernels of the CPU-assisted FFN (engine_cpu_ffn.c, --cpu-ffn)
 * and the host-side bookkeeping of a step's activity, each device entry
 * beside its CPU reference. C-callable; streams void*, 16-bit tensors of a
 * gp_dtype (BF16 or F16). */
#ifndef GP_CPU_FFN_KERNELS_H
#define GP_CPU_FFN_KERNELS_H

#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = x[i] when |x[i]| > t, else +0, for n 16-bit elements of dt (the
 * masking rule of sparse/gp_sparse.h, applied before a dense GEMM so that it
 * sums exactly the inputs the sparse kernels would). t finite, >= 0; n >= 0
 * (0: no-op); x, y device, may be the same. Graph-capturable. */
gp_status gp_cpu_ffn_mask(gp_dtype dt, const void *x, float t, void *y, int n, void *stream);
/* CPU oracle: the same, host arrays, bit for bit. */
void gp_cpu_ffn_mask_ref(gp_dtype dt, const void *x, float t, void *y, int n);

/* acc[i] += y[i] in fp32 for n elements (the CPU's partial FFN added into
 * the residual). Device; n >= 0. Graph-capturable. */
gp_status gp_cpu_ffn_add(float *acc, const float *y, int n, void *stream);
/* CPU oracle: the same fp32 adds, bit for bit. */
void gp_cpu_ffn_add_ref(float *acc, const float *y, int n);

/* A layer's step activity over its ffn neurons (gp_hotset_observe's input):
 * active[slots[s]] = 1 when |act[b][s]| > t for some b < B (act [B][H] of
 * dt, the hot neurons' SwiGLU outputs in slot order), and active[cold[i]] =
 * cold_flags[i] for i < n_cold (gp_cold_ffn_run_ex's flags); every other
 * entry 0. active has room for ffn; slots [H] and cold [n_cold] name
 * neurons in [0, ffn). Host arrays. */
void gp_cpu_ffn_activity(gp_dtype dt, const void *act, int B, int H, const int *slots, float t,
                         const int *cold, const uint8_t *cold_flags, int n_cold, int ffn, uint8_t *active);

#ifdef __cplusplus
}
#endif
#endif
