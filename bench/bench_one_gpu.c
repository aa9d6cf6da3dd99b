/* The one-GPU reference of the multi-GPU benchmarks: the whole model's
 * weights, where they fit. */
#include <cuda_runtime_api.h>

#include "bench_one_gpu.h"

gp_status gp_bench_whole_weights(const gp_config *cfg, gp_device_weights **out)
{
    *out = NULL;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "the one-GPU weights: %s", cudaGetErrorString(cudaGetLastError()));
    gp_step_cost wc;
    gp_step_floor(cfg, 1, 0, 1, &wc);
    if (wc.bytes + (4ull << 30) >= (double)free_b)
        return GP_OK;
    return gp_device_weights_synthetic(cfg, GP_DTYPE_BF16, 0, out);
}
