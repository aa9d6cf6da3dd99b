/* The virtual memory of an offloaded KV cache: every layer's K
 * and V pool is one address range whose device-resident blocks are memory of
 * its own and whose offloaded blocks are a window onto staging buffer
 * layer % 2, so the attention kernels read a layer's offloaded blocks where
 * the block table says, once its copy has landed, unchanged. CUDA's
 * virtual memory calls come through cudaGetDriverEntryPointByVersion, as
 * green/'s do: binaries start without libcuda. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_device.h"
#include "kv_vmm.h"

typedef CUresult (*fn_granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

typedef struct vmm_fns {
    fn_granularity granularity;
    fn_reserve reserve;
    fn_addr_free addr_free;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
} vmm_fns;

struct gp_kv_vmm {
    vmm_fns f;
    CUdeviceptr base;
    size_t size;              /* reserved and mapped */
    int n_parts;
    size_t own, win;          /* bytes of each part's own memory and window */
    CUmemGenericAllocationHandle *own_h; /* [n_parts] (0: none) */
    CUmemGenericAllocationHandle win_h[2][2]; /* [parity][K|V] */
    int mapped;               /* parts whose two ranges are mapped */
};

static gp_status load(vmm_fns *f)
{
    static const struct { const char *sym; size_t at; } t[] = {
        {"cuMemGetAllocationGranularity", offsetof(vmm_fns, granularity)},
        {"cuMemAddressReserve", offsetof(vmm_fns, reserve)},
        {"cuMemAddressFree", offsetof(vmm_fns, addr_free)},
        {"cuMemCreate", offsetof(vmm_fns, create)},
        {"cuMemRelease", offsetof(vmm_fns, release)},
        {"cuMemMap", offsetof(vmm_fns, map)},
        {"cuMemUnmap", offsetof(vmm_fns, unmap)},
        {"cuMemSetAccess", offsetof(vmm_fns, access)},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        void *fn = NULL;
        cudaError_t e = cudaGetDriverEntryPointByVersion(t[i].sym, &fn, 10020, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
            (void)cudaGetLastError();
            GP_FAIL(GP_ERR_UNSUPPORTED, "offloaded KV cache: the CUDA driver has no %s (virtual memory "
                    "management, CUDA 10.2+)", t[i].sym);
        }
        memcpy((char *)f + t[i].at, &fn, sizeof fn);
    }
    return GP_OK;
}

static gp_status cu_fail(CUresult r, const char *what, size_t bytes)
{
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_device_oom(what, bytes, "cuMemCreate");
    GP_FAIL(GP_ERR_CUDA, "offloaded KV cache: %s (%zu bytes) failed: CUresult %d", what, bytes, (int)r);
}

static CUmemAllocationProp prop_of(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

gp_status gp_kv_vmm_granularity(int device, size_t *g)
{
    vmm_fns f;
    GP_TRY(load(&f));
    CUmemAllocationProp p = prop_of(device);
    CUresult r = f.granularity(g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuMemGetAllocationGranularity", 0);
    return GP_OK;
}

gp_status gp_kv_vmm_create(int device, int n_parts, size_t own, size_t win, gp_kv_vmm **out, void **base)
{
    *out = NULL;
    *base = NULL;
    gp_kv_vmm *v = calloc(1, sizeof *v);
    if (!v || !(v->own_h = calloc((size_t)n_parts, sizeof *v->own_h))) {
        free(v);
        GP_FAIL(GP_ERR_NO_MEMORY, "offloaded KV cache: out of host memory");
    }
    v->n_parts = n_parts;
    v->own = own;
    v->win = win;
    gp_status st = load(&v->f);
    CUmemAllocationProp p = prop_of(device);
    CUresult r = CUDA_SUCCESS;
    size_t g = 0;
    if (st == GP_OK && (r = v->f.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
        st = cu_fail(r, "cuMemGetAllocationGranularity", 0);
    if (st == GP_OK && (own % g || win % g))
        st = GP_ERR_INVALID_ARG, gp_set_error("offloaded KV cache: parts of %zu + %zu bytes: each must be a "
                                              "multiple of the device's mapping granularity, %zu", own, win, g);
    if (st == GP_OK) {
        v->size = (own + win) * (size_t)n_parts;
        if ((r = v->f.reserve(&v->base, v->size, g, 0, 0)) != CUDA_SUCCESS) {
            v->size = 0;
            st = cu_fail(r, "cuMemAddressReserve of the KV pools", (own + win) * (size_t)n_parts);
        }
    }
    for (int q = 0; q < 2 && st == GP_OK && win; q++)
        for (int k = 0; k < 2 && st == GP_OK; k++)
            if ((r = v->f.create(&v->win_h[q][k], win, &p, 0)) != CUDA_SUCCESS)
                st = cu_fail(r, "the offloaded KV staging buffers", win);
    for (int i = 0; i < n_parts && st == GP_OK; i++) {
        CUdeviceptr at = v->base + (CUdeviceptr)((own + win) * (size_t)i);
        if (own && (r = v->f.create(&v->own_h[i], own, &p, 0)) != CUDA_SUCCESS)
            st = cu_fail(r, "the device-resident KV blocks", own);
        else if (own && (r = v->f.map(at, own, 0, v->own_h[i], 0)) != CUDA_SUCCESS)
            st = cu_fail(r, "cuMemMap of the device-resident KV blocks", own);
        else if (win && (r = v->f.map(at + own, win, 0, v->win_h[(i / 2) % 2][i % 2], 0)) != CUDA_SUCCESS) {
            if (own)
                v->f.unmap(at, own);
            st = cu_fail(r, "cuMemMap of an offloaded KV window", win);
        } else
            v->mapped++;
    }
    if (st == GP_OK) {
        CUmemAccessDesc d;
        memset(&d, 0, sizeof d);
        d.location = p.location;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if ((r = v->f.access(v->base, v->size, &d, 1)) != CUDA_SUCCESS)
            st = cu_fail(r, "cuMemSetAccess of the KV pools", v->size);
    }
    if (st != GP_OK) {
        gp_kv_vmm_destroy(v);
        return st;
    }
    *out = v;
    *base = (void *)(uintptr_t)v->base;
    return GP_OK;
}

void gp_kv_vmm_destroy(gp_kv_vmm *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->mapped; i++) {
        CUdeviceptr at = v->base + (CUdeviceptr)((v->own + v->win) * (size_t)i);
        if (v->own)
            v->f.unmap(at, v->own);
        if (v->win)
            v->f.unmap(at + v->own, v->win);
    }
    for (int i = 0; i < v->n_parts; i++)
        if (v->own_h[i])
            v->f.release(v->own_h[i]);
    for (int q = 0; q < 2; q++)
        for (int k = 0; k < 2; k++)
            if (v->win_h[q][k])
                v->f.release(v->win_h[q][k]);
    if (v->size)
        v->f.addr_free(v->base, v->size);
    free(v->own_h);
    free(v);
}
