/* The LM head split by vocabulary, put back in vocabulary order: each
 * rank's segment holds its rows' logits, B rows of n_r; one thread per
 * output logit, consecutive threads on consecutive vocabulary ids. */
#include <stdint.h>

#include "cuda_check.h"
#include "gp_launch.cuh"
#include "gp_model.h"
#include "kernels.h"

#define THREADS 256

static __global__ void vocab_gather_kernel(const float *__restrict__ parts, float *__restrict__ logits, int B, int V,
                                           int s)
{
    gp_pdl_wait();
    const int v = (int)(blockIdx.x * THREADS + threadIdx.x), b = (int)blockIdx.y;
    if (v >= V)
        return;
    const int r = v / s, j = v - r * s, n = min(s, V - r * s);
    logits[(size_t)b * V + v] = parts[(size_t)r * B * s + (size_t)b * n + j];
}

extern "C" gp_status gp_vocab_gather(const float *parts, float *logits, int B, int V, int tp, void *stream)
{
    if (B < 0 || V < 1 || tp < 1 || tp > GP_TP_MAX || gp_vocab_part_tokens(V, tp, tp - 1) == 0 || B > 65535)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_vocab_gather: B = %d, V = %d, tp = %d (need 0 <= B <= 65535, V >= 1, "
                "1 <= tp <= " GP_TP_MAX_STR " and every rank a row)", B, V, tp);
    if (B == 0)
        return GP_OK;
    if (!parts || !logits)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_vocab_gather: NULL pointer (parts %p, logits %p)", (const void *)parts,
                (void *)logits);
    gp_launch l;
    gp_launch_setup(&l, dim3((unsigned)((V + THREADS - 1) / THREADS), (unsigned)B), dim3(THREADS), 0,
                    (cudaStream_t)stream);
    GP_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, vocab_gather_kernel, parts, logits, B, V, gp_vocab_part_rows(V, tp)));
    return GP_OK;
}
