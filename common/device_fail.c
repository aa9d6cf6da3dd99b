/* The single mapping of failed CUDA runtime, driver and cuBLAS calls to a
 * gp_status and a message, so that every folder reports a full device, a
 * missing device and a dead context the same way. */
#include "gp_device.h"

#include <stdio.h>

#include <cublas_api.h>
#include <cuda.h>

/* The status a code means when no sticky error is involved. */
static gp_status code_status(gp_device_api api, int code)
{
    switch (api) {
    case GP_DEVICE_API_RUNTIME:
        switch ((cudaError_t)code) {
        case cudaErrorMemoryAllocation:
            return GP_ERR_DEVICE_MEMORY;
        case cudaErrorNoDevice:
        case cudaErrorInvalidDevice:
        case cudaErrorInsufficientDriver:
        case cudaErrorDevicesUnavailable:
        case cudaErrorSystemDriverMismatch:
        case cudaErrorCompatNotSupportedOnDevice:
            return GP_ERR_NO_DEVICE;
        default:
            return GP_ERR_CUDA;
        }
    case GP_DEVICE_API_DRIVER:
        switch ((CUresult)code) {
        case CUDA_ERROR_OUT_OF_MEMORY:
            return GP_ERR_DEVICE_MEMORY;
        case CUDA_ERROR_NO_DEVICE:
        case CUDA_ERROR_INVALID_DEVICE:
        case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
            return GP_ERR_NO_DEVICE;
        /* the green pool falls back to plain streams on this one */
        case CUDA_ERROR_NOT_SUPPORTED:
            return GP_ERR_UNSUPPORTED;
        default:
            return GP_ERR_CUDA;
        }
    case GP_DEVICE_API_CUBLAS:
        switch ((cublasStatus_t)code) {
        case CUBLAS_STATUS_ALLOC_FAILED:
            return GP_ERR_DEVICE_MEMORY;
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return GP_ERR_NO_DEVICE;
        case CUBLAS_STATUS_NOT_SUPPORTED:
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return GP_ERR_UNSUPPORTED;
        default:
            return GP_ERR_CUDA;
        }
    }
    return GP_ERR_CUDA;
}

gp_status gp_device_fail(gp_device_api api, int code, int held, const char *call,
                         const char *text, const char *name, const char *file, int line)
{
    /* Runtime and driver share the sticky codes; cuBLAS reports a dead
     * context only through what the caller found held. */
    int sticky = api != GP_DEVICE_API_CUBLAS && gp_cuda_code_is_sticky(code);
    int before = gp_device_faulted();
    gp_status s = code_status(api, code);
    char extra[512] = "";
    /* Checked before everything else: after a sticky error the context is
     * dead whatever the call says, and e.g. NOT_SUPPORTED must not send the
     * green pool to its fallback on a dead context. */
    if (sticky) {
        s = GP_ERR_DEVICE_FAULT;
        snprintf(extra, sizeof extra, "; %s", GP_DEVICE_FAULT_ADVICE);
    } else if (before) {
        s = GP_ERR_DEVICE_FAULT;
        snprintf(extra, sizeof extra, "; the context is unusable since an earlier sticky error "
                 "(%.300s)", gp_device_fault_message());
    } else if (held) {
        s = GP_ERR_DEVICE_FAULT;
        snprintf(extra, sizeof extra, "; the CUDA context holds %s; %s",
                 cudaGetErrorName((cudaError_t)held), GP_DEVICE_FAULT_ADVICE);
    } else if (s == GP_ERR_DEVICE_MEMORY) {
        gp_device_mem_text(extra, sizeof extra);
    }
    /* a failed call (or a cuBLAS launch) leaves a runtime error behind; a
     * non-sticky one is cleared so that the next check does not blame an
     * innocent call */
    (void)cudaGetLastError();
    gp_set_error("%s failed: %s (%s) at %s:%d%s", call, text ? text : "no description",
                 name ? name : "unknown code", file, line, extra);
    if (sticky || held)
        gp_device_fault_note(gp_last_error());
    return s;
}

gp_status gp_cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
    return gp_device_fail(GP_DEVICE_API_RUNTIME, (int)e, 0, call, cudaGetErrorString(e),
                          cudaGetErrorName(e), file, line);
}

const char *gp_cuda_absent_reason(cudaError_t e)
{
    static _Thread_local char why[256];
    int drv = 0, rt = 0;
    /* the driver's version is 0 when no driver is installed */
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    if ((e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) && drv == 0)
        snprintf(why, sizeof why, "no NVIDIA driver or GPU was found");
    else if (e == cudaErrorNoDevice)
        snprintf(why, sizeof why, "the NVIDIA driver (CUDA %d.%d) finds no GPU", drv / 1000, (drv % 1000) / 10);
    else if (e == cudaErrorInsufficientDriver)
        snprintf(why, sizeof why, "the NVIDIA driver supports CUDA %d.%d, older than this build's runtime %d.%d "
                 "needs", drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    else
        snprintf(why, sizeof why, "%s", cudaGetErrorString(e));
    return why;
}
