/* The prefill/decode lanes' trace: every lane batch's host-clock interval,
 * written as Chrome trace-event JSON (Perfetto and chrome://tracing open
 * it), one track per lane. */
#include <jansson.h>
#include <stdlib.h>

#include "pd_exec_impl.h"

gp_status gp_pd_exec_trace_start(gp_pd_exec *x, size_t max_events)
{
    if (max_events < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "trace: max events %zu; allowed >= 1", max_events);
    px_event *ev = malloc(sizeof *ev * max_events);
    if (!ev)
        GP_FAIL(GP_ERR_NO_MEMORY, "trace: out of host memory for %zu events", max_events);
    pthread_mutex_lock(&x->mu);
    free(x->ev);
    x->ev = ev;
    x->cap_ev = max_events;
    x->n_ev = x->dropped = 0;
    pthread_mutex_unlock(&x->mu);
    return GP_OK;
}

static int add(json_t *arr, json_t *o)
{
    return o ? json_array_append_new(arr, o) : -1;
}

static void track_name(const gp_pd_exec *x, int track, char *out, size_t n)
{
    if (track < px_track(x, GP_PD_WHOLE, false))
        snprintf(out, n, "%s %s SMs", track % 2 ? "prefill" : "decode", x->pairs[track / 2].name);
    else
        snprintf(out, n, "%s", track % 2 ? "prefill, every SM" : "decode and mixed, every SM");
}

static json_t *trace_json(const gp_pd_exec *x)
{
    json_t *arr = json_array();
    int bad = !arr;
    char name[64];
    for (int t = 0; t <= px_track(x, GP_PD_WHOLE, true) && !bad; t++) {
        track_name(x, t, name, sizeof name);
        bad |= add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1,
                                  "tid", t, "args", "name", name));
        bad |= add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "thread_sort_index", "ph", "M", "pid", 1,
                                  "tid", t, "args", "sort_index", t));
    }
    uint64_t t0 = x->n_ev ? x->ev[0].t0 : 0;
    for (size_t i = 0; i < x->n_ev && !bad; i++)
        t0 = x->ev[i].t0 < t0 ? x->ev[i].t0 : t0;
    for (size_t i = 0; i < x->n_ev && !bad; i++) {
        const px_event *e = &x->ev[i];
        bad |= add(arr, json_pack("{s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i}}", "name", e->what, "ph", "X", "ts",
                                  (e->t0 - t0) / 1e3, "dur", (e->t1 - e->t0) / 1e3, "pid", 1, "tid", e->track,
                                  "args", "rows", e->rows));
    }
    json_t *root = bad ? NULL : json_pack("{s:o, s:s, s:{s:I}}", "traceEvents", arr, "displayTimeUnit", "ms",
                                          "metadata", "dropped_events", (json_int_t)x->dropped);
    if (!root)
        json_decref(arr);
    return root;
}

gp_status gp_pd_exec_write_trace(gp_pd_exec *x, const char *path)
{
    pthread_mutex_lock(&x->mu);
    json_t *root = x->ev ? trace_json(x) : NULL;
    bool tracing = x->ev != NULL;
    pthread_mutex_unlock(&x->mu);
    if (!tracing)
        GP_FAIL(GP_ERR_STATE, "trace: not started (gp_pd_exec_trace_start)");
    if (!root)
        GP_FAIL(GP_ERR_NO_MEMORY, "trace: out of host memory building %s", path);
    int rc = json_dump_file(root, path, JSON_COMPACT);
    json_decref(root);
    if (rc != 0)
        GP_FAIL(GP_ERR_IO, "trace: could not write %s", path);
    return GP_OK;
}
