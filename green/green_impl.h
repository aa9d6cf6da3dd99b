/* Private to green/: the driver entry points the pool uses (fetched through
 * the runtime, so nothing links libcuda), the pool layout, error mapping. */
#ifndef GP_GREEN_IMPL_H
#define GP_GREEN_IMPL_H

#include <stddef.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "gp_device.h"
#include "gp_green.h"

/* cuGreenCtxStreamCreate is the newest entry point needed: 12.5. */
#define GP_GREEN_MIN_DRIVER 12050

/* Typed as of the version each is requested at (see green_driver.c), so
 * the call signatures match what the driver hands back. */
typedef struct gp_green_driver {
    PFN_cuGetErrorName_v6000 GetErrorName;
    PFN_cuGetErrorString_v6000 GetErrorString;
    PFN_cuDeviceGet_v2000 DeviceGet;
    PFN_cuDeviceGetDevResource_v12040 DeviceGetDevResource;
    PFN_cuDevSmResourceSplitByCount_v12040 DevSmResourceSplitByCount;
    PFN_cuDevResourceGenerateDesc_v12040 DevResourceGenerateDesc;
    PFN_cuGreenCtxCreate_v12040 GreenCtxCreate;
    PFN_cuGreenCtxDestroy_v12040 GreenCtxDestroy;
    PFN_cuGreenCtxGetDevResource_v12040 GreenCtxGetDevResource;
    PFN_cuGreenCtxStreamCreate_v12050 GreenCtxStreamCreate;
    PFN_cuStreamDestroy_v4000 StreamDestroy;
} gp_green_driver;

/* Fills d. GP_ERR_UNSUPPORTED with the reason in reason[] when the driver
 * lacks an entry point (too old); GP_ERR_NO_DEVICE / GP_ERR_CUDA (message in
 * gp_last_error) when the runtime itself cannot start. */
gp_status gp_green_driver_load(gp_green_driver *d, char *reason, size_t cap);

/* gp_device_fail (common/gp_device.h) for a failed driver call, with the
 * driver's own words for r where its entry points were found:
 * CUDA_ERROR_NOT_SUPPORTED becomes GP_ERR_UNSUPPORTED (green contexts
 * unavailable: the pool falls back). what names the call and its object.
 * Runtime calls use gp_cuda_fail. */
gp_status gp_green_cu_fail(const gp_green_driver *d, CUresult r, const char *what,
                           const char *file, int line);

/* Runtime call inside a function with cleanup: status into st, then goto. */
#define GREEN_RT(call, st, label)                                                                \
    do {                                                                                         \
        cudaError_t gr_e_ = (call);                                                              \
        if (gr_e_ != cudaSuccess) {                                                              \
            (st) = gp_cuda_fail(gr_e_, #call, __FILE__, __LINE__);                               \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

/* Checks that device names a usable GPU (maps "no driver/GPU" to
 * GP_ERR_NO_DEVICE with one line of text). */
gp_status gp_green_check_device(int device);

/* The driver's SM resource of device: GP_ERR_UNSUPPORTED (reason in
 * gp_last_error) where the driver cannot describe it. */
gp_status gp_green_device_resource(const gp_green_driver *d, int device, CUdevice *dev,
                                   CUdevResource *res);

/* info from res, with groups from a count-only cuDevSmResourceSplitByCount
 * by the granularity (creates nothing). */
gp_status gp_green_sm_info(const gp_green_driver *d, const CUdevResource *res, gp_sm_info *info);

/* One candidate split: the public view plus what backs it. The contexts are
 * NULL in an unpartitioned pair, whose streams come from the runtime. */
typedef struct gp_green_slot {
    gp_green_pair pub;
    CUgreenCtx attn_ctx, ffn_ctx;
    cudaStream_t attn_stream, ffn_stream;
} gp_green_slot;

struct gp_green_pool {
    int device;
    int device_sms;       /* multiProcessorCount: what an unpartitioned stream gets */
    gp_sm_info info;      /* what the plans were made against */
    gp_split_side side;
    int partitioned;
    char reason[320];     /* why unpartitioned */
    int have_driver;      /* drv is filled */
    gp_green_driver drv;
    int n;
    gp_green_slot *slots; /* [n] */
};

/* Calls that failed while tearing down: counted, the first kept for a line
 * on stderr, never returned (teardown goes on regardless). */
typedef struct gp_green_teardown { int failures; char first[256]; } gp_green_teardown;

/* green_pairs.c. build: cuts the device once by the plans' granularity and
 * builds every slot's two green contexts and streams; *unsup is set when a
 * driver call said CUDA_ERROR_NOT_SUPPORTED (the caller then falls back).
 * build_plain: two non-blocking runtime streams per slot. release: streams
 * (after their work), then contexts, of every slot; safe on partial builds. */
gp_status gp_green_pairs_build(gp_green_pool *pool, CUdevice dev, const CUdevResource *all,
                               int *unsup);
gp_status gp_green_pairs_build_plain(gp_green_pool *pool);
void gp_green_pairs_release(gp_green_pool *pool, gp_green_teardown *td);

#endif
