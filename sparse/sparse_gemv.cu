/* The sparse-input GEMV of small decode batches: only the weight rows (of the
 * transposed projection) of active inputs are read, then the partial sums of
 * the K splits are added in a fixed order. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_util.cuh"
#include "gp_launch.cuh"
#include "gp_half.cuh"
#include "gp_sparse.h"
#include "swiglu.cuh"

/* Why it is shaped this way.
 *
 * With half the inputs dropped the weights of a projection are read at
 * random row granularity: one row of wt (an input's weights for every
 * output) is N contiguous 16-bit values, so reading only active rows keeps
 * every load a full 16-byte-per-lane, 512-byte-per-warp segment.
 * - No compaction pass: each warp evaluates the masks of 32 consecutive
 *   inputs (one per lane) for every batch row, and a ballot gives the active
 *   ones; the warp then loads U active rows at once (U x 512 bytes in
 *   flight per warp; U = 8 up to two batch rows, 4 above) and takes each
 *   row's masked inputs from the lane that evaluated it by shuffle. The decision is uniform across the warp, so
 *   skipping an inactive row costs no divergence.
 * - A CTA is 8 warps: 2 column tiles x 4 row groups; the row groups take
 *   interleaved 32-input chunks of the CTA's split of K and add their sums
 *   through shared memory in row-group order.
 * - The grid is column tiles x K splits sized to two CTAs per SM, and each
 *   split writes fp32 partials; a second kernel adds the splits in order
 *   and writes the output, so results do not depend on timing. At batch 1
 *   the partials are a few hundred KB against tens of MB of weights. */

#define GP_SP_WARPS 8
#define GP_SP_TILES 2 /* column tiles per CTA */
#define GP_SP_ROWG (GP_SP_WARPS / GP_SP_TILES)

#define GP_SP_CTAS_PER_SM 2

/* Columns per lane: 8 (16-byte loads) while the accumulators fit, 4 from 8
 * batch rows on (NB x CPL fp32 registers). */
template <int NB> struct gp_sp_cfg {
    static constexpr int CPL = NB <= 4 ? 8 : 4;
    /* weight rows in flight per warp: more while the accumulators leave registers for them */
    static constexpr int U = NB <= 2 ? 8 : 4;
    static constexpr int WCOLS = 32 * CPL;
    static constexpr int CCOLS = GP_SP_TILES * WCOLS;
};

template <int CPL> struct gp_sp_vec;
template <> struct gp_sp_vec<8> {
    typedef uint4 V;
    static __device__ __forceinline__ V load(const uint16_t *p) { return __ldcs(reinterpret_cast<const uint4 *>(p)); }
    static __device__ __forceinline__ uint32_t word(const V &v, int i)
    {
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
    }
    static __device__ __forceinline__ V zero() { return make_uint4(0, 0, 0, 0); }
};
template <> struct gp_sp_vec<4> {
    typedef uint2 V;
    static __device__ __forceinline__ V load(const uint16_t *p) { return __ldcs(reinterpret_cast<const uint2 *>(p)); }
    static __device__ __forceinline__ uint32_t word(const V &v, int i) { return i == 0 ? v.x : v.y; }
    static __device__ __forceinline__ V zero() { return make_uint2(0, 0); }
};

template <typename T, int NB>
static __global__ void __launch_bounds__(32 * GP_SP_WARPS, GP_SP_CTAS_PER_SM)
    gp_sparse_gemv_kernel(const uint16_t *__restrict__ x, const uint16_t *__restrict__ wt, float *__restrict__ part,
                          int B, int N, int K, float t, int rows_per_split, int *active)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> ht;
    constexpr int CPL = gp_sp_cfg<NB>::CPL, WCOLS = gp_sp_cfg<NB>::WCOLS, CCOLS = gp_sp_cfg<NB>::CCOLS;
    constexpr int U = gp_sp_cfg<NB>::U;
    typedef gp_sp_vec<CPL> vec;
    __shared__ float red[NB * CCOLS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tile = warp % GP_SP_TILES, rg = warp / GP_SP_TILES;
    const int ccol = tile * WCOLS + lane * CPL; /* within the CTA's columns */
    const int col = blockIdx.x * CCOLS + ccol;
    const bool col_ok = col < N; /* N % 8 == 0: a lane's vector is all in or all out */
    const int k0 = blockIdx.y * rows_per_split, k1 = min(K, k0 + rows_per_split);
    float acc[NB][CPL];
#pragma unroll
    for (int b = 0; b < NB; b++)
#pragma unroll
        for (int j = 0; j < CPL; j++)
            acc[b][j] = 0.0f;
    int n_active = 0;
    for (int kc = k0 + rg * 32; kc < k1; kc += GP_SP_ROWG * 32) {
        const int k = kc + lane;
        float xm[NB];
        bool any = false;
#pragma unroll
        for (int b = 0; b < NB; b++) {
            float v = 0.0f;
            if (b < B && k < k1) {
                v = ht::to_f32(x[(size_t)b * K + k]);
                if (!(fabsf(v) > t))
                    v = 0.0f;
            }
            xm[b] = v;
            any |= v != 0.0f;
        }
        unsigned m = __ballot_sync(0xffffffffu, any);
        n_active += __popc(m);
        while (m) {
            int r[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                r[u] = m ? __ffs(m) - 1 : -1;
                m &= m ? m - 1 : 0u;
            }
            typename vec::V w[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                w[u] = (r[u] >= 0 && col_ok) ? vec::load(wt + (size_t)(kc + r[u]) * N + col) : vec::zero();
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (r[u] < 0) /* uniform: r comes from the ballot */
                    break;
                float wf[CPL];
#pragma unroll
                for (int i = 0; i < CPL / 2; i++) {
                    const uint32_t wd = vec::word(w[u], i);
                    wf[2 * i] = ht::lo(wd);
                    wf[2 * i + 1] = ht::hi(wd);
                }
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    const float xv = __shfl_sync(0xffffffffu, xm[b], r[u]);
#pragma unroll
                    for (int j = 0; j < CPL; j++)
                        acc[b][j] = fmaf(xv, wf[j], acc[b][j]);
                }
            }
        }
    }
    if (active && lane == 0 && tile == 0 && blockIdx.x == 0 && n_active)
        atomicAdd(active, n_active);
    /* row group 0 stores, the others add in their order */
    for (int g = 0; g < GP_SP_ROWG; g++) {
        if (rg == g) {
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int j = 0; j < CPL; j++) {
                    float *p = &red[b * CCOLS + ccol + j];
                    *p = g == 0 ? acc[b][j] : *p + acc[b][j];
                }
        }
        __syncthreads();
    }
    float *out = part + (size_t)blockIdx.y * B * N;
    for (int i = threadIdx.x; i < B * CCOLS; i += blockDim.x) {
        const int b = i / CCOLS, c = i - b * CCOLS, n = blockIdx.x * CCOLS + c;
        if (n < N)
            out[(size_t)b * N + n] = red[b * CCOLS + c];
    }
}

/* y = the splits' partials added in split order, then stored per out
 * (GP_SPARSE_OUT_SWIGLU: gp_sparse_swiglu_kernel). */
/* The gate/up projection's sum through SwiGLU: out[b][j] from columns j and
 * F + j, each added in split order and rounded as the 16-bit gate/up
 * output would be. */
template <typename T>
static __global__ void gp_sparse_swiglu_kernel(const float *__restrict__ part, int splits, int B, int F,
                                               uint16_t *__restrict__ y)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> ht;
    const size_t total = (size_t)B * 2 * F, items = (size_t)B * F;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / (size_t)F, j = i - b * (size_t)F;
        const float *pg = part + b * 2 * (size_t)F + j, *pu = pg + F;
        float g = 0.0f, u = 0.0f;
        for (int sp = 0; sp < splits; sp++) {
            g += pg[(size_t)sp * total];
            u += pu[(size_t)sp * total];
        }
        y[i] = ht::from_f32(gp_swiglu_one(ht::to_f32(ht::from_f32(g)), ht::to_f32(ht::from_f32(u))));
    }
}

template <typename T>
static __global__ void gp_sparse_reduce_kernel(const float *__restrict__ part, int splits, int B, int N, void *y,
                                               int out)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> ht;
    const size_t total = (size_t)B * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int sp = 0; sp < splits; sp++)
            s += part[(size_t)sp * total + i];
        if (out == GP_SPARSE_OUT_HALF)
            static_cast<uint16_t *>(y)[i] = ht::from_f32(s);
        else if (out == GP_SPARSE_OUT_F32)
            static_cast<float *>(y)[i] = s;
        else
            static_cast<float *>(y)[i] += s;
    }
}

typedef struct gp_sp_plan {
    int nb, ccols, tiles, splits, rows_per_split;
} gp_sp_plan;

static int gp_sp_bucket(int B) { return B <= 1 ? 1 : B <= 2 ? 2 : B <= 4 ? 4 : B <= 8 ? 8 : 16; }

static int gp_sp_sms(int sms)
{
    if (sms > 0)
        return sms;
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        n = 132;
    return n;
}

static gp_sp_plan gp_sp_plan_make(int B, int N, int K, int sms)
{
    gp_sp_plan p;
    p.nb = gp_sp_bucket(B);
    p.ccols = GP_SP_TILES * 32 * (p.nb <= 4 ? 8 : 4);
    p.tiles = (N + p.ccols - 1) / p.ccols;
    const int target = GP_SP_CTAS_PER_SM * gp_sp_sms(sms);
    int splits = target / p.tiles;
    /* at least 32 inputs per row group, so a split is never all overhead */
    const int most = (K + 32 * GP_SP_ROWG - 1) / (32 * GP_SP_ROWG);
    if (splits > most)
        splits = most;
    if (splits < 1)
        splits = 1;
    /* whole 32-input chunks per split; then the splits those make */
    p.rows_per_split = ((K + splits - 1) / splits + 31) / 32 * 32;
    p.splits = (K + p.rows_per_split - 1) / p.rows_per_split;
    return p;
}

extern "C" size_t gp_sparse_gemv_ws_bytes(int B, int N, int K, int sms)
{
    if (B < 1 || N < 1 || K < 1)
        return 0;
    gp_sp_plan p = gp_sp_plan_make(B, N, K, sms);
    return (size_t)p.splits * (size_t)B * (size_t)N * sizeof(float);
}

template <typename T>
static cudaError_t gp_sp_launch(const gp_sp_plan *p, int B, int N, int K, const uint16_t *x, const uint16_t *wt,
                                float t, void *y, int out, float *ws, int *active, cudaStream_t s)
{
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)p->tiles, (unsigned)p->splits), dim3(32 * GP_SP_WARPS), 0, s);
    const int rps = p->rows_per_split;
    cudaError_t e;
    switch (p->nb) {
    case 1: e = cudaLaunchKernelEx(&l.cfg, gp_sparse_gemv_kernel<T, 1>, x, wt, ws, B, N, K, t, rps, active); break;
    case 2: e = cudaLaunchKernelEx(&l.cfg, gp_sparse_gemv_kernel<T, 2>, x, wt, ws, B, N, K, t, rps, active); break;
    case 4: e = cudaLaunchKernelEx(&l.cfg, gp_sparse_gemv_kernel<T, 4>, x, wt, ws, B, N, K, t, rps, active); break;
    case 8: e = cudaLaunchKernelEx(&l.cfg, gp_sparse_gemv_kernel<T, 8>, x, wt, ws, B, N, K, t, rps, active); break;
    default: e = cudaLaunchKernelEx(&l.cfg, gp_sparse_gemv_kernel<T, 16>, x, wt, ws, B, N, K, t, rps, active); break;
    }
    if (e != cudaSuccess)
        return e;
    const size_t total = (size_t)B * (out == GP_SPARSE_OUT_SWIGLU ? N / 2 : N);
    unsigned blocks = (unsigned)((total + 255) / 256);
    if (blocks > 4096u)
        blocks = 4096u;
    gp_launch_setup(&l, dim3(blocks), dim3(256), 0, s);
    if (out == GP_SPARSE_OUT_SWIGLU)
        return cudaLaunchKernelEx(&l.cfg, gp_sparse_swiglu_kernel<T>, (const float *)ws, p->splits, B, N / 2,
                                  static_cast<uint16_t *>(y));
    return cudaLaunchKernelEx(&l.cfg, gp_sparse_reduce_kernel<T>, (const float *)ws, p->splits, B, N, y, out);
}

extern "C" gp_status gp_sparse_gemv(gp_dtype dt, int B, int N, int K, const void *x, const void *wt, float t, void *y,
                                    int out, float *ws, size_t ws_bytes, int sms, int *active, void *stream)
{
    if (!gp_dtype_is_half(dt))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: dtype %s, allowed bf16 or fp16", gp_dtype_name(dt));
    if (B < 1 || B > GP_SPARSE_MAX_B || N < 8 || N % 8 != 0 || K < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: B %d (allowed 1..%d), N %d (a multiple of 8), K %d (>= 1)", B,
                GP_SPARSE_MAX_B, N, K);
    if (!x || !wt || !y || !ws || ((uintptr_t)wt & 15u))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: x %p, wt %p (16-byte aligned), y %p and ws %p must be set", x,
                wt, y, (void *)ws);
    if (!(t >= 0.0f) || isinf(t))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: threshold %g, allowed a finite value >= 0", (double)t);
    if (out != GP_SPARSE_OUT_HALF && out != GP_SPARSE_OUT_F32 && out != GP_SPARSE_OUT_F32_ACC &&
        out != GP_SPARSE_OUT_SWIGLU)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: out %d, allowed %d (16-bit), %d (fp32), %d (fp32 +=), %d "
                "(SwiGLU of gate/up)", out, GP_SPARSE_OUT_HALF, GP_SPARSE_OUT_F32, GP_SPARSE_OUT_F32_ACC,
                GP_SPARSE_OUT_SWIGLU);
    if (out == GP_SPARSE_OUT_SWIGLU && N % 16 != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: SwiGLU output of N %d: allowed N = 2F with F a multiple of 8",
                N);
    const size_t need = gp_sparse_gemv_ws_bytes(B, N, K, sms);
    if (ws_bytes < need)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_gemv: workspace of %zu bytes, %zu needed for B %d, N %d, K %d",
                ws_bytes, need, B, N, K);
    gp_sp_plan p = gp_sp_plan_make(B, N, K, sms);
    const uint16_t *xs = static_cast<const uint16_t *>(x), *ws16 = static_cast<const uint16_t *>(wt);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t e;
    GP_HALF_DISPATCH(dt, e = gp_sp_launch<T>(&p, B, N, K, xs, ws16, t, y, out, ws, active, s));
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "launch of the sparse GEMV", __FILE__, __LINE__);
    return GP_OK;
}

/* 32 x 32 tiles through shared memory (padded against bank conflicts). */
static __global__ void gp_sparse_transpose_kernel(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int R,
                                                  int C)
{
    __shared__ uint16_t tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C)
            tile[i][threadIdx.x] = src[(size_t)r * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < C)
            dst[(size_t)c * R + r] = tile[threadIdx.x][i];
    }
}

extern "C" gp_status gp_sparse_transpose(const void *src, void *dst, int R, int C, void *stream)
{
    if (!src || !dst || R < 1 || C < 1 || (C + 31) / 32 > 65535 * 1024 || (R + 31) / 32 > 65535)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparse_transpose: src %p, dst %p, %d x %d (each >= 1, rows/32 <= 65535)",
                src, dst, R, C);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)((R + 31) / 32)), block(32, 8);
    gp_sparse_transpose_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), R, C);
    GP_CUDA_LAUNCH_CHECK("gp_sparse_transpose_kernel");
    return GP_OK;
}
