/* greenpipe devices: what CUDA sees, or one plain line saying why nothing is
 * usable (no GPU, no driver, driver too old). */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_device.h"
#include "gp_tools.h"

int gp_cmd_devices(int argc, char **argv)
{
    if (argc > 1) {
        if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            printf("usage: greenpipe devices\n");
            return 0;
        }
        /* an ignored argument could be someone's "greenpipe devices 1" */
        fprintf(stderr, "greenpipe devices: takes no arguments, got '%s'\nusage: greenpipe devices\n", argv[1]);
        return 2;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr, "greenpipe: no CUDA GPU usable: %s; greenpipe generate --backend cpu runs the float32 CPU "
                "reference\n", gp_cuda_absent_reason(e != cudaSuccess ? e : cudaErrorNoDevice));
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
