/* Driver entry points through cudaGetDriverEntryPointByVersion (binaries
 * must start without libcuda), error mapping, the device SM query. */
#include "green_impl.h"

#include <stdio.h>
#include <string.h>

#include "gp_device.h"

gp_status gp_green_cu_fail(const gp_green_driver *d, CUresult r, const char *what,
                           const char *file, int line)
{
    const char *name = NULL, *text = NULL;
    if (!d->GetErrorName || d->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    if (!d->GetErrorString || d->GetErrorString(r, &text) != CUDA_SUCCESS || !text)
        text = "no description";
    /* the code's number too: driver names are unknown where the entry
     * point is missing */
    char named[160];
    snprintf(named, sizeof named, "%s, %d", name, (int)r);
    return gp_device_fail(GP_DEVICE_API_DRIVER, (int)r, 0, what, text, named, file, line);
}

gp_status gp_green_check_device(int device)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess && (gp_cuda_code_is_sticky((int)e) || gp_device_faulted()))
        return gp_cuda_fail(e, "cudaGetDeviceCount", __FILE__, __LINE__);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: %s", gp_cuda_absent_reason(e));
    }
    if (n <= 0)
        GP_FAIL(GP_ERR_NO_DEVICE, "no CUDA GPU usable: %s", gp_cuda_absent_reason(cudaErrorNoDevice));
    if (device < 0 || device >= n)
        GP_FAIL(GP_ERR_INVALID_ARG, "device %d: allowed 0 .. %d (%d CUDA device%s)", device,
                n - 1, n, n == 1 ? "" : "s");
    return GP_OK;
}

/* One entry point. 1: found; 0: the driver lacks it (reason written). */
static int load_one(const char *sym, unsigned version, void **fn, char *reason, size_t cap)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    *fn = NULL;
    cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fn, version, cudaEnableDefault, &q);
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && *fn)
        return 1;
    (void)cudaGetLastError();
    int drv = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        (void)cudaGetLastError();
    /* cudaErrorInvalidValue here means the version asked for is newer than the driver. */
    snprintf(reason, cap, "the driver (CUDA %d.%d) has no %s of CUDA %u.%u (%s%s)", drv / 1000,
             drv % 1000 / 10, sym, version / 1000, version % 1000 / 10,
             e != cudaSuccess ? cudaGetErrorName(e)
             : q == cudaDriverEntryPointVersionNotSufficent ? "version not sufficient"
                                                            : "symbol not found",
             drv && drv < GP_GREEN_MIN_DRIVER ? "; green contexts need driver 12.5+" : "");
    return 0;
}

gp_status gp_green_driver_load(gp_green_driver *d, char *reason, size_t cap)
{
    memset(d, 0, sizeof *d);
    /* Requested at the version each typedef describes: a newer driver then
     * still returns that ABI, never a later variant with another signature. */
    static const struct { const char *sym; unsigned version; } t[] = {
        { "cuGetErrorName", 6000 },
        { "cuGetErrorString", 6000 },
        { "cuDeviceGet", 2000 },
        { "cuDeviceGetDevResource", 12040 },
        { "cuDevSmResourceSplitByCount", 12040 },
        { "cuDevResourceGenerateDesc", 12040 },
        { "cuGreenCtxCreate", 12040 },
        { "cuGreenCtxDestroy", 12040 },
        { "cuGreenCtxGetDevResource", 12040 },
        { "cuGreenCtxStreamCreate", 12050 },
        { "cuStreamDestroy", 4000 },
    };
    enum { N_FN = sizeof t / sizeof t[0] };
    void *fn[N_FN];
    for (int i = 0; i < N_FN; i++) {
        if (!load_one(t[i].sym, t[i].version, &fn[i], reason, cap)) {
            gp_set_error("green contexts unavailable: %s", reason);
            return GP_ERR_UNSUPPORTED;
        }
    }
    d->GetErrorName = (PFN_cuGetErrorName_v6000)fn[0];
    d->GetErrorString = (PFN_cuGetErrorString_v6000)fn[1];
    d->DeviceGet = (PFN_cuDeviceGet_v2000)fn[2];
    d->DeviceGetDevResource = (PFN_cuDeviceGetDevResource_v12040)fn[3];
    d->DevSmResourceSplitByCount = (PFN_cuDevSmResourceSplitByCount_v12040)fn[4];
    d->DevResourceGenerateDesc = (PFN_cuDevResourceGenerateDesc_v12040)fn[5];
    d->GreenCtxCreate = (PFN_cuGreenCtxCreate_v12040)fn[6];
    d->GreenCtxDestroy = (PFN_cuGreenCtxDestroy_v12040)fn[7];
    d->GreenCtxGetDevResource = (PFN_cuGreenCtxGetDevResource_v12040)fn[8];
    d->GreenCtxStreamCreate = (PFN_cuGreenCtxStreamCreate_v12050)fn[9];
    d->StreamDestroy = (PFN_cuStreamDestroy_v4000)fn[10];
    return GP_OK;
}

gp_status gp_green_device_resource(const gp_green_driver *d, int device, CUdevice *dev,
                                   CUdevResource *res)
{
    CUresult r = d->DeviceGet(dev, device);
    if (r != CUDA_SUCCESS)
        return gp_green_cu_fail(d, r, "cuDeviceGet", __FILE__, __LINE__);
    memset(res, 0, sizeof *res);
    r = d->DeviceGetDevResource(*dev, res, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS)
        return gp_green_cu_fail(d, r, "cuDeviceGetDevResource(SM)", __FILE__, __LINE__);
    if (res->type != CU_DEV_RESOURCE_TYPE_SM || res->sm.smCount == 0
        || res->sm.minSmPartitionSize == 0 || res->sm.smCoscheduledAlignment == 0
        || res->sm.smCount > 1u << 20)
        GP_FAIL(GP_ERR_CUDA, "cuDeviceGetDevResource(SM) of device %d returned type %d with "
                "%u SMs, minimum partition %u, alignment %u", device, (int)res->type,
                res->sm.smCount, res->sm.minSmPartitionSize, res->sm.smCoscheduledAlignment);
    return GP_OK;
}

gp_status gp_green_sm_info(const gp_green_driver *d, const CUdevResource *res, gp_sm_info *info)
{
    info->sm_count = (int)res->sm.smCount;
    info->min_partition = (int)res->sm.minSmPartitionSize;
    info->alignment = (int)res->sm.smCoscheduledAlignment;
    info->groups = 0;
    int g = gp_split_granularity(info);
    unsigned n = 0;
    CUresult r = d->DevSmResourceSplitByCount(NULL, &n, res, NULL, 0, (unsigned)g);
    if (r != CUDA_SUCCESS)
        return gp_green_cu_fail(d, r, "cuDevSmResourceSplitByCount (count)", __FILE__, __LINE__);
    if (n > (unsigned)(info->sm_count / g))
        GP_FAIL(GP_ERR_CUDA, "cuDevSmResourceSplitByCount: %u groups of %d from %d SMs", n, g,
                info->sm_count);
    info->groups = (int)n;
    return GP_OK;
}

gp_status gp_green_query(int device, gp_sm_info *info)
{
    if (!info)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_query: info is NULL");
    GP_TRY(gp_green_check_device(device));
    gp_green_driver d;
    char reason[256];
    GP_TRY(gp_green_driver_load(&d, reason, sizeof reason));
    CUdevice dev;
    CUdevResource res;
    GP_TRY(gp_green_device_resource(&d, device, &dev, &res));
    return gp_green_sm_info(&d, &res, info);
}
