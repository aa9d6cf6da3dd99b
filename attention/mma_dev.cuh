/* Tensor-core and cp.async building blocks shared by the two tensor-core
 * decode-attention kernels (decode_attn_mma.cu, decode_attn_stream.cu):
 * inline PTX for sm_80+ (ldmatrix, movmatrix, cp.async: element-type
 * agnostic). */
#ifndef GP_MMA_DEV_CUH
#define GP_MMA_DEV_CUH

#include <stdint.h>

#include "gp_half.cuh"

static __device__ __forceinline__ unsigned gp_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void gp_cp_async16(unsigned dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

/* The same with an L2 cache policy from gp_l2_policy. */
static __device__ __forceinline__ void gp_cp_async16_l2(unsigned dst, const void *src, int bytes, uint64_t policy)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(bytes), "l"(policy));
}

/* An L2 policy for streamed data: evict_first marks its lines to go before
 * anyone else's (so data read once does not push out what a co-running
 * kernel reuses), else evict_normal (the default behaviour). */
static __device__ __forceinline__ uint64_t gp_l2_policy(bool evict_first)
{
    uint64_t p;
    if (evict_first)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    else
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}

static __device__ __forceinline__ void gp_ldsm_x4(unsigned addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                  uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

static __device__ __forceinline__ void gp_ldsm_x4_t(unsigned addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                    uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* The mma.sync products and the packing of pairs depend on the element
 * type: gp_half_traits (common/gp_half.cuh). */

/* The transpose of an 8x8 b16 matrix held one pair per lane (lane holds row
 * lane/4, columns 2(lane%4) and +1; so does the result). */
static __device__ __forceinline__ uint32_t gp_movmatrix_t(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

#endif
