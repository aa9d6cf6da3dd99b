/* The CUDA backend of the weight-streaming manager: one non-blocking copy
 * stream on which every slot allocation, free and host-to-device copy is
 * ordered, slots from a private stream-ordered memory pool, markers as
 * events. Compiled as CUDA for the toolchain only: the runtime's C API. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_device.h"
#include "gp_streaming.h"

/* gp_cuda_fail is the single mapper (common/); these are the two-line
 * wrappers model/cuda_util.cuh has, kept here since streaming/ sits below
 * model/ in the dependency order. */
#define SC_TRY(call)                                                                             \
    do {                                                                                         \
        cudaError_t sc_e_ = (call);                                                              \
        if (sc_e_ != cudaSuccess)                                                                \
            return gp_cuda_fail(sc_e_, #call, __FILE__, __LINE__);                               \
    } while (0)

/* Copy batches timed between two collects before the oldest finished ones
 * are folded in without waiting; a caller that never collects stops timing
 * copies instead of growing without bound. */
#define SC_MAX_TIMED 1024

typedef struct sc_timing {
    cudaEvent_t start, end; /* around one copy_h2d on the copy stream */
} sc_timing;

typedef struct gp_stream_cuda {
    int device;
    cudaStream_t copy;
    cudaMemPool_t pool;  /* private: its release threshold keeps freed slots mapped */
    cudaEvent_t drain;   /* for the bounded wait of destroy */
    sc_timing *timed;    /* [SC_MAX_TIMED], events created on first use */
    int n_created;       /* pairs with events */
    int n_timed;         /* pairs recorded since the last collect, oldest first */
    double folded_s;     /* seconds of pairs folded in before collect */
    uint64_t untimed;    /* copies not timed since the last collect (table full) */
} gp_stream_cuda;

/* Teardown and error paths: keep the caller's message, report ours. */
static void sc_note(gp_status st, const char *fn)
{
    if (st == GP_OK)
        return;
    fprintf(stderr, "greenpipe: %s: %s: %s\n", fn, gp_status_str(st), gp_last_error());
}

static void sc_clear_soft(cudaError_t e)
{
    if (e != cudaSuccess && !gp_cuda_code_is_sticky((int)e))
        (void)cudaGetLastError();
}

static gp_status sc_slot_alloc(void *be, uint64_t bytes, void **slot)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    *slot = NULL;
    if (gp_device_faulted())
        GP_FAIL(GP_ERR_DEVICE_FAULT, "weight streaming slot of %llu bytes: the device already had a "
                "sticky error", (unsigned long long)bytes);
    if (bytes > SIZE_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "weight streaming slot of %llu bytes: beyond size_t",
                (unsigned long long)bytes);
    cudaError_t e = gp_fault_alloc_hit("weight streaming slot", (size_t)bytes)
                        ? cudaErrorMemoryAllocation
                        : cudaMallocFromPoolAsync(slot, (size_t)bytes, b->pool, b->copy);
    if (e == cudaSuccess)
        return GP_OK;
    *slot = NULL;
    if (e == cudaErrorMemoryAllocation && !gp_device_faulted()) {
        (void)cudaGetLastError();
        return gp_device_oom("weight streaming slot (cudaMallocFromPoolAsync on the copy stream)",
                             (size_t)bytes, "cudaErrorMemoryAllocation");
    }
    char call[160];
    snprintf(call, sizeof call, "cudaMallocFromPoolAsync of %llu bytes (weight streaming slot)",
             (unsigned long long)bytes);
    return gp_cuda_fail(e, call, __FILE__, __LINE__);
}

/* The copy stream waits for every marker, then frees in its order: the
 * next allocation on it cannot get the memory before the readers are done. */
static gp_status sc_copy_waits(gp_stream_cuda *b, void *const *wait, int n_wait)
{
    for (int i = 0; i < n_wait; i++)
        if (wait[i])
            SC_TRY(cudaStreamWaitEvent(b->copy, (cudaEvent_t)wait[i], 0));
    return GP_OK;
}

static void sc_slot_free(void *be, void *slot, void *const *wait, int n_wait)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    if (!slot)
        return;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", gp_last_error());
    gp_status st = sc_copy_waits(b, wait, n_wait);
    if (st != GP_OK) {
        /* Freeing without the waits would hand the memory to the next copy
         * while readers may still use it: a leak is the lesser harm. */
        sc_note(st, "weight streaming slot free (slot leaked)");
        gp_set_error("%s", keep);
        return;
    }
    cudaError_t e = cudaFreeAsync(slot, b->copy);
    if (e != cudaSuccess) {
        sc_note(gp_cuda_fail(e, "cudaFreeAsync (weight streaming slot)", __FILE__, __LINE__),
                "weight streaming slot free");
        gp_set_error("%s", keep);
    }
}

static gp_status sc_marker_create(void *be, void **marker)
{
    (void)be;
    cudaEvent_t ev = NULL;
    *marker = NULL;
    GP_TRY(gp_device_event_create(&ev, cudaEventDisableTiming, "weight streaming marker"));
    *marker = (void *)ev;
    return GP_OK;
}

static void sc_marker_destroy(void *be, void *marker)
{
    (void)be;
    if (marker)
        sc_clear_soft(cudaEventDestroy((cudaEvent_t)marker));
}

/* Folds the oldest finished pairs in without waiting; 1 when one is free. */
static int sc_fold_done(gp_stream_cuda *b)
{
    int k = 0;
    for (; k < b->n_timed; k++) {
        cudaError_t e = cudaEventQuery(b->timed[k].end);
        if (e != cudaSuccess) {
            sc_clear_soft(e);
            break;
        }
        float ms = 0.0f;
        e = cudaEventElapsedTime(&ms, b->timed[k].start, b->timed[k].end);
        if (e != cudaSuccess) {
            sc_clear_soft(e);
            break;
        }
        b->folded_s += (double)ms * 1e-3;
    }
    if (k > 0) {
        /* keep the pairs' events: the finished ones go to the back */
        sc_timing done[SC_MAX_TIMED];
        memcpy(done, b->timed, (size_t)k * sizeof *done);
        memmove(b->timed, b->timed + k, (size_t)(b->n_created - k) * sizeof *b->timed);
        memcpy(b->timed + b->n_created - k, done, (size_t)k * sizeof *done);
        b->n_timed -= k;
    }
    return b->n_timed < SC_MAX_TIMED;
}

/* The next free timing pair, or NULL when copies go untimed. */
static gp_status sc_timing_slot(gp_stream_cuda *b, sc_timing **out)
{
    *out = NULL;
    if (b->n_timed == SC_MAX_TIMED && !sc_fold_done(b)) {
        b->untimed++;
        return GP_OK;
    }
    if (b->n_timed == b->n_created) {
        sc_timing *t = &b->timed[b->n_created];
        GP_TRY(gp_device_event_create(&t->start, cudaEventDefault, "weight streaming copy timing"));
        gp_status st = gp_device_event_create(&t->end, cudaEventDefault, "weight streaming copy timing");
        if (st != GP_OK) {
            sc_clear_soft(cudaEventDestroy(t->start));
            t->start = NULL;
            return st;
        }
        b->n_created++;
    }
    *out = &b->timed[b->n_timed];
    return GP_OK;
}

static gp_status sc_copy_h2d(void *be, void *slot, const void *host, uint64_t bytes, uint64_t chunk_bytes,
                             void *const *wait, int n_wait, void *ready)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    if (!slot || !host || !ready || chunk_bytes == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "weight streaming copy: slot %p, host %p, ready %p, chunk %llu bytes: "
                "none may be NULL or 0", slot, host, ready, (unsigned long long)chunk_bytes);
    GP_TRY(sc_copy_waits(b, wait, n_wait));
    sc_timing *t = NULL;
    GP_TRY(sc_timing_slot(b, &t));
    /* After the waits: the pair times the copy engine's work, not the
     * readers it waited for. */
    if (t)
        SC_TRY(cudaEventRecord(t->start, b->copy));
    for (uint64_t off = 0; off < bytes; off += chunk_bytes) {
        uint64_t n = bytes - off < chunk_bytes ? bytes - off : chunk_bytes;
        SC_TRY(cudaMemcpyAsync((char *)slot + off, (const char *)host + off, (size_t)n,
                               cudaMemcpyHostToDevice, b->copy));
    }
    if (t) {
        SC_TRY(cudaEventRecord(t->end, b->copy));
        b->n_timed++;
    }
    SC_TRY(cudaEventRecord((cudaEvent_t)ready, b->copy));
    return GP_OK;
}

static gp_status sc_capturing(void *stream, int *active)
{
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    SC_TRY(cudaStreamIsCapturing((cudaStream_t)stream, &cap));
    *active = cap == cudaStreamCaptureStatusActive;
    return GP_OK;
}

static gp_status sc_stream_wait(void *be, void *stream, void *marker, gp_stream_kind kind)
{
    (void)be;
    (void)kind;
    int cap = 0;
    GP_TRY(sc_capturing(stream, &cap));
    /* Inside a capture the marker was recorded outside it: the wait must
     * become an event-wait node (as gp_weight_group_acquire does). */
    SC_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)marker, cap ? cudaEventWaitExternal : 0));
    return GP_OK;
}

static gp_status sc_marker_record(void *be, void *stream, void *marker)
{
    (void)be;
    int cap = 0;
    GP_TRY(sc_capturing(stream, &cap));
    /* Inside a capture, an external record node: the copy stream, outside
     * the graph, waits on it when the graph runs. */
    if (cap)
        SC_TRY(cudaEventRecordWithFlags((cudaEvent_t)marker, (cudaStream_t)stream, cudaEventRecordExternal));
    else
        SC_TRY(cudaEventRecord((cudaEvent_t)marker, (cudaStream_t)stream));
    return GP_OK;
}

static gp_status sc_marker_query(void *be, void *marker, int *done)
{
    (void)be;
    cudaError_t e = cudaEventQuery((cudaEvent_t)marker);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not an error: leave nothing for a launch check */
        return GP_OK;
    }
    SC_TRY(e);
    return GP_OK;
}

static gp_status sc_marker_wait(void *be, void *marker)
{
    (void)be;
    return gp_device_event_wait((cudaEvent_t)marker, "a weight streaming marker");
}

/* Between steps: waits (bounded) for the last timed copy, then sums. */
static gp_status sc_collect(void *be, double *copy_s, double waited_s[GP_STREAM_KIND_COUNT])
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    for (int k = 0; k < GP_STREAM_KIND_COUNT; k++)
        waited_s[k] = 0.0; /* compute-side stalls are not timed by this backend */
    double s = b->folded_s;
    if (b->n_timed > 0)
        GP_TRY(gp_device_event_wait(b->timed[b->n_timed - 1].end, "the last timed weight streaming copy"));
    for (int k = 0; k < b->n_timed; k++) {
        float ms = 0.0f;
        SC_TRY(cudaEventElapsedTime(&ms, b->timed[k].start, b->timed[k].end));
        s += (double)ms * 1e-3;
    }
    if (b->untimed)
        fprintf(stderr, "greenpipe: weight streaming: %llu copies were not timed (more than %d between "
                "two statistics calls); copy seconds are low\n", (unsigned long long)b->untimed,
                SC_MAX_TIMED);
    b->n_timed = 0;
    b->folded_s = 0.0;
    b->untimed = 0;
    *copy_s = s;
    return GP_OK;
}

static const gp_stream_backend_ops sc_ops = {
    sc_slot_alloc, sc_slot_free,   sc_marker_create, sc_marker_destroy, sc_copy_h2d,
    sc_stream_wait, sc_marker_record, sc_marker_query, sc_marker_wait,  sc_collect,
};

static void sc_free(gp_stream_cuda *b)
{
    if (!b)
        return;
    for (int k = 0; b->timed && k < b->n_created; k++) {
        sc_clear_soft(cudaEventDestroy(b->timed[k].start));
        sc_clear_soft(cudaEventDestroy(b->timed[k].end));
    }
    if (b->drain)
        sc_clear_soft(cudaEventDestroy(b->drain));
    if (b->copy)
        sc_clear_soft(cudaStreamDestroy(b->copy));
    /* slots still allocated keep the pool alive until they are freed */
    if (b->pool)
        sc_clear_soft(cudaMemPoolDestroy(b->pool));
    free(b->timed);
    free(b);
}

extern "C" gp_status gp_stream_cuda_backend_create(int device, gp_stream_backend *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stream_cuda_backend_create: out is NULL");
    out->ops = NULL;
    out->be = NULL;
    if (gp_device_faulted())
        GP_FAIL(GP_ERR_DEVICE_FAULT, "gp_stream_cuda_backend_create: the device already had a sticky error");
    int n = 0;
    SC_TRY(cudaGetDeviceCount(&n));
    if (device < 0 || device >= n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stream_cuda_backend_create: device %d: 0 to %d are present", device,
                n - 1);
    SC_TRY(cudaSetDevice(device));
    int pools = 0;
    SC_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    if (!pools)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_stream_cuda_backend_create: device %d has no stream-ordered "
                "memory pools (cudaMallocAsync)", device);
    gp_stream_cuda *b = (gp_stream_cuda *)calloc(1, sizeof *b);
    if (b)
        b->timed = (sc_timing *)calloc(SC_MAX_TIMED, sizeof *b->timed);
    if (!b || !b->timed) {
        free(b);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_stream_cuda_backend_create: out of memory");
    }
    b->device = device;
    gp_status st = gp_device_stream_create(&b->copy, "weight streaming copy stream");
    if (st == GP_OK)
        st = gp_device_event_create(&b->drain, cudaEventDisableTiming, "weight streaming drain event");
    if (st == GP_OK) {
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        cudaError_t e = cudaMemPoolCreate(&b->pool, &props);
        if (e == cudaErrorMemoryAllocation && !gp_device_faulted()) {
            (void)cudaGetLastError();
            st = gp_device_oom("weight streaming memory pool", 0, "cudaMemPoolCreate");
        } else if (e != cudaSuccess) {
            st = gp_cuda_fail(e, "cudaMemPoolCreate (weight streaming)", __FILE__, __LINE__);
        }
        if (e != cudaSuccess)
            b->pool = NULL;
    }
    if (st == GP_OK) {
        /* Freed slots stay mapped for the next allocation: the budget bounds
         * what is held, and giving memory back to the driver at every
         * synchronisation would remap it on every step. */
        uint64_t keep = UINT64_MAX;
        cudaError_t e = cudaMemPoolSetAttribute(b->pool, cudaMemPoolAttrReleaseThreshold, &keep);
        if (e != cudaSuccess)
            st = gp_cuda_fail(e, "cudaMemPoolSetAttribute(release threshold) (weight streaming)", __FILE__,
                              __LINE__);
    }
    if (st != GP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        sc_free(b);
        gp_set_error("gp_stream_cuda_backend_create: %s", msg);
        return st;
    }
    out->ops = &sc_ops;
    out->be = b;
    return GP_OK;
}

extern "C" gp_status gp_stream_cuda_backend_mem(const gp_stream_backend *bk, uint64_t *used_high,
                                                uint64_t *reserved_high)
{
    if (!bk || bk->ops != &sc_ops || !bk->be || !used_high || !reserved_high)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stream_cuda_backend_mem: not a CUDA streaming backend, or NULL out");
    gp_stream_cuda *b = (gp_stream_cuda *)bk->be;
    uint64_t u = 0, r = 0;
    SC_TRY(cudaMemPoolGetAttribute(b->pool, cudaMemPoolAttrUsedMemHigh, &u));
    SC_TRY(cudaMemPoolGetAttribute(b->pool, cudaMemPoolAttrReservedMemHigh, &r));
    *used_high = (uint64_t)u;
    *reserved_high = (uint64_t)r;
    return GP_OK;
}

extern "C" void gp_stream_cuda_backend_destroy(gp_stream_backend *bk)
{
    if (!bk || bk->ops != &sc_ops || !bk->be)
        return;
    gp_stream_cuda *b = (gp_stream_cuda *)bk->be;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", gp_last_error());
    /* Bounded drain: frees and copies still queued must finish before the
     * stream and the pool go. */
    cudaError_t e = cudaEventRecord(b->drain, b->copy);
    gp_status st = e == cudaSuccess ? gp_device_event_wait(b->drain, "the weight streaming copy stream")
                                    : gp_cuda_fail(e, "cudaEventRecord(drain)", __FILE__, __LINE__);
    sc_note(st, "gp_stream_cuda_backend_destroy");
    sc_free(b);
    bk->ops = NULL;
    bk->be = NULL;
    gp_set_error("%s", keep);
}
