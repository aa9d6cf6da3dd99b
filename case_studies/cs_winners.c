/* The line each report ends with, per workload: which configuration was
 * fastest and by how much against the seq row of the same run; when seq is
 * fastest the line says so, with the best split's loss beside it. */
#include "cs_impl.h"

#include <math.h>
#include <string.h>

static bool timed(const gp_cs_row *r)
{
    return r->ok && isfinite(r->ms_median) && r->ms_median > 0;
}

static bool same_workload(const gp_cs_winner *w, const gp_cs_row *r)
{
    return w->B == r->B && w->C == r->C && strcmp(w->workload, r->workload) == 0;
}

int gp_cs_winners(const gp_cs_row *rows, int n, gp_cs_winner *out, int cap)
{
    int k = 0;
    for (int i = 0; rows && out && i < n; i++) {
        const gp_cs_row *r = &rows[i];
        int j = 0;
        while (j < k && !same_workload(&out[j], r))
            j++;
        if (j == k) {
            if (k == cap)
                continue; /* more workloads than room: the first cap are summed up */
            gp_cs_winner *w = &out[k++];
            memset(w, 0, sizeof *w);
            snprintf(w->workload, sizeof w->workload, "%s", r->workload);
            w->B = r->B;
            w->C = r->C;
            w->row = w->seq_row = w->best_split_row = -1;
        }
        gp_cs_winner *w = &out[j];
        if (!timed(r))
            continue;
        int *slot = r->seq ? &w->seq_row : &w->best_split_row;
        if (*slot < 0 || r->ms_median < rows[*slot].ms_median)
            *slot = i;
    }
    for (int j = 0; j < k; j++) {
        gp_cs_winner *w = &out[j];
        /* strictly faster to beat seq: a tie is no reason to split the GPU */
        bool split_wins = w->best_split_row >= 0 &&
                          (w->seq_row < 0 || rows[w->best_split_row].ms_median < rows[w->seq_row].ms_median);
        w->row = split_wins ? w->best_split_row : w->seq_row;
        w->speedup = w->row >= 0 && w->seq_row >= 0 ? rows[w->seq_row].ms_median / rows[w->row].ms_median : 0;
    }
    return k;
}

/* "24:108 qkvo-f M=2 depth 4 [best-known (h100-sxm)]" (obtained split when
 * partitioned, else requested) */
static void config_text(const gp_cs_row *r, char *buf, size_t len)
{
    char split[64];
    if (r->split.partitioned && r->split.a_got > 0)
        cs_row_got_text(r, split, sizeof split);
    else
        cs_row_req_text(r, split, sizeof split);
    int used = snprintf(buf, len, "%s %s M=%d depth %u%s", split, gp_placement_name(r->placement), r->M, r->depth,
                        r->rebalance != GP_REBALANCE_OFF ? " rebalanced" : "");
    if (r->tag[0] && used >= 0 && (size_t)used < len)
        snprintf(buf + used, len - (size_t)used, " [%s]", r->tag);
}

void gp_cs_winner_text(const gp_cs_winner *w, const gp_cs_row *rows, char *buf, size_t len)
{
    char cfg[160], split[320] = "";
    int used = snprintf(buf, len, "%s (%d:%d): ", w->workload, w->B, w->C);
    if (used < 0 || (size_t)used >= len)
        return;
    buf += used;
    len -= (size_t)used;
    if (w->row < 0) {
        snprintf(buf, len, "no winner: every configuration failed");
        return;
    }
    const gp_cs_row *r = &rows[w->row];
    if (w->seq_row < 0) {
        config_text(r, cfg, sizeof cfg);
        snprintf(buf, len, "%s, %.3f ms; no speedup: the seq row failed", cfg, r->ms_median);
        return;
    }
    const gp_cs_row *s = &rows[w->seq_row];
    if (!r->seq) {
        config_text(r, cfg, sizeof cfg);
        snprintf(buf, len, "%s, %.3f ms, %.2fx seq (%.3f ms)", cfg, r->ms_median, w->speedup, s->ms_median);
        return;
    }
    if (w->best_split_row >= 0) {
        const gp_cs_row *b = &rows[w->best_split_row];
        config_text(b, cfg, sizeof cfg);
        snprintf(split, sizeof split, "; no split beat it, the fastest was %s at %.3f ms, %.2fx seq", cfg,
                 b->ms_median, s->ms_median / b->ms_median);
    } else {
        snprintf(split, sizeof split, "; no split row ran");
    }
    snprintf(buf, len, "seq, %.3f ms (1.00x)%s", s->ms_median, split);
}
