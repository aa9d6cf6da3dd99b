/* Synthetic weights on the device: a grid-stride kernel over the same value
 * function as the host filler, so both give bit-identical tensors. */
#include "cuda_util.cuh"
#include "gp_model.h"
#include "synth_hash.h"

static __global__ void gp_synth_fill_kernel(gp_bf16 *dst, uint64_t n, uint64_t seed, int kind,
                                            int layer, float scale)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = gp_synth_bf16(seed, kind, layer, i, scale);
}

/* 64K blocks of 256 threads cover the largest GPUs many times over; beyond
 * that threads loop, which keeps the launch valid for any n. */
#define GP_SYNTH_THREADS 256
#define GP_SYNTH_MAX_BLOCKS 65536u

extern "C" gp_status gp_synth_fill_device(gp_bf16 *dst, uint64_t n, uint64_t seed,
                                          gp_tensor_kind kind, int layer, float scale,
                                          void *stream)
{
    if ((int)kind < (int)GP_T_EMBED || (int)kind > (int)GP_T_W_DOWN)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_device: kind = %d is not a gp_tensor_kind "
                "(%d..%d)", (int)kind, (int)GP_T_EMBED, (int)GP_T_W_DOWN);
    if (n == 0)
        return GP_OK;
    if (!dst)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_device: dst is NULL for n = %llu",
                (unsigned long long)n);
    uint64_t blocks = (n + GP_SYNTH_THREADS - 1) / GP_SYNTH_THREADS;
    if (blocks > GP_SYNTH_MAX_BLOCKS)
        blocks = GP_SYNTH_MAX_BLOCKS;
    gp_synth_fill_kernel<<<(unsigned)blocks, GP_SYNTH_THREADS, 0, (cudaStream_t)stream>>>(
        dst, n, seed, (int)kind, layer, scale);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_synth_fill_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}
