/* Checks for the cuBLAS(Lt) calls of the engine folder (CUDA runtime calls
 * use common/cuda_util.cuh, included here): a failure becomes a gp_status plus
 * a message naming the call, file and line. */
#ifndef GP_ENGINE_CUDA_CHECK_H
#define GP_ENGINE_CUDA_CHECK_H

/* C-includable: only the C APIs of cudart and cuBLASLt. */
#include <stdio.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "cuda_util.cuh"
#include "gp_common.h"

/* cuBLASLt launches its kernels through its own runtime, so a dead context
 * reaches us as CUBLAS_STATUS_EXECUTION_FAILED (or INTERNAL_ERROR) with no
 * sticky code of ours. The sticky cudaError_t the context holds (0: none):
 * the runtime's last error, else (probe) that of calls that touch the
 * context without waiting: cudaMemGetInfo, then cudaStreamQuery of the
 * GEMM's stream when given (it reads the stream's error state). Probes are
 * not made where failures are expected and survived (candidate algorithms,
 * possibly inside a graph capture, which a query would end). An earlier
 * sticky error seen by any check counts as well (as cudaErrorLaunchFailure). */
static inline int gp_cublas_failure_sticky_code(cublasStatus_t c, int probe, cudaStream_t stream)
{
    if (c == CUBLAS_STATUS_EXECUTION_FAILED || c == CUBLAS_STATUS_INTERNAL_ERROR) {
        int e = (int)cudaPeekAtLastError();
        if (gp_cuda_code_is_sticky(e))
            return e;
        size_t free_b = 0, total_b = 0;
        if (probe && gp_cuda_code_is_sticky(e = (int)cudaMemGetInfo(&free_b, &total_b)))
            return e;
        if (probe && stream && gp_cuda_code_is_sticky(e = (int)cudaStreamQuery(stream)))
            return e;
    }
    return gp_device_faulted() ? (int)cudaErrorLaunchFailure : 0;
}

/* The failure of call on stream (NULL: unknown; see the probes above),
 * mapped by the common mapper. */
static inline gp_status gp_check_cublas_fail_on(cublasStatus_t c, const char *call,
                                                const char *file, int line, cudaStream_t stream)
{
    int held = gp_cublas_failure_sticky_code(c, 1, stream);
    return gp_device_fail(GP_DEVICE_API_CUBLAS, (int)c, held, call, cublasLtGetStatusString(c),
                          cublasLtGetStatusName(c), file, line);
}

static inline gp_status gp_check_cublas_fail(cublasStatus_t c, const char *call, const char *file,
                                             int line)
{
    return gp_check_cublas_fail_on(c, call, file, line, NULL);
}

#define GP_CHECK_CUBLAS(call)                                                                    \
    do {                                                                                         \
        cublasStatus_t gp_chk_c_ = (call);                                                       \
        if (gp_chk_c_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return gp_check_cublas_fail(gp_chk_c_, #call, __FILE__, __LINE__);                   \
    } while (0)

#define GP_CHECK_CUBLAS_GOTO(call, st, label)                                                    \
    do {                                                                                         \
        cublasStatus_t gp_chk_c_ = (call);                                                       \
        if (gp_chk_c_ != CUBLAS_STATUS_SUCCESS) {                                                \
            (st) = gp_check_cublas_fail(gp_chk_c_, #call, __FILE__, __LINE__);                   \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

#endif
