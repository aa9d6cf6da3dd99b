/* RoPE on the q and k heads of the fused QKV output, q to its own buffer, k
 * and v appended to this layer's paged cache at each row's position. */
#include <limits.h>
#include <stdint.h>

#include "attn_cuda.cuh"
#include "rope_kv.cuh"

/* Not built with --use_fast_math: cosf/sinf are the accurate versions, so the
 * angles match the CPU reference's to about an ulp even for large positions. */
static __global__ void __launch_bounds__(GP_ROPE_THREADS) gp_rope_kv_kernel(const gp_rope_args a)
{
    extern __shared__ float2 gp_rope_cs[]; /* [head_dim/2]: (cos, sin) of this row's angles */
    const int b = blockIdx.x;
    const int half = a.head_dim / 2;
    const int pos = a.positions[b];
    /* Uniform over the CTA, so returning before the barrier is safe. */
    if (pos < 0 || pos / a.block_size >= a.max_blocks)
        return;
    const int blk = a.tables[(size_t)b * a.max_blocks + pos / a.block_size];
    if (blk < 0 || blk >= a.n_blocks)
        return;
    const int slot = pos % a.block_size;

    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float angle = (float)pos * a.inv_freq[i];
        gp_rope_cs[i] = make_float2(cosf(angle), sinf(angle));
    }
    __syncthreads();

    const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv * a.head_dim;
    const __nv_bfloat16 *row = a.qkv + (size_t)b * (size_t)(q_dim + 2 * kv_dim);
    /* Heads of one slot are contiguous in the pool: slot_base + kv_head*head_dim + d. */
    const size_t slot_base = ((size_t)blk * a.block_size + slot) * (size_t)kv_dim;

    /* q heads and k heads are adjacent in the row, so one loop rotates both:
     * pair p = (head, i) with head < n_heads + n_kv. */
    const int n_pairs = (a.n_heads + a.n_kv) * half;
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        int head = p / half, i = p - head * half;
        const __nv_bfloat16 *x = row + (size_t)head * a.head_dim;
        float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + half]);
        float2 cs = gp_rope_cs[i];
        /* Explicit roundings keep nvcc from contracting into FMAs, which the
         * CPU reference (x86-64 without FMA) does not do. */
        __nv_bfloat16 o1 = __float2bfloat16_rn(__fsub_rn(__fmul_rn(x1, cs.x), __fmul_rn(x2, cs.y)));
        __nv_bfloat16 o2 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x2, cs.x), __fmul_rn(x1, cs.y)));
        __nv_bfloat16 *dst;
        if (head < a.n_heads)
            dst = a.q_out + ((size_t)b * a.n_heads + head) * a.head_dim;
        else
            dst = a.k_cache + slot_base + (size_t)(head - a.n_heads) * a.head_dim;
        dst[i] = o1;
        dst[i + half] = o2;
    }
    const __nv_bfloat16 *v = row + q_dim + kv_dim;
    for (int e = threadIdx.x; e < kv_dim; e += blockDim.x)
        a.v_cache[slot_base + e] = v[e];
}

gp_status gp_rope_kv_launch(const gp_rope_args *a, cudaStream_t stream)
{
    size_t smem = (size_t)(a->head_dim / 2) * sizeof(float2);
    gp_rope_kv_kernel<<<a->B, GP_ROPE_THREADS, smem, stream>>>(*a);
    GP_ATTN_LAUNCH_CHECK("gp_rope_kv_kernel");
    return GP_OK;
}

/* Largest head_dim whose cos/sin table fits the default dynamic shared memory. */
#define GP_ROPE_MAX_HEAD_DIM 4096

extern "C" gp_status gp_rope_kv_append(const gp_kv_view *kv, int B, int n_heads,
                                       const gp_bf16 *qkv, const float *inv_freq, gp_bf16 *q_out,
                                       void *stream)
{
    static const char fn[] = "gp_rope_kv_append";
    if (!kv || !qkv || !inv_freq || !q_out)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kv, qkv, inv_freq and q_out must not be NULL", fn);
    if (!kv->k || !kv->v || !kv->block_tables || !kv->positions)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: the view's k, v, block_tables and positions must not be "
                "NULL", fn);
    if (B < 1 || B > kv->n_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d is outside [1, %d] (rows of the view)", fn, B,
                kv->n_rows);
    if (n_heads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_heads = %d must be positive", fn, n_heads);
    if (kv->n_kv_heads < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: n_kv_heads = %d must be positive", fn, kv->n_kv_heads);
    if (kv->head_dim < 2 || kv->head_dim % 2 || kv->head_dim > GP_ROPE_MAX_HEAD_DIM)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: head_dim = %d must be even and in [2, %d]", fn,
                kv->head_dim, GP_ROPE_MAX_HEAD_DIM);
    if (kv->block_size < 1 || kv->max_blocks < 1 || kv->n_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: block_size = %d, max_blocks = %d and n_blocks = %d must "
                "be positive", fn, kv->block_size, kv->max_blocks, kv->n_blocks);
    if ((int64_t)(n_heads + 2 * (int64_t)kv->n_kv_heads) * kv->head_dim > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: (n_heads = %d + 2 x n_kv_heads = %d) x head_dim = %d "
                "overflows", fn, n_heads, kv->n_kv_heads, kv->head_dim);
    gp_rope_args a;
    a.qkv = (const __nv_bfloat16 *)qkv;
    a.positions = kv->positions;
    a.inv_freq = inv_freq;
    a.tables = kv->block_tables;
    a.k_cache = (__nv_bfloat16 *)kv->k;
    a.v_cache = (__nv_bfloat16 *)kv->v;
    a.q_out = (__nv_bfloat16 *)q_out;
    a.B = B;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.head_dim = kv->head_dim;
    a.block_size = kv->block_size;
    a.max_blocks = kv->max_blocks;
    a.n_blocks = kv->n_blocks;
    return gp_rope_kv_launch(&a, (cudaStream_t)stream);
}
