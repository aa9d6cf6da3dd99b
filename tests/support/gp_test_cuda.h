/* The CUDA runtime check that GPU tests share: a failed call fails the test
 * with the call, the error's text and its name. */
#ifndef GP_TEST_CUDA_H
#define GP_TEST_CUDA_H

#include <cuda_runtime_api.h>

#include "gp_test.h"

#define GP_CHECK_CUDA(call)                                                                      \
    do {                                                                                         \
        cudaError_t gp_check_e_ = (call);                                                        \
        if (gp_check_e_ != cudaSuccess)                                                          \
            fail_msg("%s: %s (%s)", #call, cudaGetErrorString(gp_check_e_),                      \
                     cudaGetErrorName(gp_check_e_));                                             \
    } while (0)

#endif
