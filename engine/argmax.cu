/* Greedy sampling: index of each row's largest logit, first index on ties,
 * NaN never wins (gp_argmax's rules), one CTA per row. */
#include <math.h>
#include <stdint.h>

#include "argmax.cuh"
#include "cuda_check.h"
#include "gp_launch.cuh"
#include "kernels.h"

#define GP_ARGMAX_THREADS 512
#define GP_ARGMAX_NONE INT32_MAX /* "no candidate yet" (all NaN so far) */

/* (v, i) beats (bv, bi) when larger, or equal with a smaller index. The
 * initial (-inf, NONE) loses to every real value, -inf included, so no special
 * case is needed; NaN is filtered before this is called. */
static __device__ __forceinline__ bool gp_argmax_better(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

/* grid: B CTAs. Each thread scans its indices in increasing order, so
 * within a thread the strict > keeps the first of equal values; the tree
 * below resolves ties across threads by index. VEC = 4 reads float4 (V % 4
 * == 0 and logits 16-byte aligned), else 1. */
template <int VEC>
static __global__ void gp_argmax_rows_kernel(const float *__restrict__ logits,
                                             int32_t *__restrict__ out, int V)
{
    gp_pdl_wait();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *row = logits + (size_t)blockIdx.x * (size_t)V; /* [V] */
    float bv = -INFINITY;
    int bi = GP_ARGMAX_NONE;
    const int step = (int)blockDim.x * VEC;
    for (int i = (int)threadIdx.x * VEC; i < V; i += step) {
        float x[VEC];
        if constexpr (VEC == 4) {
            float4 f = *reinterpret_cast<const float4 *>(row + i);
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
        } else {
            x[0] = row[i];
        }
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (!isnan(x[k]) && gp_argmax_better(x[k], i + k, bv, bi))
                bv = x[k], bi = i + k;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (gp_argmax_better(ov, oi, bv, bi))
            bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x >> 5;
        bv = lane < n_warps ? sv[lane] : -INFINITY;
        bi = lane < n_warps ? si[lane] : GP_ARGMAX_NONE;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (gp_argmax_better(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        if (lane == 0)
            out[blockIdx.x] = bi == GP_ARGMAX_NONE ? 0 : bi; /* all NaN: 0, as gp_argmax */
    }
}

cudaError_t gp_argmax_rows_launch(const float *logits, int32_t *out, int B, int V,
                                  cudaStream_t stream)
{
    /* rows start at multiples of V: V % 4 == 0 keeps each row 16-byte aligned */
    const bool vec = V % 4 == 0 && ((uintptr_t)logits & 15u) == 0;
    int threads = (V / (vec ? 4 : 1) + 31) / 32 * 32;
    if (threads > GP_ARGMAX_THREADS)
        threads = GP_ARGMAX_THREADS;
    if (threads < 32)
        threads = 32;
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)B), dim3((unsigned)threads), 0, stream);
    return vec ? cudaLaunchKernelEx(&l.cfg, gp_argmax_rows_kernel<4>, logits, out, V)
               : cudaLaunchKernelEx(&l.cfg, gp_argmax_rows_kernel<1>, logits, out, V);
}

extern "C" gp_status gp_argmax_rows(const float *logits, int32_t *out, int B, int V, void *stream)
{
    if (B < 0 || V < 1 || V > GP_ARGMAX_MAX_V)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_argmax_rows: B = %d, V = %d (need B >= 0, 1 <= V <= %d)",
                B, V, (int)GP_ARGMAX_MAX_V);
    if (B == 0)
        return GP_OK;
    if (!logits || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_argmax_rows: NULL pointer (logits %p, out %p) for B = %d",
                (const void *)logits, (void *)out, B);
    GP_CUDA_TRY(gp_argmax_rows_launch(logits, out, B, V, (cudaStream_t)stream));
    return GP_OK;
}
