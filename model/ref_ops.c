/* Operations of the float32 CPU reference (dot products, RMSNorm, RoPE,
 * SwiGLU, argmax): the oracles of the GPU kernels. */
#include "ref_impl.h"

#include <math.h>

/* Dot product of a bf16 row with a float vector. Sixteen independent partial
 * sums break the add dependency chain and fill four SSE (two AVX) lanes; the
 * row is widened 16 values at a time. The summation order is fixed, so every
 * caller (single vector, batch, any thread) gets the same bits. */
float gp_ref_dot_bf16(const gp_bf16 *w, const float *x, int n)
{
    float acc[16] = {0}; /* [16] partial sums, lane k takes elements j + k */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        float wf[16]; /* [16] this chunk of the row in f32 */
        for (int k = 0; k < 16; k++)
            wf[k] = gp_bf16_to_f32(w[j + k]);
        for (int k = 0; k < 16; k++)
            acc[k] += wf[k] * x[j + k];
    }
    float tail = 0.0f;
    for (; j < n; j++)
        tail += gp_bf16_to_f32(w[j]) * x[j];
    for (int k = 0; k < 8; k++) /* pairwise fold: 16 -> 8 -> 4 -> 2 -> 1 */
        acc[k] += acc[k + 8];
    for (int k = 0; k < 4; k++)
        acc[k] += acc[k + 4];
    return ((acc[0] + acc[2]) + (acc[1] + acc[3])) + tail;
}

/* Two dot products sharing one widening of the row: batch rows cost one
 * conversion instead of two. Each sum is formed exactly as in
 * gp_ref_dot_bf16 (same lanes, same fold), so a sequence gets the same bits
 * whether it is decoded alone or beside another. */
void gp_ref_dot2_bf16(const gp_bf16 *w, const float *x0, const float *x1, int n, float *o0,
                             float *o1)
{
    float a0[16] = {0}, a1[16] = {0}; /* [16] partial sums of x0, of x1 */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        float wf[16]; /* [16] this chunk of the row in f32 */
        for (int k = 0; k < 16; k++)
            wf[k] = gp_bf16_to_f32(w[j + k]);
        for (int k = 0; k < 16; k++) {
            a0[k] += wf[k] * x0[j + k];
            a1[k] += wf[k] * x1[j + k];
        }
    }
    float t0 = 0.0f, t1 = 0.0f;
    for (; j < n; j++) {
        float wv = gp_bf16_to_f32(w[j]);
        t0 += wv * x0[j];
        t1 += wv * x1[j];
    }
    for (int k = 0; k < 8; k++)
        a0[k] += a0[k + 8], a1[k] += a1[k + 8];
    for (int k = 0; k < 4; k++)
        a0[k] += a0[k + 4], a1[k] += a1[k + 4];
    *o0 = ((a0[0] + a0[2]) + (a0[1] + a0[3])) + t0;
    *o1 = ((a1[0] + a1[2]) + (a1[1] + a1[3])) + t1;
}

void gp_ref_matvec(float *out, const gp_bf16 *w, const float *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        out[r] = gp_ref_dot_bf16(w + (size_t)r * (size_t)cols, x, cols);
}

/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight. The sum
 * of squares is accumulated in double: a positive sum of up to 8192 terms
 * loses ~1e-4 relative in float, and the oracle should not carry that. */
void gp_ref_rmsnorm(float *out, const float *x, const gp_bf16 *w, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = gp_bf16_to_f32(w[i]) * (x[i] * r);
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
