/* GQA flash-decoding over the paged KV cache: one CTA per (batch row, KV
 * head, context split) serving all query heads of the group, and a kernel
 * that merges the splits. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_util.cuh"
#include "decode_attn.cuh"
#include "decode_attn_dev.cuh"
#include "decode_attn_rule.h"

/* Layout of the work (why it is shaped this way):
 *
 * Decode attention is a read-once stream of K/V rows, so the design goal is
 * that each K/V row of a KV head crosses DRAM exactly once per step and the
 * loads are 16-byte, coalesced and many in flight. A K (or V) row of one KV
 * head is head_dim 16-bit values = head_dim/8 chunks of 16 bytes. A "lane group" of
 * LPT = head_dim/8 lanes loads one row, one uint4 per lane, and each lane
 * keeps its 8 dims of q and of the output accumulator for ALL G query heads
 * of the group in registers: a row loaded once serves the G heads without a
 * trip through shared memory. A warp holds TPW = 32/LPT lane groups, each on
 * its own token; every lane group also runs U tokens at once so each lane
 * has 2U 16-byte loads (K and V) in flight before it needs the first.
 * Each lane group keeps its own online-softmax state (running max m, sum l,
 * acc) over the tokens it saw; at the end the groups are merged, first
 * inside the warp with shuffles, then across the 4 warps in shared memory.
 * q.k needs a sum over the LPT lanes of a group: log2(LPT) xor-shuffles per
 * (token, head). Scores are kept in log2 units (q pre-scaled by
 * log2(e)/sqrt(d)) so the softmax uses exp2f. All math is fp32.
 *
 * Measured on the H100 (gp_bench_attn; 32 heads, 8 KV heads, head_dim 128,
 * block 16; 128 registers, 4 CTAs/SM): 2.88 TB/s at B=1024/C=384, 2.85 at
 * 256/1024, 2.78 at 64/2048 (3.1 TB/s is the read ceiling). The G = 8
 * instances need ~212 registers (2 CTAs/SM) and reach ~1.3 TB/s at the
 * Llama-3-70B shape: moving q to shared memory is the next step there. */

template <int HD> struct gp_attn_geom {
    static constexpr int LPT = HD / 8;   /* lanes per token row (one uint4 each) */
    static constexpr int TPW = 32 / LPT; /* token rows a warp covers per step */
    static_assert(HD % 8 == 0 && LPT >= 1 && LPT <= 32, "head_dim must be 8..256");
};

/* Tokens in flight per lane group: fewer for large groups, whose q and acc
 * already take 16*G registers per lane. */
template <int GT> struct gp_attn_unroll {
    static constexpr int U = GT <= 2 ? 8 : (GT <= 4 ? 4 : 2);
};

/* K/V rows of one tile: lane group token t = base + u*STEP + my for u < U,
 * masked past t_end. Each token's table lookup sits right before its K/V
 * loads: issuing all U lookups first and then all K/V loads measured 8%
 * slower on the H100 (2.64 vs 2.88 TB/s at B=1024, C=384). */
template <class T, int HD, int U, int STEP>
static __device__ __forceinline__ void gp_attn_load_tile(const gp_attn_args &a,
                                                         const int32_t *table, int base, int my,
                                                         int t_end, size_t slot_stride,
                                                         size_t head_off, uint4 (&kr)[U],
                                                         uint4 (&vr)[U], bool (&ok)[U])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int t = base + u * STEP + my;
        ok[u] = t < t_end;
        if (ok[u]) {
            const int bi = gp_attn_block_index(a, t);
            const int slot = t - bi * a.block_size;
            const int blk = __ldg(table + bi);
            const size_t off = ((size_t)blk * a.block_size + slot) * slot_stride + head_off;
            /* streaming loads: K/V are read once per step, keep L2 for others */
            kr[u] = __ldcs(reinterpret_cast<const uint4 *>(static_cast<const T *>(a.k) + off));
            vr[u] = __ldcs(reinterpret_cast<const uint4 *>(static_cast<const T *>(a.v) + off));
        } else {
            kr[u] = make_uint4(0u, 0u, 0u, 0u);
            vr[u] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/* GT = group size rounded up to a power of two; heads h >= a.group get q = 0
 * and are never stored, so odd groups (3, 5, 6, 7) share the code.
 * PIPE (used when the context is split, i.e. small batches, where the whole
 * grid is one wave of short CTAs): half the tokens per tile, but the next
 * tile's K/V loads are issued before the current tile's math, so HBM is not
 * idle while every CTA computes at the same time. Large batches run many
 * waves whose CTAs overlap each other anyway, and keep the longer tiles.
 * T: the 16-bit element type of q, K/V and out (common/gp_half.cuh). */
template <class T, int HD, int GT, bool PIPE>
static __global__ void __launch_bounds__(GP_ATTN_THREADS)
gp_decode_attn_kernel(const gp_attn_args a)
{
    gp_pdl_wait();
    constexpr int LPT = gp_attn_geom<HD>::LPT;
    constexpr int TPW = gp_attn_geom<HD>::TPW;
    constexpr int U0 = gp_attn_unroll<GT>::U;
    constexpr int U = PIPE ? (U0 >= 2 ? U0 / 2 : 1) : U0;
    constexpr int NW = GP_ATTN_THREADS / 32;
    constexpr int STEP = NW * TPW; /* tokens between a lane group's consecutive tokens */
    constexpr int TILE = STEP * U; /* tokens per CTA iteration */

    __shared__ float s_m[NW][GT];       /* per warp: running max of each head */
    __shared__ float s_l[NW][GT];       /* per warp: running sum */
    __shared__ float s_acc[NW][GT][HD]; /* per warp: unnormalised output */

    const int kvh = blockIdx.x % a.n_kv;
    const int b = blockIdx.x / a.n_kv;
    const int split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane % LPT;            /* which 8 dims of the row */
    const int my = warp * TPW + lane / LPT; /* this lane group's token offset in a tile */
    const int g = a.group;

    int t_begin, t_end;
    gp_attn_split_range(a, b, split, &t_begin, &t_end);

    float q[GT][8];
#pragma unroll
    for (int h = 0; h < GT; h++) {
        if (h < g) {
            const uint4 raw = *reinterpret_cast<const uint4 *>(
                static_cast<const T *>(a.q) + ((size_t)b * a.n_heads + (size_t)kvh * g + h) * HD + sub * 8);
            gp_unpack_x8<T>(raw, q[h]);
#pragma unroll
            for (int j = 0; j < 8; j++)
                q[h][j] *= a.scale_log2;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                q[h][j] = 0.0f;
        }
    }

    float m[GT], l[GT], acc[GT][8];
#pragma unroll
    for (int h = 0; h < GT; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[h][j] = 0.0f;
    }

    const int32_t *table = a.tables + (size_t)b * a.max_blocks;
    const size_t slot_stride = (size_t)a.n_kv * HD; /* elements between consecutive slots */
    const size_t head_off = (size_t)kvh * HD + sub * 8;

    /* The loop bounds are CTA-uniform, so every lane runs every iteration and
     * the shuffles below always see the full warp; tokens past t_end are
     * masked, not skipped. */
    uint4 kn[U], vn[U]; /* PIPE: the next tile, in flight during this one's math */
    bool okn[U];
    if (PIPE && t_begin < t_end)
        gp_attn_load_tile<T, HD, U, STEP>(a, table, t_begin, my, t_end, slot_stride, head_off, kn, vn,
                                       okn);
    for (int base = t_begin; base < t_end; base += TILE) {
        uint4 kr[U], vr[U];
        bool ok[U];
        if (PIPE) {
#pragma unroll
            for (int u = 0; u < U; u++)
                kr[u] = kn[u], vr[u] = vn[u], ok[u] = okn[u];
            if (base + TILE < t_end)
                gp_attn_load_tile<T, HD, U, STEP>(a, table, base + TILE, my, t_end, slot_stride,
                                               head_off, kn, vn, okn);
        } else {
            gp_attn_load_tile<T, HD, U, STEP>(a, table, base, my, t_end, slot_stride, head_off, kr,
                                           vr, ok);
        }

        float s[U][GT]; /* scores in log2 units */
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            gp_unpack_x8<T>(kr[u], kf);
#pragma unroll
            for (int h = 0; h < GT; h++) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++)
                    d = fmaf(q[h][j], kf[j], d);
                s[u][h] = d;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int h = 0; h < GT; h++) {
#pragma unroll
                for (int off = LPT / 2; off >= 1; off >>= 1)
                    s[u][h] += __shfl_xor_sync(0xffffffffu, s[u][h], off);
                if (!ok[u])
                    s[u][h] = -INFINITY;
            }

        /* One rescale per U tokens rather than per token. */
        float p[U][GT];
#pragma unroll
        for (int h = 0; h < GT; h++) {
            float mx = m[h];
#pragma unroll
            for (int u = 0; u < U; u++)
                mx = fmaxf(mx, s[u][h]);
            const float ms = gp_safe_max(mx);
            const float corr = exp2f(m[h] - ms);
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                p[u][h] = exp2f(s[u][h] - ms);
                sum += p[u][h];
            }
            l[h] = fmaf(l[h], corr, sum);
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[h][j] *= corr;
            m[h] = mx;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float vf[8];
            gp_unpack_x8<T>(vr[u], vf);
#pragma unroll
            for (int h = 0; h < GT; h++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[h][j] = fmaf(p[u][h], vf[j], acc[h][j]);
        }
    }

    /* Merge the lane groups of the warp: xor offsets >= LPT pair lanes with
     * the same dims (sub) and different tokens. */
#pragma unroll
    for (int off = 16; off >= LPT; off >>= 1) {
#pragma unroll
        for (int h = 0; h < GT; h++) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[h], off);
            const float lo = __shfl_xor_sync(0xffffffffu, l[h], off);
            const float mx = fmaxf(m[h], mo), ms = gp_safe_max(mx);
            const float c1 = exp2f(m[h] - ms), c2 = exp2f(mo - ms);
            l[h] = l[h] * c1 + lo * c2;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float ao = __shfl_xor_sync(0xffffffffu, acc[h][j], off);
                acc[h][j] = acc[h][j] * c1 + ao * c2;
            }
            m[h] = mx;
        }
    }
    if (lane < LPT) { /* lane group 0 of each warp now holds the warp's state */
#pragma unroll
        for (int h = 0; h < GT; h++) {
#pragma unroll
            for (int j = 0; j < 8; j++)
                s_acc[warp][h][sub * 8 + j] = acc[h][j];
            if (sub == 0) {
                s_m[warp][h] = m[h];
                s_l[warp][h] = l[h];
            }
        }
    }
    __syncthreads();

    gp_attn_merge_warps<T, HD, GT, NW>(a, b, kvh, split, s_m, s_l, s_acc);
}

/* One warp per (row, query head): weights 2^(m_s - M) rescale every split's
 * sum and accumulator to the common max M; empty splits (m = -inf) weigh 0. */
template <class T, int HD>
static __global__ void __launch_bounds__(GP_ATTN_COMBINE_THREADS)
gp_decode_attn_combine_kernel(const float *ws_acc, const float *ws_ml, T *out,
                              int rows, int n_splits)
{
    gp_pdl_wait();
    const int row = blockIdx.x * (GP_ATTN_COMBINE_THREADS / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) /* warp-uniform; the kernel has no barrier */
        return;
    const float *ml = ws_ml + (size_t)row * n_splits * 2;    /* [n_splits][2] */
    const float *acc = ws_acc + (size_t)row * n_splits * HD; /* [n_splits][HD] */
    float mx = -INFINITY;
    for (int s = lane; s < n_splits; s += 32)
        mx = fmaxf(mx, ml[2 * s]);
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float ms = gp_safe_max(mx);
    float L = 0.0f;
    for (int s = lane; s < n_splits; s += 32)
        L = fmaf(ml[2 * s + 1], exp2f(ml[2 * s] - ms), L);
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
        L += __shfl_xor_sync(0xffffffffu, L, off);
    /* L >= 1 whenever any split saw a token (the split holding the max
     * contributes 2^0 at least); 0 only for an empty row. */
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = lane; d < HD; d += 32) {
        float o = 0.0f;
        for (int s = 0; s < n_splits; s++)
            o = fmaf(exp2f(ml[2 * s] - ms), acc[(size_t)s * HD + d], o);
        out[(size_t)row * HD + d] = gp_half_traits<T>::from_float(o * inv);
    }
}

/* The split kernel chosen (MMA, CUDACORE or CUDACORE_PIPE), then the
 * combine when the context is split. */
template <class T, int HD, int GT>
static gp_status gp_decode_attn_launch_t(const gp_attn_args *a, gp_attn_kernel which,
                                         cudaStream_t stream)
{
    void (*kernel)(const gp_attn_args) = which == GP_ATTN_KERNEL_CUDACORE_PIPE
                                             ? gp_decode_attn_kernel<T, HD, GT, true>
                                             : gp_decode_attn_kernel<T, HD, GT, false>;
    gp_launch l;
    gp_attn_launch_setup(&l, a, 0, stream);
    cudaError_t e;
    if (which == GP_ATTN_KERNEL_MMA) {
        GP_TRY(gp_decode_attn_mma_launch(a, stream));
    } else if ((e = cudaLaunchKernelEx(&l.cfg, kernel, *a)) != cudaSuccess) {
        return gp_cuda_fail(e, "gp_decode_attn_kernel launch", __FILE__, __LINE__);
    }
    if (a->n_splits > 1) {
        const int rows = a->B * a->n_heads;
        const int per_cta = GP_ATTN_COMBINE_THREADS / 32;
        gp_launch_setup(&l, dim3((unsigned)((rows + per_cta - 1) / per_cta)), dim3(GP_ATTN_COMBINE_THREADS), 0,
                        stream);
        e = cudaLaunchKernelEx(&l.cfg, gp_decode_attn_combine_kernel<T, HD>, (const float *)a->ws_acc,
                               (const float *)a->ws_ml, static_cast<T *>(a->out), rows, a->n_splits);
        if (e != cudaSuccess)
            return gp_cuda_fail(e, "gp_decode_attn_combine_kernel launch", __FILE__,
                                     __LINE__);
    }
    return GP_OK;
}

/* The launcher of the instantiation serving (dtype, head_dim, group); NULL
 * where none does. */
typedef gp_status (*gp_attn_launch_fn)(const gp_attn_args *, gp_attn_kernel, cudaStream_t);

template <class T, int HD> static gp_attn_launch_fn gp_attn_launch_g(int group)
{
    if (group == 1)
        return gp_decode_attn_launch_t<T, HD, 1>;
    if (group == 2)
        return gp_decode_attn_launch_t<T, HD, 2>;
    if (group <= 4)
        return gp_decode_attn_launch_t<T, HD, 4>;
    if (group <= 8)
        return gp_decode_attn_launch_t<T, HD, 8>;
    return NULL;
}

template <class T> static gp_attn_launch_fn gp_attn_launch_hd(int head_dim, int group)
{
    switch (head_dim) {
    case 16: return gp_attn_launch_g<T, 16>(group);
    case 32: return gp_attn_launch_g<T, 32>(group);
    case 64: return gp_attn_launch_g<T, 64>(group);
    case 128: return gp_attn_launch_g<T, 128>(group);
    case 256: return gp_attn_launch_g<T, 256>(group);
    default: return NULL;
    }
}

static gp_attn_launch_fn gp_attn_launch_for(gp_dtype dtype, int head_dim, int group)
{
    if (group < 1 || group > GP_DECODE_ATTN_MAX_GROUP)
        return NULL;
    if (dtype == GP_DTYPE_F16)
        return gp_attn_launch_hd<__half>(head_dim, group);
    if (dtype == GP_DTYPE_BF16)
        return gp_attn_launch_hd<__nv_bfloat16>(head_dim, group);
    return NULL;
}

gp_status gp_decode_attn_launch(const gp_attn_args *a, int head_dim, gp_attn_kernel kernel,
                                cudaStream_t stream)
{
    if (kernel == GP_ATTN_KERNEL_STREAM)
        return gp_decode_attn_stream_launch(a, stream);
    const gp_attn_launch_fn launch = gp_attn_launch_for(a->dtype, head_dim, a->group);
    if (!launch)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_decode_attn: no kernel for dtype %s, head_dim = %d, group = %d",
                gp_dtype_name(a->dtype), head_dim, a->group);
    return launch(a, kernel, stream);
}

static gp_status gp_attn_check_shape(const char *fn, int B, int n_heads, int n_kv_heads,
                                     int head_dim)
{
    if (B < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d must be positive", fn, B);
    if (n_heads < 1 || n_kv_heads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads = %d and n_kv_heads = %d must be positive", fn,
                n_heads, n_kv_heads);
    if (n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > GP_DECODE_ATTN_MAX_GROUP)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads = %d must be n_kv_heads = %d times 1..%d", fn,
                n_heads, n_kv_heads, GP_DECODE_ATTN_MAX_GROUP);
    if (head_dim != 16 && head_dim != 32 && head_dim != 64 && head_dim != 128 && head_dim != 256)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: head_dim = %d is not one of 16, 32, 64, 128, 256", fn,
                head_dim);
    if ((int64_t)B * n_heads > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d x n_heads = %d overflows", fn, B, n_heads);
    return GP_OK;
}

/* The SMs a call may use: the partition's (p->sm_count), else the device's. */
static gp_status gp_attn_sm_count(const gp_decode_attn_params *p, int *sms)
{
    *sms = p->sm_count;
    if (*sms <= 0) {
        int dev = 0;
        GP_CUDA_TRY(cudaGetDevice(&dev));
        GP_CUDA_TRY(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return GP_OK;
}

/* The heuristic proper; shapes and params already checked. */
static gp_status gp_attn_pick_splits(int B, int n_kv_heads, int max_len, const gp_decode_attn_params *p,
                                     int *n_splits)
{
    if (p->force_splits > 0) {
        *n_splits = p->force_splits;
        return GP_OK;
    }
    int cap = p->max_splits > 0 ? p->max_splits : GP_ATTN_AUTO_MAX_SPLITS;
    int by_len = max_len / GP_ATTN_MIN_SPLIT_TOKENS;
    if (by_len < cap)
        cap = by_len;
    if (cap <= 1) {
        *n_splits = 1; /* no device query needed */
        return GP_OK;
    }
    int sms;
    GP_TRY(gp_attn_sm_count(p, &sms));
    /* As many splits as give each SM one CTA (ctas_per_sm_hint of them when
     * set), each split at least GP_ATTN_MIN_SPLIT_TOKENS tokens. A decode
     * batch's attention is a few MB a layer: what it costs is each CTA's
     * fixed latency and the merge, not bandwidth, and a full wave of short
     * splits lost to that (H100, docs/PERFORMANCE.md, "Kernels to the
     * roofline": B = 4, C = 1024 at 4 splits 11.6 us a layer, at the wave's
     * 12 splits 14.5; B = 16 unsplit 27.3, at 3 splits about 31). */
    const int cps = p->ctas_per_sm_hint > 0 ? p->ctas_per_sm_hint : 1;
    const int64_t base = (int64_t)B * n_kv_heads;
    int64_t n = (int64_t)sms * cps / base;
    if (n > cap)
        n = cap;
    *n_splits = n < 1 ? 1 : (int)n;
    return GP_OK;
}

extern "C" gp_status gp_decode_attn_splits(int B, int n_heads, int n_kv_heads, int head_dim,
                                           int max_len, const gp_decode_attn_params *p,
                                           int *n_splits)
{
    static const char fn[] = "gp_decode_attn_splits";
    if (!n_splits)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_splits must not be NULL", fn);
    *n_splits = 1;
    gp_decode_attn_params dp = gp_decode_attn_default_params();
    if (!p)
        p = &dp;
    GP_TRY(gp_attn_check_shape(fn, B, n_heads, n_kv_heads, head_dim));
    GP_TRY(gp_attn_check_params(fn, p));
    if (max_len < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_len = %d must be positive", fn, max_len);
    return gp_attn_pick_splits(B, n_kv_heads, max_len, p, n_splits);
}

extern "C" size_t gp_decode_attn_workspace_bytes(int B, int n_heads, int head_dim, int n_splits)
{
    if (B < 1 || n_heads < 1 || head_dim < 1 || n_splits <= 1)
        return 0;
    /* acc [B][n_heads][n_splits][head_dim] then ml [B][n_heads][n_splits][2] */
    uint64_t per = ((uint64_t)head_dim + 2u) * sizeof(float), n, bytes;
    if (!gp_mul_u64((uint64_t)B * (uint64_t)n_heads, (uint64_t)n_splits, &n)
        || !gp_mul_u64(n, per, &bytes) || bytes > SIZE_MAX)
        return 0;
    return (size_t)bytes;
}

extern "C" gp_status gp_decode_attn_workspace_max(int max_B, int n_heads, int n_kv_heads,
                                                  int head_dim, int max_len,
                                                  const gp_decode_attn_params *p, size_t *bytes)
{
    static const char fn[] = "gp_decode_attn_workspace_max";
    if (!bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: bytes must not be NULL", fn);
    *bytes = 0;
    gp_decode_attn_params dp = gp_decode_attn_default_params();
    if (!p)
        p = &dp;
    GP_TRY(gp_attn_check_shape(fn, max_B, n_heads, n_kv_heads, head_dim));
    GP_TRY(gp_attn_check_params(fn, p));
    if (max_len < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_len = %d must be positive", fn, max_len);
    /* splits(B) only grows as max_len grows, so max_len is the worst case
     * for every B; the product B * splits is not monotonic in B. */
    size_t worst = 0;
    for (int B = 1; B <= max_B; B++) {
        int n;
        GP_TRY(gp_attn_pick_splits(B, n_kv_heads, max_len, p, &n));
        size_t w = gp_decode_attn_workspace_bytes(B, n_heads, head_dim, n);
        if (n > 1 && w == 0)
            GP_FAIL(GP_ERR_OVERFLOW, "%s: workspace for B = %d, %d splits overflows", fn, B, n);
        if (w > worst)
            worst = w;
    }
    *bytes = worst;
    return GP_OK;
}

static int gp_is_aligned(const void *ptr, size_t align)
{
    return ((uintptr_t)ptr & (align - 1)) == 0;
}

/* The kernel a call of this shape runs: the device facts the rule needs
 * (gathered only when they can matter; the streaming kernel's occupancy is
 * that of dtype's instantiation, whose grid it sizes), then
 * gp_decode_attn_choose. */
static gp_status call_kernel(const char *fn, const gp_decode_attn_params *p, gp_dtype dtype, int B, int n_kv_heads,
                             int head_dim, int group, int n_splits, int out_aligned4, gp_attn_kernel *kernel,
                             int *stream_warps)
{
    gp_attn_call c = {};
    c.B = B;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = head_dim;
    c.group = group;
    c.n_splits = n_splits;
    c.out_aligned4 = out_aligned4;
    if (gp_attn_stream_candidate(p, &c)) {
        GP_TRY(gp_attn_sm_count(p, &c.sm_count));
        GP_TRY(gp_decode_attn_stream_occupancy(dtype, group, &c.stream_warps_per_sm));
        if (c.stream_warps_per_sm < 1)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: the streaming attention kernel fits no warp on an SM", fn);
    }
    return gp_decode_attn_choose(p, &c, kernel, stream_warps);
}

extern "C" gp_status gp_decode_attn(const gp_kv_view *kv, int B, int n_heads, int max_len,
                                    const void *q, void *out, void *workspace,
                                    size_t workspace_bytes, const gp_decode_attn_params *p,
                                    void *stream)
{
    static const char fn[] = "gp_decode_attn";
    if (!kv || !q || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kv, q and out must not be NULL", fn);
    GP_TRY(gp_dtype_check_half(kv->dtype, fn));
    if (!kv->k || !kv->v || !kv->block_tables || !kv->lens)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: the view's k, v, block_tables and lens must not be NULL",
                fn);
    gp_decode_attn_params dp = gp_decode_attn_default_params();
    if (!p)
        p = &dp;
    GP_TRY(gp_attn_check_shape(fn, B, n_heads, kv->n_kv_heads, kv->head_dim));
    GP_TRY(gp_attn_check_params(fn, p));
    if (B > kv->n_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d exceeds the view's %d rows", fn, B, kv->n_rows);
    if (kv->block_size < 1 || kv->max_blocks < 1 || kv->n_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: block_size = %d, max_blocks = %d and n_blocks = %d must "
                "be positive", fn, kv->block_size, kv->max_blocks, kv->n_blocks);
    const int64_t cap = (int64_t)kv->max_blocks * kv->block_size;
    if (cap > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_blocks = %d x block_size = %d exceeds %d positions",
                fn, kv->max_blocks, kv->block_size, INT_MAX);
    if (max_len < 1 || max_len > cap)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_len = %d is outside [1, %lld] (max_blocks x "
                "block_size)", fn, max_len, (long long)cap);
    if (!gp_is_aligned(q, 16) || !gp_is_aligned(kv->k, 16) || !gp_is_aligned(kv->v, 16))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: q, k and v must be 16-byte aligned (16-byte loads)", fn);
    if (workspace && !gp_is_aligned(workspace, 16))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: workspace must be 16-byte aligned", fn);

    int n_splits = 1;
    GP_TRY(gp_attn_pick_splits(B, kv->n_kv_heads, max_len, p, &n_splits));
    size_t need = gp_decode_attn_workspace_bytes(B, n_heads, kv->head_dim, n_splits);
    if (n_splits > 1 && (!workspace || need == 0 || workspace_bytes < need)) {
        if (p->force_splits > 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: force_splits = %d needs %zu bytes of workspace, got "
                    "%zu%s", fn, n_splits, need, workspace ? workspace_bytes : (size_t)0,
                    workspace ? "" : " (NULL)");
        /* Fewer splits rather than failing inside a step: the largest count
         * the workspace holds. */
        const size_t per = gp_decode_attn_workspace_bytes(B, n_heads, kv->head_dim, 2) / 2;
        size_t fit = (workspace && per) ? workspace_bytes / per : 0;
        n_splits = fit >= 2 ? (int)(fit < (size_t)n_splits ? fit : (size_t)n_splits) : 1;
    }

    gp_attn_args a;
    a.q = q;
    a.k = kv->k;
    a.v = kv->v;
    a.tables = kv->block_tables;
    a.lens = kv->lens;
    a.out = out;
    a.dtype = kv->dtype;
    a.ws_acc = (float *)workspace;
    a.ws_ml = n_splits > 1 ? (float *)workspace + (size_t)B * n_heads * n_splits * kv->head_dim
                           : NULL;
    a.B = B;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.group = n_heads / kv->n_kv_heads;
    a.block_size = kv->block_size;
    a.bs_shift = -1;
    if ((kv->block_size & (kv->block_size - 1)) == 0) {
        int sh = 0;
        while ((1 << sh) < kv->block_size)
            sh++;
        a.bs_shift = sh;
    }
    a.max_blocks = kv->max_blocks;
    a.n_splits = n_splits;
    a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)kv->head_dim));
    a.kv_evict_first = p->kv_evict_first;

    gp_attn_kernel kernel;
    GP_TRY(call_kernel(fn, p, kv->dtype, B, kv->n_kv_heads, kv->head_dim, a.group, n_splits,
                       gp_is_aligned(out, 4), &kernel, &a.stream_warps));
    return gp_decode_attn_launch(&a, kv->head_dim, kernel, (cudaStream_t)stream);
}

extern "C" gp_status gp_decode_attn_kernel(int B, int n_heads, int n_kv_heads, int head_dim, int max_len,
                                const gp_decode_attn_params *p, gp_attn_kernel *out)
{
    static const char fn[] = "gp_decode_attn_kernel";
    gp_decode_attn_params dp = gp_decode_attn_default_params();
    if (!p)
        p = &dp;
    if (!out || B < 1 || n_kv_heads < 1 || n_heads % n_kv_heads || max_len < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d, n_heads = %d, n_kv_heads = %d, max_len = %d (all >= 1, "
                "n_heads a multiple of n_kv_heads), out %p", fn, B, n_heads, n_kv_heads, max_len, (void *)out);
    int n_splits = 1;
    GP_TRY(gp_attn_pick_splits(B, n_kv_heads, max_len, p, &n_splits));
    return call_kernel(fn, p, GP_DTYPE_BF16, B, n_kv_heads, head_dim, n_heads / n_kv_heads, n_splits, 1, out,
                       NULL);
}
