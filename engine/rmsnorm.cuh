/* Launcher of the fused residual-add + RMSNorm kernel (engine/rmsnorm.cu), for
 * CUDA sources; C callers use gp_rmsnorm_residual in kernels.h. */
#ifndef GP_RMSNORM_CUH
#define GP_RMSNORM_CUH

#include <cuda_runtime.h>

#include "gp_common.h"

/* Launches on stream and returns cudaGetLastError(); arguments unchecked
 * beyond picking the vector path (see gp_rmsnorm_residual). */
cudaError_t gp_rmsnorm_residual_launch(float *resid, const gp_bf16 *delta, const gp_bf16 *w,
                                       gp_bf16 *out, int B, int H, float eps,
                                       cudaStream_t stream);

#endif
