/* Causal GQA prefill attention on Hopper tensor cores (wgmma), head_dim 128:
 * the same work and outputs as the mma.sync kernel of prefill_attn.cu, which
 * serves the other head sizes and devices (gp_prefill_attn picks). */
#include <stdint.h>

#include "cuda_util.cuh"
#include "decode_attn_dev.cuh"
#include "mma_dev.cuh"
#include "prefill_attn.cuh"

/* Why: the mma.sync kernel holds its two m16 tiles' softmax and matrix
 * products in the same warps, leaving the tensor pipe about half busy
 * (docs/PERFORMANCE.md). Here a warpgroup of 4 warps takes 64 query rows,
 * and q.k and p.v are single wgmma instructions that read q, K and V
 * straight from shared memory (no ldmatrix), while the other warpgroup of
 * the CTA and of the other resident CTA run their softmax.
 *
 * Layout: a CTA per (query head, 128 queries, sequence), two warpgroups.
 * Every tile in shared memory (q: 128 rows, K and V: 64 keys, of 128
 * dims) is stored as wgmma's "core matrices" without swizzling: 8 rows x
 * 16 bytes contiguous (128 B), the 16 chunks of a row group next to each
 * other (2 KB per group of 8 rows):
 *     byte (row, dims 8c..8c+7) = (row / 8) * 2048 + c * 128 + (row % 8) * 16.
 * q and K are K-major operands of q.k (K = the head dims): core matrices
 * 128 B apart along K, 2 KB apart along rows. V is the N-major B operand
 * of p.v (K = the keys, N = the dims; tnsp-b): 2 KB apart along keys,
 * 128 B apart along dims. */
#define WG_BM 128           /* query rows per CTA */
#define WG_BN 64            /* keys per K/V tile */
#define WG_HD 128
#define WG_THREADS 256      /* two warpgroups */
#define WG_GROUP_BYTES 2048 /* one group of 8 rows: 16 core matrices */
#define WG_TILE_BYTES (WG_BN / 8 * WG_GROUP_BYTES)
#define WG_Q_BYTES (WG_BM / 8 * WG_GROUP_BYTES)
#define WG_SMEM (WG_Q_BYTES + 2 * 2 * WG_TILE_BYTES) /* q, then K and V of two stages */
#define WG_RESCALE_SLACK 8.0f /* as the mma.sync kernel's: p < 2^8 */

/* The device code exists only in the sm_90a compilation (wgmma); elsewhere
 * the kernel is empty and gp_prefill_attn_wgmma_ready says 0. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE_CODE 1
#endif

#ifdef WG_DEVICE_CODE
/* byte offset of 16-byte chunk c of row r in a core-matrix tile */
static __device__ __forceinline__ uint32_t wg_off(int r, int c)
{
    return (uint32_t)((r >> 3) * WG_GROUP_BYTES + c * 128 + (r & 7) * 16);
}

/* The shared-memory matrix descriptor: start address, leading (K) and
 * stride (M/N) byte offsets between core matrices, no swizzle. */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32);
}

/* d[32] (+)= A (64 x 16, shared memory, desc a) x B (16 x 64, shared memory, K-major, desc b) */
static __device__ __forceinline__ void wg_mma_s(float (&d)[32], uint64_t a, uint64_t b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(accumulate));
}

/* d[64] += A (64 x 16, registers a0..a3 as mma.sync's A fragment) x B (16 x 128, shared memory,
 * N-major: tnsp-b 1, desc b) */
static __device__ __forceinline__ void wg_mma_pv(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Pins the accumulators at this point of the instruction stream: the
 * compiler sees the wgmma asm write them at issue, so without this it could
 * move their reads above the wait (or their writes below the issue). */
template <int N> static __device__ __forceinline__ void wg_pin(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

/* This thread's rows of a K/V tile: rows p * 16 + threadIdx.x / 16, chunk
 * threadIdx.x % 16. */
#define WG_ROWS (WG_BN / 16)

/* The block ids of this thread's rows of the tile at t0 (-1 past kv_end).
 * Fetched a tile ahead: the copies of a tile wait on them, and a lookup
 * issued right before its copies stalled every warp on the table's latency
 * at each tile (ncu: long-scoreboard stalls first). */
static __device__ __forceinline__ void wg_fetch_blocks(const pf_args &a, const int32_t *table, int t0, int kv_end,
                                                       int (&blk)[WG_ROWS])
{
#pragma unroll
    for (int p = 0; p < WG_ROWS; p++) {
        const int t = t0 + p * 16 + (int)(threadIdx.x >> 4);
        blk[p] = t < kv_end ? __ldg(table + (a.bs_shift >= 0 ? t >> a.bs_shift : t / a.block_size)) : -1;
    }
}

/* Keys [t0, t0 + WG_BN) of KV head kvh into the K and V tiles at ks/vs
 * (shared addresses), from the block ids of wg_fetch_blocks; keys past the
 * end zero-filled. */
static __device__ __forceinline__ void wg_load_tile(const pf_args &a, const int (&blk)[WG_ROWS], int t0, int kvh,
                                                    uint32_t ks, uint32_t vs)
{
    const int c = threadIdx.x & 15, rr = threadIdx.x >> 4;
#pragma unroll
    for (int p = 0; p < WG_ROWS; p++) {
        const int r = p * 16 + rr, t = t0 + r;
        size_t src = 0;
        int bytes = 0;
        if (blk[p] >= 0) {
            const int slot = a.bs_shift >= 0 ? t & (a.block_size - 1) : t % a.block_size;
            src = (((size_t)blk[p] * a.block_size + slot) * a.n_kv + kvh) * WG_HD + (size_t)c * 8;
            bytes = 16;
        }
        gp_cp_async16(ks + wg_off(r, c), a.k + src, bytes);
        gp_cp_async16(vs + wg_off(r, c), a.v + src, bytes);
    }
}

#endif /* WG_DEVICE_CODE */

static __global__ void __launch_bounds__(WG_THREADS, 2) gp_prefill_attn_wgmma_kernel(const pf_args a)
{
#ifdef WG_DEVICE_CODE
    extern __shared__ __align__(128) unsigned char gp_wg_smem[];
    const uint32_t qs = gp_smem_addr(gp_wg_smem), kvs = qs + WG_Q_BYTES;

    const gp_prefill_seq_desc d = a.seqs[blockIdx.z];
    const int m0 = (int)(gridDim.y - 1 - blockIdx.y) * WG_BM;
    if (m0 >= d.q_len)
        return; /* uniform over the CTA */
    const int h = blockIdx.x, kvh = h / a.group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2, gr = lane >> 2, tq = lane & 3;
    const size_t row_stride = (size_t)a.n_heads * WG_HD;

    const int q_last = min(m0 + WG_BM, d.q_len) - 1;
    const int kv_end = d.pos0 + q_last + 1;
    const int g0 = m0 + wg * 64;                         /* the warpgroup's first row */
    const bool g_active = g0 <= q_last;
    const int g_first = d.pos0 + g0, g_last = d.pos0 + min(g0 + 63, q_last);
    const int r0 = g0 + (warp & 3) * 16 + gr;            /* this lane's rows r0 and r0 + 8 */
    const int qp0 = d.pos0 + r0;

    {   /* the q tile; rows past q_len zero-filled */
        const int c = threadIdx.x & 15, rr = threadIdx.x >> 4;
        for (int r = rr; r < WG_BM; r += 16) {
            const bool ok = m0 + r < d.q_len;
            const __nv_bfloat16 *src = a.q + (size_t)(d.q_start + (ok ? m0 + r : 0)) * row_stride + (size_t)h * WG_HD + c * 8;
            gp_cp_async16(qs + wg_off(r, c), src, ok ? 16 : 0);
        }
    }
    const int32_t *table = a.tables + (size_t)d.table_row * a.max_blocks;
    const int n_tiles = (kv_end + WG_BN - 1) / WG_BN;
    int blk[WG_ROWS];
    wg_fetch_blocks(a, table, 0, kv_end, blk);
    wg_load_tile(a, blk, 0, kvh, kvs, kvs + WG_TILE_BYTES);
    asm volatile("cp.async.commit_group;\n");
    if (n_tiles > 1)
        wg_fetch_blocks(a, table, WG_BN, kv_end, blk);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f}; /* rows r0, r0 + 8 */
    const uint32_t q_base = qs + (uint32_t)wg * (64 / 8) * WG_GROUP_BYTES;

    for (int j = 0; j < n_tiles; j++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads(); /* tile j visible to all; everyone is done with tile j - 1's buffer */
        /* the tiles were written through the generic proxy; wgmma reads them through the async one */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (j + 1 < n_tiles) {
            const uint32_t nk = kvs + (uint32_t)((j + 1) & 1) * 2 * WG_TILE_BYTES;
            wg_load_tile(a, blk, (j + 1) * WG_BN, kvh, nk, nk + WG_TILE_BYTES);
            asm volatile("cp.async.commit_group;\n");
            if (j + 2 < n_tiles) /* in flight while tile j is computed */
                wg_fetch_blocks(a, table, (j + 2) * WG_BN, kv_end, blk);
        }
        const int t0 = j * WG_BN;
        if (!g_active || t0 > g_last)
            continue; /* uniform over the warpgroup */
        const uint32_t ks = kvs + (uint32_t)(j & 1) * 2 * WG_TILE_BYTES, vs = ks + WG_TILE_BYTES;
        float s[32];
        wg_pin(o);
        wg_fence();
#pragma unroll
        for (int kst = 0; kst < WG_HD / 16; kst++)
            wg_mma_s(s, wg_desc(q_base + kst * 256, 128, WG_GROUP_BYTES), wg_desc(ks + kst * 256, 128, WG_GROUP_BYTES),
                     kst > 0);
        wg_commit();
        wg_wait0();
        wg_pin(s);
        /* s[4i + c]: row r0 + 8 (c >> 1), key t0 + 8i + 2tq + (c & 1) */
        if (t0 + WG_BN - 1 > g_first) {
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (t0 + 8 * i + 2 * tq + (c & 1) > qp0 + (c >> 1) * 8)
                        s[4 * i + c] = -INFINITY;
        }
        float mx[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float v = -INFINITY;
#pragma unroll
            for (int i = 0; i < 8; i++)
                v = fmaxf(v, fmaxf(s[4 * i + 2 * hr], s[4 * i + 2 * hr + 1]));
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
            mx[hr] = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
        }
        const bool keep = __all_sync(0xffffffffu, m_r[0] != -INFINITY && m_r[1] != -INFINITY &&
                                                      (mx[0] - m_r[0]) * a.scale_log2 <= WG_RESCALE_SLACK &&
                                                      (mx[1] - m_r[1]) * a.scale_log2 <= WG_RESCALE_SLACK);
        float ms[2], corr[2] = {1.0f, 1.0f};
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            if (!keep) {
                const float m_new = fmaxf(m_r[hr], mx[hr]);
                ms[hr] = gp_safe_max(m_new) * a.scale_log2;
                corr[hr] = pf_exp2(fmaf(m_r[hr], a.scale_log2, -ms[hr]));
                m_r[hr] = m_new;
            } else {
                ms[hr] = m_r[hr] * a.scale_log2;
            }
        }
        /* p rounded to bf16 (the mma.sync kernel's rule); pk[i][hr]: the pair of row hr, keys 8i + 2tq */
        uint32_t pk[8][2];
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                pk[i][hr] = gp_pack_bf16x2(pf_exp2(fmaf(s[4 * i + 2 * hr], a.scale_log2, -ms[hr])),
                                           pf_exp2(fmaf(s[4 * i + 2 * hr + 1], a.scale_log2, -ms[hr])));
                sum[hr] += gp_bf16_lo(pk[i][hr]) + gp_bf16_hi(pk[i][hr]);
            }
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
            l_r[hr] = fmaf(l_r[hr], corr[hr], sum[hr]);
        if (!keep) {
#pragma unroll
            for (int i = 0; i < 16; i++) {
                o[4 * i] *= corr[0];
                o[4 * i + 1] *= corr[0];
                o[4 * i + 2] *= corr[1];
                o[4 * i + 3] *= corr[1];
            }
        }
        wg_pin(o);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BN / 16; kk++) /* keys 16kk..16kk+15: key n-tiles 2kk and 2kk + 1 */
            wg_mma_pv(o, pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1],
                      wg_desc(vs + kk * 2 * WG_GROUP_BYTES, WG_GROUP_BYTES, 128));
        wg_commit();
        wg_wait0();
        wg_pin(o);
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float l = l_r[hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int r = r0 + hr * 8;
        if (!g_active || r >= d.q_len)
            continue;
        __nv_bfloat16 *dst = a.out + (size_t)(d.q_start + r) * row_stride + (size_t)h * WG_HD + 2 * tq;
#pragma unroll
        for (int i = 0; i < 16; i++) /* o[4i + 2hr + {0, 1}]: dims 8i + 2tq + {0, 1} */
            *reinterpret_cast<__nv_bfloat162 *>(dst + i * 8) =
                __floats2bfloat162_rn(o[4 * i + 2 * hr] * inv, o[4 * i + 2 * hr + 1] * inv);
    }
#endif
}

int gp_prefill_attn_wgmma_ready(void)
{
#ifdef GP_HAVE_WGMMA
    static int ready = -1; /* the device does not change under a running process */
    if (ready < 0) {
        int dev = 0, major = 0, minor = 0;
        ready = cudaGetDevice(&dev) == cudaSuccess &&
                cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                major == 9 && minor == 0;
        (void)cudaGetLastError();
    }
    return ready;
#else
    return 0;
#endif
}

gp_status gp_prefill_attn_wgmma_launch(const pf_args &a, int n_seqs, int max_q_len, cudaStream_t stream)
{
    static int done;
    const void *k = (const void *)gp_prefill_attn_wgmma_kernel;
    GP_TRY(gp_attn_smem_once(&done, k, WG_SMEM, false));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)a.n_heads, (unsigned)((max_q_len + WG_BM - 1) / WG_BM), (unsigned)n_seqs);
    cfg.blockDim = dim3(WG_THREADS);
    cfg.dynamicSmemBytes = WG_SMEM;
    cfg.stream = stream;
    void *args[] = {(void *)&a};
    cudaError_t e = cudaLaunchKernelExC(&cfg, k, args);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, "gp_prefill_attn_wgmma_kernel launch", __FILE__, __LINE__);
    return GP_OK;
}
