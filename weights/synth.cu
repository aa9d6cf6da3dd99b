/* Synthetic weights on the device: a grid-stride kernel over the same value
 * function as the host filler (synth_hash.h), rounded to the device dtype
 * (bf16 or fp16) by the same rule as the host, so both give bit-identical
 * tensors. */
#include "cuda_util.cuh"
#include "gp_half.cuh"
#include "gp_model.h"
#include "synth_hash.h"
#include "gp_weights.h"

/* bf16: gp_synth_bf16, the kernel's output before fp16 existed (same bits);
 * fp16: the generator's float rounded to nearest even (__float2half_rn, the
 * rule of the host's gp_f32_to_f16). */
template <typename T>
static __global__ void gp_synth_fill_kernel(uint16_t *dst, uint64_t n, uint64_t seed, int kind,
                                            int layer, float scale)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if constexpr (gp_half_traits<T>::is_bf16)
            dst[i] = gp_synth_bf16(seed, kind, layer, i, scale);
        else
            dst[i] = gp_half_traits<T>::from_f32(gp_synth_f32(seed, kind, layer, i, scale));
    }
}

/* 64K blocks of 256 threads cover the largest GPUs many times over; beyond
 * that threads loop, which keeps the launch valid for any n. */
#define GP_SYNTH_THREADS 256
#define GP_SYNTH_MAX_BLOCKS 65536u

extern "C" gp_status gp_synth_fill_device(void *dst, gp_dtype dtype, uint64_t n,
                                                uint64_t seed, gp_tensor_kind kind, int layer,
                                                float scale, void *stream)
{
    if ((int)kind < (int)GP_T_EMBED || (int)kind > (int)GP_T_BQKV)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_device: kind = %d is not a gp_tensor_kind "
                "(%d..%d)", (int)kind, (int)GP_T_EMBED, (int)GP_T_BQKV);
    if (!gp_dtype_is_half(dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_device: dtype %s, allowed BF16 or F16",
                gp_dtype_name(dtype));
    if (n == 0)
        return GP_OK;
    if (!dst)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_device: dst is NULL for n = %llu",
                (unsigned long long)n);
    uint64_t blocks = (n + GP_SYNTH_THREADS - 1) / GP_SYNTH_THREADS;
    if (blocks > GP_SYNTH_MAX_BLOCKS)
        blocks = GP_SYNTH_MAX_BLOCKS;
    uint16_t *d = static_cast<uint16_t *>(dst);
    if (dtype == GP_DTYPE_F16)
        gp_synth_fill_kernel<__half><<<(unsigned)blocks, GP_SYNTH_THREADS, 0, (cudaStream_t)stream>>>(
            d, n, seed, (int)kind, layer, scale);
    else
        gp_synth_fill_kernel<__nv_bfloat16><<<(unsigned)blocks, GP_SYNTH_THREADS, 0,
                                              (cudaStream_t)stream>>>(d, n, seed, (int)kind, layer,
                                                                      scale);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_synth_fill_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}
