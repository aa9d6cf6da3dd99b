/* Causal GQA prefill attention on Hopper, head_dim 128, after
 * FlashAttention-3's design: a producer warpgroup copies K/V tiles into a
 * ring in shared memory while two consumer warpgroups run q.k and p.v as
 * wgmma; the same work and outputs as the mma.sync kernel of
 * prefill_attn.cu, which serves the other head sizes and devices
 * (gp_prefill_attn picks). */
#include <stdint.h>

#include "cuda_util.cuh"
#include "decode_attn_dev.cuh"
#include "mma_dev.cuh"
#include "prefill_attn.cuh"

/* Why this shape: a kernel whose warps both copy and compute (the mma.sync
 * kernel, and a wgmma kernel on its plan) runs each tile as one serial chain
 * (barrier, copies landed, q.k, softmax, p.v) and left the tensor pipe a
 * third to a half busy (docs/PERFORMANCE.md). Here
 *  - warpgroup 0 only copies: the q tile once, then K and V tiles of 128
 *    keys from the paged cache into a ring of WS_STAGES slots (cp.async, an
 *    mbarrier per slot that the copies themselves complete), a slot refilled
 *    as soon as both consumers released it;
 *  - warpgroups 1 and 2 each own 64 query rows. Inside each, tile j's q.k
 *    is issued together with tile j - 1's p.v, and tile j's softmax runs
 *    while that p.v is still on the tensor cores; the two take turns at
 *    issuing (ws_turn_wait). A slot is released only after its V's p.v, a
 *    tile later than its K's q.k, hence three slots: two would leave the
 *    copy of each tile no time ahead of its use.
 * Registers move from the producer to the consumers (setmaxnreg): 64 fp32
 * scores, 64 fp32 outputs and the previous tile's 32 packed probabilities
 * per thread.
 *
 * Every tile in shared memory (q: 128 rows, K and V: 128 keys, of 128
 * dims) is stored in wgmma's 128-byte swizzled layout: two halves of 64
 * dims, each row of a half 128 contiguous bytes whose 16-byte chunks are
 * permuted by the row's index mod 8 (ws_off), halves and tiles on 1024-byte
 * boundaries. q and K are K-major operands of q.k (K = the head dims; a
 * k-step of 16 dims starts 32 bytes further into the rows); V is the
 * N-major B operand of p.v (K = the keys, N = the dims; tnsp-b; the
 * leading offset is the distance to the other half). With this layout a
 * copy warp reads two whole 256-byte cache rows and writes four 128-byte
 * rows of a tile, one bank each per lane; the unswizzled core-matrix
 * layout spreads each cache row over four warps' copies, at about two
 * thirds of this speed (docs/PERFORMANCE.md).
 *
 * Numerics are the mma.sync kernel's: fp32 scores and outputs, p rounded to
 * the element type as it enters p.v, the denominator summing the rounded
 * values, the reference max moved only past PF_RESCALE_SLACK. */
#define WS_BM 128           /* query rows per CTA: 64 per consumer warpgroup */
#define WS_BN 128           /* keys per K/V tile */
#define WS_HD 128
#define WS_STAGES 3         /* ring slots: 32 KB of q + 64 KB a slot */
#define WS_THREADS 384      /* the producer and two consumer warpgroups */
#define WS_ROW_BYTES 128    /* a row of one half (64 dims) of a tile */
#define WS_TILE_BYTES (WS_BN * 2 * WS_ROW_BYTES)
#define WS_Q_BYTES (WS_BM * 2 * WS_ROW_BYTES)
#define WS_BAR_OFF (WS_Q_BYTES + WS_STAGES * 2 * WS_TILE_BYTES)
#define WS_SMEM (WS_BAR_OFF + 8 * (1 + 2 * WS_STAGES) + 1024) /* + the mbarriers, + alignment */
#define WS_PRODUCER_REGS 72 /* setmaxnreg: the CTA keeps the registers it launched with */
#define WS_CONSUMER_REGS 216
/* 168 registers a thread at launch (384 threads, one CTA an SM); more asked
 * for than the CTA holds would leave setmaxnreg.inc waiting forever */
static_assert(128 * WS_PRODUCER_REGS + 256 * WS_CONSUMER_REGS <= 168 * WS_THREADS, "setmaxnreg budget");

/* The device code exists only in the sm_90a compilation (wgmma,
 * setmaxnreg); elsewhere the kernel is empty and gp_prefill_attn_ws_ready
 * says 0. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WS_DEVICE_CODE 1
#endif

#ifdef WS_DEVICE_CODE
/* The 64 fp32 accumulators of an m64n128 product: operand names, and their
 * constraints (c: "+f" to accumulate, "=f" to overwrite). */
#define WS_ACC64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define WS_OUT64(c, d) \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), \
    c(d[7]), c(d[8]), c(d[9]), c(d[10]), c(d[11]), c(d[12]), c(d[13]), \
    c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]), \
    c(d[21]), c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]), \
    c(d[28]), c(d[29]), c(d[30]), c(d[31]), c(d[32]), c(d[33]), c(d[34]), \
    c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), c(d[40]), c(d[41]), \
    c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), c(d[48]), \
    c(d[49]), c(d[50]), c(d[51]), c(d[52]), c(d[53]), c(d[54]), c(d[55]), \
    c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]), c(d[62]), \
    c(d[63])

/* The shared-memory matrix descriptor: start address, leading and stride
 * byte offsets, 128-byte swizzle. */
static __device__ __forceinline__ uint64_t ws_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/* Byte offset of dims 8c..8c+7 of row r in a tile of `rows` rows. */
static __device__ __forceinline__ uint32_t ws_off(int r, int c, int rows)
{
    return (uint32_t)((c >> 3) * rows * WS_ROW_BYTES + r * WS_ROW_BYTES + (((c & 7) ^ (r & 7)) << 4));
}

/* d[64] (+)= A (64 x 16, shared memory, K-major, desc a) x B (16 x 128,
 * shared memory, K-major, desc b); ACC false overwrites d, and tells the
 * compiler its old values are dead (with "+f" it kept them live across the
 * products, and ptxas serialized the wgmma pipeline for want of registers). */
template <bool BF16, bool ACC>
static __device__ __forceinline__ void ws_mma_ss(float (&d)[64], uint64_t a, uint64_t b)
{
    if (BF16 && ACC)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WS_ACC64 "}, %64, %65, 1, 1, 1, 0, 0;\n"
                     : WS_OUT64("+f", d)
                     : "l"(a), "l"(b));
    else if (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WS_ACC64 "}, %64, %65, 0, 1, 1, 0, 0;\n"
                     : WS_OUT64("=f", d)
                     : "l"(a), "l"(b));
    else if (ACC)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WS_ACC64 "}, %64, %65, 1, 1, 1, 0, 0;\n"
                     : WS_OUT64("+f", d)
                     : "l"(a), "l"(b));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WS_ACC64 "}, %64, %65, 0, 1, 1, 0, 0;\n"
                     : WS_OUT64("=f", d)
                     : "l"(a), "l"(b));
}

/* d[64] += A (64 x 16 in registers, a0..a3 as mma.sync's A fragment) x B
 * (16 x 128, shared memory, N-major: tnsp-b 1, desc b). */
template <bool BF16>
static __device__ __forceinline__ void ws_mma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint64_t b)
{
    if (BF16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WS_ACC64 "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                     : WS_OUT64("+f", d)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WS_ACC64 "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                     : WS_OUT64("+f", d)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

static __device__ __forceinline__ void ws_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void ws_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void ws_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Pins registers at this point of the instruction stream: the compiler sees
 * a wgmma asm read or write them at its issue, so without this it could
 * move their reads above the wait that completes them, or reuse the
 * registers of an A operand still being read. */
template <int N> static __device__ __forceinline__ void ws_pin(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}
/* The packed p in the first half of a score array (the rest is dead). */
static __device__ __forceinline__ void ws_pin_p(float (&r)[64])
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

static __device__ __forceinline__ void ws_bar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void ws_bar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* The barrier's arrival from this thread once all of its earlier cp.async
 * copies have landed (counted in the barrier's expected arrivals). */
static __device__ __forceinline__ void ws_bar_arrive_copies(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void ws_bar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* The descriptors of a tile's products are computed before the wgmma.fence
 * that starts them (and pinned there), so that no instruction defining an
 * input of a wgmma sits between the products (ptxas serializes the
 * pipeline for that: its report C7513). */

/* q.k's: q (64 rows at q_base) against the K tile at ks, one pair per 16 dims */
static __device__ __forceinline__ void ws_qk_descs(uint64_t (&qd)[WS_HD / 16], uint64_t (&kd)[WS_HD / 16],
                                                   uint32_t q_base, uint32_t ks)
{
#pragma unroll
    for (int kst = 0; kst < WS_HD / 16; kst++) {
        /* 16 dims = 32 bytes into a swizzled row; SBO: 8 rows */
        qd[kst] = ws_desc(q_base + (kst >> 2) * WS_BM * WS_ROW_BYTES + (kst & 3) * 32, 16, 8 * WS_ROW_BYTES);
        kd[kst] = ws_desc(ks + (kst >> 2) * WS_BN * WS_ROW_BYTES + (kst & 3) * 32, 16, 8 * WS_ROW_BYTES);
        asm volatile("" : "+l"(qd[kst]), "+l"(kd[kst]));
    }
}

/* p.v's: the V tile at vs, one per 16 keys */
static __device__ __forceinline__ void ws_pv_descs(uint64_t (&vd)[WS_BN / 16], uint32_t vs)
{
#pragma unroll
    for (int kk = 0; kk < WS_BN / 16; kk++) {
        /* 16 keys = 16 rows; LBO: the other half of the dims, SBO: 8 rows */
        vd[kk] = ws_desc(vs + kk * 16 * WS_ROW_BYTES, WS_BN * WS_ROW_BYTES, 8 * WS_ROW_BYTES);
        asm volatile("" : "+l"(vd[kk]));
    }
}

/* s (64 x 128 fp32) = q . K^T */
template <bool BF16>
static __device__ __forceinline__ void ws_qk(float (&s)[64], const uint64_t (&qd)[WS_HD / 16], const uint64_t (&kd)[WS_HD / 16])
{
    ws_mma_ss<BF16, false>(s, qd[0], kd[0]);
#pragma unroll
    for (int kst = 1; kst < WS_HD / 16; kst++)
        ws_mma_ss<BF16, true>(s, qd[kst], kd[kst]);
}

/* o += p . V; p as packed pairs (ws_softmax's), keys 16kk..16kk+15 in
 * p[4kk .. 4kk + 3] */
template <bool BF16>
static __device__ __forceinline__ void ws_pv(float (&o)[64], const float (&p)[64], const uint64_t (&vd)[WS_BN / 16])
{
#pragma unroll
    for (int kk = 0; kk < WS_BN / 16; kk++)
        ws_mma_rs<BF16>(o, __float_as_uint(p[4 * kk]), __float_as_uint(p[4 * kk + 1]), __float_as_uint(p[4 * kk + 2]),
                        __float_as_uint(p[4 * kk + 3]), vd[kk]);
}

/* A lane's two rows' softmax state: reference max of the raw scores, sum of p. */
typedef struct ws_softmax_state {
    float m[2], l[2];
} ws_softmax_state;

/* The tile at key t0: scores s[4i + c] (row qp0 + 8 (c >> 1), key t0 + 8i +
 * 2tq + (c & 1)) masked past each row's position, the reference max moved
 * if needed (corr: the factor for the output so far; returns whether no
 * row of the warp moved it), p packed into s[2i + hr] (row hr's pair of
 * keys 8i + 2tq), the sums updated. */
template <class T>
static __device__ __forceinline__ bool ws_softmax(float (&s)[64], ws_softmax_state &st, float (&corr)[2], int t0,
                                                  int g_first, int qp0, int tq, float scale_log2)
{
    typedef gp_half_traits<T> TR;
    if (t0 + WS_BN - 1 > g_first) { /* the tile crosses some row's diagonal */
#pragma unroll
        for (int i = 0; i < WS_BN / 8; i++)
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
        for (int i = 0; i < WS_BN / 8; i++)
            v = fmaxf(v, fmaxf(s[4 * i + 2 * hr], s[4 * i + 2 * hr + 1]));
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
        mx[hr] = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    }
    const bool keep = __all_sync(0xffffffffu, st.m[0] != -INFINITY && st.m[1] != -INFINITY &&
                                                  (mx[0] - st.m[0]) * scale_log2 <= PF_RESCALE_SLACK &&
                                                  (mx[1] - st.m[1]) * scale_log2 <= PF_RESCALE_SLACK);
    float ms[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        corr[hr] = 1.0f;
        if (!keep) {
            const float m_new = fmaxf(st.m[hr], mx[hr]);
            ms[hr] = gp_safe_max(m_new) * scale_log2;
            corr[hr] = pf_exp2(fmaf(st.m[hr], scale_log2, -ms[hr]));
            st.m[hr] = m_new;
        } else {
            ms[hr] = st.m[hr] * scale_log2;
        }
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < WS_BN / 8; i++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) { /* slot 2i + hr was read at step i / 2 or earlier */
            const uint32_t v = TR::pack2(pf_exp2(fmaf(s[4 * i + 2 * hr], scale_log2, -ms[hr])),
                                         pf_exp2(fmaf(s[4 * i + 2 * hr + 1], scale_log2, -ms[hr])));
            sum[hr] += TR::lo(v) + TR::hi(v);
            s[2 * i + hr] = __uint_as_float(v);
        }
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        st.l[hr] = fmaf(st.l[hr], corr[hr], sum[hr]);
    return keep;
}

/* The block ids of this thread's rows of tile j (rows 8p + r0; keys past
 * kv_end read the last key's id, their copies being zero-filled): straight
 * loads, all in flight at once (behind branches, such as a per-row bounds
 * check or division choice, each load's latency is paid in turn, and the
 * consumers wait on the producer). */
template <bool POW2>
static __device__ __forceinline__ void ws_block_ids(const pf_args &a, const int32_t *table, int j, int kv_end, int r0,
                                                    int (&blk)[WS_BN / 8])
{
#pragma unroll
    for (int p = 0; p < WS_BN / 8; p++) {
        const int t = min(j * WS_BN + 8 * p + r0, kv_end - 1);
        blk[p] = __ldg(table + (POW2 ? t >> a.bs_shift : t / a.block_size));
    }
}

/* The producer: the q tile, then every K/V tile of the CTA into the ring.
 * Lane l of warp w copies chunk l % 16 of rows 8p + 2w + l / 16, p = 0..15,
 * of each tile: a warp reads two whole 256-byte rows per copy, and its
 * stores fill four 128-byte rows of the swizzled tile, one bank each per
 * lane. The next tile's block ids
 * are loaded while it waits for a free slot. POW2: block_size is
 * 1 << a.bs_shift. */
template <class T, bool POW2>
static __device__ __forceinline__ void ws_produce(const pf_args &a, const gp_prefill_seq_desc &d, int m0, int h,
                                                  int kvh, int kv_end, int n_tiles, uint32_t qs, uint32_t kvs,
                                                  uint32_t bars)
{
    const int c = threadIdx.x & 15, r0 = ((threadIdx.x >> 5) << 1) + ((threadIdx.x >> 4) & 1);
    const size_t row_stride = (size_t)a.n_heads * WS_HD;
    const T *q = static_cast<const T *>(a.q);
    const T *kc = static_cast<const T *>(a.k) + (size_t)kvh * WS_HD + c * 8;
    const T *vc = static_cast<const T *>(a.v) + (size_t)kvh * WS_HD + c * 8;
    const size_t tok_stride = (size_t)a.n_kv * WS_HD; /* elements between a head's rows of two cache slots */
#pragma unroll
    for (int p = 0; p < WS_BM / 8; p++) { /* rows past q_len zero-filled */
        const int r = 8 * p + r0;
        const bool ok = m0 + r < d.q_len;
        gp_cp_async16(qs + ws_off(r, c, WS_BM),
                      q + (size_t)(d.q_start + (ok ? m0 + r : 0)) * row_stride + (size_t)h * WS_HD + c * 8, ok ? 16 : 0);
    }
    ws_bar_arrive_copies(bars);
    const int32_t *table = a.tables + (size_t)d.table_row * a.max_blocks;
    int blk[WS_BN / 8];
    ws_block_ids<POW2>(a, table, 0, kv_end, r0, blk);
    for (int j = 0; j < n_tiles; j++) {
        const int s = j % WS_STAGES;
        if (j >= WS_STAGES) /* both consumers are done with the slot's previous tile */
            ws_bar_wait(bars + 8 * (1 + WS_STAGES + s), (uint32_t)((j / WS_STAGES - 1) & 1));
        const uint32_t ks = kvs + (uint32_t)s * 2 * WS_TILE_BYTES, vs = ks + WS_TILE_BYTES;
#pragma unroll
        for (int p = 0; p < WS_BN / 8; p++) { /* keys past kv_end zero-filled; their source is not read */
            const int t = j * WS_BN + 8 * p + r0;
            const int slot = POW2 ? t & (a.block_size - 1) : t % a.block_size;
            const size_t e = ((size_t)blk[p] * a.block_size + slot) * tok_stride;
            const bool ok = t < kv_end;
            const uint32_t off = ws_off(8 * p + r0, c, WS_BN);
            gp_cp_async16(ks + off, kc + (ok ? e : 0), ok ? 16 : 0);
            gp_cp_async16(vs + off, vc + (ok ? e : 0), ok ? 16 : 0);
        }
        ws_bar_arrive_copies(bars + 8 * (1 + s));
        if (j + 1 < n_tiles)
            ws_block_ids<POW2>(a, table, j + 1, kv_end, r0, blk);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* What a consumer warpgroup's rounds share. */
typedef struct ws_consumer {
    uint32_t q_base, kvs, full, empty; /* its q rows, the ring, the ring's barriers */
    int n_mine, n_tiles;               /* tiles with its keys; tiles of the CTA */
    int cw, lane, tq, g_first, qp0;    /* qp0: the position of the lane's first row */
    float scale_log2;
} ws_consumer;

/* The two consumers take turns at issuing their products (FlashAttention-3's
 * ping-pong): consumer w waits on named barrier 1 + w, issues, then lets the
 * other go. The tensor cores then run one consumer's q.k and p.v while the
 * other computes its softmax, instead of both softmaxes falling together. */
static __device__ __forceinline__ void ws_turn_wait(int cw)
{
    asm volatile("bar.sync %0, 256;\n" ::"r"(1 + cw) : "memory");
}
static __device__ __forceinline__ void ws_turn_pass(int cw)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - cw) : "memory");
}

/* A consumer's rounds r = 0 .. n_tiles, each with one turn at issuing
 * products (so the two consumers' turns pair up): the first (q.k of tile
 * 0), the steady ones, the last (p.v of its last tile), and byes once its
 * tiles are done. The tiles past its last query are released as they land.
 * The kinds are separate functions, not branches of one: ptxas serializes
 * every wgmma of the kernel when products are issued or waited for under
 * conditions. */

/* Waits for tile r's slot to fill; true when it is one. */
static __device__ __forceinline__ bool ws_tile_landed(const ws_consumer &c, int r)
{
    if (r >= c.n_tiles)
        return false;
    ws_bar_wait(c.full + 8 * (r % WS_STAGES), (uint32_t)((r / WS_STAGES) & 1));
    /* the tiles were written through the generic proxy; wgmma reads them through the async one */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    return true;
}

static __device__ __forceinline__ void ws_release(const ws_consumer &c, int r)
{
    if (c.lane == 0) /* after this warp's reads of the slot */
        ws_bar_arrive(c.empty + 8 * (r % WS_STAGES));
}

/* Consumer 1 passes no turn after the last round: none is waited for. */
static __device__ __forceinline__ void ws_turn_end(const ws_consumer &c, int r)
{
    if (c.cw == 0 || r < c.n_tiles)
        ws_turn_pass(c.cw);
}

static __device__ __forceinline__ void ws_round_bye(const ws_consumer &c, int r)
{
    const bool landed = ws_tile_landed(c, r);
    ws_turn_wait(c.cw);
    ws_turn_end(c, r);
    if (landed)
        ws_release(c, r);
}

/* Round 0: q.k of tile 0 into s, its softmax. */
template <class T>
static __device__ __forceinline__ void ws_round_first(const ws_consumer &c, float (&s)[64], ws_softmax_state &st)
{
    typedef gp_half_traits<T> TR;
    ws_tile_landed(c, 0);
    uint64_t qd[WS_HD / 16], kd[WS_HD / 16];
    ws_qk_descs(qd, kd, c.q_base, c.kvs);
    ws_turn_wait(c.cw);
    ws_fence();
    ws_qk<TR::is_bf16>(s, qd, kd);
    ws_commit();
    ws_turn_end(c, 0);
    ws_wait<0>();
    ws_pin(s);
    float corr[2];
    ws_softmax<T>(s, st, corr, 0, c.g_first, c.qp0, c.tq, c.scale_log2);
}

/* Round r (1 .. n_mine - 1): q.k of tile r into sc, issued beside the p.v of
 * tile r - 1 (p packed in sp, ws_softmax's); tile r's softmax while that
 * p.v runs; then tile r - 1's slot released and the output rescaled. Two
 * score arrays alternate between rounds, so no copy of p sits between the
 * products (ptxas serializes every wgmma of the kernel when one does). */
template <class T>
static __device__ __forceinline__ void ws_round(const ws_consumer &c, int r, float (&sc)[64], float (&sp)[64],
                                                float (&o)[64], ws_softmax_state &st)
{
    typedef gp_half_traits<T> TR;
    ws_tile_landed(c, r);
    uint64_t qd[WS_HD / 16], kd[WS_HD / 16], vd[WS_BN / 16];
    ws_qk_descs(qd, kd, c.q_base, c.kvs + (uint32_t)(r % WS_STAGES) * 2 * WS_TILE_BYTES);
    ws_pv_descs(vd, c.kvs + (uint32_t)((r - 1) % WS_STAGES) * 2 * WS_TILE_BYTES + WS_TILE_BYTES);
    ws_pin(o);
    ws_pin_p(sp);
    ws_turn_wait(c.cw);
    ws_fence();
    ws_qk<TR::is_bf16>(sc, qd, kd);
    ws_commit();
    ws_pv<TR::is_bf16>(o, sp, vd);
    ws_commit();
    ws_turn_end(c, r);
    ws_wait<1>();
    ws_pin(sc);
    float corr[2];
    const bool keep = ws_softmax<T>(sc, st, corr, r * WS_BN, c.g_first, c.qp0, c.tq, c.scale_log2);
    /* the softmax's results pinned before the wait: register arithmetic may
     * otherwise sink below it, and the overlap with p.v is lost */
    ws_pin_p(sc);
    ws_wait<0>();
    ws_pin(o);
    ws_pin_p(sp);
    ws_release(c, r - 1);
    if (!keep) {
#pragma unroll
        for (int i = 0; i < 16; i++) {
            o[4 * i] *= corr[0];
            o[4 * i + 1] *= corr[0];
            o[4 * i + 2] *= corr[1];
            o[4 * i + 3] *= corr[1];
        }
    }
}

/* Round r = n_mine: the p.v of its last tile (p packed in sp). */
template <class T>
static __device__ __forceinline__ void ws_round_last(const ws_consumer &c, int r, float (&sp)[64], float (&o)[64])
{
    typedef gp_half_traits<T> TR;
    const bool landed = ws_tile_landed(c, r);
    uint64_t vd[WS_BN / 16];
    ws_pv_descs(vd, c.kvs + (uint32_t)((r - 1) % WS_STAGES) * 2 * WS_TILE_BYTES + WS_TILE_BYTES);
    ws_pin(o);
    ws_pin_p(sp);
    ws_turn_wait(c.cw);
    ws_fence();
    ws_pv<TR::is_bf16>(o, sp, vd);
    ws_commit();
    ws_turn_end(c, r);
    ws_wait<0>();
    ws_pin(o);
    ws_pin_p(sp);
    ws_release(c, r - 1);
    if (landed)
        ws_release(c, r);
}

/* A consumer warpgroup (cw 0 or 1: rows m0 + 64 cw ..): every tile of the
 * ring in turn, in rounds paired with the other consumer's. */
template <class T>
static __device__ __forceinline__ void ws_consume(const pf_args &a, const gp_prefill_seq_desc &d, int cw, int m0,
                                                  int h, int q_last, int n_tiles, uint32_t qs, uint32_t kvs,
                                                  uint32_t bars)
{
    typedef gp_half_traits<T> TR;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int gr = lane >> 2, tq = lane & 3;
    const int g0 = m0 + cw * 64;  /* the warpgroup's first row */
    const bool g_active = g0 <= q_last;
    const int g_last = d.pos0 + min(g0 + 63, q_last);
    const int r0 = g0 + warp * 16 + gr; /* this lane's rows r0 and r0 + 8 */
    ws_consumer c;
    c.q_base = qs + (uint32_t)cw * 64 * WS_ROW_BYTES;
    c.kvs = kvs;
    c.full = bars + 8;
    c.empty = bars + 8 * (1 + WS_STAGES);
    c.n_mine = g_active ? g_last / WS_BN + 1 : 0; /* tiles with a key at or before g_last */
    c.n_tiles = n_tiles;
    c.cw = cw;
    c.lane = lane;
    c.tq = tq;
    c.g_first = d.pos0 + g0;
    c.qp0 = d.pos0 + r0;
    c.scale_log2 = a.scale_log2;

    float o[64], s0[64], s1[64]; /* tile r's scores, then its p, in s0 (r even) or s1 (r odd) */
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    ws_softmax_state st = {{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
    if (cw == 1) /* consumer 0 takes the first turn */
        ws_turn_pass(cw);
    int r = 0;
    if (c.n_mine > 0) {
        ws_bar_wait(bars, 0u); /* the q tile */
        ws_round_first<T>(c, s0, st);
        for (r = 1; r + 1 < c.n_mine; r += 2) {
            ws_round<T>(c, r, s1, s0, o, st);
            ws_round<T>(c, r + 1, s0, s1, o, st);
        }
        if (r < c.n_mine) {
            ws_round<T>(c, r, s1, s0, o, st);
            ws_round_last<T>(c, r + 1, s1, o);
            r += 2;
        } else {
            ws_round_last<T>(c, r, s0, o);
            r += 1;
        }
    }
    for (; r <= n_tiles; r++)
        ws_round_bye(c, r);
    if (!g_active)
        return;

    const size_t row_stride = (size_t)a.n_heads * WS_HD;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float l = st.l[hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int r = r0 + hr * 8;
        if (r >= d.q_len)
            continue;
        T *dst = static_cast<T *>(a.out) + (size_t)(d.q_start + r) * row_stride + (size_t)h * WS_HD + 2 * tq;
#pragma unroll
        for (int i = 0; i < 16; i++) /* o[4i + 2hr + {0, 1}]: dims 8i + 2tq + {0, 1} */
            *reinterpret_cast<typename TR::T2 *>(dst + i * 8) =
                TR::from_float2(o[4 * i + 2 * hr] * inv, o[4 * i + 2 * hr + 1] * inv);
    }
}
#endif /* WS_DEVICE_CODE */

template <class T>
static __global__ void __launch_bounds__(WS_THREADS, 1) gp_prefill_attn_ws_kernel(const pf_args a)
{
#ifdef WS_DEVICE_CODE
    extern __shared__ __align__(1024) unsigned char gp_ws_smem[];
    /* the swizzle pattern repeats every 1024 bytes, from 1024-byte boundaries */
    const uint32_t qs = (gp_smem_addr(gp_ws_smem) + 1023u) & ~1023u, kvs = qs + WS_Q_BYTES, bars = qs + WS_BAR_OFF;

    const gp_prefill_seq_desc d = a.seqs[blockIdx.z];
    const int m0 = (int)(gridDim.y - 1 - blockIdx.y) * WS_BM; /* longest query tiles first */
    if (m0 >= d.q_len)
        return; /* uniform over the CTA */
    const int h = blockIdx.x, kvh = h / a.group;
    const int q_last = min(m0 + WS_BM, d.q_len) - 1;
    const int kv_end = d.pos0 + q_last + 1; /* keys the CTA reads: [0, kv_end) */
    const int n_tiles = (kv_end + WS_BN - 1) / WS_BN;
    if (threadIdx.x == 0) {
        ws_bar_init(bars, 128); /* q: the producer's 128 threads' copies */
        for (int s = 0; s < WS_STAGES; s++) {
            ws_bar_init(bars + 8 * (1 + s), 128);
            ws_bar_init(bars + 8 * (1 + WS_STAGES + s), 8); /* a release per consumer warp */
        }
    }
    __syncthreads();
    /* the warpgroup's index, through a shuffle: ptxas then knows it is
     * uniform over each warp, and keeps the consumers' wgmma unserialized */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
        if (a.bs_shift >= 0)
            ws_produce<T, true>(a, d, m0, h, kvh, kv_end, n_tiles, qs, kvs, bars);
        else
            ws_produce<T, false>(a, d, m0, h, kvh, kv_end, n_tiles, qs, kvs, bars);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
        ws_consume<T>(a, d, wg - 1, m0, h, q_last, n_tiles, qs, kvs, bars);
    }
#endif
}

int gp_prefill_attn_ws_ready(void)
{
#ifdef GP_HAVE_SM90A
    /* per device, as a process may drive several; asked once for each (bits
     * of the first 32), not at every call of the automatic choice */
    static unsigned known, ready;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const unsigned bit = dev < 32 ? 1u << dev : 0u;
    if (bit && (__atomic_load_n(&known, __ATOMIC_ACQUIRE) & bit))
        return (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) & bit) != 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const int r = major == 9 && minor == 0;
    if (r)
        __atomic_fetch_or(&ready, bit, __ATOMIC_ACQ_REL);
    __atomic_fetch_or(&known, bit, __ATOMIC_ACQ_REL);
    return r;
#else
    return 0;
#endif
}

template <class T>
static gp_status ws_launch(const pf_args &a, int n_seqs, int max_q_len, cudaStream_t stream)
{
    static unsigned done; /* per instantiation */
    return pf_launch_grid((const void *)gp_prefill_attn_ws_kernel<T>, "gp_prefill_attn_ws_kernel launch", &done, WS_BM,
                          WS_THREADS, WS_SMEM, a, n_seqs, max_q_len, stream);
}

gp_status gp_prefill_attn_ws_launch(const pf_args &a, bool bf16, int n_seqs, int max_q_len, cudaStream_t stream)
{
    return bf16 ? ws_launch<__nv_bfloat16>(a, n_seqs, max_q_len, stream)
                : ws_launch<__half>(a, n_seqs, max_q_len, stream);
}
