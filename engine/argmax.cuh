/* Launcher of the per-row argmax (engine/argmax.cu), for CUDA sources; C
 * callers use gp_argmax_rows in kernels.h. */
#ifndef GP_ARGMAX_CUH
#define GP_ARGMAX_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* Launches on stream and returns cudaGetLastError(); arguments unchecked. */
cudaError_t gp_argmax_rows_launch(const float *logits, int32_t *out, int B, int V,
                                  cudaStream_t stream);

#endif
