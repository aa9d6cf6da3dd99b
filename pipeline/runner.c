/* The step runner: a chain of N stages per (layer, micro-batch), one thread
 * per stage issuing it for every (layer, micro-batch) in order, per-layer
 * rings between consecutive stages; the caller's thread opens and closes
 * each step. All cross-stage ordering on the device is left to the executor
 * (event waits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

/* Stage 0 spins this many checks of the last stage it depends on before
 * sleeping: that stage's thread usually issues it within microseconds. */
#define GP_DEP_SPIN 2048

gp_pipeline_params gp_pipeline_default_params(void)
{
    return (gp_pipeline_params){.micro_batches = 2, .micro_sizes = {0}, .ring = gp_ring_default_params()};
}

static gp_status check_params(const gp_pipeline_params *p)
{
    if (p->micro_batches < 1 || p->micro_batches > GP_PIPE_MAX_MICRO)
        GP_FAIL(GP_ERR_INVALID_ARG, "micro-batches %d: allowed 1..%d", p->micro_batches, GP_PIPE_MAX_MICRO);
    for (int m = 0; m < GP_PIPE_MAX_MICRO; m++)
        if (p->micro_sizes[m] < 0 || (m >= p->micro_batches && p->micro_sizes[m] != 0))
            GP_FAIL(GP_ERR_INVALID_ARG, "micro-batch size %d of micro-batch %d: sizes must be >= 1 for the "
                    "%d micro-batches (or all 0 for an even split), 0 past them", p->micro_sizes[m], m,
                    p->micro_batches);
    return GP_OK;
}

gp_status gp_pipeline_plan(const gp_pipeline_params *p, int n_layers, int B, gp_step_plan *out)
{
    GP_TRY(check_params(p));
    int M = p->micro_batches;
    if (B < M)
        GP_FAIL(GP_ERR_INVALID_ARG, "batch %d cannot be split into %d micro-batches: each needs a row", B, M);
    memset(out, 0, sizeof *out);
    out->B = B;
    out->M = M;
    out->n_layers = n_layers;
    bool even = true;
    for (int m = 0; m < M; m++)
        even = even && p->micro_sizes[m] == 0;
    int row = 0;
    for (int m = 0; m < M; m++) {
        /* even: the first B % M micro-batches get one row more */
        int n = even ? B / M + (m < B % M) : p->micro_sizes[m];
        if (n < 1)
            GP_FAIL(GP_ERR_INVALID_ARG, "micro-batch %d has %d rows: every micro-batch needs at least 1", m, n);
        out->b0[m] = row;
        out->nb[m] = n;
        row += n;
    }
    if (row != B)
        GP_FAIL(GP_ERR_INVALID_ARG, "micro-batch sizes sum to %d, the batch has %d rows", row, B);
    return GP_OK;
}

gp_ring *gp_pipeline_ring(gp_pipeline *pl, int edge, int layer)
{
    return gp_ring_set_get(pl->rings, edge * pl->n_layers + layer);
}

/* A stage's failure stops every thread: the rings are closed so a blocked
 * push or pop returns, and stage 0 asleep on a dependency is woken. */
static void fail_step(gp_pipeline *pl, int stage, gp_status st)
{
    pl->st[stage] = st;
    snprintf(pl->err[stage], sizeof pl->err[stage], "%s", gp_last_error());
    atomic_store(&pl->abort, true);
    gp_ring_set_close(pl->rings);
    pthread_mutex_lock(&pl->mu);
    pthread_cond_broadcast(&pl->dep_cv);
    pthread_mutex_unlock(&pl->mu);
}

/* Wait until the last stage of (layer - 1, m) has been issued. */
static void wait_last(gp_pipeline *pl, int m, int layer)
{
    if (atomic_load_explicit(&pl->last_done[m], memory_order_acquire) >= layer)
        return;
    uint64_t t0 = gp_now_ns();
    for (int i = 0; i < GP_DEP_SPIN; i++)
        if (atomic_load_explicit(&pl->last_done[m], memory_order_acquire) >= layer || atomic_load(&pl->abort))
            goto out;
    pthread_mutex_lock(&pl->mu);
    /* seq_cst store then re-check: pairs with the last stage's store of
     * last_done then load of dep_waiting, so one of the two sees the other */
    atomic_store(&pl->dep_waiting, 1);
    while (atomic_load(&pl->last_done[m]) < layer && !atomic_load(&pl->abort))
        pthread_cond_wait(&pl->dep_cv, &pl->mu);
    atomic_store(&pl->dep_waiting, 0);
    pthread_mutex_unlock(&pl->mu);
out:
    pl->dep_wait_ns += gp_now_ns() - t0;
}

/* The payload stage i of (l, m) was handed is that of stage i - 1 of (l, m). */
static bool payload_ok(gp_pipeline *pl, int i, int l, int m, const gp_payload *pay)
{
    const gp_step_plan *pn = &pl->plan;
    if (pay->layer == l && pay->micro == m && pay->tok_begin == pn->b0[m] && pay->tok_count == pn->nb[m] &&
        (pay->x.rows == 0 || pay->x.rows == pay->tok_count) &&
        (pay->resid.rows == 0 || pay->resid.rows == pay->tok_count))
        return true;
    gp_set_error("ring of layer %d into the %s stage delivered layer %d micro-batch %d rows [%d, +%d) with views "
                 "of %d and %d rows, expected micro-batch %d rows [%d, +%d) with views of that many rows (or "
                 "empty): the executor's %s stage filled the payload wrongly", l, pl->graph.names[i], pay->layer,
                 pay->micro, pay->tok_begin, pay->tok_count, (int)pay->x.rows, (int)pay->resid.rows, m, pn->b0[m],
                 pn->nb[m], pl->graph.names[i - 1]);
    return false;
}

/* Stage i of every (layer, micro-batch), in order: stage 0 after the last
 * stage of the layer before, a later stage on its predecessor's payload. */
static void run_stage(gp_pipeline *pl, int i)
{
    const gp_step_plan *pn = &pl->plan;
    const int N = pl->graph.n_stages;
    const bool last = i == N - 1;
    for (int l = 0; l < pn->n_layers; l++)
        for (int m = 0; m < pn->M; m++) {
            gp_payload in, out;
            if (i == 0) {
                if (l > 0)
                    wait_last(pl, m, l);
            } else {
                if (gp_ring_pop(gp_pipeline_ring(pl, i - 1, l), &in) != GP_OK)
                    return; /* closed: another stage failed */
                if (!payload_ok(pl, i, l, m, &in)) {
                    fail_step(pl, i, GP_ERR_STATE);
                    return;
                }
            }
            if (atomic_load(&pl->abort))
                return;
            memset(&out, 0, sizeof out);
            gp_status st = pl->exec.step->stage(pl->exec.ctx, i, l, m, i ? &in : NULL, last ? NULL : &out);
            if (st != GP_OK) {
                fail_step(pl, i, st);
                return;
            }
            if (!last) {
                out.seq = i == 0 ? pl->seq++ : in.seq;
                pl->edge_bytes[(size_t)i * pl->n_layers + l] += (double)gp_payload_bytes(&out);
                /* GP_ERR_STATE: a later stage failed and closed the rings */
                if (gp_ring_push(gp_pipeline_ring(pl, i, l), &out) != GP_OK)
                    return;
                continue;
            }
            /* release: stage 0's acquire load sees the last stage issued */
            atomic_store(&pl->last_done[m], l + 1);
            if (atomic_load(&pl->dep_waiting)) {
                pthread_mutex_lock(&pl->mu);
                pthread_cond_broadcast(&pl->dep_cv);
                pthread_mutex_unlock(&pl->mu);
            }
        }
}

typedef struct thread_arg {
    gp_pipeline *pl;
    int stage;
} thread_arg;

static void *thread_main(void *arg)
{
    gp_pipeline *pl = ((thread_arg *)arg)->pl;
    int stage = ((thread_arg *)arg)->stage;
    free(arg);
    unsigned long seen = 0;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (pl->generation == seen && !pl->quit)
            pthread_cond_wait(&pl->start_cv, &pl->mu);
        if (pl->quit)
            break;
        seen = pl->generation;
        pthread_mutex_unlock(&pl->mu);
        run_stage(pl, stage);
        pthread_mutex_lock(&pl->mu);
        if (--pl->running == 0)
            pthread_cond_signal(&pl->done_cv);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

void gp_pipeline_destroy(gp_pipeline *pl)
{
    if (!pl)
        return;
    pthread_mutex_lock(&pl->mu);
    pl->quit = true;
    pthread_cond_broadcast(&pl->start_cv);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->n_threads_started; i++)
        pthread_join(pl->threads[i], NULL);
    pthread_cond_destroy(&pl->dep_cv);
    pthread_cond_destroy(&pl->done_cv);
    pthread_cond_destroy(&pl->start_cv);
    pthread_mutex_destroy(&pl->mu);
    gp_ring_set_destroy(pl->rings);
    gp_stats_free(&pl->stats);
    free(pl->edge_bytes);
    free(pl->timing_buf);
    free(pl);
}

static gp_status start_thread(gp_pipeline *pl, int stage)
{
    thread_arg *a = malloc(sizeof *a);
    if (!a)
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: out of memory");
    *a = (thread_arg){pl, stage};
    if (pthread_create(&pl->threads[stage], NULL, thread_main, a) != 0) {
        free(a);
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: cannot start the thread of the %s stage", pl->graph.names[stage]);
    }
    pl->n_threads_started++;
    return GP_OK;
}

static gp_status check_graph(const gp_stage_graph *g)
{
    if (g->n_stages < 2 || g->n_stages > GP_PIPE_MAX_STAGES)
        GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: the executor's graph has %d stages, allowed 2..%d", g->n_stages,
                GP_PIPE_MAX_STAGES);
    for (int i = 0; i < g->n_stages; i++)
        if (!g->names[i])
            GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: stage %d of the executor's graph has no name", i);
    return GP_OK;
}

gp_status gp_pipeline_create(gp_exec exec, int n_layers, const gp_pipeline_params *p, gp_pipeline **out)
{
    *out = NULL;
    const gp_step_ops *o = exec.step;
    if (!o || !o->step_begin || !o->stage || !o->step_end || !o->abort_step)
        GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: the executor%s%s serves no pipelined steps (its step ops lack "
                "step_begin/stage/step_end/abort_step)", o && o->name ? " " : "", o && o->name ? o->name : "");
    GP_TRY(check_graph(&o->graph));
    if (n_layers < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: %d layers, need at least 1", n_layers);
    gp_pipeline_params params = p ? *p : gp_pipeline_default_params();
    GP_TRY(check_params(&params));
    gp_pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: out of memory");
    pl->exec = exec;
    pl->graph = o->graph;
    pl->n_layers = n_layers;
    pl->p = params;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->start_cv, NULL);
    pthread_cond_init(&pl->done_cv, NULL);
    pthread_cond_init(&pl->dep_cv, NULL);
    const int N = pl->graph.n_stages;
    size_t per = (size_t)n_layers * GP_PIPE_MAX_MICRO;
    pl->timing_buf = calloc(2 * (size_t)N * per, sizeof(float));
    pl->edge_bytes = calloc((size_t)(N - 1) * (size_t)n_layers, sizeof(double));
    gp_status st = GP_OK;
    if (!pl->timing_buf || !pl->edge_bytes) {
        gp_set_error("pipeline: out of memory");
        st = GP_ERR_NO_MEMORY;
    }
    if (st == GP_OK)
        st = gp_stats_alloc(&pl->stats, n_layers);
    if (st == GP_OK)
        st = gp_ring_set_create((N - 1) * n_layers, &params.ring, &pl->rings);
    for (int i = 0; i < N && st == GP_OK; i++)
        st = start_thread(pl, i);
    if (st != GP_OK) {
        gp_pipeline_destroy(pl);
        return st;
    }
    for (int i = 0; i < N; i++) {
        pl->timing.begin[i] = pl->timing_buf + (size_t)(2 * i) * per;
        pl->timing.end[i] = pl->timing_buf + (size_t)(2 * i + 1) * per;
    }
    *out = pl;
    return GP_OK;
}

gp_status gp_pipeline_set_params(gp_pipeline *pl, const gp_pipeline_params *p)
{
    GP_TRY(check_params(p));
    if (p->ring.depth != pl->p.ring.depth || p->ring.spin != pl->p.ring.spin) {
        gp_ring_set *r;
        GP_TRY(gp_ring_set_create((pl->graph.n_stages - 1) * pl->n_layers, &p->ring, &r));
        gp_ring_set_destroy(pl->rings); /* the threads are idle between steps */
        pl->rings = r;
    }
    pl->p = *p;
    return GP_OK;
}

const gp_pipeline_params *gp_pipeline_params_get(const gp_pipeline *pl)
{
    return &pl->p;
}

const gp_step_stats *gp_pipeline_last_stats(const gp_pipeline *pl)
{
    return pl->stats_valid ? &pl->stats : NULL;
}

const gp_step_timing *gp_pipeline_last_timing(const gp_pipeline *pl)
{
    return pl->stats_valid ? &pl->timing : NULL;
}

/* The failure to report: a device fault outranks the others (the caller
 * must learn that the context is gone, whichever thread saw it), then the
 * earliest stage's. */
static int failed_stage(const gp_pipeline *pl)
{
    int first = -1;
    for (int i = 0; i < pl->graph.n_stages; i++) {
        if (pl->st[i] == GP_ERR_DEVICE_FAULT)
            return i;
        if (pl->st[i] != GP_OK && first < 0)
            first = i;
    }
    return first;
}

gp_status gp_pipeline_step(gp_pipeline *pl, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                           float *logits)
{
    pl->stats_valid = false;
    GP_TRY(gp_pipeline_plan(&pl->p, pl->n_layers, B, &pl->plan));
    const int N = pl->graph.n_stages;
    for (int m = 0; m < GP_PIPE_MAX_MICRO; m++)
        atomic_store(&pl->last_done[m], 0);
    atomic_store(&pl->abort, false);
    for (int i = 0; i < N; i++)
        pl->st[i] = GP_OK;
    pl->dep_wait_ns = 0;
    memset(pl->edge_bytes, 0, sizeof(double) * (size_t)(N - 1) * (size_t)pl->n_layers);
    for (int r = 0; r < (N - 1) * pl->n_layers; r++)
        gp_ring_stats_reset(gp_ring_set_get(pl->rings, r)); /* every stage idle */
    GP_TRY(pl->exec.step->step_begin(pl->exec.ctx, &pl->plan, seq_ids, tokens));

    /* the mutex orders the plan and the resets above before the threads' reads */
    pthread_mutex_lock(&pl->mu);
    pl->running = N;
    pl->generation++;
    pthread_cond_broadcast(&pl->start_cv);
    while (pl->running > 0)
        pthread_cond_wait(&pl->done_cv, &pl->mu);
    pthread_mutex_unlock(&pl->mu);

    int bad = failed_stage(pl);
    if (bad >= 0) {
        pl->exec.step->abort_step(pl->exec.ctx);
        gp_ring_set_reopen(pl->rings);
        gp_set_error("%s stage failed: %s", pl->graph.names[bad], pl->err[bad]);
        return pl->st[bad];
    }
    GP_TRY(pl->exec.step->step_end(pl->exec.ctx, next, logits, &pl->timing));
    gp_stats_compute(pl, &pl->stats);
    pl->stats_valid = true;
    return GP_OK;
}
