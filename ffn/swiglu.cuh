/* Launcher of the SwiGLU activation (ffn/swiglu.cu), for CUDA sources; C
 * callers use gp_swiglu in ffn_kernels.h. */
#ifndef GP_SWIGLU_CUH
#define GP_SWIGLU_CUH

#include <cuda_runtime.h>

#include "gp_common.h"

/* Launches on stream and returns cudaGetLastError(); arguments unchecked. */
/* gu, out of dt (BF16 or F16, checked by the caller). */
cudaError_t gp_swiglu_launch(gp_dtype dt, const void *gu, void *out, int B, int F,
                             cudaStream_t stream);

#endif
