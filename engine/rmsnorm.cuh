/* Launcher of the fused residual-add + RMSNorm kernel (engine/rmsnorm.cu), for
 * CUDA sources; C callers use gp_rmsnorm_residual in kernels.h. */
#ifndef GP_RMSNORM_CUH
#define GP_RMSNORM_CUH

#include <cuda_runtime.h>

#include "gp_common.h"

/* Launches on stream and returns cudaGetLastError(); arguments unchecked
 * beyond picking the vector path (see gp_rmsnorm_residual). */
cudaError_t gp_rmsnorm_residual_launch(gp_dtype dt, float *resid, const void *delta, const void *w,
                                       void *out, int B, int H, float eps, cudaStream_t stream);

#endif
