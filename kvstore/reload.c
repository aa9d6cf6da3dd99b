/* The lag-2 layer-wise reload schedule (gp_kvstore.h, reload): enqueues
 * load, process and write of every layer with markers between the stages,
 * through the backend's ops, and never waits on the host. */
#include "gp_kvstore.h"

#include <stdio.h>
#include <string.h>

const char *gp_kv_reload_stage_name(gp_kv_reload_stage s)
{
    switch (s) {
    case GP_KV_RELOAD_LOAD: return "load";
    case GP_KV_RELOAD_PROCESS: return "process";
    case GP_KV_RELOAD_WRITE: return "write";
    default: return "?";
    }
}

gp_kv_reload_params gp_kv_reload_default_params(void)
{
    gp_kv_reload_params p;
    memset(&p, 0, sizeof p);
    p.n_buffers = 2;
    return p;
}

/* One marker per (buffer, stage): buffer b's markers belong to the layer it
 * holds, and are recorded again for its next layer only n_buffers layers
 * later, after every wait on the previous recording was enqueued. */
typedef struct reload_run {
    const gp_kv_reload_params *p;
    gp_kv_reload_stats st;
    void *marker[GP_KV_RELOAD_MAX_BUFFERS][GP_KV_RELOAD_STAGE_COUNT]; /* [buffer][stage done] */
} reload_run;

static gp_status check_params(const gp_kv_reload_params *p)
{
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv reload: params is NULL");
    if (p->n_layers < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv reload: n_layers %d, need at least 1", p->n_layers);
    if (p->n_buffers < 2 || p->n_buffers > GP_KV_RELOAD_MAX_BUFFERS)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "kv reload: n_buffers %d, allowed 2..%d (a buffer is held from its load to its "
                "write, so one buffer would serialise every stage)",
                p->n_buffers, GP_KV_RELOAD_MAX_BUFFERS);
    const gp_kv_reload_ops *o = p->ops;
    if (!o)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv reload: ops is NULL");
    const char *missing = !o->load            ? "load"
                          : !o->process       ? "process"
                          : !o->write         ? "write"
                          : !o->record        ? "record"
                          : !o->wait          ? "wait"
                          : !o->marker_create ? "marker_create"
                          : !o->marker_destroy ? "marker_destroy"
                                              : NULL;
    if (missing)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv reload: op %s is NULL (only layer_ready is optional)", missing);
    return GP_OK;
}

/* Prefixes the failed op's message with what failed and what was enqueued
 * before it; the op's text is copied first, as gp_set_error writes over it. */
static gp_status fail_op(reload_run *r, gp_status s, const char *what, int layer)
{
    char why[512];
    snprintf(why, sizeof why, "%s", gp_last_error());
    char where[64] = "";
    if (layer >= 0) /* marker creation precedes every layer */
        snprintf(where, sizeof where, " of layer %d (buffer %d)", layer, layer % r->p->n_buffers);
    gp_set_error("kv reload: %s%s failed with %s after %d loads, %d processes, %d writes enqueued: %s",
                 what, where, gp_status_str(s), r->st.loads, r->st.processes, r->st.writes, why);
    return s;
}

static gp_status do_record(reload_run *r, gp_kv_reload_stage stage, int layer)
{
    const gp_kv_reload_params *p = r->p;
    gp_status s = p->ops->record(p->be, stage, r->marker[layer % p->n_buffers][stage]);
    if (s != GP_OK) {
        char what[64];
        snprintf(what, sizeof what, "record after the %s", gp_kv_reload_stage_name(stage));
        return fail_op(r, s, what, layer);
    }
    r->st.records++;
    return GP_OK;
}

/* stage's stream waits for `after` of layer `of` (the marker of its buffer). */
static gp_status do_wait(reload_run *r, gp_kv_reload_stage stage, gp_kv_reload_stage after, int of,
                         int layer)
{
    const gp_kv_reload_params *p = r->p;
    gp_status s = p->ops->wait(p->be, stage, r->marker[of % p->n_buffers][after]);
    if (s != GP_OK) {
        char what[96];
        if (of == layer)
            snprintf(what, sizeof what, "wait for the %s before the %s", gp_kv_reload_stage_name(after),
                     gp_kv_reload_stage_name(stage));
        else
            snprintf(what, sizeof what, "wait for the %s of layer %d before the %s",
                     gp_kv_reload_stage_name(after), of, gp_kv_reload_stage_name(stage));
        return fail_op(r, s, what, layer);
    }
    r->st.waits++;
    return GP_OK;
}

static gp_status do_op(reload_run *r, gp_kv_reload_stage stage, int layer)
{
    const gp_kv_reload_params *p = r->p;
    int buf = layer % p->n_buffers;
    gp_status (*op)(void *, int, int) = stage == GP_KV_RELOAD_LOAD      ? p->ops->load
                                        : stage == GP_KV_RELOAD_PROCESS ? p->ops->process
                                                                        : p->ops->write;
    gp_status s = op(p->be, layer, buf);
    if (s != GP_OK)
        return fail_op(r, s, gp_kv_reload_stage_name(stage), layer);
    int *n = stage == GP_KV_RELOAD_LOAD ? &r->st.loads : stage == GP_KV_RELOAD_PROCESS ? &r->st.processes
                                                                                      : &r->st.writes;
    (*n)++;
    return GP_OK;
}

static gp_status write_layer(reload_run *r, int l)
{
    const gp_kv_reload_params *p = r->p;
    GP_TRY(do_wait(r, GP_KV_RELOAD_WRITE, GP_KV_RELOAD_PROCESS, l, l));
    GP_TRY(do_op(r, GP_KV_RELOAD_WRITE, l));
    r->st.layers_written = l + 1;
    GP_TRY(do_record(r, GP_KV_RELOAD_WRITE, l));
    if (p->ops->layer_ready) {
        gp_status s = p->ops->layer_ready(p->be, l, r->marker[l % p->n_buffers][GP_KV_RELOAD_WRITE]);
        if (s != GP_OK)
            return fail_op(r, s, "layer_ready", l);
        r->st.ready_calls++;
    }
    return GP_OK;
}

static gp_status process_layer(reload_run *r, int l)
{
    GP_TRY(do_wait(r, GP_KV_RELOAD_PROCESS, GP_KV_RELOAD_LOAD, l, l));
    GP_TRY(do_op(r, GP_KV_RELOAD_PROCESS, l));
    return do_record(r, GP_KV_RELOAD_PROCESS, l);
}

static gp_status load_layer(reload_run *r, int l)
{
    int prev = l - r->p->n_buffers; /* the buffer's previous layer, written out by now in enqueue order */
    if (prev >= 0)
        GP_TRY(do_wait(r, GP_KV_RELOAD_LOAD, GP_KV_RELOAD_WRITE, prev, l));
    GP_TRY(do_op(r, GP_KV_RELOAD_LOAD, l));
    return do_record(r, GP_KV_RELOAD_LOAD, l);
}

/* Within an iteration the write comes first: with 2 buffers load(i) refills
 * the buffer of write(i - 2), whose marker must be recorded before the load's
 * wait is enqueued. */
static gp_status run_schedule(reload_run *r)
{
    const gp_kv_reload_params *p = r->p;
    int n = p->n_layers;
    for (int i = 0; i < n + 2; i++) {
        if (i - 2 >= 0)
            GP_TRY(write_layer(r, i - 2));
        if (i - 1 >= 0 && i - 1 < n)
            GP_TRY(process_layer(r, i - 1));
        if (i < n)
            GP_TRY(load_layer(r, i));
    }
    if (p->done) {
        gp_status s = p->ops->record(p->be, GP_KV_RELOAD_WRITE, p->done);
        if (s != GP_OK)
            return fail_op(r, s, "record of done after the write", n - 1);
        r->st.records++;
    }
    return GP_OK;
}

gp_status gp_kv_reload_run(const gp_kv_reload_params *p, gp_kv_reload_stats *stats)
{
    if (stats)
        memset(stats, 0, sizeof *stats);
    GP_TRY(check_params(p));
    reload_run r;
    memset(&r, 0, sizeof r);
    r.p = p;
    int used = p->n_buffers < p->n_layers ? p->n_buffers : p->n_layers;
    gp_status s = GP_OK;
    for (int b = 0; b < used && s == GP_OK; b++)
        for (int st = 0; st < GP_KV_RELOAD_STAGE_COUNT && s == GP_OK; st++) {
            s = p->ops->marker_create(p->be, &r.marker[b][st]);
            if (s == GP_OK)
                r.st.markers++;
            else
                s = fail_op(&r, s, "marker_create", -1);
        }
    if (s == GP_OK)
        s = run_schedule(&r);
    for (int b = 0; b < used; b++)
        for (int st = 0; st < GP_KV_RELOAD_STAGE_COUNT; st++)
            if (r.marker[b][st])
                p->ops->marker_destroy(p->be, r.marker[b][st]);
    if (stats)
        *stats = r.st;
    return s;
}
