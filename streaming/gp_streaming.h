/* Weight streaming: which weight groups live in a device-memory budget, when
 * their host-to-device copies are issued, and when their memory may be reused.
 * Pure C; the device work goes through a backend of function pointers. */
#ifndef GP_STREAMING_H
#define GP_STREAMING_H

#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a group holds. ATTN, FFN and HEAD have the values of gp_group_kind
 * (model/gp_model.h), so the engine can pass its kinds through; OTHER is for
 * groups that are neither (an embedding or norms kept apart). Statistics are
 * kept per kind. */
typedef enum gp_stream_kind {
    GP_STREAM_ATTN = 0,
    GP_STREAM_FFN = 1,
    GP_STREAM_HEAD = 2,
    GP_STREAM_OTHER = 3,
    GP_STREAM_KIND_COUNT = 4
} gp_stream_kind;

const char *gp_stream_kind_name(gp_stream_kind k);

/* One host-to-device group copy on a timeline (gp_streamer_copy_log). */
typedef struct gp_stream_copy {
    gp_stream_kind kind;   /* the group's, as copy_label named it; GP_STREAM_OTHER when unnamed */
    int layer;             /* -1: none (the head, or unnamed) */
    uint64_t bytes;
    double start_ms, end_ms; /* the copy engine's start and end of the copy, ms after the reference
                                marker (negative: before it) */
} gp_stream_copy;

/* The device side, in the terms of a CUDA backend: a slot is device memory
 * (a device pointer), a marker an event, a stream a compute stream. The
 * backend owns one copy stream, and every slot_alloc, slot_free and copy_h2d
 * is ordered on it, so a free followed by an allocation never overlaps in
 * device memory, and a wait enqueued on it before a free or a copy holds that
 * memory until the markers complete without the host waiting.
 * Every op returns GP_OK or an error with a message (gp_set_error). */
typedef struct gp_stream_backend_ops {
    /* A slot of `bytes` on the device (cudaMallocAsync on the copy stream, or
     * a slot of a fixed slab). */
    gp_status (*slot_alloc)(void *be, uint64_t bytes, void **slot);
    /* Give slot back once every marker of wait[0..n_wait) completed: a wait
     * of the copy stream on each (cudaStreamWaitEvent), then cudaFreeAsync on
     * it. The markers may be recorded again right after the call returns. */
    void (*slot_free)(void *be, void *slot, void *const *wait, int n_wait);
    gp_status (*marker_create)(void *be, void **marker);
    void (*marker_destroy)(void *be, void *marker);
    /* Copy `bytes` from host (pinned) into slot on the copy stream, in chunks
     * of at most chunk_bytes, after every marker of wait[0..n_wait) (the last
     * readers of the slot's previous group: GPU-side waits), then record
     * `ready` on the copy stream. */
    gp_status (*copy_h2d)(void *be, void *slot, const void *host, uint64_t bytes, uint64_t chunk_bytes,
                          void *const *wait, int n_wait, void *ready);
    /* Make a compute stream wait for marker on the GPU (cudaStreamWaitEvent).
     * kind only names the statistics bucket the stall is counted in. */
    gp_status (*stream_wait)(void *be, void *stream, void *marker, gp_stream_kind kind);
    /* Record marker on a compute stream (cudaEventRecord). */
    gp_status (*marker_record)(void *be, void *stream, void *marker);
    /* Optional (the manager does not poll today): *done = 1 when marker
     * completed (cudaEventQuery), for a host-side eviction policy. */
    gp_status (*marker_query)(void *be, void *marker, int *done);
    /* Host: block until marker completed, bounded (gp_device_event_wait). */
    gp_status (*marker_wait)(void *be, void *marker);
    /* Optional (NULL: the time figures stay 0). Seconds the copy engine was
     * busy and seconds compute streams stalled in stream_wait, per kind,
     * since the previous call; called between steps, so a CUDA backend may
     * wait on the timing events it recorded around copies and waits. */
    gp_status (*collect)(void *be, double *copy_s, double waited_s[GP_STREAM_KIND_COUNT]);
    /* Optional (NULL: copies go unnamed). Called just before each copy_h2d
     * with the group that copy loads (layer -1: none), so a backend can name
     * the copy in profiler ranges and in its copy log. */
    void (*copy_label)(void *be, gp_stream_kind kind, int layer);
    /* Optional (NULL: gp_streamer_copy_log is GP_ERR_UNSUPPORTED). The copies
     * since the last collect, as gp_streamer_copy_log documents. */
    gp_status (*copy_log)(void *be, void *ref, gp_stream_copy *out, int cap, int *n);
} gp_stream_backend_ops;

typedef struct gp_stream_backend {
    const gp_stream_backend_ops *ops; /* required, every op set but the optional ones (marker_query,
                                         collect, copy_label, copy_log) */
    void *be;                         /* the backend's state, passed to every op */
} gp_stream_backend;

/* One weight group: the unit that is copied, resident or evicted. */
typedef struct gp_stream_group {
    gp_stream_kind kind;
    int layer;         /* for messages; -1 when none */
    uint64_t bytes;    /* > 0: the slot size */
    const void *host;  /* the group's bytes in host memory (pinned for full PCIe speed) */
    int pinned;        /* 1: loaded at create and never evicted (embedding, head, norms) */
    int on_demand;     /* 1: copied only when acquired (gp_streamer_ensure / acquire): never kept
                          resident by keep_resident, passed over by gp_streamer_advance's prefetch
                          (and not counted among its D groups), for groups whose readers run only
                          some steps. Pinned and on demand together is GP_ERR_INVALID_ARG */
} gp_stream_group;

typedef struct gp_streamer_params {
    uint64_t budget_bytes;   /* device bytes the slots may hold at any instant */
    int prefetch_depth;      /* D >= 0: gp_streamer_advance issues the next D streamed groups (neither
                                pinned nor on demand) of the order */
    uint64_t chunk_bytes;    /* largest single copy; default 32 MiB, from where pinned copies run at
                                full PCIe speed (docs/ARCHITECTURE.md §6) */
    int min_window;          /* >= 1: groups consecutive in the order that must fit at once (the
                                minimum working set); default 2, as the pipelined runner holds an
                                attn group on one stream while the ffn group runs on the other */
    int keep_resident;       /* 0 (default): every unpinned group streams, LRU. 1: the budget left
                                after the pinned groups and a streaming reserve of (min_window + D)
                                times the largest unpinned group is filled with unpinned groups kept
                                resident for good (loaded at create, spread evenly over the order;
                                never on-demand ones), and only the rest stream through the reserve.
                                When every group but the on-demand ones fits beside a reserve of
                                min_window times the largest on-demand group, all of them are kept,
                                as nothing else streams then. On a cyclic order LRU
                                evicts every group before its next use, so a budget of half the
                                weights streams as much as one just above the minimum; keeping a
                                fixed set streams only what does not fit (what Belady's optimal
                                policy misses on a cycle, up to the reserve) */
    const gp_stream_group *groups; /* [n_groups], copied */
    int n_groups;
    const int *order;        /* [n_order] group indices: one step's execution order, repeated every
                                step (copied); pinned groups in it are allowed and skipped */
    int n_order;
    gp_stream_backend backend;
} gp_streamer_params;

/* chunk 32 MiB, window 2, prefetch depth 1, everything else 0 / NULL. */
gp_streamer_params gp_streamer_default_params(void);

/* The least budget that params can run in: every pinned group plus the
 * largest set of distinct unpinned groups in min_window consecutive positions
 * of the order (wrapping into the next step). Checks params like create but
 * ignores budget_bytes and the backend. */
gp_status gp_streamer_min_budget(const gp_streamer_params *p, uint64_t *bytes);

typedef struct gp_streamer gp_streamer; /* opaque */

/* Checks params (a budget below the minimum working set is
 * GP_ERR_INVALID_ARG naming the groups of that set and their bytes), then
 * loads the pinned groups. */
gp_status gp_streamer_create(const gp_streamer_params *p, gp_streamer **out);
/* Waits on the host for every copy and last reader, then frees the slots.
 * Groups still in use are a caller bug: reported on stderr, freed anyway. */
void gp_streamer_destroy(gp_streamer *s);

/* The seed pattern of a stage: mark in use, ensure, make stream wait for
 * the copy; on failure the mark is dropped again, so the caller releases
 * only after GP_OK. */
gp_status gp_streamer_acquire(gp_streamer *s, int group, void *stream);
/* Unmark, recording the group's last-reader marker on stream: the stage's
 * work on the group is already enqueued there. */
gp_status gp_streamer_release(gp_streamer *s, int group, void *stream);

/* The parts, for callers that split them. ensure issues the copy if the
 * group is not resident, evicting least-recently-used groups that are
 * neither pinned nor in use; GP_ERR_DEVICE_MEMORY (naming what is held) when
 * the groups in use leave no room. */
gp_status gp_streamer_ensure(gp_streamer *s, int group);
gp_status gp_streamer_wait_ready(gp_streamer *s, int group, void *stream);
gp_status gp_streamer_mark_in_use(gp_streamer *s, int group);
/* stream NULL: nothing was enqueued on the group since the mark (an error
 * path), no marker is recorded. */
gp_status gp_streamer_unmark(gp_streamer *s, int group, void *stream);

/* The stage at order[pos] is about to run: issue the copies of the next D
 * unpinned groups of the order (in that order, wrapping into the next step;
 * pinned, kept and on-demand groups in between are passed over) that are not
 * resident.
 * A prefetch never evicts one of those D groups; without room it stops and
 * returns GP_SOFT_FULL (counted in prefetch_skipped); a demand ensure later
 * evicts what it must. */
gp_status gp_streamer_advance(gp_streamer *s, int pos);

/* Queries. slot: the group's device memory, NULL when not resident. */
int gp_streamer_in_use(gp_streamer *s, int group);
int gp_streamer_resident(gp_streamer *s, int group);
void *gp_streamer_slot(gp_streamer *s, int group);
uint64_t gp_streamer_device_bytes(gp_streamer *s);
/* The bookkeeping's invariants (held bytes = sum of resident groups' bytes
 * <= budget, pinned and in-use groups resident, counts >= 0):
 * GP_ERR_STATE naming the first broken one. For tests and debug builds. */
gp_status gp_streamer_check(gp_streamer *s);

typedef struct gp_streamer_stats {
    uint64_t loads;            /* copies issued (demand and prefetch) */
    uint64_t bytes_streamed;   /* sum of the loaded groups' bytes */
    uint64_t hits;             /* ensure found the group resident (or its copy in flight) */
    uint64_t misses;           /* ensure had to issue the copy */
    uint64_t prefetches;       /* copies issued by gp_streamer_advance */
    uint64_t prefetch_skipped; /* prefetches given up for lack of room */
    uint64_t evictions;
    double copy_s;             /* copy-engine busy seconds (backend collect; 0 without) */
    double gbps;               /* bytes_streamed / copy_s / 1e9; 0 when copy_s is 0 */
    double waited_s[GP_STREAM_KIND_COUNT]; /* compute stalled on copies, per kind */
    int kept_groups;           /* unpinned groups kept resident by keep_resident (fixed at create) */
    uint64_t kept_bytes;       /* their bytes */
    uint64_t device_bytes;     /* held now */
    uint64_t peak_device_bytes;/* most held since the last reset */
} gp_streamer_stats;

/* Statistics since the last reset (collecting the backend's timing); with
 * reset, the next step starts from zero. Call between steps. */
gp_status gp_streamer_stats_get(gp_streamer *s, gp_streamer_stats *out, int reset);

/* The copies issued since the last gp_streamer_stats_get (which collects),
 * oldest first, with their times relative to ref: a marker of the backend's
 * device with timing (for the CUDA backend a cudaEvent_t recorded on any
 * stream of the device, e.g. a step's start event), recorded after that
 * statistics call. The newest cap when there were more; *n receives how many
 * were written. Waits (bounded) for ref and the copies: call between steps,
 * and before the statistics call that ends the interval. GP_ERR_UNSUPPORTED
 * when the backend keeps no copy log. */
gp_status gp_streamer_copy_log(gp_streamer *s, void *ref, gp_stream_copy *out, int cap, int *n);

/* What gp_streamer_create checks of p before it touches the backend: the
 * groups, the order and the budget against the minimum working set
 * (GP_ERR_INVALID_ARG naming the groups of that set and their bytes). For
 * callers that can refuse a budget before preparing the groups' host bytes;
 * ignores host pointers and the backend. */
gp_status gp_streamer_check_budget(const gp_streamer_params *p);

/* The CUDA backend (library gp_streaming_cuda, streaming/stream_cuda.cu):
 * one non-blocking copy stream on device (named in NVTX, each group copy's
 * enqueue an NVTX range "copy attn 3"), slots from a private stream-ordered
 * pool (cudaMallocFromPoolAsync / cudaFreeAsync on the copy stream, freed
 * memory kept mapped for the next slot), markers as events without timing,
 * copies in chunks of chunk_bytes. collect: copy-busy seconds from a timing
 * event pair per copy on the copy stream, and waited_s[kind] from a pair
 * around each stream_wait on the compute stream (its elapsed time is how
 * long that stream stalled on the copy; a few microseconds of event overhead
 * each where the copy was already done; waits inside a graph capture are not
 * timed). copy_log: each copy's group and its times since the last collect
 * (the newest few thousand; times through float milliseconds since that
 * collect, so microseconds apart after minutes).
 * create makes device the calling thread's current device; every op must be
 * called with it current, streams of that device, and host memory pinned
 * (pageable memory makes each chunk a staged, partly host-synchronous copy). */
gp_status gp_stream_cuda_backend_create(int device, gp_stream_backend *out);
/* The pool's high-water marks since create: bytes handed out to slots (the
 * budget's device-side check) and bytes mapped (including the pool's
 * rounding and fragmentation). */
gp_status gp_stream_cuda_backend_mem(const gp_stream_backend *b, uint64_t *used_high, uint64_t *reserved_high);
/* Waits (bounded) for the copy stream, then frees the stream, events and
 * pool; call after gp_streamer_destroy. NULL or a zeroed backend is a no-op. */
void gp_stream_cuda_backend_destroy(gp_stream_backend *b);

#ifdef __cplusplus
}
#endif

#endif
