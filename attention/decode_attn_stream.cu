/* GQA decode attention for batches that fill the SMs many times over (head_dim
 * 128, up to 8 query heads per KV head): persistent warps that each stream
 * whole (row, KV head) items one after another, tensor-core products. The
 * same outputs as decode_attn.cu / decode_attn_mma.cu, always one split.
 * Templated on the 16-bit element type T (bf16 or fp16, the view's dtype). */
#include <stdint.h>

#include "cuda_util.cuh"
#include "decode_attn.cuh"
#include "decode_attn_dev.cuh"
#include "mma_dev.cuh"

/* Why this kernel exists: on a small partition the split-grid
 * tensor-core kernel streams only ~50 GB/s per SM where a plain reader
 * streams ~130. Each of its CTAs reads one item of 384 tokens (6 tiles per
 * warp) and pays, per item, a q load, a block-table load in front of every
 * tile, a first tile nobody overlaps and a CTA-wide merge; with 3 CTAs per
 * SM those latencies are exposed. Here every warp owns its items whole (no
 * merge, no __syncthreads), its cp.async ring runs on across item
 * boundaries, the block-table entry of the next tile is loaded one tile
 * ahead, and q arrives with an item's first tile. The products are
 * transposed (S^T = K q^T, O^T = V^T P^T: tokens and dims fill the 16 rows
 * of the mma, the <= 8 heads its 8 columns), which halves the mma count and
 * the accumulator registers of the (q K^T) form, and leaves room for more
 * warps per SM.
 *
 * Measured on the H100 (gp_bench_attn --green N, B=1024, C=384): 95 GB/s per
 * SM on 16 and 24 SMs (the split kernel: 52), 2.9-3.0 TB/s on the whole GPU.
 * A warp's rate follows the instructions it issues per tile, not the bytes
 * it has in flight: deeper rings (fewer warps) were slower, and each cut in
 * the copy path's instructions paid (PERFORMANCE.md). Co-running with the
 * FFN GEMMs, its K/V copies go L2 evict_first by default
 * (gp_decode_attn_params.kv_evict_first): K/V is read once, and its lines
 * otherwise displace what the GEMMs reuse (activations, weight tiles), 2-3%
 * per step on the large workload at 24:108 (PERFORMANCE.md). */

#define SX_HD 128
#define SX_TILE 16                         /* tokens per tile: the mma's 16 rows */
#define SX_NW 2                            /* warps per CTA; they share nothing */
#define SX_KV_BYTES (SX_TILE * SX_HD * 2)  /* one K or V tile: 16 rows of 256 B */
#define SX_STAGE_BYTES(gt) (2 * SX_KV_BYTES + (gt) * SX_HD * 2) /* K, V, and q of <= gt heads */
/* Ring depth per warp: one tile in flight while one is computed; deeper
 * rings leave fewer warps per SM and measured slower. */
#define SX_ST 2
#define SX_SMEM_BYTES(gt) (SX_NW * SX_ST * SX_STAGE_BYTES(gt))

/* Byte offset of 16-byte chunk c (0..15) of row r in a tile. Rows are 256 B,
 * so without the XOR the 8 rows one ldmatrix reads would all hit the same
 * banks; the XOR spreads them over 8 chunk positions without padding (which
 * would cost a warp's ring 1/16 more shared memory). */
static __device__ __forceinline__ unsigned gp_sx_swz(int r, int c)
{
    return (unsigned)(r * 256 + ((c ^ (r & 7)) << 4));
}

/* The warp's producer: the next tile to copy. blk is loaded when the cursor
 * moves, one tile before it is used, so the table load is never waited on. */
struct gp_sx_prod {
    int item, b, kvh; /* item = b * n_kv + kvh: row and KV head */
    int base, len;    /* tile base..base+15 of the item, whose row has len tokens */
    int blk;          /* block of token base + (lane & 15), -1 past the table */
    uint64_t l2;      /* L2 policy of the K/V copies (gp_l2_policy) */
};

/* Loads the block of the lane's token of the producer's tile. */
static __device__ __forceinline__ void gp_sx_load_block(const gp_attn_args &a, gp_sx_prod &p, int lane)
{
    const int t = p.base + (lane & 15);
    p.blk = t < a.max_blocks * a.block_size
                ? __ldg(a.tables + (size_t)p.b * a.max_blocks + gp_attn_block_index(a, t))
                : -1;
}

/* Points the producer at the first tile of item (< n_items). */
static __device__ __forceinline__ void gp_sx_start(const gp_attn_args &a, gp_sx_prod &p, int item, int lane)
{
    p.item = item;
    p.b = item / a.n_kv;
    p.kvh = item - p.b * a.n_kv;
    p.base = 0;
    p.len = gp_attn_row_len(a, p.b);
    gp_sx_load_block(a, p, lane);
}

/* Copy the producer's tile (and, for an item's first tile, its q) into stage
 * buffer st, then move the cursor to the next tile (n_items, W: items and
 * warps of the grid). Rows past the item's length are zero-filled. */
template <class T>
static __device__ __forceinline__ void gp_sx_issue(const gp_attn_args &a, gp_sx_prod &p, unsigned char *st, int lane,
                                                   int n_items, int W)
{
    const T *ak = static_cast<const T *>(a.k), *av = static_cast<const T *>(a.v);
    const unsigned ks = gp_smem_addr(st), vs = ks + SX_KV_BYTES;
    const long long slot_stride = (long long)a.n_kv * SX_HD, head_off = (long long)p.kvh * SX_HD;
    const int chunk = lane & 15, hi = lane >> 4;
    if ((a.block_size & (SX_TILE - 1)) == 0) {
        /* The tile is 16 slots of one block (every lane holds its number):
         * lane copies chunk `chunk` of rows hi, hi+2, ..., 14+hi, two
         * rows of 256 B per instruction, at one stride from each other. */
        const int slot0 = p.base - gp_attn_block_index(a, p.base) * a.block_size;
        const long long off = ((long long)p.blk * a.block_size + slot0 + hi) * slot_stride + head_off + chunk * 8;
        const T *kp = ak + off, *vp = av + off;
        if (p.blk >= 0 && p.base + SX_TILE <= p.len) {
            /* a full tile (the common case): no per-row checks, since the
             * copies' issue is much of what bounds a warp's rate */
#pragma unroll
            for (int i = 0; i < 8; i++) {
                gp_cp_async16_l2(ks + gp_sx_swz(2 * i + hi, chunk), kp, 16, p.l2);
                gp_cp_async16_l2(vs + gp_sx_swz(2 * i + hi, chunk), vp, 16, p.l2);
                kp += 2 * slot_stride;
                vp += 2 * slot_stride;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int row = 2 * i + hi;
                const bool ok = p.blk >= 0 && p.base + row < p.len;
                /* 0 bytes: zero-fill, the source is not read */
                gp_cp_async16_l2(ks + gp_sx_swz(row, chunk), ok ? kp : ak, ok ? 16 : 0, p.l2);
                gp_cp_async16_l2(vs + gp_sx_swz(row, chunk), ok ? vp : av, ok ? 16 : 0, p.l2);
                kp += 2 * slot_stride;
                vp += 2 * slot_stride;
            }
        }
    } else {
        /* Any block size: lane l resolves the row of token base + (l & 15);
         * the copies take their row's offset by shuffle. */
        const int t = p.base + chunk;
        long long off = -1;
        if (t < p.len && p.blk >= 0) {
            const int slot = t - gp_attn_block_index(a, t) * a.block_size;
            off = ((long long)p.blk * a.block_size + slot) * slot_stride + head_off;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int row = 2 * i + hi;
            const long long ro = __shfl_sync(0xffffffffu, off, row);
            const size_t src = ro >= 0 ? (size_t)ro + (size_t)chunk * 8 : 0;
            gp_cp_async16_l2(ks + gp_sx_swz(row, chunk), ak + src, ro >= 0 ? 16 : 0, p.l2);
            gp_cp_async16_l2(vs + gp_sx_swz(row, chunk), av + src, ro >= 0 ? 16 : 0, p.l2);
        }
    }
    if (p.base == 0) {
        /* the item's G query heads, contiguous in q: [G][128] */
        const T *qs = static_cast<const T *>(a.q) + ((size_t)p.b * a.n_heads + (size_t)p.kvh * a.group) * SX_HD;
        for (int j = lane; j < a.group * 16; j += 32)
            gp_cp_async16(vs + SX_KV_BYTES + j * 16, qs + j * 8, 16);
    }
    p.base += SX_TILE;
    if (p.base >= p.len) { /* an empty row still takes one (masked) tile */
        if (p.item + W < n_items)
            gp_sx_start(a, p, p.item + W, lane);
        else
            p.item = n_items; /* done */
    } else {
        gp_sx_load_block(a, p, lane);
    }
}

template <class T, int GT>
static __global__ void __launch_bounds__(SX_NW * 32, 6)
gp_decode_attn_stream_kernel(const gp_attn_args a)
{
    gp_pdl_wait();
    typedef gp_half_traits<T> TR;
    constexpr int ST = SX_ST;
    extern __shared__ __align__(128) unsigned char gp_sx_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gr = lane >> 2, tq = lane & 3; /* fragment row and column pair */
    const int n_items = a.B * a.n_kv, W = gridDim.x * SX_NW;
    const int gw = blockIdx.x * SX_NW + warp;
    if (gw >= n_items)
        return;
    unsigned char *ring = gp_sx_smem + (size_t)warp * ST * SX_STAGE_BYTES(GT);

    gp_sx_prod p;
    p.l2 = gp_l2_policy(a.kv_evict_first != 0);
    gp_sx_start(a, p, gw, lane);
    int next_len = p.len; /* the consumer's copy: the prologue may move p past a short item */
    /* the ring: one commit group per tile (empty past the last), so that
     * wait_group ST-1 always means "the oldest tile has landed" */
#pragma unroll
    for (int j = 0; j < ST - 1; j++) {
        if (p.item < n_items)
            gp_sx_issue<T>(a, p, ring + j * SX_STAGE_BYTES(GT), lane, n_items, W);
        asm volatile("cp.async.commit_group;\n");
    }
    int cs = 0; /* consumer's stage; the producer fills (cs + ST - 1) % ST */
    /* ldmatrix: the matrix mi and its row ri this lane addresses, as byte
     * offsets in a tile per k-step (K) and per 16 dims (V, transposed),
     * computed once rather than in every tile */
    const int mi = lane >> 3, ri = lane & 7;
    unsigned koff[8], voff[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        koff[j] = gp_sx_swz((mi & 1) * 8 + ri, j * 2 + (mi >> 1));
        voff[j] = gp_sx_swz((mi >> 1) * 8 + ri, j * 2 + (mi & 1));
    }
    for (int item = gw; item < n_items; item += W) {
        const int len = next_len;
        if (item + W < n_items)
            next_len = gp_attn_row_len(a, (item + W) / a.n_kv);
        const int tiles = len > 0 ? (len + SX_TILE - 1) / SX_TILE : 1;

        uint32_t qb[8][2];                 /* B fragments of q^T: head gr, dims kst*16 + 2tq (+8) */
        float o[8][4];                     /* O^T: dims dt*16 + gr (+8), heads 2tq, 2tq+1 */
        float m0 = -INFINITY, m1 = -INFINITY; /* running max of heads 2tq, 2tq+1 (log2 units) */
        float l0 = 0.0f, l1 = 0.0f;          /* this lane's share of their sums */
#pragma unroll
        for (int dt = 0; dt < 8; dt++)
            o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

        for (int tile = 0; tile < tiles; tile++) {
            if (p.item < n_items) {
                const int ps = cs == 0 ? ST - 1 : cs - 1; /* freed by the last iteration */
                gp_sx_issue<T>(a, p, ring + ps * SX_STAGE_BYTES(GT), lane, n_items, W);
            }
            asm volatile("cp.async.commit_group;\n");
            asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1) : "memory");
            __syncwarp();
            unsigned char *stg = ring + cs * SX_STAGE_BYTES(GT);
            const unsigned ks = gp_smem_addr(stg), vs = ks + SX_KV_BYTES;
            if (tile == 0) {
                const uint32_t *qs = reinterpret_cast<const uint32_t *>(stg + 2 * SX_KV_BYTES) + gr * (SX_HD / 2);
#pragma unroll
                for (int kst = 0; kst < 8; kst++) {
                    qb[kst][0] = gr < a.group ? qs[kst * 8 + tq] : 0u;
                    qb[kst][1] = gr < a.group ? qs[kst * 8 + 4 + tq] : 0u;
                }
            }

            /* S^T (16 tokens x 8 heads) = K q^T over 8 k-steps of 16 dims,
             * in two accumulators to halve the dependent mma chain. A
             * matrices: (tok 0-7, dims +0-7), (tok 8-15, +0-7), (tok 0-7,
             * +8-15), (tok 8-15, +8-15). */
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kst = 0; kst < 8; kst++) {
                uint32_t a0, a1, a2, a3;
                gp_ldsm_x4(ks + koff[kst], a0, a1, a2, a3);
                if (kst & 1)
                    TR::mma(sb, a0, a1, a2, a3, qb[kst][0], qb[kst][1]);
                else
                    TR::mma(sa, a0, a1, a2, a3, qb[kst][0], qb[kst][1]);
            }
            /* s[0], s[1]: token gr, heads 2tq, 2tq+1; s[2], s[3]: token gr+8 */
            const int base = tile * SX_TILE;
            float s[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int tok = base + gr + (j >> 1) * 8;
                s[j] = tok < len ? (sa[j] + sb[j]) * a.scale_log2 : -INFINITY;
            }
            /* per head: max over the tile's 16 tokens (lanes of equal tq) */
            float x0 = fmaxf(m0, fmaxf(s[0], s[2])), x1 = fmaxf(m1, fmaxf(s[1], s[3]));
#pragma unroll
            for (int sh = 4; sh < 32; sh <<= 1) {
                x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, sh));
                x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, sh));
            }
            const float ms0 = gp_safe_max(x0), ms1 = gp_safe_max(x1);
            const float c0 = exp2f(m0 - ms0), c1 = exp2f(m1 - ms1);
            const float p00 = exp2f(s[0] - ms0), p01 = exp2f(s[1] - ms1); /* token gr */
            const float p10 = exp2f(s[2] - ms0), p11 = exp2f(s[3] - ms1); /* token gr + 8 */
            l0 = fmaf(l0, c0, p00 + p10);
            l1 = fmaf(l1, c1, p01 + p11);
            m0 = x0;
            m1 = x1;
            /* once a head's max settles the factors are exactly 1 */
            if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
                for (int dt = 0; dt < 8; dt++) {
                    o[dt][0] *= c0;
                    o[dt][1] *= c1;
                    o[dt][2] *= c0;
                    o[dt][3] *= c1;
                }
            }
            /* P^T as the B operand (k = tokens, n = heads): the S^T
             * fragment holds (token, head pair); B wants (head, token
             * pair), its transpose per 8x8 block. p = hi + lo in two bf16
             * (or fp16) parts (16 significant bits; 22), as in decode_attn_mma.cu. */
            const uint32_t h0 = TR::pack2(p00, p01), h1 = TR::pack2(p10, p11);
            const uint32_t e0 = TR::pack2(p00 - TR::lo(h0), p01 - TR::hi(h0));
            const uint32_t e1 = TR::pack2(p10 - TR::lo(h1), p11 - TR::hi(h1));
            const uint32_t bh0 = gp_movmatrix_t(h0), bh1 = gp_movmatrix_t(h1);
            const uint32_t bl0 = gp_movmatrix_t(e0), bl1 = gp_movmatrix_t(e1);
            /* O^T += V^T P^T per 16 dims; transposed A matrices: (dims +0-7,
             * tok 0-7), (+8-15, tok 0-7), (+0-7, tok 8-15), (+8-15, tok 8-15) */
#pragma unroll
            for (int dt = 0; dt < 8; dt++) {
                uint32_t a0, a1, a2, a3;
                gp_ldsm_x4_t(vs + voff[dt], a0, a1, a2, a3);
                TR::mma(o[dt], a0, a1, a2, a3, bh0, bh1);
                TR::mma(o[dt], a0, a1, a2, a3, bl0, bl1);
            }
            __syncwarp(); /* every lane is done with this stage before it is refilled */
            cs = cs + 1 == ST ? 0 : cs + 1;
        }

        /* The item's output: sums over the 8 lanes of equal tq, then each
         * 8x8 (dims x heads) block transposed so that lane gr < G stores
         * dims 2tq, 2tq+1 of head gr as one 4-byte word. */
#pragma unroll
        for (int sh = 4; sh < 32; sh <<= 1) {
            l0 += __shfl_xor_sync(0xffffffffu, l0, sh);
            l1 += __shfl_xor_sync(0xffffffffu, l1, sh);
        }
        const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f; /* empty row: 0 */
        const int b = item / a.n_kv, kvh = item % a.n_kv;
        uint32_t *orow = reinterpret_cast<uint32_t *>(static_cast<T *>(a.out) +
                                                      ((size_t)b * a.n_heads + (size_t)kvh * a.group + gr) * SX_HD);
#pragma unroll
        for (int dt = 0; dt < 8; dt++) {
            const uint32_t lo = gp_movmatrix_t(TR::pack2(o[dt][0] * i0, o[dt][1] * i1));
            const uint32_t hi = gp_movmatrix_t(TR::pack2(o[dt][2] * i0, o[dt][3] * i1));
            if (gr < a.group) {
                orow[dt * 8 + tq] = lo;     /* dims dt*16 + 2tq, +1 */
                orow[dt * 8 + 4 + tq] = hi; /* dims dt*16 + 8 + 2tq, +1 */
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

static_assert(SX_SMEM_BYTES(8) <= 227 * 1024, "a CTA's rings must fit an SM's shared memory");

/* The kernel for the group with its shared memory bytes; the limit above the
 * default 48 KB and the carveout (all of the unified L1 the kernel can get,
 * since its rings are what bound the warps per SM) are set once per kernel. */
static gp_status gp_sx_kernel_for(gp_dtype dtype, int group, const void **kernel, int *smem)
{
    const int gi = group <= 4 ? 0 : 1, di = dtype == GP_DTYPE_F16 ? 1 : 0;
    if (di)
        *kernel = gi == 0 ? (const void *)gp_decode_attn_stream_kernel<__half, 4>
                          : (const void *)gp_decode_attn_stream_kernel<__half, 8>;
    else
        *kernel = gi == 0 ? (const void *)gp_decode_attn_stream_kernel<__nv_bfloat16, 4>
                          : (const void *)gp_decode_attn_stream_kernel<__nv_bfloat16, 8>;
    *smem = gi == 0 ? SX_SMEM_BYTES(4) : SX_SMEM_BYTES(8);
    static unsigned done[2][2];
    return gp_attn_smem_once(&done[di][gi], *kernel, *smem, true);
}

/* Queried once per kernel: gp_decode_attn asks on every call. */
gp_status gp_decode_attn_stream_occupancy(gp_dtype dtype, int group, int *warps_per_sm)
{
    const void *k;
    int smem, ctas = 0;
    GP_TRY(gp_sx_kernel_for(dtype, group, &k, &smem));
    static int cached[2][2];
    int *c = &cached[dtype == GP_DTYPE_F16 ? 1 : 0][group <= 4 ? 0 : 1];
    if (!(ctas = __atomic_load_n(c, __ATOMIC_ACQUIRE))) {
        GP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, k, SX_NW * 32, smem));
        __atomic_store_n(c, ctas, __ATOMIC_RELEASE);
    }
    *warps_per_sm = ctas * SX_NW;
    return GP_OK;
}

gp_status gp_decode_attn_stream_launch(const gp_attn_args *a, cudaStream_t stream)
{
    const void *k;
    int smem;
    GP_TRY(gp_sx_kernel_for(a->dtype, a->group, &k, &smem));
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)((a->stream_warps + SX_NW - 1) / SX_NW)), dim3(SX_NW * 32), smem, stream);
    void *args[] = {(void *)a};
    cudaError_t e = cudaLaunchKernelExC(&l.cfg, k, args);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_decode_attn_stream_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}
