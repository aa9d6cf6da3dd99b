/* RMSNorm fused with the residual add: resid += delta (fp32), out =
 * T(w * resid / rms(resid)) with T bf16 or fp16, one CTA per row (the row in registers when
 * it fits). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "gp_half.cuh"
#include "gp_launch.cuh"
#include "kernels.h"
#include "rmsnorm.cuh"

#define GP_RMSNORM_MAX_THREADS 512

/* Sum over the CTA (blockDim.x a multiple of 32, <= 1024); every thread gets
 * the total. Called once per kernel, so the shared slots are not reused. */
static __device__ __forceinline__ float gp_rmsnorm_block_sum(float v)
{
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x >> 5;
        v = lane < n_warps ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
            warp_sums[0] = v;
    }
    __syncthreads();
    return warp_sums[0];
}

/* VEC consecutive elements per access: 4 (float4 of resid, 8-byte 16-bit
 * loads) when H % 4 == 0 and the pointers allow it, else 1. T: the 16-bit
 * type of delta, w and out (gp_half.cuh). */
template <typename T, int VEC> struct gp_rms_io;

template <typename T> struct gp_rms_io<T, 1> {
    typedef gp_half_traits<T> ht;
    static __device__ __forceinline__ void load_f32(const float *p, float *v) { v[0] = *p; }
    static __device__ __forceinline__ void store_f32(float *p, const float *v) { *p = v[0]; }
    static __device__ __forceinline__ void load_h(const uint16_t *p, float *v)
    {
        v[0] = ht::to_f32(*p);
    }
    static __device__ __forceinline__ void store_h(uint16_t *p, const float *v)
    {
        *p = ht::from_f32(v[0]);
    }
};

template <typename T> struct gp_rms_io<T, 4> {
    typedef gp_half_traits<T> ht;
    static __device__ __forceinline__ void load_f32(const float *p, float *v)
    {
        float4 f = *reinterpret_cast<const float4 *>(p);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    }
    static __device__ __forceinline__ void store_f32(float *p, const float *v)
    {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
    static __device__ __forceinline__ void load_h(const uint16_t *p, float *v)
    {
        uint2 u = *reinterpret_cast<const uint2 *>(p); /* little endian: element 0 is low */
        v[0] = ht::to_f32((uint16_t)(u.x & 0xffffu)), v[1] = ht::to_f32((uint16_t)(u.x >> 16));
        v[2] = ht::to_f32((uint16_t)(u.y & 0xffffu)), v[3] = ht::to_f32((uint16_t)(u.y >> 16));
    }
    static __device__ __forceinline__ void store_h(uint16_t *p, const float *v)
    {
        uint2 u;
        u.x = (uint32_t)ht::from_f32(v[0]) | ((uint32_t)ht::from_f32(v[1]) << 16);
        u.y = (uint32_t)ht::from_f32(v[2]) | ((uint32_t)ht::from_f32(v[3]) << 16);
        *reinterpret_cast<uint2 *>(p) = u;
    }
};

template <typename... Exp, typename... Act>
static cudaError_t gp_rms_launch(void (*kernel)(Exp...), int B, int threads, cudaStream_t stream,
                                 Act &&...args)
{
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)B), dim3((unsigned)threads), 0, stream);
    return cudaLaunchKernelEx(&l.cfg, kernel, args...);
}

/* grid: B CTAs, one per row. Pass 1 adds delta, writes resid back and sums
 * squares; pass 2 re-reads what this same thread wrote (same indices, so no
 * barrier is needed; the row is hot in L1/L2) and writes out. The general
 * path: any H and alignment. */
template <typename T, int VEC>
static __global__ void gp_rmsnorm_residual_kernel(float *__restrict__ resid,
                                                  const uint16_t *__restrict__ delta,
                                                  const uint16_t *__restrict__ w,
                                                  uint16_t *__restrict__ out, int H, float eps)
{
    gp_pdl_wait();
    typedef gp_rms_io<T, VEC> io;
    const size_t row = (size_t)blockIdx.x * (size_t)H;
    float *r = resid + row;                        /* [H] */
    const uint16_t *d = delta ? delta + row : NULL; /* [H] or none */
    uint16_t *o = out + row;                         /* [H] */
    const int step = (int)blockDim.x * VEC;

    float ss = 0.0f;
    for (int i = (int)threadIdx.x * VEC; i < H; i += step) {
        float v[VEC];
        io::load_f32(r + i, v);
        if (d) {
            float dv[VEC];
            io::load_h(d + i, dv);
#pragma unroll
            for (int k = 0; k < VEC; k++)
                v[k] += dv[k];
            io::store_f32(r + i, v);
        }
#pragma unroll
        for (int k = 0; k < VEC; k++)
            ss += v[k] * v[k];
    }
    ss = gp_rmsnorm_block_sum(ss);
    /* IEEE sqrt and division (no fast-math): the CPU reference's formula */
    const float inv = 1.0f / sqrtf(ss / (float)H + eps);

    for (int i = (int)threadIdx.x * VEC; i < H; i += step) {
        float v[VEC], wv[VEC];
        io::load_f32(r + i, v);
        io::load_h(w + i, wv);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            v[k] = wv[k] * (v[k] * inv);
        io::store_h(o + i, v);
    }
}

/* The fast path (H % 4 == 0, aligned, H <= 4 x GP_RMSNORM_REG_THREADS x NPT):
 * the row lives in registers, NPT float4 per thread, all loads (resid,
 * delta, w) issued before the first use, so a row costs one memory round
 * trip instead of two; decode rows are short, and latency is the cost. */
#define GP_RMSNORM_REG_THREADS 256
template <typename T, int NPT>
static __global__ void __launch_bounds__(GP_RMSNORM_REG_THREADS)
gp_rmsnorm_residual_reg_kernel(float *__restrict__ resid, const uint16_t *__restrict__ delta,
                               const uint16_t *__restrict__ w, uint16_t *__restrict__ out, int H,
                               float eps)
{
    gp_pdl_wait();
    typedef gp_rms_io<T, 4> io;
    const size_t row = (size_t)blockIdx.x * (size_t)H;
    float *r = resid + row;                        /* [H] */
    const uint16_t *d = delta ? delta + row : NULL; /* [H] or none */
    uint16_t *o = out + row;                         /* [H] */
    float v[NPT][4], wv[NPT][4];
#pragma unroll
    for (int j = 0; j < NPT; j++) {
        const int i = ((int)threadIdx.x + j * GP_RMSNORM_REG_THREADS) * 4;
        if (i < H) {
            io::load_f32(r + i, v[j]);
            io::load_h(w + i, wv[j]);
            if (d) {
                float dv[4];
                io::load_h(d + i, dv);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    v[j][k] += dv[k];
                io::store_f32(r + i, v[j]);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++)
                v[j][k] = 0.0f, wv[j][k] = 0.0f;
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NPT; j++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            ss += v[j][k] * v[j][k];
    ss = gp_rmsnorm_block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)H + eps);
#pragma unroll
    for (int j = 0; j < NPT; j++) {
        const int i = ((int)threadIdx.x + j * GP_RMSNORM_REG_THREADS) * 4;
        if (i < H) {
            float y[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                y[k] = wv[j][k] * (v[j][k] * inv);
            io::store_h(o + i, y);
        }
    }
}

static bool gp_aligned(const void *p, unsigned bytes)
{
    return ((uintptr_t)p & (uintptr_t)(bytes - 1)) == 0;
}

template <typename T>
static cudaError_t gp_rmsnorm_residual_launch_t(float *resid, const uint16_t *delta,
                                                const uint16_t *w, uint16_t *out, int B, int H,
                                                float eps, cudaStream_t stream)
{
    /* rows start at multiples of H, so base alignment plus H % 4 == 0 keeps
     * every row's float4 / 8-byte accesses aligned */
    const bool vec = H % 4 == 0 && gp_aligned(resid, 16) && gp_aligned(w, 8)
                     && gp_aligned(out, 8) && (!delta || gp_aligned(delta, 8));
    if (vec && H <= 4 * GP_RMSNORM_REG_THREADS * 8) {
        const int per = (H / 4 + GP_RMSNORM_REG_THREADS - 1) / GP_RMSNORM_REG_THREADS;
        void (*k)(float *, const uint16_t *, const uint16_t *, uint16_t *, int, float) =
            per <= 1   ? gp_rmsnorm_residual_reg_kernel<T, 1>
            : per <= 2 ? gp_rmsnorm_residual_reg_kernel<T, 2>
            : per <= 4 ? gp_rmsnorm_residual_reg_kernel<T, 4>
                       : gp_rmsnorm_residual_reg_kernel<T, 8>;
        return gp_rms_launch(k, B, GP_RMSNORM_REG_THREADS, stream, resid, delta, w, out, H, eps);
    }
    const int per_thread = vec ? 4 : 1;
    int threads = (H / per_thread + 31) / 32 * 32;
    if (threads > GP_RMSNORM_MAX_THREADS)
        threads = GP_RMSNORM_MAX_THREADS;
    if (threads < 32)
        threads = 32;
    return gp_rms_launch(vec ? gp_rmsnorm_residual_kernel<T, 4> : gp_rmsnorm_residual_kernel<T, 1>,
                         B, threads, stream, resid, delta, w, out, H, eps);
}

cudaError_t gp_rmsnorm_residual_launch(gp_dtype dt, float *resid, const void *delta, const void *w,
                                       void *out, int B, int H, float eps, cudaStream_t stream)
{
    const uint16_t *d = static_cast<const uint16_t *>(delta), *wp = static_cast<const uint16_t *>(w);
    uint16_t *o = static_cast<uint16_t *>(out);
    if (dt == GP_DTYPE_F16)
        return gp_rmsnorm_residual_launch_t<__half>(resid, d, wp, o, B, H, eps, stream);
    return gp_rmsnorm_residual_launch_t<__nv_bfloat16>(resid, d, wp, o, B, H, eps, stream);
}

extern "C" gp_status gp_rmsnorm_residual(gp_dtype dt, float *resid, const void *delta,
                                         const void *w, void *out, int B, int H, float eps,
                                         void *stream)
{
    GP_TRY(gp_dtype_check_half(dt, "gp_rmsnorm_residual"));
    if (B < 0 || H < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_rmsnorm_residual: B = %d, H = %d (need B >= 0, H >= 1)",
                B, H);
    if (!(eps >= 0.0f) || isinf(eps))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_rmsnorm_residual: eps = %g (need finite, >= 0)",
                (double)eps);
    if (B == 0)
        return GP_OK;
    if (!resid || !w || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_rmsnorm_residual: NULL pointer (resid %p, w %p, out %p) "
                "for B = %d, H = %d", (void *)resid, w, out, B, H);
    if ((const void *)out == (const void *)resid || (const void *)out == delta)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_rmsnorm_residual: out %p aliases resid or delta", out);
    GP_CUDA_TRY(gp_rmsnorm_residual_launch(dt, resid, delta, w, out, B, H, eps,
                                             (cudaStream_t)stream));
    return GP_OK;
}
