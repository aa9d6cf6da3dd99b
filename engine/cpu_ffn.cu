/* Device side of cpu_ffn_kernels.h: elementwise, over a decode step's few
 * rows (B x hidden elements), so a plain grid-stride loop is enough. */
#include <math.h>
#include <stdint.h>

#include "cpu_ffn_kernels.h"
#include "cuda_util.cuh"
#include "gp_half.cuh"

#define GP_CPU_FFN_THREADS 256
#define GP_CPU_FFN_MAX_BLOCKS 1024

template <class T>
__global__ void gp_cpu_ffn_mask_kernel(const uint16_t *x, float t, uint16_t *y, int n)
{
    typedef gp_half_traits<T> ht;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint16_t v = x[i];
        y[i] = fabsf(ht::to_f32(v)) > t ? v : (uint16_t)0;
    }
}

__global__ void gp_cpu_ffn_add_kernel(float *acc, const float *y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc[i] += y[i];
}

static int blocks_for(int n)
{
    int b = (n + GP_CPU_FFN_THREADS - 1) / GP_CPU_FFN_THREADS;
    return b < GP_CPU_FFN_MAX_BLOCKS ? b : GP_CPU_FFN_MAX_BLOCKS;
}

extern "C" gp_status gp_cpu_ffn_mask(gp_dtype dt, const void *x, float t, void *y, int n, void *stream)
{
    GP_TRY(gp_dtype_check_half(dt, "gp_cpu_ffn_mask"));
    if (n < 0 || !(t >= 0.0f) || isinf(t))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_ffn_mask: n %d (>= 0), threshold %g (finite, >= 0)", n, (double)t);
    if (n == 0)
        return GP_OK;
    if (!x || !y)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_ffn_mask: x %p, y %p", x, y);
    const uint16_t *xs = static_cast<const uint16_t *>(x);
    uint16_t *ys = static_cast<uint16_t *>(y);
    cudaStream_t s = (cudaStream_t)stream;
    if (dt == GP_DTYPE_BF16)
        gp_cpu_ffn_mask_kernel<__nv_bfloat16><<<blocks_for(n), GP_CPU_FFN_THREADS, 0, s>>>(xs, t, ys, n);
    else
        gp_cpu_ffn_mask_kernel<__half><<<blocks_for(n), GP_CPU_FFN_THREADS, 0, s>>>(xs, t, ys, n);
    GP_CUDA_LAUNCH_CHECK("gp_cpu_ffn_mask_kernel");
    return GP_OK;
}

extern "C" gp_status gp_cpu_ffn_add(float *acc, const float *y, int n, void *stream)
{
    if (n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_ffn_add: n %d (>= 0)", n);
    if (n == 0)
        return GP_OK;
    if (!acc || !y)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_ffn_add: acc %p, y %p", (void *)acc, (const void *)y);
    gp_cpu_ffn_add_kernel<<<blocks_for(n), GP_CPU_FFN_THREADS, 0, (cudaStream_t)stream>>>(acc, y, n);
    GP_CUDA_LAUNCH_CHECK("gp_cpu_ffn_add_kernel");
    return GP_OK;
}
