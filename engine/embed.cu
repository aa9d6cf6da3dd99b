/* Token embedding: gathers table rows (bf16 or fp16) into the fp32 residual
 * stream, one CTA per token; a table cut by vocabulary gives zero rows for
 * the tokens it does not hold. */
#include <stdint.h>

#include "cuda_check.h"
#include "gp_launch.cuh"
#include "embed.cuh"
#include "gp_half.cuh"
#include "kernels.h"

#define GP_EMBED_THREADS 256

/* grid: B CTAs; T the table's type (gp_half.cuh). VEC = 8: 16-byte loads and two float4 stores (H % 8 == 0,
 * table 16-byte and resid 16-byte aligned); VEC = 1 otherwise. A token id
 * outside [0, V) cannot be reported from here: its row becomes NaN rather
 * than an out-of-bounds read (the host validates ids; see kernels.h). The
 * table holds the rows of ids [lo, lo + rows). */
template <typename T, int VEC>
static __global__ void gp_embed_kernel(const int32_t *__restrict__ tokens,
                                       const uint16_t *__restrict__ table,
                                       float *__restrict__ resid, int H, int V, int lo, int rows)
{
    gp_pdl_wait();
    const int32_t tok = tokens[blockIdx.x];
    float *dst = resid + (size_t)blockIdx.x * (size_t)H; /* [H] */
    const int step = (int)blockDim.x * VEC;
    if (tok < 0 || tok >= V) {
        for (int i = (int)threadIdx.x; i < H; i += (int)blockDim.x)
            dst[i] = __int_as_float(0x7fc00000); /* quiet NaN */
        return;
    }
    if (tok < lo || tok - lo >= rows) { /* another part's token: the sum over the parts is its row */
        for (int i = (int)threadIdx.x; i < H; i += (int)blockDim.x)
            dst[i] = 0.0f;
        return;
    }
    typedef gp_half_traits<T> ht;
    const uint16_t *src = table + (size_t)(tok - lo) * (size_t)H; /* [H] */
    for (int i = (int)threadIdx.x * VEC; i < H; i += step) {
        if constexpr (VEC == 8 && ht::is_bf16) {
            uint4 u = *reinterpret_cast<const uint4 *>(src + i);
            /* bf16 -> f32 is a 16-bit shift; element 0 is the low half */
            float4 a = make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                                   __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
            float4 b = make_float4(__uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
                                   __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u));
            *reinterpret_cast<float4 *>(dst + i) = a;
            *reinterpret_cast<float4 *>(dst + i + 4) = b;
        } else if constexpr (VEC == 8) {
            uint4 u = *reinterpret_cast<const uint4 *>(src + i);
            const uint32_t wd[4] = { u.x, u.y, u.z, u.w }; /* element 2k is the low half of word k */
            float f[8];
#pragma unroll
            for (int k = 0; k < 4; k++)
                f[2 * k] = ht::to_f32((uint16_t)(wd[k] & 0xffffu)), f[2 * k + 1] = ht::to_f32((uint16_t)(wd[k] >> 16));
            *reinterpret_cast<float4 *>(dst + i) = make_float4(f[0], f[1], f[2], f[3]);
            *reinterpret_cast<float4 *>(dst + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
        } else {
            dst[i] = ht::to_f32(src[i]);
        }
    }
}

cudaError_t gp_embed_launch(gp_dtype dt, const int32_t *tokens, const void *table_, float *resid,
                            int B, int H, int V, int lo, int rows, cudaStream_t stream)
{
    const uint16_t *table = static_cast<const uint16_t *>(table_);
    /* rows start at multiples of H: with H % 8 == 0 every row keeps the base
     * alignment (16 bytes of bf16 = 8 elements; 32 bytes of f32) */
    const bool vec = H % 8 == 0 && ((uintptr_t)table & 15u) == 0 && ((uintptr_t)resid & 15u) == 0;
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)B), dim3(GP_EMBED_THREADS), 0, stream);
    cudaError_t e;
    GP_HALF_DISPATCH(dt, e = vec ? cudaLaunchKernelEx(&l.cfg, gp_embed_kernel<T, 8>, tokens, table, resid, H, V, lo, rows)
                                 : cudaLaunchKernelEx(&l.cfg, gp_embed_kernel<T, 1>, tokens, table, resid, H, V, lo,
                                                      rows));
    return e;
}

extern "C" gp_status gp_embed(gp_dtype dt, const int32_t *tokens, const void *table, float *resid,
                              int B, int H, int V, int lo, int rows, void *stream)
{
    GP_TRY(gp_dtype_check_half(dt, "gp_embed"));
    if (B < 0 || H < 1 || V < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_embed: B = %d, H = %d, V = %d (need B >= 0, H >= 1, "
                "V >= 1)", B, H, V);
    if (lo < 0 || rows < 1 || lo >= V || rows > V)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_embed: the table's rows [%d, %d + %d) of a vocabulary of %d: need 0 <= lo < "
                "V and 1 <= rows <= V", lo, lo, rows, V);
    if (B == 0)
        return GP_OK;
    if (!tokens || !table || !resid)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_embed: NULL pointer (tokens %p, table %p, resid %p) for "
                "B = %d", (const void *)tokens, table, (void *)resid, B);
    GP_CUDA_TRY(gp_embed_launch(dt, tokens, table, resid, B, H, V, lo, rows, (cudaStream_t)stream));
    return GP_OK;
}
