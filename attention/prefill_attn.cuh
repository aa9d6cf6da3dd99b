/* Causal prefill attention: the launch arguments and device helpers that the
 * mma.sync kernel (prefill_attn.cu) and the Hopper warp-specialized kernel
 * (prefill_attn_ws.cu) share; private to the attention library. */
#ifndef GP_PREFILL_ATTN_CUH
#define GP_PREFILL_ATTN_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "decode_attn_dev.cuh"
#include "gp_attention.h"

typedef struct pf_args {  /* 16-bit pointers: of the kernel's T */
    const void *q;            /* [rows][n_heads][HD] */
    void *out;                /* [rows][n_heads][HD] */
    const void *k;            /* [n_blocks][block_size][n_kv][HD] */
    const void *v;
    const int32_t *tables;    /* [table rows][max_blocks] */
    const gp_prefill_seq_desc *seqs;
    int n_heads, n_kv, group, block_size, max_blocks;
    int bs_shift;             /* log2(block_size) when it is a power of two, else -1 */
    float scale_log2;         /* log2(e) / sqrt(HD) */
} pf_args;

/* The reference max of a row moves only when a tile's scores exceed it by
 * more than this (log2 units): p then stays below 2^8, harmless in bf16,
 * fp16 and fp32, and a warp whose rows all keep theirs skips rescaling its
 * output (rescaling every tile measured 3% slower). */
#define PF_RESCALE_SLACK 8.0f

/* 2^x; inputs are scores minus a reference max (at most the kernels' rescale
 * slack), so the hardware approximation's 2 ulp are far below the bf16 (or
 * fp16) rounding p gets next. */
static __device__ __forceinline__ float pf_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Launches a prefill kernel on the grid both share: a CTA per (query head,
 * bm query rows, sequence), threads each, smem bytes of dynamic shared
 * memory (its limit raised once per device through *done). name: the
 * kernel's, for the error. */
static inline gp_status pf_launch_grid(const void *kernel, const char *name, unsigned *done, int bm, int threads,
                                       int smem, const pf_args &a, int n_seqs, int max_q_len, cudaStream_t stream)
{
    GP_TRY(gp_attn_smem_once(done, kernel, smem, false));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)a.n_heads, (unsigned)((max_q_len + bm - 1) / bm), (unsigned)n_seqs);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    void *args[] = {(void *)&a};
    cudaError_t e = cudaLaunchKernelExC(&cfg, kernel, args);
    if (e != cudaSuccess)
        return gp_cuda_fail(e, name, __FILE__, __LINE__);
    return GP_OK;
}

/* The Hopper kernel serves head_dim 128 in builds that include sm_90a code,
 * on devices of compute capability 9.0: 1 when both hold for the current
 * device. */
int gp_prefill_attn_ws_ready(void);
gp_status gp_prefill_attn_ws_launch(const pf_args &a, bool bf16, int n_seqs, int max_q_len, cudaStream_t stream);

#endif
