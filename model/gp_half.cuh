/* The two 16-bit compute types of the CUDA engine (docs/ARCHITECTURE.md,
 * "engine dtype"): kernels are templated on T = __nv_bfloat16 or __half and
 * keep their tensors as 16-bit patterns (uint16_t); gp_half_t<T> converts
 * one element to and from float. Arithmetic is float32 in both; only the
 * load and the one rounding of each store depend on T. The bf16 conversions
 * are the integer ones of gp_common.h the kernels used before fp16 existed,
 * so bf16 results keep their bits. CUDA sources only. */
#ifndef GP_HALF_CUH
#define GP_HALF_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gp_common.h"

template <typename T> struct gp_half_t;

template <> struct gp_half_t<__nv_bfloat16> {
    static constexpr bool is_bf16 = true;
    static __device__ __forceinline__ float to_f32(uint16_t h) { return gp_bf16_to_f32(h); }
    static __device__ __forceinline__ uint16_t from_f32(float f) { return gp_f32_to_bf16(f); }
};

template <> struct gp_half_t<__half> {
    static constexpr bool is_bf16 = false;
    static __device__ __forceinline__ float to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
    /* round to nearest even, overflow to inf: gp_f32_to_f16's rule */
    static __device__ __forceinline__ uint16_t from_f32(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

/* Call body with T bound to the type of dt (BF16 or F16); the caller has
 * checked dt with gp_half_check. */
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
