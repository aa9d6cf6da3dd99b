/* Kernel launches with programmatic dependent launch (gp_pdl_enabled,
 * common/gp_device.h): the launch config and the device-side wait every
 * kernel launched through it calls before touching memory. */
#ifndef GP_LAUNCH_CUH
#define GP_LAUNCH_CUH

#include <cuda_runtime.h>

#include "gp_device.h"

/* A launch config that owns its attribute (cfg.attrs points into it: set
 * up in place, never copied after). */
typedef struct gp_launch {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
} gp_launch;

static inline void gp_launch_setup(gp_launch *l, dim3 grid, dim3 block, size_t smem, cudaStream_t stream)
{
    l->cfg = cudaLaunchConfig_t{};
    l->cfg.gridDim = grid;
    l->cfg.blockDim = block;
    l->cfg.dynamicSmemBytes = smem;
    l->cfg.stream = stream;
    if (gp_pdl_enabled()) {
        l->attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        l->attr[0].val.programmaticStreamSerializationAllowed = 1;
        l->cfg.attrs = l->attr;
        l->cfg.numAttrs = 1;
    }
}

/* The first statement of a kernel launched through gp_launch_setup, in
 * every CTA, before any early return: its CTAs may start before the
 * previous kernel on the stream has finished, and this waits until it has
 * (and its writes are visible). Ordering is only transitive because every
 * CTA waits: a kernel whose CTAs could all skip the wait would complete
 * before its predecessor, and the kernel after it would then not wait for
 * that one. No kernel triggers its successor early either
 * (griddepcontrol.launch_dependents): the successor is scheduled as the
 * last CTAs exit. A no-op without a programmatic dependency. */
static __device__ __forceinline__ void gp_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#endif
