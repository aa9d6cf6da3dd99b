/* Launcher of the SwiGLU activation (ffn/swiglu.cu), for CUDA sources; C
 * callers use gp_swiglu in ffn_kernels.h. */
#ifndef GP_SWIGLU_CUH
#define GP_SWIGLU_CUH

#include <cuda_runtime.h>

#include "gp_common.h"

/* One SwiGLU output in fp32 from gate g and up u (each already rounded to
 * the 16-bit dtype): accurate expf (the kernels are built without
 * fast-math), the CPU reference's formula in float. Shared with the sparse
 * gate/up kernel that applies it inside its split sum. */
static __device__ __forceinline__ float gp_swiglu_one(float g, float u)
{
    return (g / (1.0f + expf(-g))) * u;
}

/* Launches on stream and returns cudaGetLastError(); arguments unchecked. */
/* gu, out of dt (BF16 or F16, checked by the caller). */
cudaError_t gp_swiglu_launch(gp_dtype dt, const void *gu, void *out, int B, int F,
                             cudaStream_t stream);

#endif
