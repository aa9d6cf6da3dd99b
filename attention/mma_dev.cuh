/* Tensor-core and cp.async building blocks shared by the two tensor-core
 * decode-attention kernels (decode_attn_mma.cu, decode_attn_stream.cu):
 * inline PTX for sm_80+ (mma.sync, ldmatrix, movmatrix, cp.async). */
#ifndef GP_MMA_DEV_CUH
#define GP_MMA_DEV_CUH

#include <cuda_bf16.h>
#include <stdint.h>

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

/* d += a (16x16, all four A registers) * b (16x8), fp32 accumulate. */
static __device__ __forceinline__ void gp_mma_bf16_full(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* d += a (16x16, rows 8..15 zero: a1 = a3 = 0) * b (16x8). */
static __device__ __forceinline__ void gp_mma_bf16(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                                   uint32_t b1)
{
    gp_mma_bf16_full(d, a0, 0u, a2, 0u, b0, b1);
}

static __device__ __forceinline__ uint32_t gp_pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* The two bf16 halves of a packed pair, as floats. */
static __device__ __forceinline__ float gp_bf16_lo(uint32_t v)
{
    return __uint_as_float(v << 16);
}

static __device__ __forceinline__ float gp_bf16_hi(uint32_t v)
{
    return __uint_as_float(v & 0xffff0000u);
}

/* The transpose of an 8x8 b16 matrix held one pair per lane (lane holds row
 * lane/4, columns 2(lane%4) and +1; so does the result). */
static __device__ __forceinline__ uint32_t gp_movmatrix_t(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

#endif
