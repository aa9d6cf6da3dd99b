/* The CUDA backend of the weight-streaming manager: one non-blocking copy
 * stream on which every slot allocation, free and host-to-device copy is
 * ordered, slots from a private stream-ordered memory pool, markers as
 * events. Compiled as CUDA for the toolchain only: the runtime's C API. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>

#include "cuda_util.cuh"
#include "gp_device.h"
#include "gp_streaming.h"

/* Timing pairs recorded between two collects before the oldest finished ones
 * are folded in without waiting; a caller that never collects stops timing
 * instead of growing without bound. One pool for copies, one for stalls. */
#define SC_MAX_TIMED 1024
/* Copies kept for gp_streamer_copy_log between two collects (the newest):
 * more than a step of the largest preset copies (its 160 layer groups, at
 * most once per micro-batch: 640), so the last step's are all there. */
#define SC_LOG_MAX 4096

typedef struct sc_timing {
    cudaEvent_t start, end; /* created on first use; around one copy (copy stream) or one stall
                               (a compute stream) */
    int kind;               /* gp_stream_kind: the copied group's, or the stall's bucket */
    int layer;              /* copies: the group's layer, -1 none */
    uint64_t bytes;         /* copies */
} sc_timing;

/* A ring of timing pairs: t[(head + i) % SC_MAX_TIMED], i < n_timed, are
 * recorded since the last collect, oldest first; the others are free. */
typedef struct sc_pairs {
    sc_timing *t;                           /* [SC_MAX_TIMED] */
    int head, n_timed;
    double folded_s[GP_STREAM_KIND_COUNT];  /* seconds of pairs folded in before collect */
    uint64_t untimed;                       /* not timed since the last collect (ring full) */
} sc_pairs;

/* One copy of the log, in ms after the epoch. */
typedef struct sc_logged {
    int kind, layer;
    uint64_t bytes;
    double start_ms, end_ms;
} sc_logged;

typedef struct gp_stream_cuda {
    int device;
    cudaStream_t copy;
    cudaMemPool_t pool;  /* private: its release threshold keeps freed slots mapped */
    cudaEvent_t drain;   /* for the bounded wait of destroy */
    sc_pairs copies;     /* copy-engine busy time, and the copies for the log */
    sc_pairs stalls;     /* compute streams waiting in stream_wait, per kind */
    /* The copy log: copies folded out of `copies` before a collect, timed
     * against epoch (recorded on the copy stream at create and at every
     * collect, so it precedes every copy it times). */
    cudaEvent_t epoch;
    sc_logged *log;      /* ring [SC_LOG_MAX]: log[(log_head + i) % SC_LOG_MAX], i < log_n */
    int log_head, log_n;
    /* The group copy_label named for the next copy_h2d. */
    bool labelled;
    int label_kind, label_layer;
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
            GP_CUDA_TRY(cudaStreamWaitEvent(b->copy, (cudaEvent_t)wait[i], 0));
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

static int sc_kind_index(int kind)
{
    return kind >= 0 && kind < GP_STREAM_KIND_COUNT ? kind : GP_STREAM_OTHER;
}

static void sc_log_push(gp_stream_cuda *b, const sc_timing *t, double start_ms, double end_ms)
{
    sc_logged e = {t->kind, t->layer, t->bytes, start_ms, end_ms};
    if (b->log_n < SC_LOG_MAX) {
        b->log[(b->log_head + b->log_n++) % SC_LOG_MAX] = e;
    } else { /* full: the oldest goes */
        b->log[b->log_head] = e;
        b->log_head = (b->log_head + 1) % SC_LOG_MAX;
    }
}

/* Folds the oldest finished pairs in without waiting (copies also into the
 * log); 1 when a pair is free. */
static int sc_fold_done(gp_stream_cuda *b, sc_pairs *p, bool copies)
{
    while (p->n_timed > 0) {
        sc_timing *t = &p->t[p->head];
        cudaError_t e = cudaEventQuery(t->end);
        float ms = 0.0f, at0 = 0.0f, at1 = 0.0f;
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, t->start, t->end);
        if (e == cudaSuccess && copies && (e = cudaEventElapsedTime(&at0, b->epoch, t->start)) == cudaSuccess)
            e = cudaEventElapsedTime(&at1, b->epoch, t->end);
        if (e != cudaSuccess) {
            sc_clear_soft(e);
            break;
        }
        p->folded_s[sc_kind_index(t->kind)] += (double)ms * 1e-3;
        if (copies)
            sc_log_push(b, t, at0, at1);
        p->head = (p->head + 1) % SC_MAX_TIMED;
        p->n_timed--;
    }
    return p->n_timed < SC_MAX_TIMED;
}

/* The next free timing pair of p, or NULL when the ring is full of pairs
 * still running (the caller goes untimed). */
static gp_status sc_timing_slot(gp_stream_cuda *b, sc_pairs *p, bool copies, sc_timing **out)
{
    *out = NULL;
    if (p->n_timed == SC_MAX_TIMED && !sc_fold_done(b, p, copies)) {
        p->untimed++;
        return GP_OK;
    }
    sc_timing *t = &p->t[(p->head + p->n_timed) % SC_MAX_TIMED];
    if (!t->start) {
        GP_TRY(gp_device_event_create(&t->start, cudaEventDefault, "weight streaming timing"));
        gp_status st = gp_device_event_create(&t->end, cudaEventDefault, "weight streaming timing");
        if (st != GP_OK) {
            sc_clear_soft(cudaEventDestroy(t->start));
            t->start = NULL;
            return st;
        }
    }
    *out = t;
    return GP_OK;
}

static void sc_copy_label(void *be, gp_stream_kind kind, int layer)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    b->labelled = true;
    b->label_kind = (int)kind;
    b->label_layer = layer;
}

/* The copy's enqueue, between the NVTX range push and pop of sc_copy_h2d. */
static gp_status sc_copy_enqueue(gp_stream_cuda *b, void *slot, const void *host, uint64_t bytes,
                                 uint64_t chunk_bytes, void *const *wait, int n_wait, void *ready, int kind,
                                 int layer)
{
    GP_TRY(sc_copy_waits(b, wait, n_wait));
    sc_timing *t = NULL;
    GP_TRY(sc_timing_slot(b, &b->copies, true, &t));
    /* After the waits: the pair times the copy engine's work, not the
     * readers it waited for. */
    if (t)
        GP_CUDA_TRY(cudaEventRecord(t->start, b->copy));
    for (uint64_t off = 0; off < bytes; off += chunk_bytes) {
        uint64_t n = bytes - off < chunk_bytes ? bytes - off : chunk_bytes;
        GP_CUDA_TRY(cudaMemcpyAsync((char *)slot + off, (const char *)host + off, (size_t)n,
                               cudaMemcpyHostToDevice, b->copy));
    }
    if (t) {
        GP_CUDA_TRY(cudaEventRecord(t->end, b->copy));
        t->kind = kind;
        t->layer = layer;
        t->bytes = bytes;
        b->copies.n_timed++;
    }
    GP_CUDA_TRY(cudaEventRecord((cudaEvent_t)ready, b->copy));
    return GP_OK;
}

static gp_status sc_copy_h2d(void *be, void *slot, const void *host, uint64_t bytes, uint64_t chunk_bytes,
                             void *const *wait, int n_wait, void *ready)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    /* the label names this copy only, whatever becomes of it */
    const bool named = b->labelled;
    int kind = named ? b->label_kind : GP_STREAM_OTHER, layer = named ? b->label_layer : -1;
    b->labelled = false;
    if (!slot || !host || !ready || chunk_bytes == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "weight streaming copy: slot %p, host %p, ready %p, chunk %llu bytes: "
                "none may be NULL or 0", slot, host, ready, (unsigned long long)chunk_bytes);
    char name[48];
    if (!named)
        snprintf(name, sizeof name, "copy group");
    else if (layer >= 0)
        snprintf(name, sizeof name, "copy %s %d", gp_stream_kind_name((gp_stream_kind)kind), layer);
    else
        snprintf(name, sizeof name, "copy %s", gp_stream_kind_name((gp_stream_kind)kind));
    /* Nsight Systems shows each group's enqueue (its waits, chunks and
     * events) under the group's name, on the thread that issued it. */
    nvtxRangePushA(name);
    gp_status st = sc_copy_enqueue(b, slot, host, bytes, chunk_bytes, wait, n_wait, ready, kind, layer);
    nvtxRangePop();
    return st;
}

static gp_status sc_capturing(void *stream, int *active)
{
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    GP_CUDA_TRY(cudaStreamIsCapturing((cudaStream_t)stream, &cap));
    *active = cap == cudaStreamCaptureStatusActive;
    return GP_OK;
}

static gp_status sc_stream_wait(void *be, void *stream, void *marker, gp_stream_kind kind)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    int cap = 0;
    GP_TRY(sc_capturing(stream, &cap));
    /* Inside a capture the marker was recorded outside it: the wait must
     * become an event-wait node (as gp_weight_group_acquire does). A graph
     * replays without this call, so it is not timed. */
    if (cap) {
        GP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)marker, cudaEventWaitExternal));
        return GP_OK;
    }
    /* A pair around the wait on the compute stream: start completes when
     * the stream's earlier work is done, end when the copy is too, so the
     * pair's elapsed time is how long the stream stalled on the copy. */
    sc_timing *t = NULL;
    GP_TRY(sc_timing_slot(b, &b->stalls, false, &t));
    if (t)
        GP_CUDA_TRY(cudaEventRecord(t->start, (cudaStream_t)stream));
    GP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)marker, 0));
    if (t) {
        GP_CUDA_TRY(cudaEventRecord(t->end, (cudaStream_t)stream));
        t->kind = sc_kind_index((int)kind);
        t->layer = -1;
        t->bytes = 0;
        b->stalls.n_timed++;
    }
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
        GP_CUDA_TRY(cudaEventRecordWithFlags((cudaEvent_t)marker, (cudaStream_t)stream, cudaEventRecordExternal));
    else
        GP_CUDA_TRY(cudaEventRecord((cudaEvent_t)marker, (cudaStream_t)stream));
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
    GP_CUDA_TRY(e);
    return GP_OK;
}

static gp_status sc_marker_wait(void *be, void *marker)
{
    (void)be;
    return gp_device_event_wait((cudaEvent_t)marker, "a weight streaming marker");
}

/* Waits (bounded) for every pair still recorded: the copies' last one (one
 * stream, in order), each stall's (several compute streams). */
static gp_status sc_pairs_wait(sc_pairs *p, bool one_stream, const char *what)
{
    for (int i = one_stream && p->n_timed > 0 ? p->n_timed - 1 : 0; i < p->n_timed; i++)
        GP_TRY(gp_device_event_wait(p->t[(p->head + i) % SC_MAX_TIMED].end, what));
    return GP_OK;
}

/* Sums the pairs still recorded into the folded seconds per kind, and empties the ring. */
static gp_status sc_pairs_sum(sc_pairs *p)
{
    for (int i = 0; i < p->n_timed; i++) {
        const sc_timing *t = &p->t[(p->head + i) % SC_MAX_TIMED];
        float ms = 0.0f;
        GP_CUDA_TRY(cudaEventElapsedTime(&ms, t->start, t->end));
        p->folded_s[sc_kind_index(t->kind)] += (double)ms * 1e-3;
    }
    p->head = 0;
    p->n_timed = 0;
    return GP_OK;
}

static void sc_pairs_reset(sc_pairs *p)
{
    memset(p->folded_s, 0, sizeof p->folded_s);
    p->untimed = 0;
}

/* Between steps: waits (bounded) for the last timed copy and stall, then sums. */
static gp_status sc_collect(void *be, double *copy_s, double waited_s[GP_STREAM_KIND_COUNT])
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    *copy_s = 0.0;
    for (int k = 0; k < GP_STREAM_KIND_COUNT; k++)
        waited_s[k] = 0.0;
    GP_TRY(sc_pairs_wait(&b->copies, true, "the last timed weight streaming copy"));
    GP_TRY(sc_pairs_wait(&b->stalls, false, "a timed wait on a weight streaming copy"));
    GP_TRY(sc_pairs_sum(&b->copies));
    GP_TRY(sc_pairs_sum(&b->stalls));
    for (int k = 0; k < GP_STREAM_KIND_COUNT; k++) {
        *copy_s += b->copies.folded_s[k];
        waited_s[k] = b->stalls.folded_s[k];
    }
    if (b->copies.untimed || b->stalls.untimed)
        fprintf(stderr, "greenpipe: weight streaming: %llu copies and %llu waits on copies were not timed (more "
                "than %d of either still running between two statistics calls); copy and wait seconds are low\n",
                (unsigned long long)b->copies.untimed, (unsigned long long)b->stalls.untimed, SC_MAX_TIMED);
    sc_pairs_reset(&b->copies);
    sc_pairs_reset(&b->stalls);
    /* A new interval: its log starts empty, timed against a new epoch. */
    b->log_head = 0;
    b->log_n = 0;
    GP_CUDA_TRY(cudaEventRecord(b->epoch, b->copy));
    return GP_OK;
}

/* The log's copies, then the ring's (not folded yet), relative to ref; the
 * newest cap. Both through the epoch, which every copy of the interval and
 * (as documented) ref follow, so no elapsed time is negative. */
static gp_status sc_copy_log(void *be, void *ref, gp_stream_copy *out, int cap, int *n)
{
    gp_stream_cuda *b = (gp_stream_cuda *)be;
    *n = 0;
    GP_TRY(gp_device_event_wait((cudaEvent_t)ref, "the copy log's reference event"));
    GP_TRY(sc_pairs_wait(&b->copies, true, "the last timed weight streaming copy"));
    float ref_ms = 0.0f;
    GP_CUDA_TRY(cudaEventElapsedTime(&ref_ms, b->epoch, (cudaEvent_t)ref));
    int total = b->log_n + b->copies.n_timed, skip = total > cap ? total - cap : 0, k = 0;
    for (int i = skip; i < b->log_n; i++) {
        const sc_logged *e = &b->log[(b->log_head + i) % SC_LOG_MAX];
        out[k++] = (gp_stream_copy){(gp_stream_kind)e->kind, e->layer, e->bytes, e->start_ms - ref_ms,
                                    e->end_ms - ref_ms};
    }
    for (int i = skip > b->log_n ? skip - b->log_n : 0; i < b->copies.n_timed; i++) {
        const sc_timing *t = &b->copies.t[(b->copies.head + i) % SC_MAX_TIMED];
        float at0 = 0.0f, at1 = 0.0f;
        GP_CUDA_TRY(cudaEventElapsedTime(&at0, b->epoch, t->start));
        GP_CUDA_TRY(cudaEventElapsedTime(&at1, b->epoch, t->end));
        out[k++] = (gp_stream_copy){(gp_stream_kind)t->kind, t->layer, t->bytes, (double)at0 - ref_ms,
                                    (double)at1 - ref_ms};
    }
    *n = k;
    return GP_OK;
}

static const gp_stream_backend_ops sc_ops = {
    sc_slot_alloc,  sc_slot_free,     sc_marker_create, sc_marker_destroy, sc_copy_h2d,
    sc_stream_wait, sc_marker_record, sc_marker_query,  sc_marker_wait,    sc_collect,
    sc_copy_label,  sc_copy_log,
};

static void sc_free(gp_stream_cuda *b)
{
    if (!b)
        return;
    sc_pairs *pools[] = {&b->copies, &b->stalls};
    for (int p = 0; p < 2; p++)
        for (int k = 0; pools[p]->t && k < SC_MAX_TIMED; k++) {
            if (pools[p]->t[k].start)
                sc_clear_soft(cudaEventDestroy(pools[p]->t[k].start));
            if (pools[p]->t[k].end)
                sc_clear_soft(cudaEventDestroy(pools[p]->t[k].end));
        }
    if (b->epoch)
        sc_clear_soft(cudaEventDestroy(b->epoch));
    if (b->drain)
        sc_clear_soft(cudaEventDestroy(b->drain));
    if (b->copy)
        sc_clear_soft(cudaStreamDestroy(b->copy));
    /* slots still allocated keep the pool alive until they are freed */
    if (b->pool)
        sc_clear_soft(cudaMemPoolDestroy(b->pool));
    free(b->copies.t);
    free(b->stalls.t);
    free(b->log);
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
    GP_CUDA_TRY(cudaGetDeviceCount(&n));
    if (device < 0 || device >= n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_stream_cuda_backend_create: device %d: 0 to %d are present", device,
                n - 1);
    GP_CUDA_TRY(cudaSetDevice(device));
    int pools = 0;
    GP_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    if (!pools)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_stream_cuda_backend_create: device %d has no stream-ordered "
                "memory pools (cudaMallocAsync)", device);
    gp_stream_cuda *b = (gp_stream_cuda *)calloc(1, sizeof *b);
    if (b) {
        b->copies.t = (sc_timing *)calloc(SC_MAX_TIMED, sizeof *b->copies.t);
        b->stalls.t = (sc_timing *)calloc(SC_MAX_TIMED, sizeof *b->stalls.t);
        b->log = (sc_logged *)calloc(SC_LOG_MAX, sizeof *b->log);
    }
    if (!b || !b->copies.t || !b->stalls.t || !b->log) {
        if (b) {
            free(b->copies.t);
            free(b->stalls.t);
            free(b->log);
        }
        free(b);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_stream_cuda_backend_create: out of memory");
    }
    b->device = device;
    gp_status st = gp_device_stream_create(&b->copy, "weight streaming copy stream");
    if (st == GP_OK)
        st = gp_device_event_create(&b->drain, cudaEventDisableTiming, "weight streaming drain event");
    if (st == GP_OK)
        st = gp_device_event_create(&b->epoch, cudaEventDefault, "weight streaming copy log epoch");
    if (st == GP_OK) {
        cudaError_t e = cudaEventRecord(b->epoch, b->copy);
        if (e != cudaSuccess)
            st = gp_cuda_fail(e, "cudaEventRecord(epoch) (weight streaming)", __FILE__, __LINE__);
    }
    if (st == GP_OK) /* the copies' own row in Nsight Systems */
        nvtxNameCudaStreamA(b->copy, "greenpipe weight streaming copies");
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
    GP_CUDA_TRY(cudaMemPoolGetAttribute(b->pool, cudaMemPoolAttrUsedMemHigh, &u));
    GP_CUDA_TRY(cudaMemPoolGetAttribute(b->pool, cudaMemPoolAttrReservedMemHigh, &r));
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
