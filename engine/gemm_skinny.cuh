/* The skinny GEMM behind gp_gemm for small M (decode batches): the plan
 * (rows per CTA, grid sized to the context's SM budget) and its launcher.
 * C-callable; private to the engine folder (gemm.c is its only caller). */
#ifndef GP_GEMM_SKINNY_CUH
#define GP_GEMM_SKINNY_CUH

#include <cuda_runtime_api.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_SKINNY_MAX_M 16      /* largest M the kernel has an instance for */
#define GP_SKINNY_WARPS 8       /* warps per CTA, each on its own eighth of K */
#define GP_SKINNY_THREADS (32 * GP_SKINNY_WARPS)
#define GP_SKINNY_CTAS_PER_SM 2 /* __launch_bounds__ minimum: the plan's wave size */

/* How one (M, N, K) runs: fixed at the first call of the shape. */
typedef struct gp_skinny_plan {
    int nt;         /* 8-token tiles: M <= 8 nt; nt in {1, 2} */
    int r;          /* 16-row tiles per CTA (1 or 2) */
    int row_blocks; /* ceil(N / (16 r)): the work items */
    int grid;       /* persistent CTAs: min(row_blocks, SMs x GP_SKINNY_CTAS_PER_SM) */
} gp_skinny_plan;

/* 1 and *p filled when the kernel can serve the call: 1 <= M <= 16, K % 8 ==
 * 0, x and w 16-byte aligned (16-byte loads of every row); 0 otherwise
 * (cuBLASLt then serves it). sms: the SM budget the grid is sized to (the
 * context's target, else the device's). r: 16-row tiles per CTA, 1 or 2, or
 * 0 for the default (1; benchmarks force 2 to compare). */
int gp_skinny_plan_make(int M, int N, int K, const void *x, const void *w, int sms, int r,
                        gp_skinny_plan *p);

/* y = x . w^T (out 0 of dt, 1 fp32, 2 fp32 +=, 3 the SwiGLU of its halves
 * of dt: as gp_gemm_out; 3 needs N even and 16-row tiles) on stream, x and
 * w of dt (GP_DTYPE_BF16 or GP_DTYPE_F16; else cudaErrorInvalidValue).
 * Returns the launch's error. */
#define GP_SKINNY_OUT_SWIGLU 3
cudaError_t gp_skinny_launch(const gp_skinny_plan *p, gp_dtype dt, int M, int N, int K,
                             const void *x, const void *w, void *y, int out_type,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
