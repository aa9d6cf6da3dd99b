/* Launcher of the embedding gather (engine/embed.cu), for CUDA sources; C
 * callers use gp_embed in kernels.h. */
#ifndef GP_EMBED_CUH
#define GP_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "gp_common.h"

/* Launches on stream and returns cudaGetLastError(); arguments unchecked. */
cudaError_t gp_embed_launch(const int32_t *tokens, const gp_bf16 *table, float *resid, int B,
                            int H, int V, cudaStream_t stream);

#endif
