/* The simulated weight-streaming backend (sim_stream.h): virtual time for a
 * copy engine and compute streams, with the footprint and reuse checks the
 * manager's tests assert on. */
#include "sim_stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct sim_marker { double t; } sim_marker; /* completion time; 0 until recorded */

typedef struct sim_slot {
    uint64_t bytes;
    double write_end;     /* the last copy into it finished */
    double last_read_end; /* the latest read of it finished */
} sim_slot;

typedef struct sim_cstream { double tail; } sim_cstream;

struct gp_sim_stream {
    gp_sim_stream_params p;
    double copy_tail; /* the copy stream's end: allocs, frees and copies are ordered on it */
    double host_now;  /* what host queries see as completed */
    sim_cstream streams[GP_SIM_STREAM_MAX_STREAMS];
    double busy_since_collect, waited_since_collect[GP_STREAM_KIND_COUNT];
    int fail_alloc, fail_copy;
    gp_sim_stream_report r;
};

static double sim_max_wait(void *const *wait, int n, double t)
{
    for (int i = 0; i < n; i++)
        if (((sim_marker *)wait[i])->t > t)
            t = ((sim_marker *)wait[i])->t;
    return t;
}

static gp_status sim_slot_alloc(void *be, uint64_t bytes, void **slot)
{
    gp_sim_stream *x = be;
    if (x->fail_alloc > 0 && --x->fail_alloc == 0)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "sim: injected allocation failure of %llu bytes",
                (unsigned long long)bytes);
    sim_slot *s = calloc(1, sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "sim: out of memory");
    s->bytes = bytes;
    x->r.device_bytes += bytes;
    if (x->r.device_bytes > x->r.peak_bytes)
        x->r.peak_bytes = x->r.device_bytes;
    if (x->p.budget_bytes && x->r.device_bytes > x->p.budget_bytes)
        x->r.over_budget++;
    x->r.live_slots++;
    *slot = s;
    return GP_OK;
}

static void sim_slot_free(void *be, void *slot, void *const *wait, int n_wait)
{
    gp_sim_stream *x = be;
    sim_slot *s = slot;
    x->copy_tail = sim_max_wait(wait, n_wait, x->copy_tail);
    if (x->copy_tail < s->last_read_end)
        x->r.early_reuse++;
    x->r.device_bytes -= s->bytes;
    x->r.live_slots--;
    free(s);
}

static gp_status sim_marker_create(void *be, void **marker)
{
    gp_sim_stream *x = be;
    sim_marker *m = calloc(1, sizeof *m);
    if (!m)
        GP_FAIL(GP_ERR_NO_MEMORY, "sim: out of memory");
    x->r.live_markers++;
    *marker = m;
    return GP_OK;
}

static void sim_marker_destroy(void *be, void *marker)
{
    ((gp_sim_stream *)be)->r.live_markers--;
    free(marker);
}

static gp_status sim_copy_h2d(void *be, void *slot, const void *host, uint64_t bytes, uint64_t chunk,
                              void *const *wait, int n_wait, void *ready)
{
    gp_sim_stream *x = be;
    sim_slot *s = slot;
    if (x->fail_copy > 0 && --x->fail_copy == 0)
        GP_FAIL(GP_ERR_CUDA, "sim: injected copy failure of %llu bytes", (unsigned long long)bytes);
    if (bytes > s->bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "sim: copy of %llu bytes into a slot of %llu", (unsigned long long)bytes,
                (unsigned long long)s->bytes);
    /* The copy engine cannot start before the host issued the copy. */
    double t0 = sim_max_wait(wait, n_wait, x->copy_tail > x->host_now ? x->copy_tail : x->host_now);
    if (t0 < s->last_read_end)
        x->r.early_reuse++;
    uint64_t chunks = (bytes + chunk - 1) / chunk;
    double dur = (double)chunks * x->p.chunk_latency_s + (double)bytes / (x->p.gbps * 1e9);
    x->copy_tail = t0 + dur;
    s->write_end = x->copy_tail;
    ((sim_marker *)ready)->t = x->copy_tail;
    x->busy_since_collect += dur;
    x->r.copy_busy_s += dur;
    x->r.copies++;
    x->r.bytes_copied += bytes;
    x->r.last_copy_start = t0;
    x->r.last_copy_end = x->copy_tail;
    if (x->r.n_log < GP_SIM_STREAM_LOG)
        x->r.log[x->r.n_log++] = host;
    return GP_OK;
}

static gp_status sim_stream_wait(void *be, void *stream, void *marker, gp_stream_kind kind)
{
    gp_sim_stream *x = be;
    sim_cstream *c = stream;
    double t = ((sim_marker *)marker)->t;
    if (t > c->tail) {
        x->waited_since_collect[kind] += t - c->tail;
        c->tail = t;
    }
    return GP_OK;
}

static gp_status sim_marker_record(void *be, void *stream, void *marker)
{
    ((sim_marker *)marker)->t = ((sim_cstream *)stream)->tail;
    return GP_OK;
}

static gp_status sim_marker_query(void *be, void *marker, int *done)
{
    *done = ((sim_marker *)marker)->t <= ((gp_sim_stream *)be)->host_now;
    return GP_OK;
}

static gp_status sim_marker_wait(void *be, void *marker)
{
    gp_sim_stream *x = be;
    if (((sim_marker *)marker)->t > x->host_now)
        x->host_now = ((sim_marker *)marker)->t;
    return GP_OK;
}

static gp_status sim_collect(void *be, double *copy_s, double waited_s[GP_STREAM_KIND_COUNT])
{
    gp_sim_stream *x = be;
    *copy_s = x->busy_since_collect;
    memcpy(waited_s, x->waited_since_collect, sizeof x->waited_since_collect);
    x->busy_since_collect = 0.0;
    memset(x->waited_since_collect, 0, sizeof x->waited_since_collect);
    return GP_OK;
}

static const gp_stream_backend_ops sim_ops = {
    sim_slot_alloc, sim_slot_free,   sim_marker_create, sim_marker_destroy, sim_copy_h2d,
    sim_stream_wait, sim_marker_record, sim_marker_query, sim_marker_wait,  sim_collect,
    NULL /* copy_label: copies need no names here */, NULL /* copy_log: none kept */,
};

gp_status gp_sim_stream_create(const gp_sim_stream_params *p, gp_sim_stream **out)
{
    if (!p || !out || !(p->gbps > 0.0) || p->chunk_latency_s < 0.0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sim_stream_create: params, out and a rate > 0 are required");
    gp_sim_stream *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sim_stream_create: out of memory");
    x->p = *p;
    *out = x;
    return GP_OK;
}

void gp_sim_stream_destroy(gp_sim_stream *x) { free(x); }

gp_stream_backend gp_sim_stream_backend(gp_sim_stream *x)
{
    gp_stream_backend b = {&sim_ops, x};
    return b;
}

void *gp_sim_stream_compute(gp_sim_stream *x, int i)
{
    return i >= 0 && i < GP_SIM_STREAM_MAX_STREAMS ? &x->streams[i] : NULL;
}

void gp_sim_stream_read(gp_sim_stream *x, void *stream, void *slot, double seconds)
{
    sim_cstream *c = stream;
    sim_slot *s = slot;
    if (s && c->tail < s->write_end)
        x->r.read_before_ready++;
    c->tail += seconds;
    if (s && c->tail > s->last_read_end)
        s->last_read_end = c->tail;
}

double gp_sim_stream_time(gp_sim_stream *x, void *stream) { return ((sim_cstream *)stream)->tail; }
void gp_sim_stream_host_at(gp_sim_stream *x, double t)
{
    if (t > x->host_now)
        x->host_now = t;
}
void gp_sim_stream_fail_alloc(gp_sim_stream *x, int nth) { x->fail_alloc = nth; }
void gp_sim_stream_fail_copy(gp_sim_stream *x, int nth) { x->fail_copy = nth; }
const gp_sim_stream_report *gp_sim_stream_report_get(gp_sim_stream *x) { return &x->r; }
