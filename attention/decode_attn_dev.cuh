/* Helpers shared by the decode-attention kernels (the CUDA-core kernel in
 * decode_attn.cu, the tensor-core ones in decode_attn_mma.cu and
 * decode_attn_stream.cu): the safe running max, row lengths and block
 * indices, the merge of the warps' partial softmax states into the output
 * (or the split workspace), and the once-per-kernel shared-memory
 * attributes. */
#ifndef GP_DECODE_ATTN_DEV_CUH
#define GP_DECODE_ATTN_DEV_CUH

#include <math.h>
#include <stdbool.h>

#include "gp_half.cuh"
#include "cuda_util.cuh"
#include "gp_launch.cuh"
#include "decode_attn.cuh"

/* The first time on a device (its bit of *done clear): kernel's dynamic
 * shared memory limit raised to smem bytes and, with max_shared, all of the
 * unified L1 it can get as shared memory (attributes of the kernel on the
 * current device, so once per device). */
static inline gp_status gp_attn_smem_once(unsigned *done, const void *kernel, int smem, bool max_shared)
{
    /* a kernel's attributes are per device: one bit per device of a process
     * driving several (devices beyond 31 set them on every call) */
    int dev = 0;
    GP_CUDA_TRY(cudaGetDevice(&dev));
    const unsigned bit = dev < 32 ? 1u << dev : 0u;
    if (bit && (__atomic_load_n(done, __ATOMIC_ACQUIRE) & bit))
        return GP_OK;
    GP_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (max_shared)
        GP_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    __atomic_fetch_or(done, bit, __ATOMIC_ACQ_REL);
    return GP_OK;
}

/* A running max that is still -inf (nothing seen) must not produce
 * exp2(-inf - -inf) = NaN: subtracting 0 instead gives exp2(-inf) = 0. */
static __device__ __forceinline__ float gp_safe_max(float m)
{
    return m == -INFINITY ? 0.0f : m;
}

/* Length of row b, clamped to what its table can hold: a bad one must not
 * read outside it. */
static __device__ __forceinline__ int gp_attn_row_len(const gp_attn_args &a, int b)
{
    const int len = __ldg(a.lens + b);
    const int cap = a.max_blocks * a.block_size;
    return len < 0 ? 0 : (len > cap ? cap : len);
}

/* Index in the row's block table of token t. */
static __device__ __forceinline__ int gp_attn_block_index(const gp_attn_args &a, int t)
{
    return a.bs_shift >= 0 ? (t >> a.bs_shift) : t / a.block_size;
}

/* Tokens [t_begin, t_end) of row b's split: every split of a row gets an
 * equal chunk of its clamped length, so a length above the host's max_len
 * is still covered. */
static __device__ __forceinline__ void gp_attn_split_range(const gp_attn_args &a, int b, int split, int *t_begin,
                                                           int *t_end)
{
    const int len = gp_attn_row_len(a, b);
    const int chunk = (len + a.n_splits - 1) / a.n_splits;
    *t_begin = min(split * chunk, len);
    *t_end = min(*t_begin + chunk, len);
}

/* The launch of an attention kernel: a CTA per (row, KV head) and split. */
static inline void gp_attn_launch_setup(gp_launch *l, const gp_attn_args *a, size_t smem, cudaStream_t stream)
{
    gp_launch_setup(l, dim3((unsigned)(a->B * a->n_kv), (unsigned)a->n_splits), dim3(GP_ATTN_THREADS), smem,
                    stream);
}

/* Merge the warps: one thread per (head, dim) of the group. s_m/s_l hold
 * each warp's running max and sum per head (log2 units), s_acc its
 * unnormalised output; the caller has synchronised the CTA. T: the output's
 * 16-bit type. */
template <class T, int HD, int GT, int NW>
static __device__ __forceinline__ void gp_attn_merge_warps(const gp_attn_args &a, int b, int kvh, int split,
                                                           const float (*s_m)[GT], const float (*s_l)[GT],
                                                           const float (*s_acc)[GT][HD])
{
    const int g = a.group;
    for (int i = threadIdx.x; i < g * HD; i += NW * 32) {
        const int h = i / HD, d = i % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            mx = fmaxf(mx, s_m[w][h]);
        const float ms = gp_safe_max(mx);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float c = exp2f(s_m[w][h] - ms);
            L = fmaf(s_l[w][h], c, L);
            o = fmaf(s_acc[w][h][d], c, o);
        }
        const size_t row = (size_t)b * a.n_heads + (size_t)kvh * g + h; /* (b, query head) */
        if (a.n_splits == 1) {
            /* L == 0 only for an empty row (len 0): zeros, not 0/0 */
            static_cast<T *>(a.out)[row * HD + d] = gp_half_traits<T>::from_float(L > 0.0f ? o / L : 0.0f);
        } else {
            const size_t idx = row * a.n_splits + split;
            a.ws_acc[idx * HD + d] = o;
            if (d == 0) {
                a.ws_ml[2 * idx] = mx;
                a.ws_ml[2 * idx + 1] = L;
            }
        }
    }
}

#endif
