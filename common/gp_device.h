/* Every device allocation of the library goes through these helpers (library
 * gp_common_cuda): one place that names what failed with its byte count and
 * the device's free/total memory, counts live buffers for leak checks, and
 * honours GP_FAULT_DEVICE_ALLOC. Also gp_device_fail (the single mapping of
 * failed CUDA runtime, driver and cuBLAS calls), the bounded event wait and the step gate (sticky-error
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
 * if it fired. For out-of-memory messages. */
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

/* Which API a failed call belongs to: its code means something different
 * in each. */
typedef enum gp_device_api {
    GP_DEVICE_API_RUNTIME = 0, /* cudaError_t */
    GP_DEVICE_API_DRIVER = 1,  /* CUresult */
    GP_DEVICE_API_CUBLAS = 2,  /* cublasStatus_t */
} gp_device_api;

/* The single mapping of a failed CUDA call: sets the message "call failed:
 * text (name) at file:line" plus what the status needs, and tells a full
 * device (GP_ERR_DEVICE_MEMORY, with free/total bytes), a missing one
 * (GP_ERR_NO_DEVICE), a feature the device lacks (GP_ERR_UNSUPPORTED) and a
 * dead context (GP_ERR_DEVICE_FAULT: a sticky code, any failure after one,
 * or held != 0) from bugs (GP_ERR_CUDA). held: a sticky cudaError_t the
 * caller found the context holding when the code cannot say so (cuBLAS
 * launches through its own runtime), else 0. text and name describe code in
 * its API's words. A sticky error sets the device-fault flag. */
gp_status gp_device_fail(gp_device_api api, int code, int held, const char *call,
                         const char *text, const char *name, const char *file, int line);

/* gp_device_fail for a CUDA runtime call (the macros in cuda_util.cuh
 * use it). */
gp_status gp_cuda_fail(cudaError_t e, const char *call, const char *file, int line);

/* Why no GPU is usable after cudaGetDeviceCount (or the first context)
 * failed with e, in words a user without a GPU understands: the runtime's
 * own "CUDA driver version is insufficient" is what a machine with no NVIDIA
 * driver at all gets. One line, no trailing period; a thread's own buffer. */
const char *gp_cuda_absent_reason(cudaError_t e);

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

/* Programmatic dependent launch (Hopper): with $GP_PDL = 1 (the default;
 * 0 turns it off, another value is GP_ERR_INVALID_ARG of gp_pdl_check, and
 * gp_pdl_enabled then answers 0) the decode path's kernels launch with
 * cudaLaunchAttributeProgrammaticStreamSerialization, so a kernel's CTAs are
 * scheduled while the previous kernel on the stream drains and wait for it
 * in griddepcontrol.wait (gp_launch.cuh) before touching memory; a
 * chain of small kernels no longer pays each launch after the last CTA of
 * the one before. Read once per process; engines check it at create. */
gp_status gp_pdl_check(void);
int gp_pdl_enabled(void);

/* Called once at the beginning of every decode step (engine and pipeline),
 * before any CUDA call of the step: GP_ERR_DEVICE_FAULT at once after a
 * sticky error (the step would only fail later, or block on a dead context),
 * and the GP_FAULT_TRAP hook, which launches a trapping kernel on stream. */
gp_status gp_device_step_gate(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
