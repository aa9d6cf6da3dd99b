/* GQA decode attention on tensor cores (head_dim 128, up to 8 query heads
 * per KV head): the same work and outputs as the CUDA-core kernel in
 * decode_attn.cu, with q.k and p.v as mma.m16n8k16 bf16 or fp16 products
 * (the template T, the view's dtype). */
#include <stdint.h>

#include "cuda_util.cuh"
#include "decode_attn.cuh"
#include "decode_attn_dev.cuh"
#include "mma_dev.cuh"

/* Why this kernel exists: the CUDA-core kernel spends about 130
 * instructions per token row and lane (unpacking, 64 FMAs, 16 shuffles for
 * the q.k sums, softmax), so it streams only 24-32 GB/s per SM: on a
 * partition of the GPU its time is linear in the SMs it gets, and splitting
 * attention from the GEMMs cannot pay. Here a warp handles 16 tokens with 32
 * mma instructions (48 with the two-part p) and 16 ldmatrix; K and V tiles travel global -> shared
 * memory through cp.async (double-buffered per warp, no registers held),
 * so the kernel is bound by HBM, not by instruction issue.
 *
 * Layout: a CTA per (row, KV head, split), 4 warps; warp w takes the split's
 * 16-token tiles w, w+4, ... The group's G <= 8 query heads are rows 0..G-1
 * of the 16-row A operand (rows G..15 are zero). Scores and the output stay
 * in fp32 accumulators; q, k, v are the cache's bf16 or fp16; the
 * probabilities enter the p.v product as two parts of that type (16
 * significant bits in bf16, 22 in fp16). */

#define MMA_HD 128
#define MMA_TILE 16                 /* tokens per warp tile */
#define MMA_PITCH (MMA_HD + 8)      /* smem row pitch in elements: 272 B, so 8 rows hit 8 distinct 16-B bank groups */
#define MMA_NW (GP_ATTN_THREADS / 32)
#define MMA_TILE_ELEMS (MMA_TILE * MMA_PITCH)
/* Tiles per warp ring: one in flight while one is computed. Deeper rings
 * cost shared memory and with it resident CTAs (3 stages: 2 CTAs per SM
 * instead of 3), and measured 10-25% slower on every partition. */
#define MMA_ST 2
/* per warp and stage: a K tile and a V tile */
#define MMA_SMEM_BYTES (MMA_NW * MMA_ST * 2 * MMA_TILE_ELEMS * 2)

/* Issue the cp.async copies of one 16-token tile (K and V rows of this KV
 * head) into ks/vs; rows past t_end are zero-filled. Lane l resolves the
 * cache row of token base + (l & 15) through the block table once; the 8
 * copies per lane and tensor then take their row's offset by shuffle. */
template <class T>
static __device__ __forceinline__ void gp_mma_load_tile(const gp_attn_args &a, const int32_t *table, int base,
                                                        int t_end, size_t slot_stride, size_t head_off,
                                                        T *ks, T *vs, int lane)
{
    const int t = base + (lane & 15);
    long long off = -1;
    if (t < t_end) {
        const int bi = gp_attn_block_index(a, t);
        const int slot = t - bi * a.block_size;
        off = (long long)(((size_t)__ldg(table + bi) * a.block_size + slot) * slot_stride + head_off);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int row = 2 * i + (lane >> 4), chunk = lane & 15;
        const long long ro = __shfl_sync(0xffffffffu, off, row);
        const size_t src = ro >= 0 ? (size_t)ro + (size_t)chunk * 8 : 0;
        const int bytes = ro >= 0 ? 16 : 0; /* 0: zero-fill, the source is not read */
        gp_cp_async16(gp_smem_addr(ks + row * MMA_PITCH + chunk * 8), static_cast<const T *>(a.k) + src, bytes);
        gp_cp_async16(gp_smem_addr(vs + row * MMA_PITCH + chunk * 8), static_cast<const T *>(a.v) + src, bytes);
    }
}

template <class T, int GT>
static __global__ void __launch_bounds__(GP_ATTN_THREADS, 3)
gp_decode_attn_mma_kernel(const gp_attn_args a)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> TR;
    constexpr int ST = MMA_ST;
    extern __shared__ __align__(16) unsigned char gp_mma_smem[];
    const int kvh = blockIdx.x % a.n_kv;
    const int b = blockIdx.x / a.n_kv;
    const int split = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gr = lane >> 2, tq = lane & 3; /* fragment row (query head) and column pair */
    const int G = a.group;

    int t_begin, t_end;
    gp_attn_split_range(a, b, split, &t_begin, &t_end);

    /* q of head gr as A fragments of the 8 k-steps (16 dims each); rows >= G
     * are zero, so their scores are 0 and never stored. */
    uint32_t qa[8][2];
    const size_t qrow = ((size_t)b * a.n_heads + (size_t)kvh * G + gr) * MMA_HD;
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
        if (gr < G) {
            const uint32_t *qp = reinterpret_cast<const uint32_t *>(static_cast<const T *>(a.q) + qrow + ks * 16 + 2 * tq);
            qa[ks][0] = qp[0]; /* dims 2tq, 2tq+1 */
            qa[ks][1] = qp[4]; /* dims 2tq+8, 2tq+9 */
        } else {
            qa[ks][0] = qa[ks][1] = 0u;
        }
    }

    float o[16][4]; /* output dims nt*8 + 2tq + {0,1} of head gr in [0..1]; [2..3] are zero rows */
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
        o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* this lane's share of head gr's softmax state */

    T *wbuf = reinterpret_cast<T *>(gp_mma_smem) +
                          (size_t)warp * ST * 2 * MMA_TILE_ELEMS;
    const int32_t *table = a.tables + (size_t)b * a.max_blocks;
    const size_t slot_stride = (size_t)a.n_kv * MMA_HD;
    const size_t head_off = (size_t)kvh * MMA_HD;
    const int first = t_begin + warp * MMA_TILE, stride = MMA_NW * MMA_TILE;

    /* ring of ST stages: tiles i+1 .. i+ST-1 in flight while tile i is
     * computed; one commit group per tile (empty past the end) keeps the
     * wait count fixed */
#pragma unroll
    for (int j = 0; j < ST - 1; j++) {
        if (first + j * stride < t_end) {
            T *nk = wbuf + j * 2 * MMA_TILE_ELEMS;
            gp_mma_load_tile(a, table, first + j * stride, t_end, slot_stride, head_off, nk,
                             nk + MMA_TILE_ELEMS, lane);
        }
        asm volatile("cp.async.commit_group;\n");
    }
    int stage = 0;
    for (int base = first; base < t_end; base += stride, stage = stage + 1 == ST ? 0 : stage + 1) {
        T *ks = wbuf + stage * 2 * MMA_TILE_ELEMS, *vs = ks + MMA_TILE_ELEMS;
        const int ahead = base + (ST - 1) * stride;
        if (ahead < t_end) {
            const int ns = stage == 0 ? ST - 1 : stage - 1; /* freed by the last iteration */
            T *nk = wbuf + ns * 2 * MMA_TILE_ELEMS;
            gp_mma_load_tile(a, table, ahead, t_end, slot_stride, head_off, nk, nk + MMA_TILE_ELEMS, lane);
        }
        asm volatile("cp.async.commit_group;\n");
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1) : "memory"); /* tile `base` has landed */
        __syncwarp();

        /* S = q K^T over the 16 tokens: n-tile 0 = tokens 0..7, 1 = 8..15.
         * ldmatrix (no transpose) of K rows gives the B fragment directly. */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        const int mi = lane >> 3, ri = lane & 7; /* matrix and row this lane addresses */
#pragma unroll
        for (int kst = 0; kst < 8; kst++) {
            uint32_t b0, b1, b2, b3;
            /* matrices: (tok 0-7, dims +0..7), (tok 0-7, +8..15), (tok 8-15, +0..7), (tok 8-15, +8..15) */
            gp_ldsm_x4(gp_smem_addr(ks + ((mi >> 1) * 8 + ri) * MMA_PITCH + kst * 16 + (mi & 1) * 8), b0, b1, b2, b3);
            gp_mma_half<T>(s[0], qa[kst][0], qa[kst][1], b0, b1);
            gp_mma_half<T>(s[1], qa[kst][0], qa[kst][1], b2, b3);
        }
        /* scores of head gr, tokens base + nt*8 + 2tq + {0,1}, in log2 units */
        float mx = m;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int tok = base + nt * 8 + 2 * tq + j;
                s[nt][j] = tok < t_end ? s[nt][j] * a.scale_log2 : -INFINITY;
                mx = fmaxf(mx, s[nt][j]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float ms = gp_safe_max(mx);
        const float corr = exp2f(m - ms);
        float p[2][2], sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                p[nt][j] = exp2f(s[nt][j] - ms);
                sum += p[nt][j];
            }
        l = fmaf(l, corr, sum);
        m = mx;
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            o[nt][0] *= corr;
            o[nt][1] *= corr;
        }
        /* p as the A fragment (k = the 16 tokens): C fragments of the two
         * n-tiles are exactly its columns 2tq.. and 8+2tq... p = hi + lo in
         * two bf16 parts: bf16 alone (8 bits) put single outputs 1e-3 of
         * their row's max off the fp32 kernel (measured), hi + lo keeps 16
         * bits, for 16 more mma per tile (the tensor cores have room). The
         * same two parts in fp16 keep 22 bits (less for p below 2^-14,
         * where fp16 is subnormal: their share of the output is that small). */
        const uint32_t pa0 = TR::pack2(p[0][0], p[0][1]), pa2 = TR::pack2(p[1][0], p[1][1]);
        const uint32_t pl0 = TR::pack2(p[0][0] - TR::lo(pa0), p[0][1] - TR::hi(pa0));
        const uint32_t pl2 = TR::pack2(p[1][0] - TR::lo(pa2), p[1][1] - TR::hi(pa2));
#pragma unroll
        for (int db = 0; db < 8; db++) {
            uint32_t b0, b1, b2, b3;
            /* transposed: (tok 0-7, dims +0..7), (tok 8-15, +0..7), (tok 0-7, +8..15), (tok 8-15, +8..15) */
            gp_ldsm_x4_t(gp_smem_addr(vs + ((mi & 1) * 8 + ri) * MMA_PITCH + db * 16 + (mi >> 1) * 8), b0, b1, b2,
                         b3);
            gp_mma_half<T>(o[2 * db], pa0, pa2, b0, b1);
            gp_mma_half<T>(o[2 * db + 1], pa0, pa2, b2, b3);
            gp_mma_half<T>(o[2 * db], pl0, pl2, b0, b1);
            gp_mma_half<T>(o[2 * db + 1], pl0, pl2, b2, b3);
        }
        __syncwarp(); /* every lane is done with this stage before it is refilled */
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncthreads(); /* the tile buffers become the merge arrays */
    float(*s_m)[GT] = reinterpret_cast<float(*)[GT]>(gp_mma_smem);
    float(*s_l)[GT] = s_m + MMA_NW;
    float(*s_acc)[GT][MMA_HD] = reinterpret_cast<float(*)[GT][MMA_HD]>(s_l + MMA_NW);
    if (gr < G) {
        if (tq == 0) {
            s_m[warp][gr] = m;
            s_l[warp][gr] = l;
        }
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            s_acc[warp][gr][nt * 8 + 2 * tq] = o[nt][0];
            s_acc[warp][gr][nt * 8 + 2 * tq + 1] = o[nt][1];
        }
    }
    __syncthreads();
    gp_attn_merge_warps<T, MMA_HD, GT, MMA_NW>(a, b, kvh, split, s_m, s_l, s_acc);
}

static_assert(MMA_SMEM_BYTES >= (int)sizeof(float) * MMA_NW * 8 * (MMA_HD + 2),
              "the merge arrays must fit in the tile buffers");

/* The kernel for the dtype and group with its shared memory bytes; the tile
 * buffers exceed the default 48 KB of dynamic shared memory, so the limit is
 * raised once per kernel and device. */
static gp_status gp_mma_kernel_for(gp_dtype dtype, int group, const void **kernel, int *smem)
{
    const int gi = group <= 4 ? 0 : 1, di = dtype == GP_DTYPE_F16 ? 1 : 0;
    if (di)
        *kernel = gi == 0 ? (const void *)gp_decode_attn_mma_kernel<__half, 4>
                          : (const void *)gp_decode_attn_mma_kernel<__half, 8>;
    else
        *kernel = gi == 0 ? (const void *)gp_decode_attn_mma_kernel<__nv_bfloat16, 4>
                          : (const void *)gp_decode_attn_mma_kernel<__nv_bfloat16, 8>;
    *smem = MMA_SMEM_BYTES;
    static unsigned done[2][2];
    return gp_attn_smem_once(&done[di][gi], *kernel, *smem, false);
}

gp_status gp_decode_attn_mma_launch(const gp_attn_args *a, cudaStream_t stream)
{
    const void *k;
    int smem;
    GP_TRY(gp_mma_kernel_for(a->dtype, a->group, &k, &smem));
    gp_launch l;
    gp_attn_launch_setup(&l, a, smem, stream);
    void *args[] = {(void *)a};
    cudaError_t e = cudaLaunchKernelExC(&l.cfg, k, args);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_decode_attn_mma_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}
