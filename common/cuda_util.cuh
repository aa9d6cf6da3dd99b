/* The CUDA runtime checks of every folder (streaming, model, attention,
 * engine, pipeline, sparse, ffn): a failing call becomes a gp_status with a
 * message naming the call, CUDA's reason, file and line. C-includable (the
 * runtime's C API). */
#ifndef GP_CUDA_UTIL_CUH
#define GP_CUDA_UTIL_CUH

#include <cuda_runtime_api.h>

/* gp_cuda_fail, the one mapping of a failed call to a status and message
 * (out of memory, no device, sticky fault), lives beside the allocation
 * helpers so that common/ can use it too. */
#include "gp_device.h"

/* Return from the enclosing gp_status function when call fails. */
#define GP_CUDA_TRY(call)                                                                        \
    do {                                                                                         \
        cudaError_t gp_cuda_e_ = (call);                                                         \
        if (gp_cuda_e_ != cudaSuccess)                                                           \
            return gp_cuda_fail(gp_cuda_e_, #call, __FILE__, __LINE__);                          \
    } while (0)

/* For functions with cleanup: store the status in st and jump to label. */
#define GP_CUDA_GOTO(call, st, label)                                                            \
    do {                                                                                         \
        cudaError_t gp_cuda_e_ = (call);                                                         \
        if (gp_cuda_e_ != cudaSuccess) {                                                         \
            (st) = gp_cuda_fail(gp_cuda_e_, #call, __FILE__, __LINE__);                          \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

/* After a <<<>>> launch: launch-configuration errors surface only through
 * cudaGetLastError. Legal during stream capture (it does not synchronise).
 * what (a string literal) names the kernel. */
#define GP_CUDA_LAUNCH_CHECK(what)                                                               \
    do {                                                                                         \
        cudaError_t gp_cuda_e_ = cudaGetLastError();                                             \
        if (gp_cuda_e_ != cudaSuccess)                                                           \
            return gp_cuda_fail(gp_cuda_e_, "launch of " what, __FILE__, __LINE__);              \
    } while (0)

#endif
