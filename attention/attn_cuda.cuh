/* Private CUDA helpers of the attention library: turn a failing CUDA call
 * into a gp_status with a message naming the call and CUDA's reason. */
#ifndef GP_ATTN_CUDA_CUH
#define GP_ATTN_CUDA_CUH

#include <cuda_runtime.h>

#include "gp_common.h"

/* Allocation failures and missing devices get their own statuses so callers
 * can tell them from bugs. */
static inline gp_status gp_attn_cuda_fail(cudaError_t e, const char *call, const char *file,
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
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not blamed */
    return s;
}

#define GP_ATTN_CUDA_TRY(call)                                                                   \
    do {                                                                                         \
        cudaError_t gp_attn_e_ = (call);                                                         \
        if (gp_attn_e_ != cudaSuccess)                                                           \
            return gp_attn_cuda_fail(gp_attn_e_, #call, __FILE__, __LINE__);                     \
    } while (0)

#define GP_ATTN_CUDA_GOTO(call, st, label)                                                       \
    do {                                                                                         \
        cudaError_t gp_attn_e_ = (call);                                                         \
        if (gp_attn_e_ != cudaSuccess) {                                                         \
            (st) = gp_attn_cuda_fail(gp_attn_e_, #call, __FILE__, __LINE__);                     \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

/* After a <<<>>> launch: launch-configuration errors surface here. Legal
 * during stream capture (it does not synchronise). */
#define GP_ATTN_LAUNCH_CHECK(what)                                                               \
    do {                                                                                         \
        cudaError_t gp_attn_e_ = cudaGetLastError();                                             \
        if (gp_attn_e_ != cudaSuccess)                                                           \
            return gp_attn_cuda_fail(gp_attn_e_, what " launch", __FILE__, __LINE__);            \
    } while (0)

#endif
