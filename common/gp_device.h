/* Every device allocation of the library goes through these helpers (library
 * gp_common_cuda): one place that names what failed with its byte count and
 * the device's free/total memory, counts live buffers for leak checks, and
 * honours GP_FAULT_DEVICE_ALLOC. Also gp_cuda_fail (the single check of CUDA
 * runtime calls), the bounded event wait and the step gate (sticky-error
 * refusal, GP_FAULT_TRAP). C-includable: the runtime's C API only. */
#ifndef GP_DEVICE_H
#define GP_DEVICE_H

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "gp_common.h"
#include "gp_fault.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "; the device has F bytes (x GiB) free of T bytes (y GiB)" into buf, or why
 * that cannot be asked; then which allocation GP_FAULT_DEVICE_ALLOC failed,
 * if it fired. For out-of-memory messages. Inline so that the header-only
 * CUDA checks (model/cuda_util.cuh) need no extra library. */
static inline void gp_device_mem_text(char *buf, size_t cap)
{
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    int n;
    if (e == cudaSuccess)
        n = snprintf(buf, cap, "; the device has %zu bytes (%.2f GiB) free of %zu bytes (%.2f GiB)",
                     free_b, (double)free_b / 1073741824.0, total_b, (double)total_b / 1073741824.0);
    else
        n = snprintf(buf, cap, "; free device memory unknown (cudaMemGetInfo: %s)",
                     cudaGetErrorName(e));
    if (e != cudaSuccess && !gp_cuda_code_is_sticky((int)e))
        (void)cudaGetLastError();
    const char *what = NULL;
    size_t bytes = 0;
    long at = 0;
    const char *env_err = gp_fault_env_error();
    if (n >= 0 && (size_t)n < cap && env_err)
        snprintf(buf + n, cap - (size_t)n, " [injected: every allocation fails: %s]", env_err);
    else if (n >= 0 && (size_t)n < cap && gp_fault_alloc_injected(&what, &bytes, &at))
        snprintf(buf + n, cap - (size_t)n, " [injected: GP_FAULT_DEVICE_ALLOC=%ld failed %s]", at,
                 what);
}

/* The single check of CUDA runtime calls (the macros in model/cuda_util.cuh
 * use it): sets the message naming the call, CUDA's reason, file and line,
 * and maps the error so that callers can tell a full device
 * (GP_ERR_DEVICE_MEMORY, with free/total bytes), a missing one
 * (GP_ERR_NO_DEVICE) and a dead context (GP_ERR_DEVICE_FAULT: a sticky error,
 * or any failure after one) from bugs (GP_ERR_CUDA). */
static inline gp_status gp_cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
    int sticky = gp_cuda_code_is_sticky((int)e);
    int after = !sticky && gp_device_faulted();
    gp_status s = GP_ERR_CUDA;
    if (sticky || after)
        s = GP_ERR_DEVICE_FAULT;
    else if (e == cudaErrorMemoryAllocation)
        s = GP_ERR_DEVICE_MEMORY;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
             || e == cudaErrorDevicesUnavailable
             || e == cudaErrorSystemDriverMismatch || e == cudaErrorCompatNotSupportedOnDevice)
        s = GP_ERR_NO_DEVICE;
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not blamed */
    char extra[512] = "";
    if (s == GP_ERR_DEVICE_MEMORY)
        gp_device_mem_text(extra, sizeof extra);
    else if (sticky)
        snprintf(extra, sizeof extra, "; %s", GP_DEVICE_FAULT_ADVICE);
    else if (after)
        snprintf(extra, sizeof extra, "; the context is unusable since an earlier sticky error "
                 "(%.300s)", gp_device_fault_message());
    gp_set_error("%s failed: %s (%s) at %s:%d%s", call, cudaGetErrorString(e), cudaGetErrorName(e),
                 file, line, extra);
    if (sticky)
        gp_device_fault_note(gp_last_error());
    return s;
}

/* Device memory (cudaMalloc). On failure *p is NULL and the status is
 * GP_ERR_DEVICE_MEMORY (message: what, bytes, free/total), or what
 * gp_cuda_fail makes of another error. After a sticky error every helper
 * below refuses with GP_ERR_DEVICE_FAULT without calling CUDA. bytes == 0
 * gives NULL and GP_OK, as cudaMalloc does. */
gp_status gp_device_alloc(void **p, size_t bytes, const char *what);
void gp_device_free(void *p); /* NULL is fine; errors are ignored (teardown) */
/* Page-locked host memory (cudaHostAlloc, default flags). Failure is
 * GP_ERR_DEVICE_MEMORY too: the driver pins and maps it for the device, and
 * callers react to it as to device memory (smaller batch or context). */
gp_status gp_pinned_alloc(void **p, size_t bytes, const char *what);
void gp_pinned_free(void *p);
/* Buffers from the two allocators above not yet freed (tests check that a
 * failed create leaves none behind). */
long gp_device_alloc_live(void);

/* Resources without a byte count, counted and injected the same way; their
 * out-of-memory message carries the device's free/total bytes. */
gp_status gp_device_stream_create(cudaStream_t *s, const char *what); /* non-blocking */
gp_status gp_device_event_create(cudaEvent_t *ev, unsigned flags, const char *what);
gp_status gp_device_graph_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, const char *what);

/* Out-of-device-memory status and message for a site that allocates through
 * a library (cuBLASLt, the driver): "out of device memory: what ...". */
gp_status gp_device_oom(const char *what, size_t bytes, const char *reason);

/* Waits for ev on the host, as cudaEventSynchronize, but for at most
 * $GP_DEVICE_WAIT_TIMEOUT_S seconds (read once; default 300; 0: no limit; a
 * value that is not an integer in 0..GP_DEVICE_WAIT_MAX_S is
 * GP_ERR_INVALID_ARG of every wait):
 * past it the device is taken as hung and the call returns
 * GP_ERR_DEVICE_FAULT (and sets the sticky flag), since a kernel that never
 * ends cannot be cancelled either. what names the wait in the message. */
gp_status gp_device_event_wait(cudaEvent_t ev, const char *what);
#define GP_DEVICE_WAIT_MAX_S 86400
gp_status gp_device_wait_limit_s(double *seconds);

/* Called once at the beginning of every decode step (engine and pipeline),
 * before any CUDA call of the step: GP_ERR_DEVICE_FAULT at once after a
 * sticky error (the step would only fail later, or block on a dead context),
 * and the GP_FAULT_TRAP hook, which launches a trapping kernel on stream. */
gp_status gp_device_step_gate(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
