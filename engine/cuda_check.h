/* Checks for the cuBLAS(Lt) calls of the engine folder (CUDA runtime calls
 * use model/cuda_util.cuh, included here): a failure becomes a gp_status plus
 * a message naming the call, file and line. */
#ifndef GP_ENGINE_CUDA_CHECK_H
#define GP_ENGINE_CUDA_CHECK_H

/* C-includable: only the C APIs of cudart and cuBLASLt. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "cuda_util.cuh"
#include "gp_common.h"

static inline gp_status gp_check_cublas_fail(cublasStatus_t c, const char *call, const char *file,
                                             int line)
{
    gp_status s = GP_ERR_CUDA;
    if (c == CUBLAS_STATUS_ALLOC_FAILED)
        s = GP_ERR_DEVICE_MEMORY;
    else if (c == CUBLAS_STATUS_NOT_SUPPORTED || c == CUBLAS_STATUS_ARCH_MISMATCH)
        s = GP_ERR_UNSUPPORTED;
    else if (c == CUBLAS_STATUS_NOT_INITIALIZED)
        s = GP_ERR_NO_DEVICE;
    gp_set_error("%s failed: %s (%s) at %s:%d", call, cublasLtGetStatusString(c),
                 cublasLtGetStatusName(c), file, line);
    /* cuBLAS launch failures also leave a runtime error behind */
    (void)cudaGetLastError();
    return s;
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
