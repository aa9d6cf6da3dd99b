/* --trace: Chrome trace event JSON (Perfetto, chrome://tracing) of one
 * representative step per configuration: a process per row, a thread per
 * partition, a complete ("X") slice per stage, a flow arrow from each
 * attention slice to its FFN slice, rebalancer decisions as instant events,
 * and with streamed weights a copy thread with a slice per weight-group copy. */
#include "cs_impl.h"

#include <jansson.h>
#include <math.h>

enum { TID_ATTN = 1, TID_FFN = 2, TID_REBALANCE = 3, TID_COPY = 4, TID_STEP = 5 };

typedef struct tb {
    json_t *events;
    bool failed;
    long long next_flow_id; /* flow ids are global to the file */
} tb;

static void add(tb *b, json_t *ev)
{
    if (!ev || json_array_append_new(b->events, ev) != 0)
        b->failed = true;
}

/* Stage times are ms from the step's start; the format wants microseconds.
 * Rounded to the nanosecond: the float times carry no more, and the file
 * then shows 100.0 rather than 100.00000149. */
static double us(float ms) { return isfinite(ms) ? round(1e6 * (double)ms) / 1e3 : 0.0; }

/* "M" metadata naming a process or thread and fixing its sort order. */
static void meta_event(tb *b, const char *what, int pid, int tid, const char *name)
{
    add(b, json_pack("{s:s, s:s, s:i, s:i, s:{s:o}}", "name", what, "ph", "M", "pid", pid, "tid", tid, "args",
                     "name", cs_json_text(name)));
}

static void sort_event(tb *b, const char *what, int pid, int tid, int index)
{
    add(b, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", what, "ph", "M", "pid", pid, "tid", tid, "args",
                     "sort_index", index));
}

static void slice(tb *b, int pid, int tid, const char *name, const char *cat, double ts, double dur, int layer,
                  int micro)
{
    add(b, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i, s:i}}", "name", name, "cat", cat, "ph", "X",
                     "ts", ts, "dur", dur, "pid", pid, "tid", tid, "args", "layer", layer, "micro", micro));
}

/* A flow end point: "s" on the attention slice, "f" on the FFN slice. Both
 * sit in the middle of their slice and use binding point "e" (enclosing), so
 * each binds to the slice around it even when neighbours touch end to begin. */
static void flow(tb *b, const char *ph, int pid, int tid, double ts, long long id)
{
    add(b, json_pack("{s:s, s:s, s:s, s:f, s:i, s:i, s:I, s:s}", "name", "A→F payload", "cat", "a2f", "ph", ph,
                     "ts", ts, "pid", pid, "tid", tid, "id", (json_int_t)id, "bp", "e"));
}

static void row_stages(tb *b, const gp_cs_row *r, int pid)
{
    const gp_cs_trace *t = &r->trace;
    for (int l = 0; l < t->n_layers; l++)
        for (int m = 0; m < t->M; m++) {
            int i = l * t->M + m;
            double a0 = us(t->attn_begin[i]), a1 = us(t->attn_end[i]);
            double f0 = us(t->ffn_begin[i]), f1 = us(t->ffn_end[i]);
            /* A stage recorded end-before-begin (clock noise) is drawn empty
             * rather than with a negative duration, which viewers reject. */
            double ad = a1 > a0 ? a1 - a0 : 0.0, fd = f1 > f0 ? f1 - f0 : 0.0;
            char name[48];
            snprintf(name, sizeof name, "attn L%d m%d", l, m);
            slice(b, pid, TID_ATTN, name, "attention", a0, ad, l, m);
            snprintf(name, sizeof name, "ffn L%d m%d", l, m);
            slice(b, pid, TID_FFN, name, "ffn", f0, fd, l, m);
            long long id = b->next_flow_id++;
            flow(b, "s", pid, TID_ATTN, a0 + ad / 2, id);
            flow(b, "f", pid, TID_FFN, f0 + fd / 2, id);
        }
}

/* Host-to-device weight copies of the traced step, on the stages' clock.
 * One begun in the step before is drawn from the step's start (a
 * viewer may reject times before 0), its real begin in args. */
static void row_copies(tb *b, const gp_cs_row *r, int pid)
{
    for (int i = 0; i < r->n_copies; i++) {
        const gp_cs_copy *c = &r->copies[i];
        double t0 = us(c->begin_ms > 0.0f ? c->begin_ms : 0.0f), t1 = us(c->end_ms);
        double ms = (double)c->end_ms - (double)c->begin_ms;
        json_t *args = json_pack("{s:o, s:I, s:f, s:f}", "group", cs_json_text(c->group), "bytes",
                                 (json_int_t)c->bytes, "begin_ms", (double)c->begin_ms, "end_ms", (double)c->end_ms);
        if (args && ms > 0.0 && json_object_set_new(args, "gbps", json_real((double)c->bytes / ms / 1e6)) != 0)
            b->failed = true;
        if (!args) {
            b->failed = true;
            continue;
        }
        add(b, json_pack("{s:o, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", cs_json_text(c->group), "cat", "copy",
                         "ph", "X", "ts", t0, "dur", t1 > t0 ? t1 - t0 : 0.0, "pid", pid, "tid", TID_COPY, "args",
                         args));
    }
}

/* Decisions happen between steps, and the trace holds one step: each is
 * placed where its step would start if every step took the representative
 * step's time (step index x step time), its real step number in args. */
static void row_decisions(tb *b, const gp_cs_row *r, int pid)
{
    double step_us = cs_row_has_trace(r) && r->trace.step_ms > 0 ? us(r->trace.step_ms)
                     : r->ms_median > 0 && isfinite(r->ms_median) ? 1e3 * r->ms_median
                                                                  : 1e3;
    for (int k = 0; k < r->n_decisions; k++) {
        const gp_rebalance_decision *d = &r->decisions[k];
        char name[64];
        if (d->from == d->to)
            snprintf(name, sizeof name, "rebalance: stay at A %d", d->from_a);
        else
            snprintf(name, sizeof name, "rebalance: A %d -> %d", d->from_a, d->to_a);
        json_t *args = json_pack("{s:i, s:i, s:i, s:i, s:i, s:o}", "step", d->step, "from", d->from, "to", d->to,
                                 "from_a", d->from_a, "to_a", d->to_a, "reason", cs_json_text(d->reason));
        /* figures may be NaN where a policy does not use them: left out then */
        const struct { const char *k; double v; } fig[] = {
            { "attn_ms", d->attn_ms }, { "ffn_ms", d->ffn_ms }, { "attn_backlog", d->attn_backlog },
            { "ffn_backlog", d->ffn_backlog }, { "a2f_mb_per_token", d->a2f_mb_per_token },
            { "step_ms", d->step_ms }, { "target_share", d->target_share },
            { "predicted_from_ms", d->predicted_from_ms }, { "predicted_to_ms", d->predicted_to_ms },
        };
        for (size_t i = 0; args && i < sizeof fig / sizeof fig[0]; i++)
            if (isfinite(fig[i].v) && json_object_set_new(args, fig[i].k, json_real(fig[i].v)) != 0)
                b->failed = true;
        if (!args) {
            b->failed = true;
            continue;
        }
        add(b, json_pack("{s:s, s:s, s:s, s:f, s:i, s:i, s:s, s:o}", "name", name, "cat", "rebalance", "ph", "i",
                         "ts", d->step * step_us, "pid", pid, "tid", TID_REBALANCE, "s", "t", "args", args));
    }
}

static void row_process(tb *b, const gp_cs_row *r, int pid)
{
    char req[64], name[160];
    cs_row_req_text(r, req, sizeof req);
    snprintf(name, sizeof name, "%s %d:%d, split %s, M=%d, depth %u%s%s%s", r->workload, r->B, r->C, req, r->M,
             r->depth, r->placement == GP_PLACE_QKVO_F ? ", qkvo-f" : "", r->rebalance != GP_REBALANCE_OFF ? ", rebalance " : "",
             r->rebalance != GP_REBALANCE_OFF ? gp_rebalance_policy_name(r->rebalance) : "");
    meta_event(b, "process_name", pid, 0, name);
    sort_event(b, "process_sort_index", pid, 0, pid);
    if (cs_row_has_trace(r)) {
        meta_event(b, "thread_name", pid, TID_ATTN, "attention (A)");
        meta_event(b, "thread_name", pid, TID_FFN, "FFN (F)");
        sort_event(b, "thread_sort_index", pid, TID_ATTN, TID_ATTN);
        sort_event(b, "thread_sort_index", pid, TID_FFN, TID_FFN);
        row_stages(b, r, pid);
    }
    /* the seq row has no partitions: its step's extent, for the copies to be read against */
    if (!cs_row_has_trace(r) && r->ok && r->n_copies > 0 && r->copy_step_ms > 0) {
        meta_event(b, "thread_name", pid, TID_STEP, r->seq ? "sequential step (all SMs)" : "step");
        sort_event(b, "thread_sort_index", pid, TID_STEP, 0);
        add(b, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name", "decode step", "cat", "step", "ph", "X", "ts",
                         0.0, "dur", us(r->copy_step_ms), "pid", pid, "tid", TID_STEP));
    }
    if (r->ok && r->copies && r->n_copies > 0) {
        meta_event(b, "thread_name", pid, TID_COPY, "copy");
        sort_event(b, "thread_sort_index", pid, TID_COPY, 3);
        row_copies(b, r, pid);
    }
    if (r->decisions && r->n_decisions > 0) {
        meta_event(b, "thread_name", pid, TID_REBALANCE, "rebalancer");
        sort_event(b, "thread_sort_index", pid, TID_REBALANCE, 4);
        row_decisions(b, r, pid);
    }
}

gp_status gp_cs_write_trace(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    tb b = { json_array(), false, 1 };
    json_t *root = json_object();
    if (!b.events || !root) {
        json_decref(b.events);
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "trace: out of memory");
    }
    for (int i = 0; rows && i < n; i++) {
        const gp_cs_row *r = &rows[i];
        /* pid = row index + 1: the same numbering as the report's rows */
        if (cs_row_has_trace(r) || (r->decisions && r->n_decisions > 0) || (r->ok && r->copies && r->n_copies > 0))
            row_process(&b, r, i + 1);
    }
    if (json_object_set_new(root, "traceEvents", b.events) != 0)
        b.failed = true;
    if (json_object_set_new(root, "displayTimeUnit", json_string("ms")) != 0)
        b.failed = true;
    json_t *meta = gp_cs_meta_json(m);
    if (!meta || json_object_set_new(root, "otherData", meta) != 0)
        b.failed = true;
    if (b.failed) {
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "trace for '%s': out of memory building the document", path ? path : "");
    }
    FILE *f = cs_open_out(path, "trace");
    if (!f) {
        json_decref(root);
        return GP_ERR_IO;
    }
    /* compact: a trace is for viewers, and can hold tens of thousands of events */
    int rc = json_dumpf(root, f, JSON_COMPACT | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (rc != 0 || fputc('\n', f) == EOF) {
        fclose(f);
        GP_FAIL(GP_ERR_IO, "cannot write the trace to '%s'", path);
    }
    return cs_close_out(f, path, "trace");
}
