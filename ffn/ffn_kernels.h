/* FFN-stage kernels, C-callable (no CUDA types: streams are void*, bf16
 * tensors are gp_bf16 device pointers), and their CPU references. */
#ifndef GP_FFN_KERNELS_H
#define GP_FFN_KERNELS_H

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[b][i] = bf16(silu(g) * u) with g = gu[b][i], u = gu[b][F + i] (the
 * fused gate/up GEMM output: gate columns, then up columns), computed in fp32
 * with silu(g) = g / (1 + expf(-g)).
 * gu: [B][2F] bf16 device; out: [B][F] bf16 device; B >= 0 (0: nothing to
 * do), F >= 1. 16-byte vector path when F % 8 == 0 and both pointers are
 * 16-byte aligned, scalar otherwise. Graph-capturable. */
gp_status gp_swiglu(const gp_bf16 *gu, gp_bf16 *out, int B, int F, void *stream);

/* CPU oracle: the same formula in double, unrounded. gu: [B][2F] host; out:
 * [B][F] host float. */
void gp_swiglu_ref(const gp_bf16 *gu, float *out, int B, int F);

#ifdef __cplusplus
}
#endif
#endif
