/* Causal prefill attention: the launch arguments and device helpers the
 * mma.sync kernel (prefill_attn.cu) and the Hopper wgmma kernel
 * (prefill_attn_wgmma.cu) share; private to the attention library. */
#ifndef GP_PREFILL_ATTN_CUH
#define GP_PREFILL_ATTN_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gp_attention.h"

typedef struct pf_args {
    const __nv_bfloat16 *q;   /* [rows][n_heads][HD] */
    __nv_bfloat16 *out;       /* [rows][n_heads][HD] */
    const __nv_bfloat16 *k;   /* [n_blocks][block_size][n_kv][HD] */
    const __nv_bfloat16 *v;
    const int32_t *tables;    /* [table rows][max_blocks] */
    const gp_prefill_seq_desc *seqs;
    int n_heads, n_kv, group, block_size, max_blocks;
    int bs_shift;             /* log2(block_size) when it is a power of two, else -1 */
    float scale_log2;         /* log2(e) / sqrt(HD) */
} pf_args;

/* 2^x; inputs are scores minus a reference max (at most a few units), so the hardware
 * approximation's 2 ulp are far below the bf16 rounding p gets next. */
static __device__ __forceinline__ float pf_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The Hopper kernel (head_dim 128, sm_90a builds on compute capability 9.0
 * devices): 1 when this build and the current device can run it. */
int gp_prefill_attn_wgmma_ready(void);
gp_status gp_prefill_attn_wgmma_launch(const pf_args &a, int n_seqs, int max_q_len, cudaStream_t stream);

#endif
