/* RoPE on the q and k heads of the fused QKV output, q to its own buffer, k
 * and v appended to this layer's paged cache at each row's position. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "gp_half.cuh"
#include "gp_launch.cuh"
#include "cuda_util.cuh"
#include "rope_kv.cuh"

/* Layout (why): at decode batch sizes the kernel is a chain of latencies
 * (position -> block table -> qkv row -> stores), not bandwidth, so it is
 * spread wide: CTA (b, y) rotates the q/k heads of row b in group y, one warp
 * per head (GP_ROPE_THREADS / 32 heads per CTA), and the last CTA of the row
 * copies V. One CTA per row with a loop over all heads measured ~9 us per
 * layer at B = 8 on the H100. The cos/sin of the row's angles are computed
 * once per CTA into shared memory (one sincos per thread) and shared by its
 * heads: accurate sincos per head and lane made the kernel compute-bound at
 * large B.
 *
 * Not built with --use_fast_math: sincosf is the accurate version, so the
 * angles match the CPU reference's to about an ulp even for large positions. */
#define GP_ROPE_WARPS (GP_ROPE_THREADS / 32)

/* One rotated pair (x1 at i, x2 at i + half). Explicit roundings keep nvcc
 * from contracting into FMAs, which the CPU reference (x86-64 without FMA)
 * does not do. */
template <class T>
static __device__ __forceinline__ void gp_rope_pair(float x1, float x2, float2 cs, T *o1, T *o2)
{
    *o1 = gp_half_traits<T>::from_float(__fsub_rn(__fmul_rn(x1, cs.x), __fmul_rn(x2, cs.y)));
    *o2 = gp_half_traits<T>::from_float(__fadd_rn(__fmul_rn(x2, cs.x), __fmul_rn(x1, cs.y)));
}

/* A pair of qkv values with their biases added in float (BIAS), as floats. */
template <class T, bool BIAS>
static __device__ __forceinline__ float2 gp_rope_load2(const T *x, const T *bias)
{
    typedef gp_half_traits<T> TR;
    float2 f = TR::to_float2(*reinterpret_cast<const typename TR::T2 *>(x));
    if (BIAS) {
        const float2 c = TR::to_float2(*reinterpret_cast<const typename TR::T2 *>(bias));
        f.x = __fadd_rn(f.x, c.x);
        f.y = __fadd_rn(f.y, c.y);
    }
    return f;
}

template <class T, bool BIAS>
static __device__ __forceinline__ float gp_rope_load1(const T *x, const T *bias)
{
    typedef gp_half_traits<T> TR;
    return BIAS ? __fadd_rn(TR::to_float(*x), TR::to_float(*bias)) : TR::to_float(*x);
}

/* T: the 16-bit element type (bf16 or fp16). VEC: pairs (i, i+1) move as
 * 16-bit pairs (head_dim % 4 == 0, 4-byte aligned buffers), else one element
 * at a time. BIAS: a.bias is added (in float, before RoPE) to every value. */
template <class T, bool VEC, bool BIAS>
static __global__ void __launch_bounds__(GP_ROPE_THREADS) gp_rope_kv_kernel(const gp_rope_args a)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> TR;
    extern __shared__ float2 gp_rope_cs[]; /* [head_dim/2]: (cos, sin) of this row's angles */
    const int b = blockIdx.x;
    const int n_rot = a.n_heads + a.n_kv;
    const int n_groups = (n_rot + GP_ROPE_WARPS - 1) / GP_ROPE_WARPS;
    const int pos = a.positions[b];
    /* Uniform over the CTA, so returning before the barrier is safe: a bad
     * row writes nothing. */
    if (pos < 0 || pos / a.block_size >= a.max_blocks)
        return;
    const int trow = a.row_table ? a.row_table[b] : b;
    const int blk = a.tables[(size_t)trow * a.max_blocks + pos / a.block_size];
    if (blk < 0 || blk >= a.n_blocks)
        return;
    const int slot = pos % a.block_size;
    const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv * a.head_dim;
    const T *__restrict__ row = static_cast<const T *>(a.qkv) + (size_t)b * (size_t)(q_dim + 2 * kv_dim);
    const T *__restrict__ bias = static_cast<const T *>(a.bias); /* NULL unless BIAS */
    /* Heads of one slot are contiguous in the pool: slot_base + kv_head*head_dim + d. */
    const size_t slot_base = ((size_t)blk * a.block_size + slot) * (size_t)kv_dim;

    if ((int)blockIdx.y == n_groups) { /* the V copy */
        const T *v = row + q_dim + kv_dim;
        T *dst = static_cast<T *>(a.v_cache) + slot_base;
        if (BIAS) { /* round(float(v) + float(bias_v)) */
            const T *bv = bias + q_dim + kv_dim;
            for (int e = threadIdx.x; e < kv_dim; e += GP_ROPE_THREADS)
                dst[e] = TR::from_float(__fadd_rn(TR::to_float(v[e]), TR::to_float(bv[e])));
        } else if (VEC && kv_dim % 8 == 0 && ((uintptr_t)v & 15u) == 0 && ((uintptr_t)dst & 15u) == 0) {
            for (int e = threadIdx.x; e < kv_dim / 8; e += GP_ROPE_THREADS)
                reinterpret_cast<uint4 *>(dst)[e] = reinterpret_cast<const uint4 *>(v)[e];
        } else {
            for (int e = threadIdx.x; e < kv_dim; e += GP_ROPE_THREADS)
                dst[e] = v[e];
        }
        return;
    }
    const int half = a.head_dim / 2;
    for (int i = threadIdx.x; i < half; i += GP_ROPE_THREADS) {
        float s, c;
        sincosf((float)pos * a.inv_freq[i], &s, &c);
        gp_rope_cs[i] = make_float2(c, s);
    }
    __syncthreads();
    const int head = blockIdx.y * GP_ROPE_WARPS + (threadIdx.x >> 5);
    if (head >= n_rot)
        return;
    const int lane = threadIdx.x & 31;
    /* q and k heads are adjacent in the row: heads >= n_heads are k heads. */
    const T *__restrict__ x = row + (size_t)head * a.head_dim;
    const T *__restrict__ xb = BIAS ? bias + (size_t)head * a.head_dim : x; /* x's biases */
    T *__restrict__ dst =
        head < a.n_heads ? static_cast<T *>(a.q_out) + ((size_t)b * a.n_heads + head) * a.head_dim
                         : static_cast<T *>(a.k_cache) + slot_base + (size_t)(head - a.n_heads) * a.head_dim;
    if (VEC) {
        for (int i = 2 * lane; i < half; i += 64) {
            const float2 f1 = gp_rope_load2<T, BIAS>(x + i, xb + i);
            const float2 f2 = gp_rope_load2<T, BIAS>(x + i + half, xb + i + half);
            typename TR::T2 o1, o2;
            gp_rope_pair<T>(f1.x, f2.x, gp_rope_cs[i], &o1.x, &o2.x);
            gp_rope_pair<T>(f1.y, f2.y, gp_rope_cs[i + 1], &o1.y, &o2.y);
            *reinterpret_cast<typename TR::T2 *>(dst + i) = o1;
            *reinterpret_cast<typename TR::T2 *>(dst + i + half) = o2;
        }
    } else {
        for (int i = lane; i < half; i += 32) {
            T o1, o2;
            gp_rope_pair<T>(gp_rope_load1<T, BIAS>(x + i, xb + i),
                            gp_rope_load1<T, BIAS>(x + i + half, xb + i + half), gp_rope_cs[i], &o1, &o2);
            dst[i] = o1;
            dst[i + half] = o2;
        }
    }
}

/* The instantiation for (T, vec, bias). */
template <class T> static void (*gp_rope_kernel_for(bool vec, bool bias))(const gp_rope_args)
{
    if (vec)
        return bias ? gp_rope_kv_kernel<T, true, true> : gp_rope_kv_kernel<T, true, false>;
    return bias ? gp_rope_kv_kernel<T, false, true> : gp_rope_kv_kernel<T, false, false>;
}

gp_status gp_rope_kv_launch(const gp_rope_args *a, gp_dtype dtype, cudaStream_t stream)
{
    const int n_groups = (a->n_heads + a->n_kv + GP_ROPE_WARPS - 1) / GP_ROPE_WARPS;
    /* rows are (n_heads + 2 n_kv) head_dim elements: even when head_dim is,
     * so 4-byte aligned bases keep every 16-bit pair access aligned */
    const bool vec = a->head_dim % 4 == 0 && ((uintptr_t)a->qkv & 3u) == 0
                     && ((uintptr_t)a->q_out & 3u) == 0 && ((uintptr_t)a->k_cache & 3u) == 0
                     && ((uintptr_t)a->v_cache & 3u) == 0 && ((uintptr_t)a->bias & 3u) == 0;
    const bool bias = a->bias != NULL;
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)a->B, (unsigned)n_groups + 1u), dim3(GP_ROPE_THREADS),
                    (size_t)(a->head_dim / 2) * sizeof(float2), stream);
    cudaError_t e = dtype == GP_DTYPE_F16
                        ? cudaLaunchKernelEx(&l.cfg, gp_rope_kernel_for<__half>(vec, bias), *a)
                        : cudaLaunchKernelEx(&l.cfg, gp_rope_kernel_for<__nv_bfloat16>(vec, bias), *a);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_rope_kv_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}

/* Largest head_dim whose cos/sin table fits the default dynamic shared memory. */
#define GP_ROPE_MAX_HEAD_DIM 4096

extern "C" gp_status gp_rope_kv_append(const gp_kv_view *kv, int B, int n_heads, const void *qkv,
                                       const void *bias, const float *inv_freq, void *q_out,
                                       void *stream)
{
    static const char fn[] = "gp_rope_kv_append";
    if (!kv || !qkv || !inv_freq || !q_out)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kv, qkv, inv_freq and q_out must not be NULL", fn);
    GP_TRY(gp_dtype_check_half(kv->dtype, fn));
    if (!kv->k || !kv->v || !kv->block_tables || !kv->positions)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: the view's k, v, block_tables and positions must not be "
                "NULL", fn);
    if (B < 1 || B > kv->n_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d is outside [1, %d] (rows of the view)", fn, B,
                kv->n_rows);
    if (n_heads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads = %d must be positive", fn, n_heads);
    if (kv->n_kv_heads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_kv_heads = %d must be positive", fn, kv->n_kv_heads);
    if (kv->head_dim < 2 || kv->head_dim % 2 || kv->head_dim > GP_ROPE_MAX_HEAD_DIM)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: head_dim = %d must be even and in [2, %d]", fn,
                kv->head_dim, GP_ROPE_MAX_HEAD_DIM);
    if (kv->block_size < 1 || kv->max_blocks < 1 || kv->n_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: block_size = %d, max_blocks = %d and n_blocks = %d must "
                "be positive", fn, kv->block_size, kv->max_blocks, kv->n_blocks);
    if ((int64_t)(n_heads + 2 * (int64_t)kv->n_kv_heads) * kv->head_dim > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: (n_heads = %d + 2 x n_kv_heads = %d) x head_dim = %d "
                "overflows", fn, n_heads, kv->n_kv_heads, kv->head_dim);
    gp_rope_args a;
    a.qkv = qkv;
    a.bias = bias;
    a.positions = kv->positions;
    a.inv_freq = inv_freq;
    a.tables = kv->block_tables;
    a.row_table = kv->row_table;
    a.k_cache = kv->k;
    a.v_cache = kv->v;
    a.q_out = q_out;
    a.B = B;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.head_dim = kv->head_dim;
    a.block_size = kv->block_size;
    a.max_blocks = kv->max_blocks;
    a.n_blocks = kv->n_blocks;
    return gp_rope_kv_launch(&a, kv->dtype, (cudaStream_t)stream);
}
