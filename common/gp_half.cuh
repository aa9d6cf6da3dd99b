/* The two 16-bit compute types of the CUDA kernels (docs/ARCHITECTURE.md,
 * "engine dtype"): every kernel is a template on T = __nv_bfloat16 or
 * __half, the dtype of its 16-bit tensors. gp_half_traits<T> holds what
 * differs between the two: conversions to and from float on 16-bit patterns
 * (to_f32/from_f32) and on the CUDA types (to_float/from_float), both round
 * to nearest even; the packed pair type; and the m16n8k16 tensor-core
 * product with fp32 accumulators (.bf16 or .f16 inputs; ldmatrix, movmatrix
 * and cp.async move 16-bit elements whatever they are). Arithmetic is
 * float32 in both; only loads and the rounding of each store depend on T.
 * The bf16 members are the operations the kernels used before fp16 existed,
 * so bf16 results keep their bits. CUDA sources only. */
#ifndef GP_HALF_CUH
#define GP_HALF_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gp_common.h"

template <class T> struct gp_half_traits;

template <> struct gp_half_traits<__nv_bfloat16> {
    typedef __nv_bfloat16 T;
    typedef __nv_bfloat162 T2;
    static constexpr gp_dtype dtype = GP_DTYPE_BF16;
    static constexpr bool is_bf16 = true;
    /* on 16-bit patterns: the integer conversions of gp_common.h, the host's bits */
    static __device__ __forceinline__ float to_f32(uint16_t h) { return gp_bf16_to_f32(h); }
    static __device__ __forceinline__ uint16_t from_f32(float f) { return gp_f32_to_bf16(f); }
    static __device__ __forceinline__ float to_float(T x) { return __bfloat162float(x); }
    static __device__ __forceinline__ T from_float(float f) { return __float2bfloat16_rn(f); }
    static __device__ __forceinline__ float2 to_float2(T2 x) { return __bfloat1622float2(x); }
    static __device__ __forceinline__ T2 from_float2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
    /* lo in bits 0..15, hi in 16..31 */
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        T2 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    /* bf16 is the upper half of an fp32 */
    static __device__ __forceinline__ float lo(uint32_t v) { return __uint_as_float(v << 16); }
    static __device__ __forceinline__ float hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
    /* d += a (16x16) * b (16x8), fp32 accumulate */
    static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
};

template <> struct gp_half_traits<__half> {
    typedef __half T;
    typedef __half2 T2;
    static constexpr gp_dtype dtype = GP_DTYPE_F16;
    static constexpr bool is_bf16 = false;
    static __device__ __forceinline__ float to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
    /* round to nearest even, overflow to inf: gp_f32_to_f16's rule */
    static __device__ __forceinline__ uint16_t from_f32(float f) { return __half_as_ushort(__float2half_rn(f)); }
    static __device__ __forceinline__ float to_float(T x) { return __half2float(x); }
    static __device__ __forceinline__ T from_float(float f) { return __float2half_rn(f); }
    static __device__ __forceinline__ float2 to_float2(T2 x) { return __half22float2(x); }
    static __device__ __forceinline__ T2 from_float2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        T2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float lo(uint32_t v)
    {
        return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
    }
    static __device__ __forceinline__ float hi(uint32_t v)
    {
        return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
    }
    static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
};

/* The 8 elements of a 16-byte load as floats (element 2j is the low half of
 * word j). */
template <class T>
static __device__ __forceinline__ void gp_unpack_x8(const uint4 r, float f[8])
{
    typedef gp_half_traits<T> TR;
    f[0] = TR::lo(r.x);
    f[1] = TR::hi(r.x);
    f[2] = TR::lo(r.y);
    f[3] = TR::hi(r.y);
    f[4] = TR::lo(r.z);
    f[5] = TR::hi(r.z);
    f[6] = TR::lo(r.w);
    f[7] = TR::hi(r.w);
}

/* d += a (16x16, rows 8..15 zero: a1 = a3 = 0) * b (16x8). */
template <class T>
static __device__ __forceinline__ void gp_mma_half(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1)
{
    gp_half_traits<T>::mma(d, a0, 0u, a2, 0u, b0, b1);
}

/* Call body with T bound to the type of dt (BF16 or F16); the caller has
 * checked dt with gp_dtype_check_half. */
#define GP_HALF_DISPATCH(dt, ...)                                                                \
    do {                                                                                         \
        if ((dt) == GP_DTYPE_F16) {                                                              \
            typedef __half T;                                                                    \
            __VA_ARGS__;                                                                         \
        } else {                                                                                 \
            typedef __nv_bfloat16 T;                                                             \
            __VA_ARGS__;                                                                         \
        }                                                                                        \
    } while (0)

#endif
