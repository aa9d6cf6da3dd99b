/* The step runner: a producer thread issues attention stages and pushes their
 * payloads into per-layer rings, a consumer thread pops them and issues the FFN
 * stages; the caller's thread opens and closes each step. All cross-stage
 * ordering on the device is left to the executor (event waits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

/* Producer spins this many checks of an FFN it depends on before sleeping:
 * the consumer usually issues it within microseconds. */
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

/* First failure wins; it stops both threads: the rings are closed so a blocked
 * push or pop returns, and a producer asleep on a dependency is woken. */
static void fail_step(gp_pipeline *pl, gp_status st, gp_status *slot, char *err)
{
    *slot = st;
    snprintf(err, 512, "%s", gp_last_error());
    atomic_store(&pl->abort, true);
    gp_ring_set_close(pl->rings);
    pthread_mutex_lock(&pl->mu);
    pthread_cond_broadcast(&pl->dep_cv);
    pthread_mutex_unlock(&pl->mu);
}

/* Wait until FFN(layer-1, m) has been issued. */
static void wait_ffn(gp_pipeline *pl, int m, int layer)
{
    if (atomic_load_explicit(&pl->ffn_done[m], memory_order_acquire) >= layer)
        return;
    uint64_t t0 = gp_now_ns();
    for (int i = 0; i < GP_DEP_SPIN; i++)
        if (atomic_load_explicit(&pl->ffn_done[m], memory_order_acquire) >= layer || atomic_load(&pl->abort))
            goto out;
    pthread_mutex_lock(&pl->mu);
    /* seq_cst store then re-check: pairs with the consumer's store of
     * ffn_done then load of dep_waiting, so one of the two sees the other */
    atomic_store(&pl->dep_waiting, 1);
    while (atomic_load(&pl->ffn_done[m]) < layer && !atomic_load(&pl->abort))
        pthread_cond_wait(&pl->dep_cv, &pl->mu);
    atomic_store(&pl->dep_waiting, 0);
    pthread_mutex_unlock(&pl->mu);
out:
    pl->dep_wait_ns += gp_now_ns() - t0;
}

static void run_producer(gp_pipeline *pl)
{
    const gp_step_plan *pn = &pl->plan;
    for (int l = 0; l < pn->n_layers; l++)
        for (int m = 0; m < pn->M; m++) {
            if (l > 0)
                wait_ffn(pl, m, l);
            if (atomic_load(&pl->abort))
                return;
            gp_payload pay;
            memset(&pay, 0, sizeof pay);
            gp_status st = pl->exec.ops->attn(pl->exec.ctx, l, m, &pay);
            if (st != GP_OK) {
                fail_step(pl, st, &pl->prod_st, pl->prod_err);
                return;
            }
            pay.seq = pl->seq++;
            pl->a2f_bytes[l] += (double)gp_payload_bytes(&pay);
            /* GP_ERR_STATE: the consumer failed and closed the rings */
            if (gp_ring_push(gp_ring_set_get(pl->rings, l), &pay) != GP_OK)
                return;
        }
}

static void run_consumer(gp_pipeline *pl)
{
    const gp_step_plan *pn = &pl->plan;
    for (int l = 0; l < pn->n_layers; l++)
        for (int m = 0; m < pn->M; m++) {
            gp_payload pay;
            if (gp_ring_pop(gp_ring_set_get(pl->rings, l), &pay) != GP_OK)
                return; /* closed: the producer failed */
            if (pay.layer != l || pay.micro != m || pay.tok_begin != pn->b0[m] || pay.tok_count != pn->nb[m] ||
                (pay.x.rows != 0 && pay.x.rows != pay.tok_count) ||
                (pay.resid.rows != 0 && pay.resid.rows != pay.tok_count)) {
                gp_set_error("ring of layer %d delivered layer %d micro-batch %d rows [%d, +%d) with views of %d "
                             "and %d rows, expected micro-batch %d rows [%d, +%d) with views of that many rows "
                             "(or empty): the executor filled the payload wrongly", l, pay.layer, pay.micro,
                             pay.tok_begin, pay.tok_count, (int)pay.x.rows, (int)pay.resid.rows, m, pn->b0[m],
                             pn->nb[m]);
                fail_step(pl, GP_ERR_STATE, &pl->cons_st, pl->cons_err);
                return;
            }
            gp_status st = pl->exec.ops->ffn(pl->exec.ctx, &pay);
            if (st != GP_OK) {
                fail_step(pl, st, &pl->cons_st, pl->cons_err);
                return;
            }
            /* release: the producer's acquire load sees the FFN issued */
            atomic_store(&pl->ffn_done[m], l + 1);
            if (atomic_load(&pl->dep_waiting)) {
                pthread_mutex_lock(&pl->mu);
                pthread_cond_broadcast(&pl->dep_cv);
                pthread_mutex_unlock(&pl->mu);
            }
        }
}

typedef struct thread_arg {
    gp_pipeline *pl;
    bool producer;
} thread_arg;

static void *thread_main(void *arg)
{
    gp_pipeline *pl = ((thread_arg *)arg)->pl;
    bool producer = ((thread_arg *)arg)->producer;
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
        if (producer)
            run_producer(pl);
        else
            run_consumer(pl);
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
    if (pl->n_threads_started > 0)
        pthread_join(pl->producer, NULL);
    if (pl->n_threads_started > 1)
        pthread_join(pl->consumer, NULL);
    pthread_cond_destroy(&pl->dep_cv);
    pthread_cond_destroy(&pl->done_cv);
    pthread_cond_destroy(&pl->start_cv);
    pthread_mutex_destroy(&pl->mu);
    gp_ring_set_destroy(pl->rings);
    gp_stats_free(&pl->stats);
    free(pl->a2f_bytes);
    free(pl->timing_buf);
    free(pl);
}

static gp_status start_thread(gp_pipeline *pl, bool producer, pthread_t *t)
{
    thread_arg *a = malloc(sizeof *a);
    if (!a)
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: out of memory");
    *a = (thread_arg){pl, producer};
    if (pthread_create(t, NULL, thread_main, a) != 0) {
        free(a);
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: cannot start the %s thread", producer ? "producer" : "consumer");
    }
    pl->n_threads_started++;
    return GP_OK;
}

gp_status gp_pipeline_create(gp_exec exec, int n_layers, const gp_pipeline_params *p, gp_pipeline **out)
{
    *out = NULL;
    if (!exec.ops || !exec.ops->step_begin || !exec.ops->attn || !exec.ops->ffn || !exec.ops->step_end ||
        !exec.ops->abort_step)
        GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: the executor lacks step_begin/attn/ffn/step_end/abort_step");
    if (n_layers < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "pipeline: %d layers, need at least 1", n_layers);
    gp_pipeline_params params = p ? *p : gp_pipeline_default_params();
    GP_TRY(check_params(&params));
    gp_pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        GP_FAIL(GP_ERR_NO_MEMORY, "pipeline: out of memory");
    pl->exec = exec;
    pl->n_layers = n_layers;
    pl->p = params;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->start_cv, NULL);
    pthread_cond_init(&pl->done_cv, NULL);
    pthread_cond_init(&pl->dep_cv, NULL);
    size_t per = (size_t)n_layers * GP_PIPE_MAX_MICRO;
    pl->timing_buf = calloc(4 * per, sizeof(float));
    pl->a2f_bytes = calloc((size_t)n_layers, sizeof(double));
    gp_status st = GP_OK;
    if (!pl->timing_buf || !pl->a2f_bytes) {
        gp_set_error("pipeline: out of memory");
        st = GP_ERR_NO_MEMORY;
    }
    if (st == GP_OK)
        st = gp_stats_alloc(&pl->stats, n_layers);
    if (st == GP_OK)
        st = gp_ring_set_create(n_layers, &params.ring, &pl->rings);
    if (st == GP_OK)
        st = start_thread(pl, true, &pl->producer);
    if (st == GP_OK)
        st = start_thread(pl, false, &pl->consumer);
    if (st != GP_OK) {
        gp_pipeline_destroy(pl);
        return st;
    }
    pl->timing = (gp_step_timing){.attn_begin = pl->timing_buf, .attn_end = pl->timing_buf + per,
                                  .ffn_begin = pl->timing_buf + 2 * per, .ffn_end = pl->timing_buf + 3 * per};
    *out = pl;
    return GP_OK;
}

gp_status gp_pipeline_set_params(gp_pipeline *pl, const gp_pipeline_params *p)
{
    GP_TRY(check_params(p));
    if (p->ring.depth != pl->p.ring.depth || p->ring.spin != pl->p.ring.spin) {
        gp_ring_set *r;
        GP_TRY(gp_ring_set_create(pl->n_layers, &p->ring, &r));
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

gp_status gp_pipeline_step(gp_pipeline *pl, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                           float *logits)
{
    pl->stats_valid = false;
    GP_TRY(gp_pipeline_plan(&pl->p, pl->n_layers, B, &pl->plan));
    for (int m = 0; m < GP_PIPE_MAX_MICRO; m++)
        atomic_store(&pl->ffn_done[m], 0);
    atomic_store(&pl->abort, false);
    pl->prod_st = pl->cons_st = GP_OK;
    pl->dep_wait_ns = 0;
    memset(pl->a2f_bytes, 0, sizeof(double) * (size_t)pl->n_layers);
    for (int l = 0; l < pl->n_layers; l++)
        gp_ring_stats_reset(gp_ring_set_get(pl->rings, l)); /* both sides idle */
    GP_TRY(pl->exec.ops->step_begin(pl->exec.ctx, &pl->plan, seq_ids, tokens));

    /* the mutex orders the plan and the resets above before the threads' reads */
    pthread_mutex_lock(&pl->mu);
    pl->running = 2;
    pl->generation++;
    pthread_cond_broadcast(&pl->start_cv);
    while (pl->running > 0)
        pthread_cond_wait(&pl->done_cv, &pl->mu);
    pthread_mutex_unlock(&pl->mu);

    if (pl->prod_st != GP_OK || pl->cons_st != GP_OK) {
        pl->exec.ops->abort_step(pl->exec.ctx);
        gp_ring_set_reopen(pl->rings);
        /* a device fault outranks the other side's failure: the caller
         * must learn that the context is gone, whichever thread saw it */
        bool prod = pl->prod_st != GP_OK &&
                    (pl->prod_st == GP_ERR_DEVICE_FAULT || pl->cons_st != GP_ERR_DEVICE_FAULT);
        gp_set_error("%s stage failed: %s", prod ? "attention" : "FFN", prod ? pl->prod_err : pl->cons_err);
        return prod ? pl->prod_st : pl->cons_st;
    }
    GP_TRY(pl->exec.ops->step_end(pl->exec.ctx, next, logits, &pl->timing));
    gp_stats_compute(pl, &pl->stats);
    pl->stats_valid = true;
    return GP_OK;
}
