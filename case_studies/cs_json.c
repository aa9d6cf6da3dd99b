/* --json: every row with its raw samples, stage-time trace, rebalancer
 * decisions and weight streaming, plus the run's metadata, through jansson
 * (always valid JSON). */
#include "cs_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cs_put(cs_jb *b, json_t *obj, const char *key, json_t *v)
{
    /* json_object_set_new takes the reference even on failure */
    if (!obj || !v || json_object_set_new(obj, key, v) != 0)
        b->failed = true;
}

json_t *cs_json_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

void cs_put_real(cs_jb *b, json_t *obj, const char *key, double v) { cs_put(b, obj, key, cs_json_real(v)); }
void cs_put_int(cs_jb *b, json_t *obj, const char *key, long long v) { cs_put(b, obj, key, json_integer(v)); }
void cs_put_bool(cs_jb *b, json_t *obj, const char *key, bool v) { cs_put(b, obj, key, json_boolean(v)); }

void cs_append(cs_jb *b, json_t *arr, json_t *v)
{
    if (!arr || !v || json_array_append_new(arr, v) != 0)
        b->failed = true;
}
json_t *cs_json_text(const char *s)
{
    s = s ? s : "";
    json_t *j = json_string(s);
    if (j)
        return j;
    /* invalid UTF-8: keep ASCII, mark every other byte */
    size_t n = strlen(s);
    char *clean = malloc(n + 1);
    if (!clean)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        clean[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    j = json_string(clean);
    free(clean);
    return j;
}

void cs_put_str(cs_jb *b, json_t *obj, const char *key, const char *s)
{
    cs_put(b, obj, key, cs_json_text(s));
}

static json_t *meta_json(cs_jb *b, const gp_cs_meta *m)
{
    json_t *o = json_object();
    if (!o) {
        b->failed = true;
        return NULL;
    }
    cs_put_str(b, o, "gpu", m->gpu);
    cs_put_int(b, o, "sm_count", m->sm_count);
    cs_put_str(b, o, "driver", m->driver);
    cs_put_str(b, o, "cuda", m->cuda);
    cs_put_str(b, o, "commit", m->commit);
    cs_put_str(b, o, "model", m->model);
    cs_put_str(b, o, "dtype", m->dtype);
    cs_put_str(b, o, "timestamp", m->timestamp);
    cs_put_str(b, o, "notes", m->notes);
    /* null: the run went through every configuration; a reader of a partial
     * report must not take absent rows for configurations never asked for */
    cs_put(b, o, "stopped", m->stopped[0] ? cs_json_text(m->stopped) : json_null());
    /* only for weights beyond VRAM: a resident run's report is as before */
    if (m->vram_budget) {
        json_t *w = json_object();
        cs_put_bool(b, w, "streamed", true);
        cs_put_int(b, w, "vram_budget_bytes", (long long)m->vram_budget);
        cs_put_int(b, w, "weight_bytes", (long long)m->weight_bytes);
        cs_put_int(b, w, "layer_groups", m->layer_groups);
        cs_put_int(b, w, "kept_groups", m->kept_groups);
        cs_put_int(b, w, "kept_bytes", (long long)m->kept_bytes);
        cs_put_int(b, w, "prefetch_depth", m->prefetch_depth);
        cs_put_bool(b, w, "graphs", false);
        cs_put(b, o, "weights", w);
    }
    return o;
}

/* [n_layers][M] as nested arrays, layer-major as the row stores them. */
static json_t *grid_json(cs_jb *b, const float *v, int n_layers, int M)
{
    json_t *outer = json_array();
    for (int l = 0; outer && l < n_layers; l++) {
        json_t *inner = json_array();
        for (int m = 0; inner && m < M; m++)
            if (json_array_append_new(inner, cs_json_real(v[l * M + m])) != 0)
                b->failed = true;
        if (!inner || json_array_append_new(outer, inner) != 0)
            b->failed = true;
    }
    if (!outer)
        b->failed = true;
    return outer;
}

static json_t *trace_json(cs_jb *b, const gp_cs_row *r)
{
    if (!cs_row_has_trace(r))
        return json_null();
    const gp_cs_trace *t = &r->trace;
    json_t *o = json_object();
    if (!o)
        return NULL;
    cs_put_int(b, o, "n_layers", t->n_layers);
    cs_put_int(b, o, "M", t->M);
    cs_put_real(b, o, "step_ms", t->step_ms);
    cs_put(b, o, "attn_begin_ms", grid_json(b, t->attn_begin, t->n_layers, t->M));
    cs_put(b, o, "attn_end_ms", grid_json(b, t->attn_end, t->n_layers, t->M));
    cs_put(b, o, "ffn_begin_ms", grid_json(b, t->ffn_begin, t->n_layers, t->M));
    cs_put(b, o, "ffn_end_ms", grid_json(b, t->ffn_end, t->n_layers, t->M));
    return o;
}

/* The row's weight streaming per step (on rows that streamed). */
static json_t *stream_json(cs_jb *b, const gp_cs_stream *st)
{
    json_t *o = json_object(), *wait = json_object();
    cs_put_int(b, o, "steps", st->steps);
    cs_put_real(b, o, "gb_per_step", st->gb_per_step);
    cs_put_real(b, o, "copy_gbps", st->copy_gbps > 0 ? st->copy_gbps : NAN);
    cs_put_real(b, o, "copy_ms_per_step", st->copy_ms_per_step);
    cs_put_real(b, wait, "attn", st->wait_attn_ms_per_step);
    cs_put_real(b, wait, "ffn", st->wait_ffn_ms_per_step);
    cs_put(b, o, "wait_ms_per_step", wait);
    cs_put_real(b, o, "hits_per_step", st->hits_per_step);
    cs_put_real(b, o, "misses_per_step", st->misses_per_step);
    cs_put_real(b, o, "prefetches_per_step", st->prefetches_per_step);
    cs_put_real(b, o, "evictions_per_step", st->evictions_per_step);
    cs_put_int(b, o, "peak_device_bytes", (long long)st->peak_device_bytes);
    if (!o)
        b->failed = true;
    return o;
}

/* The traced step's weight-group copies (ms from the step's start). */
static json_t *copies_json(cs_jb *b, const gp_cs_row *r)
{
    json_t *o = json_object(), *arr = json_array();
    cs_put_real(b, o, "step_ms", r->copy_step_ms);
    for (int i = 0; arr && i < r->n_copies; i++) {
        const gp_cs_copy *c = &r->copies[i];
        json_t *e = json_object();
        cs_put_str(b, e, "group", c->group);
        cs_put_int(b, e, "bytes", (long long)c->bytes);
        cs_put_real(b, e, "begin_ms", c->begin_ms);
        cs_put_real(b, e, "end_ms", c->end_ms);
        cs_append(b, arr, e);
    }
    cs_put(b, o, "copies", arr);
    if (!o)
        b->failed = true;
    return o;
}

static json_t *decision_json(cs_jb *b, const gp_rebalance_decision *d)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    cs_put_int(b, o, "step", d->step);
    cs_put_int(b, o, "from", d->from);
    cs_put_int(b, o, "to", d->to);
    cs_put_int(b, o, "from_a", d->from_a);
    cs_put_int(b, o, "to_a", d->to_a);
    cs_put_real(b, o, "attn_ms", d->attn_ms);
    cs_put_real(b, o, "ffn_ms", d->ffn_ms);
    cs_put_real(b, o, "attn_backlog", d->attn_backlog);
    cs_put_real(b, o, "ffn_backlog", d->ffn_backlog);
    cs_put_real(b, o, "a2f_mb_per_token", d->a2f_mb_per_token);
    cs_put_real(b, o, "step_ms", d->step_ms);
    cs_put_real(b, o, "target_share", d->target_share);
    cs_put_real(b, o, "predicted_from_ms", d->predicted_from_ms);
    cs_put_real(b, o, "predicted_to_ms", d->predicted_to_ms);
    cs_put_str(b, o, "reason", d->reason);
    return o;
}

static json_t *row_json(cs_jb *b, const gp_cs_row *r)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    cs_put_str(b, o, "workload", r->workload);
    cs_put_int(b, o, "B", r->B);
    cs_put_int(b, o, "C", r->C);
    cs_put(b, o, "seq", json_boolean(r->seq));
    json_t *s = json_object();
    if (s) {
        cs_put_int(b, s, "a_req", r->split.a_req);
        /* a negative request is the shorthand: F gets the rest */
        cs_put(b, s, "f_req", r->split.f_req < 0 ? json_null() : json_integer(r->split.f_req));
        cs_put_int(b, s, "a_got", r->split.a_got);
        cs_put_int(b, s, "f_got", r->split.f_got);
        cs_put(b, s, "partitioned", json_boolean(r->split.partitioned));
        cs_put_str(b, s, "unit", r->split.unit ? r->split.unit : "SMs");
    }
    cs_put(b, o, "split", s);
    cs_put_int(b, o, "M", r->M);
    /* rows per micro-batch as split (uneven when M does not divide B); [] unknown */
    json_t *mr = json_array();
    for (int m = 0; mr && r->micro_rows[0] > 0 && m < r->M && m < GP_PIPE_MAX_MICRO; m++)
        cs_append(b, mr, json_integer(r->micro_rows[m]));
    cs_put(b, o, "micro_rows", mr);
    cs_put_int(b, o, "depth", r->depth);
    cs_put_str(b, o, "placement", gp_placement_name(r->placement));
    cs_put_str(b, o, "rebalance", gp_rebalance_policy_name(r->rebalance));
    cs_put_str(b, o, "tag", r->tag);
    cs_put_int(b, o, "gemm_tune", r->gemm_tune);
    cs_put_str(b, o, "attn_kernel", r->attn_kernel);
    cs_put(b, o, "ok", json_boolean(r->ok));
    cs_put(b, o, "error", r->ok ? json_null() : cs_json_text(r->error));

    json_t *samples = json_array();
    for (int i = 0; samples && r->samples_ms && i < r->n_samples; i++)
        if (json_array_append_new(samples, cs_json_real(r->samples_ms[i])) != 0)
            b->failed = true;
    cs_put(b, o, "samples_ms", samples);
    /* Outcome figures of a failed configuration are null, not zeros that
     * could be read as measurements. */
    double na = NAN;
    bool ok = r->ok;
    cs_put_real(b, o, "ms_median", ok ? r->ms_median : na);
    cs_put_real(b, o, "ms_min", ok ? r->ms_min : na);
    cs_put_real(b, o, "ms_max", ok ? r->ms_max : na);
    cs_put_real(b, o, "tokens_per_s", ok ? r->tokens_per_s : na);
    cs_put_real(b, o, "attn_ms_per_layer", ok ? r->attn_ms_per_layer : na);
    cs_put_real(b, o, "ffn_ms_per_layer", ok ? r->ffn_ms_per_layer : na);
    cs_put_real(b, o, "a2f_mb_per_token", ok ? r->a2f_mb_per_token : na);
    cs_put_real(b, o, "ring_occupancy_mean", ok ? r->ring_occupancy_mean : na);
    cs_put_real(b, o, "attn_backlog", ok ? r->attn_backlog : na);
    cs_put_real(b, o, "ffn_backlog", ok ? r->ffn_backlog : na);
    cs_put_real(b, o, "attn_idle_share", ok ? r->attn_idle_share : na);
    cs_put_real(b, o, "ffn_idle_share", ok ? r->ffn_idle_share : na);
    cs_put_real(b, o, "floor_ms", r->floor_ms > 0 ? r->floor_ms : na);
    cs_put_real(b, o, "floor_share", ok ? r->floor_share : na);
    cs_put_real(b, o, "speedup_vs_seq", ok && r->speedup_vs_seq > 0 ? r->speedup_vs_seq : na);
    cs_put(b, o, "trace", trace_json(b, r));
    /* only on streamed weights: resident rows are as before */
    if (ok && r->stream.on)
        cs_put(b, o, "streaming", stream_json(b, &r->stream));
    if (ok && r->copies && r->n_copies > 0)
        cs_put(b, o, "weight_copies", copies_json(b, r));

    json_t *dec = json_array();
    for (int i = 0; dec && r->decisions && i < r->n_decisions; i++) {
        json_t *d = decision_json(b, &r->decisions[i]);
        if (!d || json_array_append_new(dec, d) != 0)
            b->failed = true;
    }
    cs_put(b, o, "decisions", dec);
    return o;
}

/* Per workload, the fastest row (its index into "rows") against seq, and
 * the report's line for it; null indices and speedups where none ran. */
static json_t *winners_json(cs_jb *b, const gp_cs_row *rows, int n)
{
    gp_cs_winner w[GP_CS_MAX_WORKLOADS];
    int k = rows ? gp_cs_winners(rows, n, w, GP_CS_MAX_WORKLOADS) : 0;
    json_t *arr = json_array();
    for (int i = 0; arr && i < k; i++) {
        json_t *o = json_object();
        char text[512];
        gp_cs_winner_text(&w[i], rows, text, sizeof text);
        cs_put_str(b, o, "workload", w[i].workload);
        cs_put_int(b, o, "B", w[i].B);
        cs_put_int(b, o, "C", w[i].C);
        cs_put(b, o, "row", w[i].row >= 0 ? json_integer(w[i].row) : json_null());
        cs_put(b, o, "seq_row", w[i].seq_row >= 0 ? json_integer(w[i].seq_row) : json_null());
        cs_put(b, o, "best_split_row", w[i].best_split_row >= 0 ? json_integer(w[i].best_split_row) : json_null());
        cs_put_bool(b, o, "seq_wins", w[i].row >= 0 && w[i].row == w[i].seq_row);
        cs_put_str(b, o, "tag", w[i].row >= 0 ? rows[w[i].row].tag : "");
        cs_put_real(b, o, "speedup_vs_seq", w[i].speedup > 0 ? w[i].speedup : NAN);
        cs_put_str(b, o, "text", text);
        cs_append(b, arr, o);
    }
    if (!arr)
        b->failed = true;
    return arr;
}

void *gp_cs_row_json(const gp_cs_row *r)
{
    cs_jb b = { false };
    json_t *o = r ? row_json(&b, r) : NULL;
    if (b.failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void *gp_cs_meta_json(const gp_cs_meta *m)
{
    static const gp_cs_meta none;
    cs_jb b = { false };
    json_t *o = meta_json(&b, m ? m : &none);
    if (b.failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

gp_status gp_cs_write_json(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    static const gp_cs_meta none;
    cs_jb b = { false };
    json_t *root = json_object();
    if (!root)
        GP_FAIL(GP_ERR_NO_MEMORY, "JSON report: out of memory");
    cs_put_str(&b, root, "format", "greenpipe decode_pipeline_case_study");
    cs_put_int(&b, root, "version", 1);
    cs_put(&b, root, "meta", meta_json(&b, m ? m : &none));
    json_t *arr = json_array();
    for (int i = 0; arr && rows && i < n; i++) {
        json_t *r = row_json(&b, &rows[i]);
        if (!r || json_array_append_new(arr, r) != 0)
            b.failed = true;
    }
    cs_put(&b, root, "rows", arr);
    cs_put(&b, root, "winners", winners_json(&b, rows, n));
    if (b.failed) {
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "JSON report for '%s': out of memory building the document", path ? path : "");
    }
    FILE *f = cs_open_out(path, "JSON report");
    if (!f) {
        json_decref(root);
        return GP_ERR_IO;
    }
    /* 10 significant digits: exact for any timing, without 0.30000000000000004 */
    int rc = json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc != 0 || fputc('\n', f) == EOF) {
        fclose(f);
        GP_FAIL(GP_ERR_IO, "cannot write the JSON report to '%s'", path);
    }
    return cs_close_out(f, path, "JSON report");
}
