/* The decode-step gate: refuse at once after a sticky error, and the
 * GP_FAULT_TRAP test hook that makes a real one (a kernel that traps). */
#include "gp_device.h"

/* One thread executing the trap instruction: the context gets a sticky
 * error, exactly as a faulting kernel of the engine would leave it. */
static __global__ void gp_fault_trap_kernel(void)
{
    __trap();
}

extern "C" gp_status gp_device_step_gate(cudaStream_t stream)
{
    if (gp_device_faulted())
        GP_FAIL(GP_ERR_DEVICE_FAULT, "decode step refused: an earlier sticky CUDA error left the "
                "context unusable; the process must exit and be restarted to use the GPU again "
                "(first error: %.600s)", gp_device_fault_message());
    GP_TRY(gp_fault_env_status());
    if (gp_fault_trap_due()) {
        fprintf(stderr, "greenpipe: GP_FAULT_TRAP: launching a trapping kernel at this step\n");
        gp_fault_trap_kernel<<<1, 1, 0, stream>>>();
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return gp_cuda_fail(e, "launch of gp_fault_trap_kernel (GP_FAULT_TRAP)", __FILE__,
                                __LINE__);
    }
    return GP_OK;
}
