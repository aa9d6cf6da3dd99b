/* Checks for every CUDA runtime and cuBLAS(Lt) call of the engine folder: a
 * failure becomes a gp_status plus a message naming the call, file and line. */
#ifndef GP_ENGINE_CUDA_CHECK_H
#define GP_ENGINE_CUDA_CHECK_H

/* C-includable: only the C APIs of cudart and cuBLASLt. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "gp_common.h"

/* Allocation failures and missing devices get their own statuses so callers
 * can tell them from bugs. A non-sticky error is cleared so the next check
 * does not blame an innocent call for it. */
static inline gp_status gp_check_cuda_fail(cudaError_t e, const char *call, const char *file,
                                           int line)
{
    gp_status s = GP_ERR_CUDA;
    if (e == cudaErrorMemoryAllocation)
        s = GP_ERR_DEVICE_MEMORY;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
             || e == cudaErrorDevicesUnavailable || e == cudaErrorSystemDriverMismatch
             || e == cudaErrorCompatNotSupportedOnDevice)
        s = GP_ERR_NO_DEVICE;
    gp_set_error("%s failed: %s (%s) at %s:%d", call, cudaGetErrorString(e), cudaGetErrorName(e),
                 file, line);
    (void)cudaGetLastError();
    return s;
}

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

/* Return from the enclosing gp_status function when call fails. */
#define GP_CHECK_CUDA(call)                                                                      \
    do {                                                                                         \
        cudaError_t gp_chk_e_ = (call);                                                          \
        if (gp_chk_e_ != cudaSuccess)                                                            \
            return gp_check_cuda_fail(gp_chk_e_, #call, __FILE__, __LINE__);                     \
    } while (0)

/* For functions with cleanup: store the status in st and jump to label. */
#define GP_CHECK_CUDA_GOTO(call, st, label)                                                      \
    do {                                                                                         \
        cudaError_t gp_chk_e_ = (call);                                                          \
        if (gp_chk_e_ != cudaSuccess) {                                                          \
            (st) = gp_check_cuda_fail(gp_chk_e_, #call, __FILE__, __LINE__);                     \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

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

/* After a kernel launch: launch-configuration errors are only visible through
 * cudaGetLastError. what (a string literal) names the kernel in the message. */
#define GP_CHECK_LAUNCH(what)                                                                    \
    do {                                                                                         \
        cudaError_t gp_chk_e_ = cudaGetLastError();                                              \
        if (gp_chk_e_ != cudaSuccess)                                                            \
            return gp_check_cuda_fail(gp_chk_e_, "launch of " what, __FILE__, __LINE__);         \
    } while (0)

#endif
