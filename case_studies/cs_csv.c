/* --csv: one header line and one line per row (RFC 4180 quoting), the same
 * columns on every line, error rows included, metadata repeated per line so
 * files of several runs can be concatenated and still say where each came from.
 * The per-workload winner is a column (1 on its row) rather than a closing
 * line of other columns, which would break that one-shape contract. */
#include "cs_impl.h"

#include <math.h>
#include <string.h>

static const char *COLUMNS[] = {
    "workload", "B", "C", "seq", "a_req", "f_req", "a_got", "f_got", "partitioned", "unit", "M", "depth",
    "placement", "rebalance", "ok", "error", "n_samples", "ms_median", "ms_min", "ms_max", "tokens_per_s",
    "attn_ms_per_layer", "ffn_ms_per_layer", "a2f_mb_per_token", "ring_occupancy_mean", "attn_backlog",
    "ffn_backlog", "attn_idle_share", "ffn_idle_share", "floor_ms", "floor_share", "speedup_vs_seq",
    "n_decisions", "samples_ms", "micro_rows", "attn_kernel", "tag", "gemm_tune", "winner", "gpu", "sm_count", "driver", "cuda", "commit", "model", "dtype", "timestamp", "notes",
    /* weights beyond VRAM (--vram-budget): the run's budget, then the row's per-step streaming; empty when
       resident. Last, so the columns before keep their places. */
    "weights_streamed", "vram_budget_bytes", "kept_groups", "kept_bytes", "stream_steps", "gb_streamed_per_step",
    "copy_gbps", "copy_ms_per_step", "wait_attn_ms_per_step", "wait_ffn_ms_per_step", "hits_per_step",
    "misses_per_step", "prefetches_per_step", "evictions_per_step", "peak_weight_bytes",
};
#define N_COLUMNS ((int)(sizeof COLUMNS / sizeof COLUMNS[0]))

/* A text field: quoted, with quotes doubled, when it holds a separator, a
 * quote, a line break or edge spaces (which readers may trim otherwise). */
static void text(FILE *f, const char *s)
{
    s = s ? s : "";
    size_t len = strlen(s);
    bool quote = strpbrk(s, ",\"\r\n") != NULL || (len && (s[0] == ' ' || s[len - 1] == ' '));
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* A figure; empty when absent (error rows, non-finite values). */
static void real(FILE *f, bool present, double v)
{
    if (present && isfinite(v))
        fprintf(f, "%.10g", v);
}

static void row(FILE *f, const gp_cs_meta *m, const gp_cs_row *r, bool winner)
{
    /* Each field is followed by a separator except the last: the column
     * count is fixed by this sequence, so it is the same on every line. */
    bool ok = r->ok, pipe = ok && !r->seq;
    text(f, r->workload);
    fprintf(f, ",%d,%d,%d,%d,", r->B, r->C, r->seq ? 1 : 0, r->split.a_req);
    if (r->split.f_req >= 0)
        fprintf(f, "%d", r->split.f_req); /* empty: F gets the rest */
    fprintf(f, ",%d,%d,%d,", r->split.a_got, r->split.f_got, r->split.partitioned ? 1 : 0);
    text(f, r->split.unit ? r->split.unit : "SMs");
    fprintf(f, ",%d,%u,%s,%s,%d,", r->M, r->depth, gp_placement_name(r->placement),
            gp_rebalance_policy_name(r->rebalance), ok ? 1 : 0);
    text(f, ok ? "" : r->error);
    fprintf(f, ",%d,", r->samples_ms ? r->n_samples : 0);
    double figures[] = { r->ms_median, r->ms_min, r->ms_max, r->tokens_per_s };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        real(f, ok, figures[i]);
        fputc(',', f);
    }
    double pipeline[] = { r->attn_ms_per_layer, r->ffn_ms_per_layer, r->a2f_mb_per_token, r->ring_occupancy_mean,
                          r->attn_backlog, r->ffn_backlog, r->attn_idle_share, r->ffn_idle_share };
    for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++) {
        real(f, pipe, pipeline[i]);
        fputc(',', f);
    }
    real(f, r->floor_ms > 0, r->floor_ms);
    fputc(',', f);
    real(f, ok && r->floor_share > 0, r->floor_share);
    fputc(',', f);
    real(f, ok && r->speedup_vs_seq > 0, r->speedup_vs_seq);
    fprintf(f, ",%d,", r->decisions ? r->n_decisions : 0);
    /* samples in one field, ';'-separated: no quoting needed */
    for (int i = 0; r->samples_ms && i < r->n_samples; i++) {
        if (i)
            fputc(';', f);
        real(f, true, r->samples_ms[i]);
    }
    fputc(',', f);
    /* rows per micro-batch, ';'-separated like the samples; empty: unknown */
    for (int m = 0; r->micro_rows[0] > 0 && m < r->M && m < GP_PIPE_MAX_MICRO; m++)
        fprintf(f, "%s%d", m ? ";" : "", r->micro_rows[m]);
    fputc(',', f);
    text(f, r->attn_kernel);
    fputc(',', f);
    text(f, r->tag);
    fprintf(f, ",%d,%d,", r->gemm_tune, winner ? 1 : 0);
    text(f, m->gpu);
    fprintf(f, ",%d,", m->sm_count);
    text(f, m->driver);
    fputc(',', f);
    text(f, m->cuda);
    fputc(',', f);
    text(f, m->commit);
    fputc(',', f);
    text(f, m->model);
    fputc(',', f);
    text(f, m->dtype);
    fputc(',', f);
    text(f, m->timestamp);
    fputc(',', f);
    text(f, m->notes);
    fprintf(f, ",%d,", m->vram_budget ? 1 : 0);
    if (m->vram_budget)
        fprintf(f, "%llu,%d,%llu", (unsigned long long)m->vram_budget, m->kept_groups,
                (unsigned long long)m->kept_bytes);
    else
        fputs(",,", f);
    const gp_cs_stream *st = &r->stream;
    bool on = ok && st->on;
    fputc(',', f);
    if (on)
        fprintf(f, "%d", st->steps);
    double per_step[] = { st->gb_per_step, st->copy_gbps, st->copy_ms_per_step, st->wait_attn_ms_per_step,
                          st->wait_ffn_ms_per_step, st->hits_per_step, st->misses_per_step, st->prefetches_per_step,
                          st->evictions_per_step };
    for (size_t i = 0; i < sizeof per_step / sizeof per_step[0]; i++) {
        fputc(',', f);
        /* no copies, no rate: empty rather than 0 GB/s */
        real(f, on && (i != 1 || st->copy_gbps > 0), per_step[i]);
    }
    fputc(',', f);
    if (on)
        fprintf(f, "%llu", (unsigned long long)st->peak_device_bytes);
    fputc('\n', f);
}

gp_status gp_cs_write_csv(const char *path, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    static const gp_cs_meta none;
    FILE *f = cs_open_out(path, "CSV report");
    if (!f)
        return GP_ERR_IO;
    for (int c = 0; c < N_COLUMNS; c++)
        fprintf(f, "%s%s", c ? "," : "", COLUMNS[c]);
    fputc('\n', f);
    gp_cs_winner w[GP_CS_MAX_WORKLOADS];
    int k = rows ? gp_cs_winners(rows, n, w, GP_CS_MAX_WORKLOADS) : 0;
    for (int i = 0; rows && i < n; i++) {
        bool won = false;
        for (int j = 0; j < k; j++)
            won = won || w[j].row == i;
        row(f, m ? m : &none, &rows[i], won);
    }
    return cs_close_out(f, path, "CSV report");
}
