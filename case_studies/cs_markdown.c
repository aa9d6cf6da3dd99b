/* The markdown report on stdout: one table line per configuration (error
 * rows say why), the rebalancer's moves, weight streaming (--vram-budget),
 * the run's metadata, then one line per workload naming its winner. */
#include "cs_impl.h"

#include <math.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A number with a fixed number of decimals and a suffix; "-" when absent. */
static const char *num(char *buf, size_t len, double v, int decimals, const char *suffix)
{
    if (!isfinite(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.*f%s", decimals, v, suffix);
    return buf;
}

/* Table cells must stay on one line and must not split the row. */
static void cell_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r' || *s == '\t')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

static const char *HEADER[] = {
    "workload", "B:C", "split asked", "split got", "M", "depth", "QKV/O", "rebalance", "ms/step", "min", "max",
    "tokens/s", "attn ms/layer", "FFN ms/layer", "A→F MB/token", "ring occ.", "A backlog", "F backlog",
    "A idle", "F idle", "of floor", "vs seq",
};
#define N_COLS ((int)(sizeof HEADER / sizeof HEADER[0]))
#define N_CONFIG_COLS 8 /* workload .. rebalance */

static void write_row(FILE *f, const gp_cs_row *r)
{
    char req[64], got[64], b[N_COLS][48];
    cs_row_req_text(r, req, sizeof req);
    cs_row_got_text(r, got, sizeof got);
    fputs("| ", f);
    cell_text(f, r->workload);
    fprintf(f, " | %d:%d | %s", r->B, r->C, req);
    if (r->tag[0]) { /* who chose the row: a profile or --tuning */
        fputs(" [", f);
        cell_text(f, r->tag);
        fputc(']', f);
    }
    fprintf(f, " | %s | ", got);
    /* An uneven split is shown where M is, so no reader takes M = 3 of
     * B = 1024 for three equal micro-batches. */
    char m_text[64];
    int used = snprintf(m_text, sizeof m_text, "%d", r->M);
    bool uneven = false;
    for (int m = 1; r->micro_rows[0] > 0 && m < r->M && m < GP_PIPE_MAX_MICRO; m++)
        uneven = uneven || r->micro_rows[m] != r->micro_rows[0];
    for (int m = 0; uneven && m < r->M && m < GP_PIPE_MAX_MICRO; m++)
        used += snprintf(m_text + used, sizeof m_text - (size_t)used, "%s%d%s", m ? "+" : " (", r->micro_rows[m],
                         m == r->M - 1 ? " rows)" : "");
    if (r->seq)
        fputs("- | - | - | - |", f); /* no micro-batches, ring, placement or rebalancer */
    else
        fprintf(f, "%s | %u | %s | %s |", m_text, r->depth, r->placement == GP_PLACE_QKVO_F ? "F" : "A",
                gp_rebalance_policy_name(r->rebalance));
    if (!r->ok) {
        fputs(" **error**: ", f);
        cell_text(f, r->error[0] ? r->error : "failed (no reason given)");
        fputs(" |", f);
        for (int c = N_CONFIG_COLS + 1; c < N_COLS; c++)
            fputs(" |", f);
        fputc('\n', f);
        return;
    }
    /* The pipeline's own figures mean nothing for the sequential engine. */
    double na = NAN;
    bool p = !r->seq;
    fprintf(f, " %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
            num(b[0], 48, r->ms_median, 3, ""), num(b[1], 48, r->ms_min, 3, ""), num(b[2], 48, r->ms_max, 3, ""),
            num(b[3], 48, r->tokens_per_s, 0, ""), num(b[4], 48, p ? r->attn_ms_per_layer : na, 3, ""),
            num(b[5], 48, p ? r->ffn_ms_per_layer : na, 3, ""), num(b[6], 48, p ? r->a2f_mb_per_token : na, 4, ""),
            num(b[7], 48, p ? r->ring_occupancy_mean : na, 2, ""), num(b[8], 48, p ? r->attn_backlog : na, 2, ""),
            num(b[9], 48, p ? r->ffn_backlog : na, 2, ""), num(b[10], 48, p ? 100.0 * r->attn_idle_share : na, 0, "%"),
            num(b[11], 48, p ? 100.0 * r->ffn_idle_share : na, 0, "%"),
            num(b[12], 48, r->floor_share > 0 ? 100.0 * r->floor_share : na, 0, "%"),
            num(b[13], 48, r->speedup_vs_seq > 0 ? r->speedup_vs_seq : na, 2, "x"));
}

/* Which decode-attention kernel the rows ran: one line per workload. */
static void write_attn_kernels(FILE *f, const gp_cs_row *rows, int n)
{
    const gp_cs_row *prev = NULL; /* the last row written */
    for (int i = 0; i < n; i++) {
        const gp_cs_row *r = &rows[i];
        if (!r->attn_kernel[0])
            continue;
        bool first = !prev || strcmp(prev->workload, r->workload) || prev->B != r->B || prev->C != r->C;
        if (!prev)
            fputs("\nDecode-attention kernel (seq: on every SM; splits: micro-batch 0 on partition A):", f);
        prev = r;
        if (first) {
            fputs("\n- ", f);
            cell_text(f, r->workload);
            fprintf(f, " %d:%d:", r->B, r->C);
        }
        char req[64];
        cs_row_req_text(r, req, sizeof req);
        fprintf(f, "%s %s %s", first ? "" : ";", req, r->attn_kernel);
    }
    if (prev)
        fputc('\n', f);
}

/* One line per row whose rebalancer decided anything: decisions, moves, path. */
static void write_rebalance(FILE *f, const gp_cs_row *rows, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        const gp_cs_row *r = &rows[i];
        if (r->n_decisions < 1 || !r->decisions)
            continue;
        if (!any)
            fputs("\nRebalancer decisions (all of them are in --json and --trace):\n", f);
        any = true;
        int moves = 0;
        for (int k = 0; k < r->n_decisions; k++)
            moves += r->decisions[k].from != r->decisions[k].to;
        fprintf(f, "- ");
        cell_text(f, r->workload);
        fprintf(f, " %d:%d M=%d depth %u (%s): %d decisions, %d moves, A %d -> %d SMs; last: ", r->B, r->C, r->M,
                r->depth, gp_rebalance_policy_name(r->rebalance), r->n_decisions, moves, r->decisions[0].from_a,
                r->decisions[r->n_decisions - 1].to_a);
        cell_text(f, r->decisions[r->n_decisions - 1].reason);
        fputc('\n', f);
    }
}

/* Weights beyond VRAM: what the budget held, then per row what streaming
 * cost each step. Nothing when the weights were resident. */
static void write_streaming(FILE *f, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        any = any || (rows[i].ok && rows[i].stream.on);
    if ((!m || !m->vram_budget) && !any)
        return;
    if (m && m->vram_budget)
        fprintf(f, "\nWeights streamed (--vram-budget): at most %.2f GiB (%llu bytes) of the %.2f GiB of weights on "
                "the GPU at once; %d of %d layer groups (%.2f GiB) kept there for good, the others copied from pinned "
                "host memory as the steps reach them, prefetching %d ahead; every row ran eager (no CUDA graphs), seq included.\n",
                m->vram_budget / GIB, (unsigned long long)m->vram_budget, m->weight_bytes / GIB, m->kept_groups,
                m->layer_groups, m->kept_bytes / GIB, m->prefetch_depth);
    if (!any)
        return;
    fputs("\nWeight streaming per step (mean over every timed step of the row; copy GB/s over the copy engine's busy "
          "time; waits: time the compute streams stalled on attention and FFN group copies; peak: most weight bytes "
          "on the GPU):\n\n| workload | B:C | split asked | M | GB streamed | copy GB/s | copy ms | attn wait ms | "
          "FFN wait ms | hits | misses | prefetches | evictions | peak GB |\n"
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", f);
    for (int i = 0; i < n; i++) {
        const gp_cs_row *r = &rows[i];
        if (!r->ok || !r->stream.on)
            continue;
        const gp_cs_stream *st = &r->stream;
        char req[64], b[4][48];
        cs_row_req_text(r, req, sizeof req);
        fputs("| ", f);
        cell_text(f, r->workload);
        fprintf(f, " | %d:%d | %s | %s | %.3f | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", r->B,
                r->C, req, r->seq ? "-" : num(b[0], 48, r->M, 0, ""), st->gb_per_step,
                num(b[1], 48, st->copy_gbps > 0 ? st->copy_gbps : NAN, 1, ""), st->copy_ms_per_step,
                st->wait_attn_ms_per_step, st->wait_ffn_ms_per_step, st->hits_per_step, st->misses_per_step,
                st->prefetches_per_step, st->evictions_per_step, st->peak_device_bytes / 1e9);
    }
}

/* Last, so the answer is the report's final lines: per workload, the
 * fastest row against seq of the same run. */
static void write_winners(FILE *f, const gp_cs_row *rows, int n)
{
    gp_cs_winner w[GP_CS_MAX_WORKLOADS];
    int k = gp_cs_winners(rows, n, w, GP_CS_MAX_WORKLOADS);
    if (k > 0)
        fputs("\nWinners (the fastest median of each workload, against its seq row):\n", f);
    for (int i = 0; i < k; i++) {
        char text[512];
        gp_cs_winner_text(&w[i], rows, text, sizeof text);
        fputs("- Winner, ", f);
        cell_text(f, text);
        fputc('\n', f);
    }
}

void gp_cs_write_markdown(FILE *f, const gp_cs_meta *m, const gp_cs_row *rows, int n)
{
    if (!f)
        return;
    if (n < 0 || !rows)
        n = 0;
    fputc('|', f);
    for (int c = 0; c < N_COLS; c++)
        fprintf(f, " %s |", HEADER[c]);
    fputs("\n|", f);
    for (int c = 0; c < N_COLS; c++)
        fputs(c < 4 || c == 6 ? " --- |" : " ---: |", f);
    fputc('\n', f);
    for (int i = 0; i < n; i++)
        write_row(f, &rows[i]);
    if (n == 0)
        fputs("\n(no configurations were run)\n", f);

    fputs("\nms/step: median over repeats of each repeat's median step, min and max over repeats. "
          "Backlog: stages ready but not started, at each start. Idle: share of the step a partition ran no "
          "stage. Of floor: the docs/ARCHITECTURE.md §5 floor over the median. vs seq: the seq row's median over "
          "this one's, same workload, same run. \"shared\": no green contexts, both sides on every SM.\n",
          f);
    write_attn_kernels(f, rows, n);
    write_rebalance(f, rows, n);
    write_streaming(f, m, rows, n);
    if (m) {
        fprintf(f, "\nGPU: %s, %d SMs, driver %s, CUDA %s\n", m->gpu[0] ? m->gpu : "?", m->sm_count,
                m->driver[0] ? m->driver : "?", m->cuda[0] ? m->cuda : "?");
        fprintf(f, "Model: %s; dtype %s; commit %s; %s\n", m->model[0] ? m->model : "?", m->dtype[0] ? m->dtype : "?",
                m->commit[0] ? m->commit : "?",
                m->timestamp[0] ? m->timestamp : "?");
        if (m->notes[0])
            fprintf(f, "Notes: %s\n", m->notes);
    }
    write_winners(f, rows, n);
}
