/* The inner loops of the CPU partial decode attention: one row's KV head
 * over a run of positions, K and V each read once for all the query heads
 * of the group. Plain C and AVX2 + F16C forms that add in the same order
 * (8 lanes, then one fixed tree) without FMA, so both give the same bits;
 * this file is built with -ffp-contract=off so the compiler cannot fuse
 * the plain form's multiply-adds either. */
#include <math.h>
#include <string.h>

#include "cpu_attn_impl.h"

/* Exact: the half's exponent and mantissa moved into a float and rebiased
 * by a power-of-two multiply (subnormal halves become normal floats), inf
 * and NaN restored after; gp_f16_to_f32 is out of line and branchy. */
static inline float f16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v;
    const uint32_t em = h & 0x7fffu;
    v.u = em << 13;
    v.f *= 0x1p112f;
    if (em >= 0x7c00u)
        v.u |= 0x7f800000u;
    v.u |= (uint32_t)(h & 0x8000u) << 16;
    return v.f;
}

static inline float reduce8(const float *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The run of positions from pos (absolute) to the end of its block or of
 * the item: its length, and in *base the element offset of its first row;
 * the run's rows are kv_stride elements apart, so the table is read once
 * per block, not per position. */
static inline int run_at(const gp_cpu_attn_item_args *a, int pos, size_t *base)
{
    const int slot = pos % a->block_size, left = a->t1 - pos;
    *base = ((size_t)a->table[pos / a->block_size] * (size_t)a->block_size + (size_t)slot) * (size_t)a->kv_stride
            + (size_t)a->kv_head * (size_t)a->head_dim;
    return a->block_size - slot < left ? a->block_size - slot : left;
}

/* A KV head's rows are 2 x head_dim bytes out of every 2 x kv_stride, a
 * stride the hardware prefetchers follow poorly: while the scores of one
 * block's run are computed, the next run's K rows are fetched, and this
 * run's V rows into L2 for the second pass (an item's V, 2 x head_dim x
 * chunk_positions bytes, stays there until then). Prefetches change no
 * result. */
static inline void prefetch_runs(const gp_cpu_attn_item_args *a, int t, int cnt, size_t base)
{
    const size_t stride = (size_t)a->kv_stride, row_bytes = (size_t)a->head_dim * sizeof(uint16_t);
    for (int i = 0; i < cnt; i++)
        for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch((const char *)(a->v_pool + base + (size_t)i * stride) + b, 0, 2);
    if (a->t0 + t + cnt >= a->t1)
        return;
    size_t next;
    const int n_next = run_at(a, a->t0 + t + cnt, &next);
    for (int i = 0; i < n_next; i++)
        for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch((const char *)(a->k_pool + next + (size_t)i * stride) + b, 0, 3);
}

/* Scores are replaced by exp(score - m) in place; l sums them in position
 * order (the same scalar code for both forms). */
static void softmax_rows(const gp_cpu_attn_item_args *a)
{
    const int n = a->t1 - a->t0;
    for (int g = 0; g < a->G; g++) {
        float *s = a->scores + (size_t)g * n;
        float m = -INFINITY;
        for (int t = 0; t < n; t++)
            m = s[t] > m ? s[t] : m;
        float l = 0.0f;
        for (int t = 0; t < n; t++) {
            s[t] = expf(s[t] - m);
            l += s[t];
        }
        a->m[g] = m;
        a->l[g] = l;
    }
}

static inline void cvt_row(const uint16_t *x, int n, gp_dtype dt, float *f)
{
    if (dt == GP_DTYPE_F16)
        for (int d = 0; d < n; d++)
            f[d] = f16_to_f32(x[d]);
    else
        for (int d = 0; d < n; d++)
            f[d] = gp_bf16_to_f32(x[d]);
}

void gp_cpu_attn_item_plain(const gp_cpu_attn_item_args *a)
{
    const int hd = a->head_dim, G = a->G, n = a->t1 - a->t0;
    const size_t stride = (size_t)a->kv_stride;
    float row[GP_CPU_ATTN_MAX_HEAD_DIM];
    for (int t = 0; t < n;) {
        size_t base;
        const int cnt = run_at(a, a->t0 + t, &base);
        prefetch_runs(a, t, cnt, base);
        for (int i = 0; i < cnt; i++) {
            cvt_row(a->k_pool + base + (size_t)i * stride, hd, a->dtype, row);
            for (int g = 0; g < G; g++) {
                const float *q = a->q + (size_t)g * hd;
                float lane[8] = {0};
                for (int d = 0; d < hd; d += 8)
                    for (int j = 0; j < 8; j++)
                        lane[j] += q[d + j] * row[d + j];
                a->scores[(size_t)g * n + t + i] = reduce8(lane) * a->scale;
            }
        }
        t += cnt;
    }
    softmax_rows(a);
    memset(a->acc, 0, sizeof(float) * (size_t)G * hd);
    for (int t = 0; t < n;) {
        size_t base;
        const int cnt = run_at(a, a->t0 + t, &base);
        for (int i = 0; i < cnt; i++) {
            cvt_row(a->v_pool + base + (size_t)i * stride, hd, a->dtype, row);
            for (int g = 0; g < G; g++) {
                const float p = a->scores[(size_t)g * n + t + i];
                float *acc = a->acc + (size_t)g * hd;
                for (int d = 0; d < hd; d++)
                    acc[d] += p * row[d];
            }
        }
        t += cnt;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define GP_AVX2 __attribute__((target("avx2,f16c")))
#define GP_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,f16c")))

GP_AVX2_INLINE __m256 load8(const uint16_t *x, gp_dtype dt)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)x);
    if (dt == GP_DTYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The tree of reduce8 on the 8 lanes of x: (lo + hi) gives a0+a4 .. a3+a7,
 * folding the upper pair onto the lower gives (a0+a4)+(a2+a6) and
 * (a1+a5)+(a3+a7), whose sum ends it. */
GP_AVX2_INLINE float hsum8(__m256 x)
{
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* Scores of n4 (1..4) query heads against one K row: one accumulator per
 * head, so the row is converted once for all of them. */
GP_AVX2_INLINE void scores_k(const gp_cpu_attn_item_args *a, const uint16_t *k, gp_dtype dt, int g0, int n4,
                             int t, int n)
{
    const int hd = a->head_dim;
    const float *q = a->q + (size_t)g0 * hd;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int d = 0; d < hd; d += 8) {
        const __m256 kv = load8(k + d, dt);
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_loadu_ps(q + d), kv));
        if (n4 > 1)
            s1 = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_loadu_ps(q + hd + d), kv));
        if (n4 > 2)
            s2 = _mm256_add_ps(s2, _mm256_mul_ps(_mm256_loadu_ps(q + 2 * hd + d), kv));
        if (n4 > 3)
            s3 = _mm256_add_ps(s3, _mm256_mul_ps(_mm256_loadu_ps(q + 3 * hd + d), kv));
    }
    float *out = a->scores + (size_t)g0 * n + t;
    out[0] = hsum8(s0) * a->scale;
    if (n4 > 1)
        out[n] = hsum8(s1) * a->scale;
    if (n4 > 2)
        out[2 * (size_t)n] = hsum8(s2) * a->scale;
    if (n4 > 3)
        out[3 * (size_t)n] = hsum8(s3) * a->scale;
}

/* acc[g0..g0+n4)[d0..d0+16) += p v over the positions [t, t + cnt) of one
 * block, whose V rows are stride elements apart: the 8 accumulators stay in
 * registers for the whole run, loaded and stored once. */
GP_AVX2_INLINE void accum_v(const gp_cpu_attn_item_args *a, const uint16_t *v, size_t stride, int cnt, gp_dtype dt,
                            int g0, int n4, int d0, int t, int n)
{
    const int hd = a->head_dim;
    float *o = a->acc + (size_t)g0 * hd + d0;
    const float *p = a->scores + (size_t)g0 * n + t;
    __m256 a0 = _mm256_loadu_ps(o), b0 = _mm256_loadu_ps(o + 8), a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    if (n4 > 1)
        a1 = _mm256_loadu_ps(o + hd), b1 = _mm256_loadu_ps(o + hd + 8);
    if (n4 > 2)
        a2 = _mm256_loadu_ps(o + 2 * hd), b2 = _mm256_loadu_ps(o + 2 * hd + 8);
    if (n4 > 3)
        a3 = _mm256_loadu_ps(o + 3 * hd), b3 = _mm256_loadu_ps(o + 3 * hd + 8);
    for (int i = 0; i < cnt; i++) {
        const uint16_t *row = v + (size_t)i * stride + d0;
        const __m256 lo = load8(row, dt), hi = load8(row + 8, dt);
        __m256 w = _mm256_broadcast_ss(p + i);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(w, lo)), b0 = _mm256_add_ps(b0, _mm256_mul_ps(w, hi));
        if (n4 > 1) {
            w = _mm256_broadcast_ss(p + n + i);
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(w, lo)), b1 = _mm256_add_ps(b1, _mm256_mul_ps(w, hi));
        }
        if (n4 > 2) {
            w = _mm256_broadcast_ss(p + 2 * (size_t)n + i);
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(w, lo)), b2 = _mm256_add_ps(b2, _mm256_mul_ps(w, hi));
        }
        if (n4 > 3) {
            w = _mm256_broadcast_ss(p + 3 * (size_t)n + i);
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(w, lo)), b3 = _mm256_add_ps(b3, _mm256_mul_ps(w, hi));
        }
    }
    _mm256_storeu_ps(o, a0), _mm256_storeu_ps(o + 8, b0);
    if (n4 > 1)
        _mm256_storeu_ps(o + hd, a1), _mm256_storeu_ps(o + hd + 8, b1);
    if (n4 > 2)
        _mm256_storeu_ps(o + 2 * hd, a2), _mm256_storeu_ps(o + 2 * hd + 8, b2);
    if (n4 > 3)
        _mm256_storeu_ps(o + 3 * hd, a3), _mm256_storeu_ps(o + 3 * hd + 8, b3);
}

/* Query heads in groups of 4 (the accumulators of a group fill the
 * registers); dt and the group's size constant after inlining. */
GP_AVX2_INLINE void item_avx2(const gp_cpu_attn_item_args *a, gp_dtype dt)
{
    const int hd = a->head_dim, G = a->G, n = a->t1 - a->t0;
    const size_t stride = (size_t)a->kv_stride;
    for (int t = 0; t < n;) {
        size_t base;
        const int cnt = run_at(a, a->t0 + t, &base);
        prefetch_runs(a, t, cnt, base);
        for (int i = 0; i < cnt; i++) {
            const uint16_t *k = a->k_pool + base + (size_t)i * stride;
            for (int g0 = 0; g0 < G; g0 += 4) {
                switch (G - g0) {
                case 1: scores_k(a, k, dt, g0, 1, t + i, n); break;
                case 2: scores_k(a, k, dt, g0, 2, t + i, n); break;
                case 3: scores_k(a, k, dt, g0, 3, t + i, n); break;
                default: scores_k(a, k, dt, g0, 4, t + i, n); break;
                }
            }
        }
        t += cnt;
    }
    softmax_rows(a);
    memset(a->acc, 0, sizeof(float) * (size_t)G * hd);
    for (int t = 0; t < n;) {
        size_t base;
        const int cnt = run_at(a, a->t0 + t, &base);
        const uint16_t *v = a->v_pool + base;
        for (int g0 = 0; g0 < G; g0 += 4)
            for (int d0 = 0; d0 < hd; d0 += 16) {
                switch (G - g0) {
                case 1: accum_v(a, v, stride, cnt, dt, g0, 1, d0, t, n); break;
                case 2: accum_v(a, v, stride, cnt, dt, g0, 2, d0, t, n); break;
                case 3: accum_v(a, v, stride, cnt, dt, g0, 3, d0, t, n); break;
                default: accum_v(a, v, stride, cnt, dt, g0, 4, d0, t, n); break;
                }
            }
        t += cnt;
    }
}

GP_AVX2 void gp_cpu_attn_item_avx2(const gp_cpu_attn_item_args *a)
{
    if (a->dtype == GP_DTYPE_F16)
        item_avx2(a, GP_DTYPE_F16);
    else
        item_avx2(a, GP_DTYPE_BF16);
}

int gp_cpu_attn_have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
void gp_cpu_attn_item_avx2(const gp_cpu_attn_item_args *a)
{
    gp_cpu_attn_item_plain(a);
}

int gp_cpu_attn_have_avx2(void)
{
    return 0;
}
#endif
