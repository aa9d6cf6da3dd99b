/* greenpipe devices: what CUDA sees, or one plain line saying why nothing is
 * usable (no GPU, no driver, driver too old). */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "gp_tools.h"

int gp_cmd_devices(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr, "greenpipe: no CUDA GPU usable: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
        return 1;
    }
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess) {
        fprintf(stderr, "greenpipe: cannot read CUDA driver/runtime versions\n");
        return 1;
    }
    printf("CUDA driver %d.%d, runtime %d.%d\n", drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        e = cudaGetDeviceProperties(&p, i);
        if (e != cudaSuccess) {
            fprintf(stderr, "greenpipe: device %d: %s\n", i, cudaGetErrorString(e));
            return 1;
        }
        printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %d MiB\n", i, p.name,
               p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30),
               p.l2CacheSize >> 20);
    }
    return 0;
}
