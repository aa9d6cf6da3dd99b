/* Device failure state shared by every folder: the process-wide "sticky CUDA
 * error seen" flag, and the test-only fault hooks (GP_FAULT_DEVICE_ALLOC,
 * GP_FAULT_TRAP). Pure C with no CUDA header, so CPU-only code can ask too. */
#ifndef GP_FAULT_H
#define GP_FAULT_H

#include <stdbool.h>
#include <stddef.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA runtime (cudaError_t) or driver (CUresult) code is a sticky
 * error: the documentation says the process is left in an inconsistent state,
 * every later CUDA call returns the same error, and the process must be
 * terminated and relaunched. Both enums use the same values for these codes
 * (checked in device_alloc.c), so one list serves both. */
static inline int gp_cuda_code_is_sticky(int code)
{
    switch (code) {
    case 226: /* cudaErrorContained / CUDA_ERROR_CONTAINED */
    case 700: /* cudaErrorIllegalAddress */
    case 702: /* cudaErrorLaunchTimeout */
    case 710: /* cudaErrorAssert */
    case 714: /* cudaErrorHardwareStackError */
    case 715: /* cudaErrorIllegalInstruction */
    case 716: /* cudaErrorMisalignedAddress */
    case 717: /* cudaErrorInvalidAddressSpace */
    case 718: /* cudaErrorInvalidPc */
    case 719: /* cudaErrorLaunchFailure */
    case 721: /* cudaErrorTensorMemoryLeak */
    case 810: /* cudaErrorMpsClientTerminated */
    case 911: /* cudaErrorExternalDevice */
        return 1;
    }
    return 0;
}

/* Text appended to every sticky-error message: what the caller must do. */
#define GP_DEVICE_FAULT_ADVICE                                                                   \
    "sticky CUDA error: the CUDA context is unusable (every later CUDA call fails); the "        \
    "process must exit and be restarted to use the GPU again"

/* Records that a sticky error was seen (the first message is kept). Once set,
 * every later CUDA failure is reported as GP_ERR_DEVICE_FAULT and the step
 * entry points refuse at once instead of touching the dead context. */
void gp_device_fault_note(const char *message);
bool gp_device_faulted(void);
/* The first sticky error's message, or "" when none was seen. */
const char *gp_device_fault_message(void);

/* ---- test-only fault injection; both variables are read once per process
 * through gp_env_int (unset or 0: off). Anything but a non-negative integer
 * is an error: gp_fault_env_status returns it (the allocation helpers of
 * gp_device.h and the step gate return it in turn), and every allocation
 * that asks gp_fault_alloc_hit fails, its out-of-memory message naming the
 * bad variable. */
gp_status gp_fault_env_status(void);
/* The bad variable's message, or NULL when both are valid. */
const char *gp_fault_env_error(void);

/* GP_FAULT_DEVICE_ALLOC=N: the N-th device allocation of the process (device
 * or pinned memory, stream, event, graph instantiation, cuBLASLt handle,
 * green context) fails as if the device were out of memory. Every allocation
 * site calls gp_fault_alloc_hit first; true means "fail now". bytes is 0 for
 * resources without a byte count. */
bool gp_fault_alloc_hit(const char *what, size_t bytes);
/* Allocations counted so far (whether or not injection is on). */
long gp_fault_alloc_count(void);
/* true once the injected failure happened; *what (valid for the process's
 * life) and *bytes name the allocation that was made to fail. */
bool gp_fault_alloc_injected(const char **what, size_t *bytes, long *n);

/* GP_FAULT_TRAP=N: the N-th decode step of the process (engine or pipeline)
 * launches a kernel that executes a trap instruction, leaving a real sticky
 * error (gp_device_step_gate in gp_device.h). Counts one step per call. */
bool gp_fault_trap_due(void);

#ifdef __cplusplus
}
#endif
#endif
