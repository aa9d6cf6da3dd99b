/* Launcher of the embedding gather (engine/embed.cu), for CUDA sources; C
 * callers use gp_embed in kernels.h. */
#ifndef GP_EMBED_CUH
#define GP_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "gp_common.h"

/* Launches on stream and returns cudaGetLastError(); arguments unchecked. */
/* table: [rows][H] of dt (BF16 or F16, checked by the caller), the rows of
 * ids [lo, lo + rows) of a vocabulary of V. */
cudaError_t gp_embed_launch(gp_dtype dt, const int32_t *tokens, const void *table, float *resid,
                            int B, int H, int V, int lo, int rows, cudaStream_t stream);

#endif
