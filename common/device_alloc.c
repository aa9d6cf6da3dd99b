/* The device allocation helpers of gp_device.h: fault injection first, then
 * the CUDA call, and on failure one message naming what, how many bytes and
 * how much the device has free. */
#include "gp_device.h"

#include <stdatomic.h>
#include <stdio.h>

#include <cuda.h>

/* gp_cuda_code_is_sticky serves runtime and driver codes with one list. */
_Static_assert(cudaErrorIllegalAddress == 700 && CUDA_ERROR_ILLEGAL_ADDRESS == 700, "sticky codes");
_Static_assert(cudaErrorLaunchTimeout == 702 && CUDA_ERROR_LAUNCH_TIMEOUT == 702, "sticky codes");
_Static_assert(cudaErrorAssert == 710 && CUDA_ERROR_ASSERT == 710, "sticky codes");
_Static_assert(cudaErrorHardwareStackError == 714 && CUDA_ERROR_HARDWARE_STACK_ERROR == 714,
               "sticky codes");
_Static_assert(cudaErrorIllegalInstruction == 715 && CUDA_ERROR_ILLEGAL_INSTRUCTION == 715,
               "sticky codes");
_Static_assert(cudaErrorMisalignedAddress == 716 && CUDA_ERROR_MISALIGNED_ADDRESS == 716,
               "sticky codes");
_Static_assert(cudaErrorInvalidAddressSpace == 717 && CUDA_ERROR_INVALID_ADDRESS_SPACE == 717,
               "sticky codes");
_Static_assert(cudaErrorInvalidPc == 718 && CUDA_ERROR_INVALID_PC == 718, "sticky codes");
_Static_assert(cudaErrorLaunchFailure == 719 && CUDA_ERROR_LAUNCH_FAILED == 719, "sticky codes");
_Static_assert(cudaErrorMpsClientTerminated == 810 && CUDA_ERROR_MPS_CLIENT_TERMINATED == 810,
               "sticky codes");
_Static_assert(cudaErrorExternalDevice == 911 && CUDA_ERROR_EXTERNAL_DEVICE == 911, "sticky codes");

static atomic_long gp_live_buffers;

/* After a sticky error nothing is asked of the dead context: the caller gets
 * the fault at once, naming what it wanted. */
static gp_status refuse_if_faulted(const char *what, size_t bytes)
{
    GP_TRY(gp_fault_env_status());
    if (!gp_device_faulted())
        return GP_OK;
    GP_FAIL(GP_ERR_DEVICE_FAULT, "allocating %s (%zu bytes) refused: the CUDA context is unusable "
            "since an earlier sticky error (%.400s)", what, bytes, gp_device_fault_message());
}

gp_status gp_device_oom(const char *what, size_t bytes, const char *reason)
{
    char mem[512];
    gp_device_mem_text(mem, sizeof mem);
    if (bytes) {
        /* exact bytes for whoever greps, a readable size for whoever reads */
        double v = (double)bytes;
        const char *unit = "KiB";
        v /= 1024.0;
        if (v >= 1024.0)
            v /= 1024.0, unit = "MiB";
        if (v >= 1024.0)
            v /= 1024.0, unit = "GiB";
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "out of device memory: %s needs %zu bytes (%.2f %s) (%s)%s",
                what, bytes, v, unit, reason, mem);
    }
    GP_FAIL(GP_ERR_DEVICE_MEMORY, "out of device memory: creating %s failed (%s)%s", what, reason,
            mem);
}

/* Failure of one allocation: out of memory gets the sizes; anything else
 * (a sticky error, no device) keeps gp_cuda_fail's classification, with what
 * and the size in the call text. */
static gp_status alloc_fail(cudaError_t e, const char *api, const char *what, size_t bytes)
{
    if (e == cudaErrorMemoryAllocation && !gp_device_faulted()) {
        (void)cudaGetLastError(); /* not sticky: the next call must not see it */
        char reason[128];
        snprintf(reason, sizeof reason, "%s: %s", api, cudaGetErrorName(e));
        return gp_device_oom(what, bytes, reason);
    }
    char call[256];
    if (bytes)
        snprintf(call, sizeof call, "%s of %zu bytes for %s", api, bytes, what);
    else
        snprintf(call, sizeof call, "%s for %s", api, what);
    return gp_cuda_fail(e, call, __FILE__, __LINE__);
}

gp_status gp_device_alloc(void **p, size_t bytes, const char *what)
{
    *p = NULL;
    GP_TRY(refuse_if_faulted(what, bytes));
    cudaError_t e = gp_fault_alloc_hit(what, bytes) ? cudaErrorMemoryAllocation : cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        return alloc_fail(e, "cudaMalloc", what, bytes);
    }
    if (*p)
        atomic_fetch_add(&gp_live_buffers, 1);
    return GP_OK;
}

void gp_device_free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub(&gp_live_buffers, 1);
    if (cudaFree(p) != cudaSuccess) /* teardown: nothing to do about it */
        (void)cudaGetLastError();
}

gp_status gp_pinned_alloc(void **p, size_t bytes, const char *what)
{
    *p = NULL;
    GP_TRY(refuse_if_faulted(what, bytes));
    cudaError_t e = gp_fault_alloc_hit(what, bytes) ? cudaErrorMemoryAllocation
                                                    : cudaHostAlloc(p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *p = NULL;
        return alloc_fail(e, "cudaHostAlloc (pinned host memory)", what, bytes);
    }
    if (*p)
        atomic_fetch_add(&gp_live_buffers, 1);
    return GP_OK;
}

void gp_pinned_free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub(&gp_live_buffers, 1);
    if (cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

long gp_device_alloc_live(void)
{
    return atomic_load(&gp_live_buffers);
}

gp_status gp_device_stream_create(cudaStream_t *s, const char *what)
{
    *s = NULL;
    GP_TRY(refuse_if_faulted(what, 0));
    cudaError_t e = gp_fault_alloc_hit(what, 0) ? cudaErrorMemoryAllocation
                                                : cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        *s = NULL;
        return alloc_fail(e, "cudaStreamCreateWithFlags", what, 0);
    }
    return GP_OK;
}

gp_status gp_device_event_create(cudaEvent_t *ev, unsigned flags, const char *what)
{
    *ev = NULL;
    GP_TRY(refuse_if_faulted(what, 0));
    cudaError_t e = gp_fault_alloc_hit(what, 0) ? cudaErrorMemoryAllocation
                                                : cudaEventCreateWithFlags(ev, flags);
    if (e != cudaSuccess) {
        *ev = NULL;
        return alloc_fail(e, "cudaEventCreateWithFlags", what, 0);
    }
    return GP_OK;
}

gp_status gp_device_graph_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, const char *what)
{
    *exec = NULL;
    GP_TRY(refuse_if_faulted(what, 0));
    cudaError_t e = gp_fault_alloc_hit(what, 0) ? cudaErrorMemoryAllocation
                                                : cudaGraphInstantiate(exec, graph, 0);
    if (e != cudaSuccess) {
        *exec = NULL;
        return alloc_fail(e, "cudaGraphInstantiate", what, 0);
    }
    return GP_OK;
}
