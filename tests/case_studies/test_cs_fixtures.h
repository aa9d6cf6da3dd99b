/* Result rows for the writer tests: a seq row, a split row with a trace and
 * rebalancer decisions, a failed row, and texts that need quoting/escaping. */
#ifndef TEST_CS_FIXTURES_H
#define TEST_CS_FIXTURES_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_case_study.h"

#define FX_LAYERS 3
#define FX_M 2
#define FX_ROWS 5
#define FX_DECISIONS 2
/* error text with every character a table, CSV or XML writer must handle */
#define FX_ERROR "cuBLAS failed, \"CUBLAS_STATUS_EXECUTION_FAILED\" | on <A:8> & F\nsecond line"

static inline void fx_meta(gp_cs_meta *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->gpu, sizeof m->gpu, "NVIDIA H100 80GB HBM3, \"test\" <rig> & co");
    m->sm_count = 132;
    snprintf(m->driver, sizeof m->driver, "580.65.06");
    snprintf(m->cuda, sizeof m->cuda, "13.0");
    snprintf(m->commit, sizeof m->commit, "83aeda3");
    snprintf(m->model, sizeof m->model, "llama3-8b");
    snprintf(m->dtype, sizeof m->dtype, "fp16");
    snprintf(m->timestamp, sizeof m->timestamp, "2025-01-02T03:04:05Z");
    snprintf(m->notes, sizeof m->notes, "notes with, commas and \"quotes\"");
}

static inline void fx_samples(gp_cs_row *r, double base)
{
    r->n_samples = 3;
    r->samples_ms = malloc(3 * sizeof(double));
    r->samples_ms[0] = base + 0.25;
    r->samples_ms[1] = base;
    r->samples_ms[2] = base + 1.5;
    r->ms_median = base + 0.25;
    r->ms_min = base;
    r->ms_max = base + 1.5;
    r->tokens_per_s = r->B / (r->ms_median / 1e3);
}

/* rows: [0] small seq, [1] small 56:76 M=2 with trace and decisions,
 * [2] small 72:rest M=2 failed, [3] large seq, [4] large 40:92 M=1 whose
 * workload label holds a comma (the CSV quoting case). */
static inline void fx_rows(gp_cs_row *rows)
{
    memset(rows, 0, FX_ROWS * sizeof *rows);
    for (int i = 0; i < FX_ROWS; i++) {
        gp_cs_row *r = &rows[i];
        bool small = i < 3;
        snprintf(r->workload, sizeof r->workload, "%s", small ? "small" : "large, \"custom\"");
        r->B = small ? 8 : 1024;
        r->C = small ? 1024 : 384;
        r->depth = 4;
        r->split.unit = "SMs";
        r->ok = true;
        snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", small ? "cudacore_pipe" : "stream");
    }
    /* seq rows */
    for (int i = 0; i < FX_ROWS; i += 3) {
        gp_cs_row *r = &rows[i];
        r->seq = true;
        r->M = 1;
        r->split.a_got = r->split.f_got = 132;
        fx_samples(r, i == 0 ? 9.0 : 36.0);
        r->floor_ms = i == 0 ? 5.5 : 21.5;
        r->floor_share = r->floor_ms / r->ms_median;
        r->speedup_vs_seq = 1.0;
    }
    gp_cs_row *r = &rows[1];
    r->split = (gp_split_info){ 56, 76, 56, 76, true, "SMs" };
    r->M = 2;
    r->micro_rows[0] = r->micro_rows[1] = 4; /* B 8 split evenly */
    r->rebalance = GP_REBALANCE_RATIO;
    fx_samples(r, 10.0);
    r->attn_ms_per_layer = 0.12;
    r->ffn_ms_per_layer = 0.17;
    r->a2f_mb_per_token = 0.0082;
    r->ring_occupancy_mean = 0.8;
    r->attn_backlog = 0.4;
    r->ffn_backlog = 1.1;
    r->attn_idle_share = 0.35;
    r->ffn_idle_share = 0.1;
    r->floor_ms = 5.6;
    r->floor_share = 5.6 / r->ms_median;
    r->speedup_vs_seq = rows[0].ms_median / r->ms_median;
    gp_cs_trace_alloc(&r->trace, FX_LAYERS, FX_M);
    float t = 0.0f;
    for (int l = 0; l < FX_LAYERS; l++)
        for (int m = 0; m < FX_M; m++) {
            int k = l * FX_M + m;
            r->trace.attn_begin[k] = t;
            r->trace.attn_end[k] = t + 0.1f;
            r->trace.ffn_begin[k] = t + 0.1f; /* touches the attention end: flows must still bind */
            r->trace.ffn_end[k] = t + 0.25f;
            t += 0.12f;
        }
    r->trace.attn_end[1] = r->trace.attn_begin[1] - 0.01f; /* clock noise: drawn with dur 0 */
    r->trace.step_ms = t + 0.2f;
    r->n_decisions = FX_DECISIONS;
    r->decisions = calloc(FX_DECISIONS, sizeof *r->decisions);
    for (int k = 0; k < FX_DECISIONS; k++) {
        gp_rebalance_decision *d = &r->decisions[k];
        d->step = 4 * (k + 1);
        d->from = k;
        d->to = k + 1;
        d->from_a = 56 + 8 * k;
        d->to_a = 64 + 8 * k;
        d->attn_ms = 0.12;
        d->ffn_ms = 0.17;
        d->target_share = 0.45;
        d->predicted_from_ms = __builtin_nan("");
        snprintf(d->reason, sizeof d->reason, "attention slower, \"move\" <8> & more");
    }

    r = &rows[2];
    r->split = (gp_split_info){ 72, -1, 0, 0, false, "SMs" };
    r->M = 2;
    r->ok = false;
    snprintf(r->error, sizeof r->error, "%s", FX_ERROR);

    r = &rows[4];
    r->split = (gp_split_info){ 40, 92, 40, 92, true, "SMs" };
    r->M = 1;
    fx_samples(r, 33.0);
    r->speedup_vs_seq = rows[3].ms_median / r->ms_median;
}

/* Weights beyond VRAM on fx_rows' rows: the run's budget in m, streaming
 * statistics on the ok rows, and copies of the traced step on the seq row 0
 * (three) and the split row 1 (four, the first begun in the step before). */
#define FX_BUDGET (8ull << 30)
static inline void fx_stream(gp_cs_row *rows, gp_cs_meta *m)
{
    m->vram_budget = FX_BUDGET;
    m->weight_bytes = 16060522496ull;
    m->layer_groups = 64;
    m->kept_groups = 20;
    m->kept_bytes = 5ull << 30;
    m->prefetch_depth = 2;
    for (int i = 0; i < FX_ROWS; i++) {
        gp_cs_row *r = &rows[i];
        if (!r->ok)
            continue;
        r->stream = (gp_cs_stream){ .on = true, .steps = 40, .gb_per_step = 7.5 + i, .copy_gbps = 51.25,
                                    .copy_ms_per_step = 146.5 + i, .wait_attn_ms_per_step = 12.25,
                                    .wait_ffn_ms_per_step = 30.5, .hits_per_step = 20, .misses_per_step = 4.5,
                                    .prefetches_per_step = 39.5, .evictions_per_step = 44,
                                    .peak_device_bytes = FX_BUDGET - 4096 };
    }
    static const struct { int row; const char *g; float b, e; } cp[] = {
        { 0, "attn 0", 0.0f, 2.5f }, { 0, "ffn 0", 2.5f, 6.0f }, { 0, "head", 6.0f, 7.0f },
        { 1, "ffn 2", -0.5f, 0.05f }, { 1, "attn 0", 0.05f, 0.15f }, { 1, "ffn 0", 0.15f, 0.3f },
        { 1, "attn 1", 0.3f, 0.4f },
    };
    for (int k = 0; k < 2; k++) {
        gp_cs_row *r = &rows[k];
        r->copies = calloc(8, sizeof *r->copies);
        r->copy_step_ms = k == 0 ? 9.0f : rows[1].trace.step_ms;
        for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
            if (cp[i].row == k) {
                gp_cs_copy *c = &r->copies[r->n_copies++];
                snprintf(c->group, sizeof c->group, "%s", cp[i].g);
                c->bytes = 218112000ull + i;
                c->begin_ms = cp[i].b;
                c->end_ms = cp[i].e;
            }
    }
}

static inline void fx_free(gp_cs_row *rows)
{
    for (int i = 0; i < FX_ROWS; i++)
        gp_cs_row_free(&rows[i]);
}

/* The file's text (NUL-terminated), or NULL. */
static inline char *fx_slurp(const char *path)
{
    char *s = NULL;
    size_t n = 0;
    return gp_read_file(path, (size_t)64 << 20, &s, &n) == GP_OK ? s : NULL;
}

/* A fresh path under the temporary directory. */
static inline void fx_tmp(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/gp_cs_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

#endif
