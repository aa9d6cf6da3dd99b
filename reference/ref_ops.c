/* Operations of the float32 CPU reference (dot products, RMSNorm, RoPE,
 * SwiGLU, argmax) over weights of any host dtype (F32, BF16, F16), each
 * widened exactly: the oracles of the GPU kernels. */
#include "ref_impl.h"

#include <math.h>

/* Exact widening of one weight element. fp16: the magnitude bits shifted
 * into a float's exponent/mantissa place read as a float 2^-112 times the
 * value (subnormal halves become float subnormals), so one multiply by 2^112
 * (exact: a power of two, result in the normal range) gives the value;
 * inf/NaN (exponent 31) get the float's all-ones exponent instead. Branch-free
 * so the loops below vectorise, and bit-equal to gp_f16_to_f32. */
static inline float gp_ref_widen_bf16(const gp_bf16 *w, size_t i)
{
    return gp_bf16_to_f32(w[i]);
}

static inline float gp_ref_widen_f16(const uint16_t *w, size_t i)
{
    uint32_t h = w[i];
    union { uint32_t u; float f; } v, big;
    v.u = (h & 0x7fffu) << 13;
    big.u = (uint32_t)(127 + 112) << 23; /* 2^112 */
    float mag = v.f * big.f;
    union { float f; uint32_t u; } r;
    r.f = mag;
    if ((h & 0x7c00u) == 0x7c00u)
        r.u = 0x7f800000u | ((h & 0x3ffu) << 13);
    r.u |= (h & 0x8000u) << 16;
    return r.f;
}

static inline float gp_ref_widen_f32(const float *w, size_t i)
{
    return w[i];
}

/* Dot product of a weight row with a float vector, one function per weight
 * dtype (T the element type, WIDEN its exact conversion). Sixteen
 * independent partial sums break the add dependency chain and fill four SSE
 * (two AVX) lanes; the row is widened 16 values at a time. The summation
 * order is fixed, so every caller (single vector, batch, any thread) gets the
 * same bits.
 *
 * The dot2 form: two dot products sharing one widening of the row, so batch
 * rows cost one conversion instead of two. Each sum is formed exactly as in
 * the single form (same lanes, same fold), so a sequence gets the same bits
 * whether it is decoded alone or beside another. */
#define GP_REF_DOTS(SUF, T, WIDEN)                                                                 \
    float gp_ref_dot_##SUF(const T *w, const float *x, int n)                                      \
    {                                                                                              \
        float acc[16] = {0}; /* [16] partial sums, lane k takes elements j + k */                 \
        int j = 0;                                                                                 \
        for (; j + 16 <= n; j += 16) {                                                             \
            float wf[16]; /* [16] this chunk of the row in f32 */                                  \
            for (int k = 0; k < 16; k++)                                                           \
                wf[k] = WIDEN(w, (size_t)(j + k));                                                 \
            for (int k = 0; k < 16; k++)                                                           \
                acc[k] += wf[k] * x[j + k];                                                        \
        }                                                                                          \
        float tail = 0.0f;                                                                         \
        for (; j < n; j++)                                                                         \
            tail += WIDEN(w, (size_t)j) * x[j];                                                    \
        for (int k = 0; k < 8; k++) /* pairwise fold: 16 -> 8 -> 4 -> 2 -> 1 */                    \
            acc[k] += acc[k + 8];                                                                  \
        for (int k = 0; k < 4; k++)                                                                \
            acc[k] += acc[k + 4];                                                                  \
        return ((acc[0] + acc[2]) + (acc[1] + acc[3])) + tail;                                     \
    }                                                                                              \
    void gp_ref_dot2_##SUF(const T *w, const float *x0, const float *x1, int n, float *o0,         \
                           float *o1)                                                              \
    {                                                                                              \
        float a0[16] = {0}, a1[16] = {0}; /* [16] partial sums of x0, of x1 */                     \
        int j = 0;                                                                                 \
        for (; j + 16 <= n; j += 16) {                                                             \
            float wf[16]; /* [16] this chunk of the row in f32 */                                  \
            for (int k = 0; k < 16; k++)                                                           \
                wf[k] = WIDEN(w, (size_t)(j + k));                                                 \
            for (int k = 0; k < 16; k++) {                                                         \
                a0[k] += wf[k] * x0[j + k];                                                        \
                a1[k] += wf[k] * x1[j + k];                                                        \
            }                                                                                      \
        }                                                                                          \
        float t0 = 0.0f, t1 = 0.0f;                                                                \
        for (; j < n; j++) {                                                                       \
            float wv = WIDEN(w, (size_t)j);                                                        \
            t0 += wv * x0[j];                                                                      \
            t1 += wv * x1[j];                                                                      \
        }                                                                                          \
        for (int k = 0; k < 8; k++)                                                                \
            a0[k] += a0[k + 8], a1[k] += a1[k + 8];                                                \
        for (int k = 0; k < 4; k++)                                                                \
            a0[k] += a0[k + 4], a1[k] += a1[k + 4];                                                \
        *o0 = ((a0[0] + a0[2]) + (a0[1] + a0[3])) + t0;                                            \
        *o1 = ((a1[0] + a1[2]) + (a1[1] + a1[3])) + t1;                                            \
    }

GP_REF_DOTS(bf16, gp_bf16, gp_ref_widen_bf16)
GP_REF_DOTS(f16, uint16_t, gp_ref_widen_f16)
GP_REF_DOTS(f32, float, gp_ref_widen_f32)

float gp_ref_dot(const void *w, gp_dtype wdt, const float *x, int n)
{
    switch (wdt) {
    case GP_DTYPE_BF16: return gp_ref_dot_bf16(w, x, n);
    case GP_DTYPE_F16: return gp_ref_dot_f16(w, x, n);
    default: return gp_ref_dot_f32(w, x, n);
    }
}

void gp_ref_dot2(const void *w, gp_dtype wdt, const float *x0, const float *x1, int n, float *o0, float *o1)
{
    switch (wdt) {
    case GP_DTYPE_BF16: gp_ref_dot2_bf16(w, x0, x1, n, o0, o1); break;
    case GP_DTYPE_F16: gp_ref_dot2_f16(w, x0, x1, n, o0, o1); break;
    default: gp_ref_dot2_f32(w, x0, x1, n, o0, o1); break;
    }
}

float gp_ref_weight(const void *w, gp_dtype wdt, size_t i)
{
    switch (wdt) {
    case GP_DTYPE_BF16: return gp_ref_widen_bf16(w, i);
    case GP_DTYPE_F16: return gp_ref_widen_f16(w, i);
    default: return gp_ref_widen_f32(w, i);
    }
}

void gp_ref_matvec(float *out, const void *w, gp_dtype wdt, const float *x, int rows, int cols)
{
    size_t rb = (size_t)cols * gp_dtype_size(wdt); /* bytes of one row */
    for (int r = 0; r < rows; r++)
        out[r] = gp_ref_dot((const char *)w + (size_t)r * rb, wdt, x, cols);
}

/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight. The sum
 * of squares is accumulated in double: a positive sum of up to 8192 terms
 * loses ~1e-4 relative in float, and the oracle should not carry that. */
void gp_ref_rmsnorm(float *out, const float *x, const void *w, gp_dtype wdt, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = gp_ref_weight(w, wdt, (size_t)i) * (x[i] * r);
}

/* HF rotate_half convention: element i pairs with i + head_dim/2 (not the
 * interleaved 2i, 2i+1 of the original paper). The angle is the float32
 * product pos * inv_freq, as HF forms it before taking cos/sin, so the
 * rounding of large angles matches. vec is [n_heads][head_dim], in place. */
void gp_ref_rope(float *vec, int n_heads, int head_dim, int pos, const float *inv_freq)
{
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i];
        float c = cosf(angle), s = sinf(angle);
        for (int h = 0; h < n_heads; h++) {
            float *v = vec + (size_t)h * (size_t)head_dim;
            float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
        }
    }
}

/* silu(gate) * up, silu(g) = g * sigmoid(g). For g below about -88 expf
 * overflows to inf and the quotient is -0, the correct limit. */
void gp_ref_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

/* NaN never compares greater, so NaNs are skipped; an all-NaN vector gives 0.
 * n <= 0 gives -1. */
int32_t gp_argmax(const float *x, int n)
{
    if (!x || n <= 0)
        return -1;
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue;
        if (best < 0 || x[i] > x[best])
            best = i;
    }
    return best < 0 ? 0 : best;
}
