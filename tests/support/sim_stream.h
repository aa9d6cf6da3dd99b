/* A test double of the weight-streaming backend: a virtual clock, one copy
 * engine of a given rate and per-chunk cost, compute streams whose work
 * advances time, and markers with completion times; it checks the device
 * footprint and every reuse of memory against the reads of it. */
#ifndef GP_TEST_SIM_STREAM_H
#define GP_TEST_SIM_STREAM_H

#include "gp_streaming.h"

#define GP_SIM_STREAM_MAX_STREAMS 8
#define GP_SIM_STREAM_LOG 4096

typedef struct gp_sim_stream_params {
    double gbps;            /* copy-engine rate for the bytes of a chunk, 1e9 bytes/s */
    double chunk_latency_s; /* fixed cost per chunk: small chunks lose speed (§6: 51 GB/s at 2 MB) */
    uint64_t budget_bytes;  /* footprint limit checked at every allocation; 0: unchecked */
} gp_sim_stream_params;

typedef struct gp_sim_stream gp_sim_stream;

gp_status gp_sim_stream_create(const gp_sim_stream_params *p, gp_sim_stream **out);
void gp_sim_stream_destroy(gp_sim_stream *x);
gp_stream_backend gp_sim_stream_backend(gp_sim_stream *x);
/* Compute stream i (0 to GP_SIM_STREAM_MAX_STREAMS - 1) as the manager's
 * opaque stream. */
void *gp_sim_stream_compute(gp_sim_stream *x, int i);
/* Work of `seconds` on a compute stream that reads slot (NULL: reads no
 * slot): checked to start after the slot's copy finished. */
void gp_sim_stream_read(gp_sim_stream *x, void *stream, void *slot, double seconds);
double gp_sim_stream_time(gp_sim_stream *x, void *stream); /* the stream's tail */
/* The host's clock, moved forward to t (never back): copies issued from now
 * on start no earlier; 0 until set, as if the host ran far ahead. */
void gp_sim_stream_host_at(gp_sim_stream *x, double t);
/* The nth allocation / copy from now fails (1: the next); 0 cancels. */
void gp_sim_stream_fail_alloc(gp_sim_stream *x, int nth);
void gp_sim_stream_fail_copy(gp_sim_stream *x, int nth);

typedef struct gp_sim_stream_report {
    uint64_t device_bytes;  /* held now, in copy-stream order */
    uint64_t peak_bytes;
    int over_budget;        /* allocations that took the footprint over budget_bytes */
    int early_reuse;        /* copies into or frees of a slot that began before a read of it ended */
    int read_before_ready;  /* reads that began before their slot's copy finished */
    int live_slots, live_markers;
    uint64_t copies, bytes_copied;
    double copy_busy_s;     /* total, not reset by collect */
    double last_copy_start, last_copy_end;
    const void *log[GP_SIM_STREAM_LOG]; /* host pointer of every copy, in issue order */
    int n_log;
} gp_sim_stream_report;
const gp_sim_stream_report *gp_sim_stream_report_get(gp_sim_stream *x);

#endif
