/* FFN-stage kernels, C-callable (no CUDA types: streams are void*, 16-bit
 * tensors are void pointers whose element type a gp_dtype names), and their
 * CPU references. */
#ifndef GP_FFN_KERNELS_H
#define GP_FFN_KERNELS_H

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[b][i] = T(silu(g) * u) with g = gu[b][i], u = gu[b][F + i] (the
 * fused gate/up GEMM output: gate columns, then up columns), computed in fp32
 * with silu(g) = g / (1 + expf(-g)), T = dt (GP_DTYPE_BF16 or GP_DTYPE_F16:
 * one rounding, to nearest even).
 * gu: [B][2F] dt device; out: [B][F] dt device; B >= 0 (0: nothing to
 * do), F >= 1. 16-byte vector path when F % 8 == 0 and both pointers are
 * 16-byte aligned, scalar otherwise. Graph-capturable. */
gp_status gp_swiglu(gp_dtype dt, const void *gu, void *out, int B, int F, void *stream);

/* CPU oracle: the same formula in double, unrounded. gu: [B][2F] host of dt;
 * out: [B][F] host float. */
void gp_swiglu_ref(gp_dtype dt, const void *gu, float *out, int B, int F);

#ifdef __cplusplus
}
#endif
#endif
