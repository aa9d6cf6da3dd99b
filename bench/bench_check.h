/* The benchmarks' fatal checks: a failed CUDA or greenpipe call prints the
 * call and its reason after the program's name, GP_BENCH_NAME (defined
 * before this header), and exits 1. Benchmarks only: library code returns
 * a status. */
#ifndef GP_BENCH_CHECK_H
#define GP_BENCH_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "gp_common.h"

#ifndef GP_BENCH_NAME
#error "define GP_BENCH_NAME (the program's name) before including bench_check.h"
#endif

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, GP_BENCH_NAME ": %s failed: %s\n", #call, cudaGetErrorString(e_));   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define GP(call)                                                                                 \
    do {                                                                                         \
        gp_status s_ = (call);                                                                   \
        if (s_ != GP_OK) {                                                                       \
            fprintf(stderr, GP_BENCH_NAME ": %s: %s: %s\n", #call, gp_status_str(s_),            \
                    gp_last_error());                                                            \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

#endif
