/* SwiGLU between the fused gate/up GEMM and the down GEMM: out = T(silu(g)
 * * u) in fp32 with T bf16 or fp16, 16-byte vectors when rows allow. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_util.cuh" /* model/: header-only checking of CUDA calls */
#include "ffn_kernels.h"
#include "gp_half.cuh" /* model/ */
#include "gp_launch.cuh"
#include "swiglu.cuh"

#define GP_SWIGLU_THREADS 256
#define GP_SWIGLU_MAX_BLOCKS 8192u /* grid-stride beyond this: plenty for 132 SMs */

/* One item = VEC consecutive outputs of one row; gu rows are [gate F | up F].
 * VEC = 8: uint4 loads/stores (F % 8 == 0, 16-byte aligned bases), else 1. */
template <typename T, int VEC>
static __global__ void gp_swiglu_kernel(const uint16_t *__restrict__ gu, uint16_t *__restrict__ out,
                                        int F, uint64_t n_items)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> ht;
    const uint64_t per_row = (uint64_t)(F / VEC);
    for (uint64_t it = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; it < n_items;
         it += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t b = it / per_row, c = (it - b * per_row) * VEC;
        const uint16_t *g = gu + b * 2u * (uint64_t)F + c; /* [VEC] gate */
        const uint16_t *u = g + F;                         /* [VEC] up */
        uint16_t *o = out + b * (uint64_t)F + c;           /* [VEC] */
        if constexpr (VEC == 8) {
            uint4 gv = *reinterpret_cast<const uint4 *>(g);
            uint4 uv = *reinterpret_cast<const uint4 *>(u);
            const uint32_t gw[4] = { gv.x, gv.y, gv.z, gv.w }, uw[4] = { uv.x, uv.y, uv.z, uv.w };
            uint32_t ow[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                /* element 2k is the low half of word k (bf16: a shift, no conversion) */
                float lo = gp_swiglu_one(ht::lo(gw[k]), ht::lo(uw[k]));
                float hi = gp_swiglu_one(ht::hi(gw[k]), ht::hi(uw[k]));
                ow[k] = (uint32_t)ht::from_f32(lo) | ((uint32_t)ht::from_f32(hi) << 16);
            }
            *reinterpret_cast<uint4 *>(o) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
        } else {
            *o = ht::from_f32(gp_swiglu_one(ht::to_f32(*g), ht::to_f32(*u)));
        }
    }
}

cudaError_t gp_swiglu_launch(gp_dtype dt, const void *gu_, void *out_, int B, int F,
                             cudaStream_t stream)
{
    const uint16_t *gu = static_cast<const uint16_t *>(gu_);
    uint16_t *out = static_cast<uint16_t *>(out_);
    /* row b of gu starts at b * 4F bytes, of out at b * 2F: F % 8 == 0 keeps
     * both (and the up half at +2F bytes) 16-byte aligned */
    const bool vec = F % 8 == 0 && ((uintptr_t)gu & 15u) == 0 && ((uintptr_t)out & 15u) == 0;
    const int per = vec ? 8 : 1;
    const uint64_t n_items = (uint64_t)B * (uint64_t)(F / per);
    uint64_t blocks = (n_items + GP_SWIGLU_THREADS - 1) / GP_SWIGLU_THREADS;
    if (blocks > GP_SWIGLU_MAX_BLOCKS)
        blocks = GP_SWIGLU_MAX_BLOCKS;
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)blocks), dim3(GP_SWIGLU_THREADS), 0, stream);
    if (dt == GP_DTYPE_F16)
        return vec ? cudaLaunchKernelEx(&l.cfg, gp_swiglu_kernel<__half, 8>, gu, out, F, n_items)
                   : cudaLaunchKernelEx(&l.cfg, gp_swiglu_kernel<__half, 1>, gu, out, F, n_items);
    if (vec)
        return cudaLaunchKernelEx(&l.cfg, gp_swiglu_kernel<__nv_bfloat16, 8>, gu, out, F, n_items);
    return cudaLaunchKernelEx(&l.cfg, gp_swiglu_kernel<__nv_bfloat16, 1>, gu, out, F, n_items);
}

extern "C" gp_status gp_swiglu(gp_dtype dt, const void *gu, void *out, int B, int F, void *stream)
{
    GP_TRY(gp_dtype_check_half(dt, "gp_swiglu"));
    if (B < 0 || F < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_swiglu: B = %d, F = %d (need B >= 0, F >= 1)", B, F);
    if (B == 0)
        return GP_OK;
    if (!gu || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_swiglu: NULL pointer (gu %p, out %p) for B = %d, F = %d",
                gu, out, B, F);
    GP_CUDA_TRY(gp_swiglu_launch(dt, gu, out, B, F, (cudaStream_t)stream));
    return GP_OK;
}
