/* Causal GQA attention of a prefill chunk on tensor cores, FlashAttention-2
 * style, over the paged KV cache (gp_prefill_attn in gp_attention.h). */
#include <stdint.h>

#include "cuda_util.cuh"
#include "decode_attn_dev.cuh"
#include "mma_dev.cuh"
#include "prefill_attn.cuh"

/* Layout: a CTA per (query head, tile of 128 query rows, sequence), 4 warps
 * of 32 query rows (two m16 tiles) each. The CTA copies its q tile into
 * shared memory once and streams its sequence's K/V in tiles of 64 tokens
 * (cp.async, two stages: the next tile lands while this one is computed,
 * one barrier per tile).
 * Each K or V fragment a warp loads from shared memory feeds both of its m
 * tiles: with one m tile per warp the ldmatrix traffic, not the tensor
 * cores, bounded the kernel (162 TFLOP/s at T = 8192 on the H100,
 * docs/PERFORMANCE.md). Scores and the output stay in fp32 accumulators;
 * the probabilities enter p.v rounded to bf16 or fp16 (the element type T
 * of the call: q, K/V and out are all of it; as FlashAttention-2 does) and
 * the softmax denominator sums those rounded values, so every row's weights
 * still sum to one. Tiles wholly after a warp's last query are skipped by
 * that warp; only tiles crossing the diagonal are masked. Query tiles are
 * issued longest first (the grid's y runs backwards) so the short ones fill
 * the tail of the wave; heads vary fastest (query tiles fastest, so that
 * co-resident CTAs share a KV head, measured 4-11% slower at T = 8192). */
#define PF_BM 128     /* query rows per CTA */
#define PF_BN 64      /* keys per K/V tile (32 measured 11% slower at T = 8192) */
#define PF_KN (PF_BN / 8) /* key n-tiles per K/V tile */
#define PF_THREADS 128
#define PF_STAGES 2

template <int HD> struct pf_shape {
    static constexpr int PITCH = HD + 8; /* row pitch in elements: 8 rows of an ldmatrix hit distinct bank groups */
    static constexpr int TILE = PF_BN * PITCH;
    static constexpr int Q_TILE = PF_BM * PITCH;
    static constexpr int SMEM = (Q_TILE + PF_STAGES * 2 * TILE) * 2; /* bytes: q, then K and V per stage */
};

/* Issue the copies of keys [t0, t0 + PF_BN) of KV head kvh into ks/vs; keys
 * at or past kv_end are zero-filled (their source is not read). */
template <class T, int HD>
static __device__ __forceinline__ void pf_load_tile(const pf_args &a, const int32_t *table, int t0, int kv_end,
                                                    int kvh, T *ks, T *vs)
{
    constexpr int CPR = HD / 8;              /* 16-byte chunks per row */
    constexpr int RPP = PF_THREADS / CPR;    /* rows per pass */
    const int c = threadIdx.x % CPR, rr = threadIdx.x / CPR;
#pragma unroll
    for (int p = 0; p < PF_BN / RPP; p++) {
        const int r = p * RPP + rr, t = t0 + r;
        size_t src = 0;
        int bytes = 0;
        if (t < kv_end) {
            /* a shift for the usual power-of-two blocks: the division was a
             * visible share of the loop's integer work */
            const int bi = a.bs_shift >= 0 ? t >> a.bs_shift : t / a.block_size;
            src = (((size_t)__ldg(table + bi) * a.block_size + (t - bi * a.block_size)) * a.n_kv + kvh) * HD +
                  (size_t)c * 8;
            bytes = 16;
        }
        gp_cp_async16(gp_smem_addr(ks + r * pf_shape<HD>::PITCH + c * 8), static_cast<const T *>(a.k) + src, bytes);
        gp_cp_async16(gp_smem_addr(vs + r * pf_shape<HD>::PITCH + c * 8), static_cast<const T *>(a.v) + src, bytes);
    }
}

template <class T, int HD>
static __global__ void __launch_bounds__(PF_THREADS, 2) gp_prefill_attn_mma_kernel(const pf_args a)
{
    typedef gp_half_traits<T> TR;
    constexpr int KS = HD / 16, NT = HD / 8, PITCH = pf_shape<HD>::PITCH, TILE = pf_shape<HD>::TILE;
    extern __shared__ __align__(16) unsigned char gp_pf_smem[];
    T *qs = reinterpret_cast<T *>(gp_pf_smem); /* [PF_BM][PITCH] */
    T *kvs = qs + pf_shape<HD>::Q_TILE;        /* [stage][K, V][PF_BN][PITCH] */

    const gp_prefill_seq_desc d = a.seqs[blockIdx.z];
    const int m0 = (int)(gridDim.y - 1 - blockIdx.y) * PF_BM;
    const int h = blockIdx.x;
    if (m0 >= d.q_len)
        return; /* uniform over the CTA */
    const int kvh = h / a.group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gr = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, ri = lane & 7; /* the ldmatrix matrix and row this lane addresses */
    const size_t row_stride = (size_t)a.n_heads * HD;

    const int q_last = min(m0 + PF_BM, d.q_len) - 1;        /* the CTA's last valid row */
    const int kv_end = d.pos0 + q_last + 1;                 /* keys the CTA reads: [0, kv_end) */
    const int w0 = m0 + warp * 32;                          /* the warp's first row */
    const int w_first = d.pos0 + w0;                        /* its first and last query positions */
    const int w_last = d.pos0 + min(w0 + 31, q_last);
    const bool w_active = w0 <= q_last;

    /* the q tile: rows past q_len are zero-filled */
    {
        constexpr int CPR = HD / 8, RPP = PF_THREADS / CPR;
        const int c = threadIdx.x % CPR, rr = threadIdx.x / CPR;
        for (int r = rr; r < PF_BM; r += RPP) {
            const bool ok = m0 + r < d.q_len;
            const T *src = static_cast<const T *>(a.q) + (size_t)(d.q_start + (ok ? m0 + r : 0)) * row_stride + (size_t)h * HD + c * 8;
            gp_cp_async16(gp_smem_addr(qs + r * PITCH + c * 8), src, ok ? 16 : 0);
        }
    }
    const int32_t *table = a.tables + (size_t)d.table_row * a.max_blocks;
    const int n_tiles = (kv_end + PF_BN - 1) / PF_BN;
    pf_load_tile<T, HD>(a, table, 0, kv_end, kvh, kvs, kvs + TILE);
    asm volatile("cp.async.commit_group;\n"); /* q and tile 0 */

    float o[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    /* per m tile, rows gr and gr + 8: reference max of the raw scores, and partial sums */
    float m_r[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, l_r[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

    for (int j = 0; j < n_tiles; j++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory"); /* tile j (and q) landed for this thread */
        /* one barrier per tile: tile j is visible to every thread, and every
         * warp is done with tile j - 1, whose buffer the next load refills */
        __syncthreads();
        if (j + 1 < n_tiles) {
            T *nk = kvs + ((j + 1) % PF_STAGES) * 2 * TILE;
            pf_load_tile<T, HD>(a, table, (j + 1) * PF_BN, kv_end, kvh, nk, nk + TILE);
            asm volatile("cp.async.commit_group;\n");
        }
        const int t0 = j * PF_BN;
        if (w_active && t0 <= w_last) {
            const T *ks = kvs + (j % PF_STAGES) * 2 * TILE, *vs = ks + TILE;
            float s[2][PF_KN][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < PF_KN; nt++)
                    s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
            for (int kst = 0; kst < KS; kst++) {
                uint32_t qa[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) /* (rows 0-7, dims +0..7), (8-15, +0..7), (0-7, +8..15), (8-15, +8..15) */
                    gp_ldsm_x4(gp_smem_addr(qs + (warp * 32 + mt * 16 + (mi & 1) * 8 + ri) * PITCH + kst * 16 +
                                            (mi >> 1) * 8),
                               qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
#pragma unroll
                for (int np = 0; np < PF_BN / 16; np++) {
                    uint32_t b0, b1, b2, b3;
                    /* (keys 0-7, dims +0..7), (0-7, +8..15), (8-15, +0..7), (8-15, +8..15) of key pair np */
                    gp_ldsm_x4(gp_smem_addr(ks + (np * 16 + (mi >> 1) * 8 + ri) * PITCH + kst * 16 + (mi & 1) * 8),
                               b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        TR::mma(s[mt][2 * np], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], b0, b1);
                        TR::mma(s[mt][2 * np + 1], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], b2, b3);
                    }
                }
            }
            if (t0 + PF_BN - 1 > w_first) { /* the tile crosses the diagonal of some row: mask */
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < PF_KN; nt++)
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const int key = t0 + nt * 8 + 2 * tq + (c & 1);
                            if (key > w_first + mt * 16 + gr + (c >> 1) * 8)
                                s[mt][nt][c] = -INFINITY;
                        }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                /* The reference max of a row moves only when a tile's scores
                 * exceed it by more than PF_RESCALE_SLACK (log2 units): then p
                 * stays below 2^slack, harmless in bf16, fp16 and fp32, and a warp
                 * whose rows all keep theirs skips rescaling its output. */
                float mx[2], ms[2], corr[2] = {1.0f, 1.0f};
#pragma unroll
                for (int hr = 0; hr < 2; hr++) { /* row gr (hr 0) or gr + 8 (hr 1) */
                    float v = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < PF_KN; nt++)
                        v = fmaxf(v, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
                    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
                    mx[hr] = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
                }
                const bool keep = __all_sync(0xffffffffu, m_r[mt][0] != -INFINITY && m_r[mt][1] != -INFINITY &&
                                                              (mx[0] - m_r[mt][0]) * a.scale_log2 <= PF_RESCALE_SLACK &&
                                                              (mx[1] - m_r[mt][1]) * a.scale_log2 <= PF_RESCALE_SLACK);
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    if (!keep) {
                        const float m_new = fmaxf(m_r[mt][hr], mx[hr]);
                        ms[hr] = gp_safe_max(m_new) * a.scale_log2;
                        corr[hr] = pf_exp2(fmaf(m_r[mt][hr], a.scale_log2, -ms[hr]));
                        m_r[mt][hr] = m_new;
                    } else {
                        ms[hr] = m_r[mt][hr] * a.scale_log2;
                    }
                }
                float sum[2] = {0.0f, 0.0f};
                /* p rounded to T as it enters p.v, the sums over the rounded
                 * values (summing the unrounded ones measured under 1% faster);
                 * packed in place: s[mt][nt][hr] = the T pair of row
                 * hr, which is the A fragment of k-step nt / 2 */
#pragma unroll
                for (int nt = 0; nt < PF_KN; nt++)
#pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        const uint32_t pk = TR::pack2(pf_exp2(fmaf(s[mt][nt][2 * hr], a.scale_log2, -ms[hr])),
                                                      pf_exp2(fmaf(s[mt][nt][2 * hr + 1], a.scale_log2, -ms[hr])));
                        sum[hr] += TR::lo(pk) + TR::hi(pk);
                        s[mt][nt][hr] = __uint_as_float(pk);
                    }
#pragma unroll
                for (int hr = 0; hr < 2; hr++)
                    l_r[mt][hr] = fmaf(l_r[mt][hr], corr[hr], sum[hr]);
                if (!keep) {
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        o[mt][nt][0] *= corr[0];
                        o[mt][nt][1] *= corr[0];
                        o[mt][nt][2] *= corr[1];
                        o[mt][nt][3] *= corr[1];
                    }
                }
            }
#pragma unroll
            for (int kk = 0; kk < PF_BN / 16; kk++) {
#pragma unroll
                for (int dp = 0; dp < HD / 16; dp++) {
                    uint32_t b0, b1, b2, b3;
                    /* transposed: (keys 0-7, dims +0..7), (8-15, +0..7), (0-7, +8..15), (8-15, +8..15) */
                    gp_ldsm_x4_t(gp_smem_addr(vs + (kk * 16 + (mi & 1) * 8 + ri) * PITCH + dp * 16 + (mi >> 1) * 8),
                                 b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        const uint32_t a0 = __float_as_uint(s[mt][2 * kk][0]), a1 = __float_as_uint(s[mt][2 * kk][1]);
                        const uint32_t a2 = __float_as_uint(s[mt][2 * kk + 1][0]);
                        const uint32_t a3 = __float_as_uint(s[mt][2 * kk + 1][1]);
                        TR::mma(o[mt][2 * dp], a0, a1, a2, a3, b0, b1);
                        TR::mma(o[mt][2 * dp + 1], a0, a1, a2, a3, b2, b3);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float l = l_r[mt][hr];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const int r = w0 + mt * 16 + gr + hr * 8;
            if (r >= d.q_len)
                continue;
            T *dst = static_cast<T *>(a.out) + (size_t)(d.q_start + r) * row_stride + (size_t)h * HD + 2 * tq;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                *reinterpret_cast<typename TR::T2 *>(dst + nt * 8) =
                    TR::from_float2(o[mt][nt][2 * hr] * inv, o[mt][nt][2 * hr + 1] * inv);
        }
}

template <class T, int HD>
static gp_status pf_launch(const pf_args &a, int n_seqs, int max_q_len, cudaStream_t stream)
{
    static unsigned done; /* per instantiation */
    return pf_launch_grid((const void *)gp_prefill_attn_mma_kernel<T, HD>, "gp_prefill_attn_mma_kernel launch", &done,
                          PF_BM, PF_THREADS, pf_shape<HD>::SMEM, a, n_seqs, max_q_len, stream);
}

extern "C" int gp_prefill_attn_supports(int head_dim)
{
    return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

/* The launch of the (T, head_dim) instantiation. */
template <class T>
static gp_status pf_launch_hd(const pf_args &a, int head_dim, int n_seqs, int max_q_len, cudaStream_t s)
{
    switch (head_dim) {
    case 16: return pf_launch<T, 16>(a, n_seqs, max_q_len, s);
    case 32: return pf_launch<T, 32>(a, n_seqs, max_q_len, s);
    case 64: return pf_launch<T, 64>(a, n_seqs, max_q_len, s);
    default: return pf_launch<T, 128>(a, n_seqs, max_q_len, s);
    }
}

extern "C" int gp_prefill_attn_kernel_serves(gp_prefill_attn_kernel k, int head_dim)
{
    switch (k) {
    case GP_PREFILL_ATTN_AUTO:
    case GP_PREFILL_ATTN_MMA: return gp_prefill_attn_supports(head_dim);
    case GP_PREFILL_ATTN_HOPPER: return head_dim == 128 && gp_prefill_attn_ws_ready();
    }
    return 0;
}

extern "C" gp_status gp_prefill_attn_kernel_check(gp_prefill_attn_kernel k, int head_dim, const char *who)
{
    if (k != GP_PREFILL_ATTN_AUTO && k != GP_PREFILL_ATTN_MMA && k != GP_PREFILL_ATTN_HOPPER)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kernel %d, allowed %s", who, (int)k, GP_PREFILL_ATTN_KERNEL_NAMES);
    if (k != GP_PREFILL_ATTN_AUTO && !gp_prefill_attn_kernel_serves(k, head_dim))
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: the %s kernel cannot serve head_dim %d here (hopper: head_dim 128 on "
                "compute capability 9.0 devices, in builds with sm_90 code; mma: head_dim %s)", who,
                gp_prefill_attn_kernel_name(k), head_dim, GP_PREFILL_ATTN_HEAD_DIMS);
    return GP_OK;
}

extern "C" gp_status gp_prefill_attn(const gp_kv_view *kv, int n_heads, const void *q, void *out, int n_rows,
                                     const gp_prefill_seq_desc *seqs, int n_seqs, int max_q_len,
                                     gp_prefill_attn_kernel kernel, void *stream)
{
    static const char fn[] = "gp_prefill_attn";
    if (!kv || !q || !out || !seqs || !kv->k || !kv->v || !kv->block_tables)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kv (with k, v, block_tables), q, out and seqs must not be NULL", fn);
    GP_TRY(gp_dtype_check_half(kv->dtype, fn));
    if (!gp_prefill_attn_supports(kv->head_dim))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: head_dim %d, allowed %s", fn, kv->head_dim, GP_PREFILL_ATTN_HEAD_DIMS);
    if (kv->n_kv_heads < 1 || n_heads < 1 || n_heads % kv->n_kv_heads)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads %d must be a positive multiple of n_kv_heads %d", fn, n_heads,
                kv->n_kv_heads);
    if (n_heads > 65535 || (max_q_len + PF_BM - 1) / PF_BM > 65535 || n_seqs < 1 || n_seqs > 65535 || n_rows < 1 || max_q_len < 1 || max_q_len > n_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads %d (1..65535), n_seqs %d (1..65535), n_rows %d (>= 1), "
                "max_q_len %d (1..n_rows)", fn, n_heads, n_seqs, n_rows, max_q_len);
    GP_TRY(gp_prefill_attn_kernel_check(kernel, kv->head_dim, fn));
    if (kv->block_size < 1 || kv->max_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: block_size %d and max_blocks %d must be positive", fn, kv->block_size,
                kv->max_blocks);
    if (((uintptr_t)q | (uintptr_t)out | (uintptr_t)kv->k | (uintptr_t)kv->v) & 15u)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: q, out and the K/V pools must be 16-byte aligned", fn);
    pf_args a;
    a.q = q;
    a.out = out;
    a.k = kv->k;
    a.v = kv->v;
    a.tables = kv->block_tables;
    a.seqs = seqs;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.group = n_heads / kv->n_kv_heads;
    a.block_size = kv->block_size;
    a.max_blocks = kv->max_blocks;
    a.bs_shift = -1;
    for (int sh = 0; sh < 31; sh++)
        if (kv->block_size == 1 << sh)
            a.bs_shift = sh;
    a.scale_log2 = (float)(1.4426950408889634 / sqrt((double)kv->head_dim));
    cudaStream_t s = (cudaStream_t)stream;
    if (kernel == GP_PREFILL_ATTN_HOPPER ||
        (kernel == GP_PREFILL_ATTN_AUTO && gp_prefill_attn_kernel_serves(GP_PREFILL_ATTN_HOPPER, kv->head_dim)))
        return gp_prefill_attn_ws_launch(a, kv->dtype != GP_DTYPE_F16, n_seqs, max_q_len, s);
    return kv->dtype == GP_DTYPE_F16 ? pf_launch_hd<__half>(a, kv->head_dim, n_seqs, max_q_len, s)
                                     : pf_launch_hd<__nv_bfloat16>(a, kv->head_dim, n_seqs, max_q_len, s);
}
