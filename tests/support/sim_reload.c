/* The simulated reload backend (sim_reload.h): virtual time on three
 * streams, ordered only by the markers the schedule records and waits on,
 * so a missing dependency shows as an op that starts too early. */
#include "sim_reload.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_marker {
    gp_sim_reload *owner;
    double t; /* completion time; -1 until recorded */
} sim_marker;

struct gp_sim_reload {
    gp_sim_reload_params p;
    double tail[3]; /* [stream]: load, process, write */
    gp_sim_reload_rec *log; /* [cap] */
    int n_log, cap;
    int calls[GP_SIM_RL_CALL_COUNT];
    int fail[GP_SIM_RL_CALL_COUNT];
    int live_markers;
    int next_ready;  /* the layer layer_ready should announce next */
    int bad;         /* rules broken inside the calls */
    char first[256]; /* the first of them */
};

static void sim_bad(gp_sim_reload *x, const char *fmt, ...)
{
    if (x->bad++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->first, sizeof x->first, fmt, ap);
        va_end(ap);
    }
}

static int sim_stream(const gp_sim_reload *x, gp_kv_reload_stage s)
{
    return s == GP_KV_RELOAD_WRITE && x->p.write_on_compute ? GP_KV_RELOAD_PROCESS : (int)s;
}

/* Counts the call and fails it when its injected countdown reaches 0. */
static gp_status sim_enter(gp_sim_reload *x, gp_sim_reload_call c, int layer)
{
    static const char *const names[GP_SIM_RL_CALL_COUNT] = {
        "load", "process", "write", "record", "wait", "marker_create", "layer_ready"};
    x->calls[c]++;
    if (x->fail[c] > 0 && --x->fail[c] == 0)
        GP_FAIL(GP_ERR_CUDA, "sim: injected failure of %s (layer %d)", names[c], layer);
    return GP_OK;
}

/* A fixed factor in 0.5..1.5 per (stage, layer), so stage times vary
 * between layers the same way in every run. */
static double sim_dur(const gp_sim_reload *x, gp_kv_reload_stage s, int layer)
{
    double d = x->p.dur[s];
    if (x->p.jitter) {
        unsigned h = (unsigned)(layer * 2654435761u) ^ (unsigned)(s * 40503u + 17u);
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        d *= 0.5 + (h % 1001u) / 1000.0;
    }
    return d;
}

static gp_status sim_op(void *be, gp_kv_reload_stage s, int layer, int buf)
{
    gp_sim_reload *x = be;
    GP_TRY(sim_enter(x, (gp_sim_reload_call)s, layer));
    if (x->n_log == x->cap) {
        sim_bad(x, "more than %d ops enqueued", x->cap);
        return GP_OK;
    }
    int q = sim_stream(x, s);
    gp_sim_reload_rec *r = &x->log[x->n_log++];
    r->stage = s;
    r->layer = layer;
    r->buf = buf;
    r->start = x->tail[q];
    r->end = r->start + sim_dur(x, s, layer);
    x->tail[q] = r->end;
    return GP_OK;
}

static gp_status sim_load(void *be, int layer, int buf) { return sim_op(be, GP_KV_RELOAD_LOAD, layer, buf); }
static gp_status sim_process(void *be, int layer, int buf)
{
    return sim_op(be, GP_KV_RELOAD_PROCESS, layer, buf);
}
static gp_status sim_write(void *be, int layer, int buf) { return sim_op(be, GP_KV_RELOAD_WRITE, layer, buf); }

static gp_status sim_record(void *be, gp_kv_reload_stage s, void *marker)
{
    gp_sim_reload *x = be;
    GP_TRY(sim_enter(x, GP_SIM_RL_RECORD, -1));
    ((sim_marker *)marker)->t = x->tail[sim_stream(x, s)];
    return GP_OK;
}

static gp_status sim_wait(void *be, gp_kv_reload_stage s, void *marker)
{
    gp_sim_reload *x = be;
    GP_TRY(sim_enter(x, GP_SIM_RL_WAIT, -1));
    double t = ((sim_marker *)marker)->t;
    if (t < 0) /* a CUDA wait on an unrecorded event waits for nothing */
        sim_bad(x, "the %s stream waited on a marker never recorded", gp_kv_reload_stage_name(s));
    int q = sim_stream(x, s);
    if (t > x->tail[q])
        x->tail[q] = t;
    return GP_OK;
}

static gp_status sim_marker_create(void *be, void **marker)
{
    gp_sim_reload *x = be;
    GP_TRY(sim_enter(x, GP_SIM_RL_MARKER_CREATE, -1));
    sim_marker *m = malloc(sizeof *m);
    if (!m)
        GP_FAIL(GP_ERR_NO_MEMORY, "sim: out of memory");
    m->owner = x;
    m->t = -1;
    x->live_markers++;
    *marker = m;
    return GP_OK;
}

static void sim_marker_destroy(void *be, void *marker)
{
    gp_sim_reload *x = be;
    x->live_markers--;
    free(marker);
}

static const gp_sim_reload_rec *sim_find(const gp_sim_reload *x, gp_kv_reload_stage s, int layer)
{
    for (int i = 0; i < x->n_log; i++)
        if (x->log[i].stage == s && x->log[i].layer == layer)
            return &x->log[i];
    return NULL;
}

static gp_status sim_layer_ready(void *be, int layer, void *written)
{
    gp_sim_reload *x = be;
    GP_TRY(sim_enter(x, GP_SIM_RL_LAYER_READY, layer));
    if (layer != x->next_ready)
        sim_bad(x, "layer_ready announced layer %d, expected %d", layer, x->next_ready);
    x->next_ready = layer + 1;
    const gp_sim_reload_rec *w = sim_find(x, GP_KV_RELOAD_WRITE, layer);
    if (!w)
        sim_bad(x, "layer_ready announced layer %d before its write was enqueued", layer);
    else if (((sim_marker *)written)->t != w->end)
        sim_bad(x, "layer_ready's marker for layer %d completes at %g, its write ends at %g", layer,
                ((sim_marker *)written)->t, w->end);
    return GP_OK;
}

static const gp_kv_reload_ops sim_ops = {
    .load = sim_load,
    .process = sim_process,
    .write = sim_write,
    .record = sim_record,
    .wait = sim_wait,
    .marker_create = sim_marker_create,
    .marker_destroy = sim_marker_destroy,
    .layer_ready = sim_layer_ready,
};

const gp_kv_reload_ops *gp_sim_reload_ops(void) { return &sim_ops; }

gp_status gp_sim_reload_create(const gp_sim_reload_params *p, gp_sim_reload **out)
{
    gp_sim_reload *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "sim: out of memory");
    x->p = *p;
    x->cap = 3 * (p->n_layers > 0 ? p->n_layers : 0) + 16; /* room to catch a few extra ops */
    x->log = calloc((size_t)x->cap, sizeof *x->log);
    if (!x->log) {
        free(x);
        GP_FAIL(GP_ERR_NO_MEMORY, "sim: out of memory");
    }
    *out = x;
    return GP_OK;
}

void gp_sim_reload_destroy(gp_sim_reload *x)
{
    if (!x)
        return;
    free(x->log);
    free(x);
}

void gp_sim_reload_fail(gp_sim_reload *x, gp_sim_reload_call call, int nth) { x->fail[call] = nth; }

double gp_sim_reload_marker_time(const void *marker) { return ((const sim_marker *)marker)->t; }

const gp_sim_reload_rec *gp_sim_reload_log(const gp_sim_reload *x, int *n)
{
    *n = x->n_log;
    return x->log;
}

int gp_sim_reload_calls(const gp_sim_reload *x, gp_sim_reload_call call) { return x->calls[call]; }

int gp_sim_reload_live_markers(const gp_sim_reload *x) { return x->live_markers; }

double gp_sim_reload_makespan(const gp_sim_reload *x)
{
    double t = 0;
    for (int i = 0; i < x->n_log; i++)
        if (x->log[i].end > t)
            t = x->log[i].end;
    return t;
}

/* Appends a broken rule to the count, describing the first. */
#define SIM_RULE(cond, ...)                                                                      \
    do {                                                                                         \
        if (cond) {                                                                              \
            if (bad++ == 0)                                                                      \
                snprintf(why, cap, __VA_ARGS__);                                                 \
        }                                                                                        \
    } while (0)

int gp_sim_reload_check(const gp_sim_reload *x, int complete, char *why, size_t cap)
{
    int bad = x->bad;
    snprintf(why, cap, "%s", x->first);
    int n = x->p.n_layers, nb = x->p.n_buffers;
    for (int i = 0; i < x->n_log; i++) {
        const gp_sim_reload_rec *r = &x->log[i];
        const char *name = gp_kv_reload_stage_name(r->stage);
        SIM_RULE(r->layer < 0 || r->layer >= n, "%s of layer %d, outside 0..%d", name, r->layer, n - 1);
        SIM_RULE(r->buf < 0 || r->buf >= nb, "%s of layer %d into buffer %d, outside 0..%d", name,
                 r->layer, r->buf, nb - 1);
        for (int j = 0; j < i; j++)
            SIM_RULE(x->log[j].stage == r->stage && x->log[j].layer == r->layer, "%s of layer %d twice",
                     name, r->layer);
        const gp_sim_reload_rec *prev = r->stage == GP_KV_RELOAD_LOAD ? NULL
                                        : sim_find(x, (gp_kv_reload_stage)(r->stage - 1), r->layer);
        if (r->stage != GP_KV_RELOAD_LOAD) {
            SIM_RULE(!prev || prev > r, "%s of layer %d enqueued before its %s", name, r->layer,
                     gp_kv_reload_stage_name(r->stage - 1));
            SIM_RULE(prev && r->start < prev->end, "%s of layer %d starts at %g, before its %s ends at %g",
                     name, r->layer, r->start, gp_kv_reload_stage_name(r->stage - 1), prev ? prev->end : 0.0);
            SIM_RULE(prev && prev->buf != r->buf, "%s of layer %d on buffer %d, its %s on buffer %d", name,
                     r->layer, r->buf, gp_kv_reload_stage_name(r->stage - 1), prev ? prev->buf : -1);
            continue;
        }
        /* No overwrite before write-out: every earlier load into this buffer
         * was written, and that write ended before this load starts. */
        for (int j = 0; j < i; j++) {
            const gp_sim_reload_rec *o = &x->log[j];
            if (o->stage != GP_KV_RELOAD_LOAD || o->buf != r->buf)
                continue;
            const gp_sim_reload_rec *w = sim_find(x, GP_KV_RELOAD_WRITE, o->layer);
            SIM_RULE(!w || w > r, "load of layer %d into buffer %d before layer %d in it was written",
                     r->layer, r->buf, o->layer);
            SIM_RULE(w && w->end > r->start,
                     "load of layer %d into buffer %d starts at %g, the write of layer %d in it ends at %g",
                     r->layer, r->buf, r->start, o->layer, w ? w->end : 0.0);
        }
    }
    if (complete) {
        for (int l = 0; l < n; l++)
            for (int s = 0; s < GP_KV_RELOAD_STAGE_COUNT; s++)
                SIM_RULE(!sim_find(x, (gp_kv_reload_stage)s, l), "layer %d never had its %s", l,
                         gp_kv_reload_stage_name((gp_kv_reload_stage)s));
        SIM_RULE(x->next_ready != n, "layer_ready announced layers 0..%d of %d", x->next_ready - 1, n);
    }
    return bad;
}
