/* Pipeline statistics: one step's figures from its stage times, ring counters
 * and host waits, and their averages over a window of steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

gp_status gp_stats_alloc(gp_step_stats *s, int n_layers)
{
    memset(s, 0, sizeof *s);
    size_t per = (size_t)n_layers * GP_PIPE_MAX_MICRO;
    s->attn_ms = calloc(per, sizeof(float));
    s->ffn_ms = calloc(per, sizeof(float));
    s->a2f_bytes = calloc((size_t)n_layers, sizeof(double));
    if (!s->attn_ms || !s->ffn_ms || !s->a2f_bytes) {
        gp_stats_free(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline statistics: out of memory");
    }
    return GP_OK;
}

void gp_stats_free(gp_step_stats *s)
{
    free(s->attn_ms);
    free(s->ffn_ms);
    free(s->a2f_bytes);
    memset(s, 0, sizeof *s);
}

/* Stages ready but not started at each start time t of the other list:
 * ready[i] <= t < begin[i], averaged over the n start times. */
static double backlog(const float *ready, const float *begin, int n)
{
    if (n == 0)
        return 0.0;
    long long count = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            count += i != j && ready[i] <= begin[j] && begin[i] > begin[j];
    return (double)count / n;
}

/* Two-sided figures of a graph of N stages: attention is stage 0, FFN
 * stage N - 1 (ready when stage N - 2 ended), A->F the bytes stage 0 hands
 * on; the producer waits are stage 0's, the consumer waits the last
 * stage's. With N = 2 that is the attention -> FFN graph itself. */
void gp_stats_compute(gp_pipeline *pl, gp_step_stats *s)
{
    const gp_step_plan *pn = &pl->plan;
    const gp_step_timing *t = &pl->timing;
    const int L = pn->n_layers, M = pn->M, n = L * M, N = pl->graph.n_stages;
    const float *a_b = t->begin[0], *a_e = t->end[0], *f_b = t->begin[N - 1], *f_e = t->end[N - 1];
    s->B = pn->B;
    s->M = M;
    s->n_layers = L;
    memcpy(s->nb, pn->nb, sizeof s->nb);
    const gp_session_ops *so = pl->exec.session;
    if (so && so->split_info && so->n_splits && so->n_splits(pl->exec.ctx) > 0)
        so->split_info(pl->exec.ctx, -1, &s->split);
    s->step_ms = t->step_ms;
    s->tokens_per_s = t->step_ms > 0 ? pn->B / (t->step_ms / 1e3) : 0.0;

    double attn_sum = 0, ffn_sum = 0, mb = 0;
    float *ready = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) {
        s->attn_ms[i] = a_e[i] - a_b[i];
        s->ffn_ms[i] = f_e[i] - f_b[i];
        attn_sum += s->attn_ms[i];
        ffn_sum += s->ffn_ms[i];
        /* stage 0 of (l, m) may start once the last stage of (l-1, m) has ended */
        if (ready)
            ready[i] = i < M ? 0.0f : f_e[i - M];
    }
    for (int l = 0; l < L; l++) {
        s->a2f_bytes[l] = pl->edge_bytes[l];
        mb += pl->edge_bytes[l] / pn->B / 1e6;
    }
    s->a2f_mb_per_token = mb / L;
    s->attn_backlog_mean = ready ? backlog(ready, a_b, n) : 0.0;
    s->ffn_backlog_mean = backlog(t->end[N - 2], f_b, n);
    free(ready);
    s->attn_idle_ms = fmax(0.0, t->step_ms - attn_sum);
    s->ffn_idle_ms = fmax(0.0, t->step_ms - ffn_sum);

    uint64_t occ = 0, pushes = 0, pop_wait = 0, push_wait = 0;
    unsigned occ_max = 0;
    for (int e = 0; e < N - 1; e++)
        for (int l = 0; l < L; l++) {
            gp_ring_stats rs;
            gp_ring_stats_get(gp_pipeline_ring(pl, e, l), &rs);
            occ += rs.occupancy_sum;
            pushes += rs.pushes;
            if (e == 0)
                push_wait += rs.push_wait_ns;
            if (e == N - 2)
                pop_wait += rs.pop_wait_ns;
            if (rs.occupancy_max > occ_max)
                occ_max = rs.occupancy_max;
        }
    s->ring_occupancy_mean = pushes ? (double)occ / pushes : 0.0;
    s->ring_occupancy_max = occ_max;
    s->producer_wait_ms = (push_wait + pl->dep_wait_ns) / 1e6;
    s->consumer_wait_ms = pop_wait / 1e6;
}

/* ------------------------------------------------------------ window */

struct gp_stats_window {
    int n_layers;
    int steps;
    gp_step_stats first;          /* shape of the window: B, M, split */
    double step_sum, step_min, step_max, tok_sum;
    double *buf;                               /* [6][n_layers], the arrays below */
    double *attn_layer, *ffn_layer, *mb_layer; /* [n_layers] sums */
    double *attn_mean, *ffn_mean, *mb_mean;    /* [n_layers] summary output */
    double mb_sum, occ_sum, ab_sum, fb_sum, pw_sum, cw_sum, ai_sum, fi_sum;
    unsigned occ_max;
};

static void set_arrays(gp_stats_window *w)
{
    int n = w->n_layers;
    w->attn_layer = w->buf;
    w->ffn_layer = w->buf + n;
    w->mb_layer = w->buf + 2 * n;
    w->attn_mean = w->buf + 3 * n;
    w->ffn_mean = w->buf + 4 * n;
    w->mb_mean = w->buf + 5 * n;
}

gp_status gp_stats_window_create(int n_layers, gp_stats_window **out)
{
    *out = NULL;
    if (n_layers < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "statistics window: %d layers", n_layers);
    gp_stats_window *w = calloc(1, sizeof *w);
    double *buf = calloc(6 * (size_t)n_layers, sizeof(double));
    if (!w || !buf) {
        free(w);
        free(buf);
        GP_FAIL(GP_ERR_NO_MEMORY, "statistics window: out of memory");
    }
    w->n_layers = n_layers;
    w->buf = buf;
    set_arrays(w);
    *out = w;
    return GP_OK;
}

void gp_stats_window_destroy(gp_stats_window *w)
{
    if (!w)
        return;
    free(w->buf);
    free(w);
}

void gp_stats_window_reset(gp_stats_window *w)
{
    int n = w->n_layers;
    double *buf = w->buf;
    memset(buf, 0, 6 * sizeof(double) * (size_t)n);
    memset(w, 0, sizeof *w);
    w->n_layers = n;
    w->buf = buf;
    set_arrays(w);
}

gp_status gp_stats_window_add(gp_stats_window *w, const gp_step_stats *s)
{
    if (s->n_layers != w->n_layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "statistics window of %d layers given a step of %d", w->n_layers,
                s->n_layers);
    if (w->steps == 0) {
        w->first = *s;
        w->first.attn_ms = w->first.ffn_ms = NULL;
        w->first.a2f_bytes = NULL;
        w->step_min = w->step_max = s->step_ms;
    }
    w->steps++;
    w->step_sum += s->step_ms;
    w->step_min = fmin(w->step_min, s->step_ms);
    w->step_max = fmax(w->step_max, s->step_ms);
    w->tok_sum += s->tokens_per_s;
    for (int l = 0; l < s->n_layers; l++) {
        for (int m = 0; m < s->M; m++) {
            w->attn_layer[l] += s->attn_ms[l * s->M + m];
            w->ffn_layer[l] += s->ffn_ms[l * s->M + m];
        }
        w->mb_layer[l] += s->a2f_bytes[l] / s->B / 1e6;
    }
    w->mb_sum += s->a2f_mb_per_token;
    w->occ_sum += s->ring_occupancy_mean;
    if (s->ring_occupancy_max > w->occ_max)
        w->occ_max = s->ring_occupancy_max;
    w->ab_sum += s->attn_backlog_mean;
    w->fb_sum += s->ffn_backlog_mean;
    w->pw_sum += s->producer_wait_ms;
    w->cw_sum += s->consumer_wait_ms;
    w->ai_sum += s->step_ms > 0 ? s->attn_idle_ms / s->step_ms : 0;
    w->fi_sum += s->step_ms > 0 ? s->ffn_idle_ms / s->step_ms : 0;
    return GP_OK;
}

gp_status gp_stats_window_summary(gp_stats_window *w, gp_stats_summary *o)
{
    memset(o, 0, sizeof *o);
    if (w->steps == 0)
        GP_FAIL(GP_ERR_STATE, "statistics window is empty");
    double n = w->steps;
    o->steps = w->steps;
    o->B = w->first.B;
    o->M = w->first.M;
    o->n_layers = w->n_layers;
    o->split = w->first.split;
    o->step_ms_mean = w->step_sum / n;
    o->step_ms_min = w->step_min;
    o->step_ms_max = w->step_max;
    o->tokens_per_s = w->tok_sum / n;
    double a = 0, f = 0;
    for (int l = 0; l < w->n_layers; l++) {
        w->attn_mean[l] = w->attn_layer[l] / n;
        w->ffn_mean[l] = w->ffn_layer[l] / n;
        w->mb_mean[l] = w->mb_layer[l] / n;
        a += w->attn_mean[l];
        f += w->ffn_mean[l];
    }
    o->attn_ms_per_layer = a / w->n_layers;
    o->ffn_ms_per_layer = f / w->n_layers;
    o->attn_ms_layer = w->attn_mean;
    o->ffn_ms_layer = w->ffn_mean;
    o->a2f_mb_per_token_layer = w->mb_mean;
    o->a2f_mb_per_token = w->mb_sum / n;
    o->ring_occupancy_mean = w->occ_sum / n;
    o->ring_occupancy_max = w->occ_max;
    o->attn_backlog_mean = w->ab_sum / n;
    o->ffn_backlog_mean = w->fb_sum / n;
    o->producer_wait_ms = w->pw_sum / n;
    o->consumer_wait_ms = w->cw_sum / n;
    o->attn_idle_share = w->ai_sum / n;
    o->ffn_idle_share = w->fi_sum / n;
    return GP_OK;
}
