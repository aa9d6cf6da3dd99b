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

/* Row t's element offset: a run of positions in one block is contiguous in
 * slots, so the table is read once per block, not per position. */
#define FOR_POSITIONS(a, t, row_off)                                                                      \
    for (int t##_b = (a)->t0; t##_b < (a)->t1;) {                                                         \
        const int t##_slot0 = t##_b % (a)->block_size;                                                    \
        const int t##_n = (a)->block_size - t##_slot0 < (a)->t1 - t##_b ? (a)->block_size - t##_slot0     \
                                                                         : (a)->t1 - t##_b;               \
        const size_t t##_base = ((size_t)(a)->table[t##_b / (a)->block_size] * (size_t)(a)->block_size    \
                                 + (size_t)t##_slot0) * (size_t)(a)->kv_stride                            \
                                + (size_t)(a)->kv_head * (size_t)(a)->head_dim;                           \
        for (int t##_i = 0; t##_i < t##_n; t##_i++) {                                                     \
            const int t = t##_b + t##_i - (a)->t0;                                                        \
            const size_t row_off = t##_base + (size_t)t##_i * (size_t)(a)->kv_stride;
#define END_POSITIONS(t)                                                                                  \
        }                                                                                                 \
        t##_b += t##_n;                                                                                   \
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
    float row[GP_CPU_ATTN_MAX_HEAD_DIM];
    FOR_POSITIONS(a, t, off)
        cvt_row(a->k_pool + off, hd, a->dtype, row);
        for (int g = 0; g < G; g++) {
            const float *q = a->q + (size_t)g * hd;
            float lane[8] = {0};
            for (int d = 0; d < hd; d += 8)
                for (int j = 0; j < 8; j++)
                    lane[j] += q[d + j] * row[d + j];
            a->scores[(size_t)g * n + t] = reduce8(lane) * a->scale;
        }
    END_POSITIONS(t)
    softmax_rows(a);
    memset(a->acc, 0, sizeof(float) * (size_t)G * hd);
    FOR_POSITIONS(a, t, off)
        cvt_row(a->v_pool + off, hd, a->dtype, row);
        for (int g = 0; g < G; g++) {
            const float p = a->scores[(size_t)g * n + t];
            float *acc = a->acc + (size_t)g * hd;
            for (int d = 0; d < hd; d++)
                acc[d] += p * row[d];
        }
    END_POSITIONS(t)
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

/* Inlined with constant dt and G so the accumulators of a group stay in
 * registers. */
GP_AVX2_INLINE void item_avx2(const gp_cpu_attn_item_args *a, gp_dtype dt, int G)
{
    const int hd = a->head_dim, n = a->t1 - a->t0;
    FOR_POSITIONS(a, t, off)
        const uint16_t *k = a->k_pool + off;
        __m256 acc[GP_CPU_ATTN_MAX_GROUP];
        for (int g = 0; g < G; g++)
            acc[g] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            const __m256 kv = load8(k + d, dt);
            for (int g = 0; g < G; g++)
                acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_loadu_ps(a->q + (size_t)g * hd + d), kv));
        }
        for (int g = 0; g < G; g++) {
            float lane[8];
            _mm256_storeu_ps(lane, acc[g]);
            a->scores[(size_t)g * n + t] = reduce8(lane) * a->scale;
        }
    END_POSITIONS(t)
    softmax_rows(a);
    memset(a->acc, 0, sizeof(float) * (size_t)G * hd);
    FOR_POSITIONS(a, t, off)
        const uint16_t *v = a->v_pool + off;
        __m256 p[GP_CPU_ATTN_MAX_GROUP];
        for (int g = 0; g < G; g++)
            p[g] = _mm256_set1_ps(a->scores[(size_t)g * n + t]);
        for (int d = 0; d < hd; d += 8) {
            const __m256 vv = load8(v + d, dt);
            for (int g = 0; g < G; g++) {
                float *o = a->acc + (size_t)g * hd + d;
                _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(p[g], vv)));
            }
        }
    END_POSITIONS(t)
}

#define ITEM_G(dt)                                                                                        \
    switch (a->G) {                                                                                       \
    case 1: item_avx2(a, dt, 1); break;                                                                   \
    case 2: item_avx2(a, dt, 2); break;                                                                   \
    case 4: item_avx2(a, dt, 4); break;                                                                   \
    case 8: item_avx2(a, dt, 8); break;                                                                   \
    default: item_avx2(a, dt, a->G); break;                                                               \
    }

GP_AVX2 void gp_cpu_attn_item_avx2(const gp_cpu_attn_item_args *a)
{
    if (a->dtype == GP_DTYPE_F16) {
        ITEM_G(GP_DTYPE_F16)
    } else {
        ITEM_G(GP_DTYPE_BF16)
    }
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
