/* Skinny GEMM for decode batches, y[M][N] = x[M][K] . W[N][K]^T with M <= 16:
 * the weights are streamed once at HBM speed into tensor cores (mma.sync). */
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gemm_skinny.cuh"
#include "gp_half.cuh"
#include "gp_launch.cuh"
#include "swiglu.cuh"

/* Both 16-bit types (T = __nv_bfloat16 or __half, the engine dtype) run the
 * same kernel: only the mma's operand type and the 16-bit store differ;
 * accumulation is fp32 in both.
 *
 * Why it is shaped this way.
 *
 * At decode batch sizes a projection is a stream of N x K bf16 weights that
 * each serve only M tokens: the time is bytes / HBM bandwidth plus whatever
 * the kernel spends not streaming (launch, ramp-up, tail, reductions), which
 * for the 17-120 us projections of an 8B model is the part worth winning.
 *
 * - A warp multiplies 16-row weight tiles with mma.m16n8k16 (rows as the A
 *   operand, up to 8 tokens as the columns of B): the tensor cores make the
 *   arithmetic free, where CUDA-core FMAs would become the limit at M = 16.
 * - The dot product runs over k in any order, so k is permuted inside each
 *   32-wide chunk so that the fragments are exactly what one 16-byte load per
 *   lane delivers: lane (g = lane/4, t = lane%4) loads W[row g][8t..8t+7] and
 *   W[row g+8][8t..8t+7]; elements 0-3 feed one mma, 4-7 a second. x is read
 *   with the same permutation (16-byte loads, L2-hot), so nothing is staged
 *   in shared memory and nothing waits on a barrier in the main loop.
 * - A CTA owns 16 rows (32 when forced) for the whole of K; its 8 warps
 *   take every eighth 32-chunk (together 512 contiguous bytes of each row per
 *   step) and are summed once through shared memory at the end, in warp
 *   order. No split-K across CTAs: no workspace, no atomics, no serial
 *   reduction tail, and the same bits on every run. (A first version split K
 *   across CTAs with a ticketed reduction and staged x in shared memory: its
 *   reduction tail and staging cost 2-4 us per GEMM, slower than cuBLASLt.)
 *   16-row CTAs measured faster than 32-row ones on every Llama-3-8B shape
 *   (H100, M = 8: LM head 383 vs 455 us, gate/up 88 vs 100 us, O 16.8 vs
 *   19.0 us), so the plan takes 16 unless a caller forces 32.
 * - The grid is persistent and sized to the context's SM budget (SMs x 2
 *   CTAs), so inside a green-context partition it is one wave of that
 *   partition; the next row block's first weights are fetched before the
 *   current one's epilogue.
 * - The gate/up projection with SwiGLU (out 3, SW): a 16-row tile is the
 *   gate rows j..j+7 (the mma's rows 0-7) and their up rows N/2 + j..
 *   (rows 8-15), so one CTA holds both halves of its 8 outputs and the
 *   epilogue applies SwiGLU to them rounded as the 16-bit output would be:
 *   gp_swiglu's bits without its kernel, its launch or the gate/up round
 *   trip through memory. */

typedef struct gp_skinny_args {
    const uint16_t *x;      /* [M][K] of T */
    const uint16_t *w;      /* [N][K] of T */
    void *y;                /* [M][N] T or fp32 */
    int M, N, K, out_type;
    int n_items;            /* row blocks */
} gp_skinny_args;

template <typename T>
static __device__ __forceinline__ void gp_mma16816(float (&d)[4], uint32_t a0, uint32_t a1,
                                                   uint32_t a2, uint32_t a3, uint32_t b0,
                                                   uint32_t b1)
{
    if constexpr (gp_half_traits<T>::is_bf16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Chunks per warp per step: 16-byte loads in flight per lane are 2 R U (W)
 * plus NT U (x); kept near 16-20 so the instance stays under 128 registers
 * (2 CTAs per SM). */
template <int NT, int R> struct gp_skinny_unroll {
    static constexpr int U = (NT == 2 && R == 2) ? 3 : 4;
};

/* Weights of this warp's chunks j0 .. j0+U-1 of row block rb (zeros past K
 * and past N: they multiply into nothing). Streaming loads: each weight is
 * read once per step, so keep L2 for the activations. */
template <int R, int U, bool SW>
static __device__ __forceinline__ void gp_skinny_fetch_w(const gp_skinny_args &a, int rb, int j0,
                                                         int my_chunks, int warp, int g, int t,
                                                         uint4 (&wl)[R][U], uint4 (&wh)[R][U])
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        /* the tile's rows 0-7 and 8-15: 16 consecutive rows, or (SW, R = 1) gate rows and their up rows */
        const int half = a.N / 2, lo = SW ? rb * 8 + g : rb * 16 * R + r * 16 + g, hi = SW ? half + lo : lo + 8;
        const bool in_lo = SW ? lo < half : lo < a.N, in_hi = SW ? lo < half : hi < a.N;
        const uint16_t *p_lo = a.w + (size_t)lo * (size_t)a.K;
        const uint16_t *p_hi = a.w + (size_t)hi * (size_t)a.K;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u;
            const int k = (warp + GP_SKINNY_WARPS * j) * 32 + 8 * t;
            /* K % 8 == 0: a 16-byte piece is all in or all out */
            const bool ok = j < my_chunks && k < a.K;
            wl[r][u] = make_uint4(0u, 0u, 0u, 0u);
            wh[r][u] = make_uint4(0u, 0u, 0u, 0u);
            if (ok && in_lo)
                wl[r][u] = __ldcs(reinterpret_cast<const uint4 *>(p_lo + k));
            if (ok && in_hi)
                wh[r][u] = __ldcs(reinterpret_cast<const uint4 *>(p_hi + k));
        }
    }
}

/* x for the same chunks (every row block multiplies the same x). Read-only
 * for the kernel's life, L2-hot: the non-coherent path. */
template <int NT, int U>
static __device__ __forceinline__ void gp_skinny_fetch_x(const gp_skinny_args &a, int j0,
                                                         int my_chunks, int warp, int g, int t,
                                                         uint4 (&xv)[NT][U])
{
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok = n * 8 + g;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u;
            const int k = (warp + GP_SKINNY_WARPS * j) * 32 + 8 * t;
            xv[n][u] = make_uint4(0u, 0u, 0u, 0u);
            if (j < my_chunks && k < a.K && tok < a.M)
                xv[n][u] = __ldg(
                    reinterpret_cast<const uint4 *>(a.x + (size_t)tok * (size_t)a.K + k));
        }
    }
}

template <typename T>
static __device__ __forceinline__ void gp_skinny_store(const gp_skinny_args &a, int m, int n,
                                                       float v)
{
    const size_t i = (size_t)m * (size_t)a.N + (size_t)n;
    if (a.out_type == 0) {
        if constexpr (gp_half_traits<T>::is_bf16)
            static_cast<__nv_bfloat16 *>(a.y)[i] = __float2bfloat16_rn(v);
        else
            static_cast<__half *>(a.y)[i] = __float2half_rn(v);
    }
    else if (a.out_type == 1)
        static_cast<float *>(a.y)[i] = v;
    else
        static_cast<float *>(a.y)[i] += v; /* one thread owns each element */
}

template <typename T, int NT, int R, bool SW>
static __global__ void __launch_bounds__(GP_SKINNY_THREADS, GP_SKINNY_CTAS_PER_SM)
gp_skinny_kernel(const gp_skinny_args a)
{
    static_assert(!SW || R == 1, "SwiGLU tiles are 8 gate and 8 up rows");
    gp_pdl_wait();
    constexpr int U = gp_skinny_unroll<NT, R>::U;
    constexpr int ROWS = 16 * R;
    /* Row stride of the reduction buffer: +4 floats puts the 4 token pairs
     * of a fragment store 8 banks apart, so a warp's stores are conflict-free. */
    constexpr int RSTR = ROWS + 4;
    __shared__ float red[GP_SKINNY_WARPS][8 * NT][RSTR]; /* per warp: [token][row] partials */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int nck = (a.K + 31) / 32; /* 32-wide chunks; warp w takes w, w+8, ... */
    const int my_chunks = nck > warp ? (nck - warp + GP_SKINNY_WARPS - 1) / GP_SKINNY_WARPS : 0;

    int item = blockIdx.x;
    uint4 wl[R][U], wh[R][U]; /* the current step's weights */
    uint4 xv[NT][U];          /* the current step's x */
    if (item < a.n_items)
        gp_skinny_fetch_w<R, U, SW>(a, item, 0, my_chunks, warp, g, t, wl, wh);
    gp_skinny_fetch_x<NT, U>(a, 0, my_chunks, warp, g, t, xv);

    for (; item < a.n_items; item += gridDim.x) {
        float acc[R][NT][4];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[r][n][j] = 0.0f;

        for (int j0 = 0; j0 < my_chunks; j0 += U) {
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        gp_mma16816<T>(acc[r][n], wl[r][u].x, wh[r][u].x, wl[r][u].y, wh[r][u].y,
                                    xv[n][u].x, xv[n][u].y);
                        gp_mma16816<T>(acc[r][n], wl[r][u].z, wh[r][u].z, wl[r][u].w, wh[r][u].w,
                                    xv[n][u].z, xv[n][u].w);
                    }
            /* the next step's operands: this row block's, else the first of
             * this CTA's next row block (in flight over the epilogue below) */
            if (j0 + U < my_chunks) {
                gp_skinny_fetch_w<R, U, SW>(a, item, j0 + U, my_chunks, warp, g, t, wl, wh);
                gp_skinny_fetch_x<NT, U>(a, j0 + U, my_chunks, warp, g, t, xv);
            } else if (item + (int)gridDim.x < a.n_items) {
                gp_skinny_fetch_w<R, U, SW>(a, item + gridDim.x, 0, my_chunks, warp, g, t, wl, wh);
                gp_skinny_fetch_x<NT, U>(a, 0, my_chunks, warp, g, t, xv);
            }
        }

        /* acc[r][n][j]: row 16r + g + 8 (j >> 1), token 8n + 2t + (j & 1) */
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    red[warp][n * 8 + 2 * t + (j & 1)][r * 16 + g + (j >> 1) * 8] = acc[r][n][j];
        __syncthreads();
        if constexpr (SW) { /* out[tok][8 item + j] = SwiGLU(gate row j, up row j), each rounded first */
            typedef gp_half_traits<T> ht;
            const int half = a.N / 2;
            for (int e = threadIdx.x; e < 8 * a.M; e += GP_SKINNY_THREADS) {
                const int tok = e / 8, j = e - tok * 8, col = item * 8 + j;
                float g = 0.0f, u = 0.0f;
#pragma unroll
                for (int w = 0; w < GP_SKINNY_WARPS; w++) /* the order of the plain store: the same bits */
                    g += red[w][tok][j], u += red[w][tok][j + 8];
                if (col < half)
                    static_cast<T *>(a.y)[(size_t)tok * (size_t)half + (size_t)col] = ht::from_float(
                        gp_swiglu_one(ht::to_float(ht::from_float(g)), ht::to_float(ht::from_float(u))));
            }
            __syncthreads(); /* red is rewritten by the next row block */
            continue;
        }
        const int n0 = item * ROWS;
        for (int e = threadIdx.x; e < ROWS * a.M; e += GP_SKINNY_THREADS) {
            const int tok = e / ROWS, row = e - tok * ROWS;
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < GP_SKINNY_WARPS; w++) /* fixed order: same bits every run */
                v += red[w][tok][row];
            if (n0 + row < a.N)
                gp_skinny_store<T>(a, tok, n0 + row, v);
        }
        __syncthreads(); /* red is rewritten by the next row block */
    }
}

extern "C" int gp_skinny_plan_make(int M, int N, int K, const void *x, const void *w, int sms,
                                   int r, gp_skinny_plan *p)
{
    if (M < 1 || M > GP_SKINNY_MAX_M || N < 1 || K < 8 || K % 8 != 0 || sms < 1
        || r < 0 || r > 2 || ((uintptr_t)x & 15u) || ((uintptr_t)w & 15u))
        return 0;
    const long long slots = (long long)sms * GP_SKINNY_CTAS_PER_SM;
    if (r == 0)
        r = 1; /* 16-row blocks: faster on every measured shape (see the top) */
    const long long rb = (N + 16LL * r - 1) / (16LL * r);
    p->nt = M <= 8 ? 1 : 2;
    p->r = r;
    p->row_blocks = (int)rb;
    p->grid = (int)(rb < slots ? rb : slots);
    return 1;
}

template <typename T, int NT, int R, bool SW>
static cudaError_t gp_skinny_launch_t(const gp_skinny_plan *p, const gp_skinny_args *a,
                                      cudaStream_t stream)
{
    gp_launch l;
    gp_launch_setup(&l, p->grid, dim3(GP_SKINNY_THREADS), 0, stream);
    return cudaLaunchKernelEx(&l.cfg, gp_skinny_kernel<T, NT, R, SW>, *a);
}

template <typename T>
static cudaError_t gp_skinny_launch_v(const gp_skinny_plan *p, const gp_skinny_args *a,
                                      cudaStream_t stream)
{
    if (a->out_type == GP_SKINNY_OUT_SWIGLU) { /* 8 gate and 8 up rows a tile: N even, 16-row tiles */
        if (p->r != 1 || a->N % 2)
            return cudaErrorInvalidValue;
        return p->nt == 1 ? gp_skinny_launch_t<T, 1, 1, true>(p, a, stream)
                          : gp_skinny_launch_t<T, 2, 1, true>(p, a, stream);
    }
    const int v = (p->nt - 1) * 2 + (p->r - 1);
    switch (v) {
    case 0: return gp_skinny_launch_t<T, 1, 1, false>(p, a, stream);
    case 1: return gp_skinny_launch_t<T, 1, 2, false>(p, a, stream);
    case 2: return gp_skinny_launch_t<T, 2, 1, false>(p, a, stream);
    case 3: return gp_skinny_launch_t<T, 2, 2, false>(p, a, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t gp_skinny_launch(const gp_skinny_plan *p, gp_dtype dt, int M, int N, int K,
                                        const void *x, const void *w, void *y, int out_type,
                                        cudaStream_t stream)
{
    gp_skinny_args a;
    a.x = static_cast<const uint16_t *>(x);
    a.w = static_cast<const uint16_t *>(w);
    a.y = y;
    a.M = M, a.N = N, a.K = K, a.out_type = out_type;
    a.n_items = p->row_blocks;
    if (dt == GP_DTYPE_F16)
        return gp_skinny_launch_v<__half>(p, &a, stream);
    if (dt == GP_DTYPE_BF16)
        return gp_skinny_launch_v<__nv_bfloat16>(p, &a, stream);
    return cudaErrorInvalidValue;
}
