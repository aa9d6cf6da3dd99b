/* The prefill/decode executor: two lanes over one engine (one model state,
 * one KV cache), the decode lane on one partition of a green pair and the
 * prefill lane on the other, so a scheduler's prefill batch runs (on a
 * worker thread) while its decode steps go on; a request's blocks pass from
 * one lane to the other with no copy, ordered by the prefill call's end. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_green.h"
#include "pipeline_impl.h"

struct gp_pd_exec {
    gp_engine *e;          /* borrowed */
    gp_lane *decode, *prefill;
    int prefill_rows;
    bool idle_whole;       /* decode on the engine's own lane (every SM) while no prefill batch runs */
    gp_split_info info;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, stop;
    /* the prefill batch: launched -> running (worker) -> done (status) */
    bool launched, done;
    gp_status status;
    char error[512];       /* the worker's message, handed to the polling thread */
    gp_batch_part *parts;  /* [max_batch]: a copy of the launched batch's parts */
    gp_batch batch;
    int32_t *next;
    float *logits;
};

static void *worker_main(void *arg)
{
    gp_pd_exec *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->stop && !(x->launched && !x->done))
            pthread_cond_wait(&x->cv, &x->mu);
        if (x->stop)
            break;
        pthread_mutex_unlock(&x->mu);
        gp_status st = gp_lane_run_batch(x->prefill, &x->batch, x->next, x->logits);
        pthread_mutex_lock(&x->mu);
        x->status = st;
        snprintf(x->error, sizeof x->error, "%s", st == GP_OK ? "" : gp_last_error());
        x->done = true;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static gp_status px_launch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_pd_exec *x = ctx;
    if (!b || b->n_parts < 1 || b->n_parts > gp_engine_max_batch(x->e))
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill lane: a batch of %d parts; allowed 1..%d", b ? b->n_parts : 0,
                gp_engine_max_batch(x->e));
    long long tokens = 0; /* the lane's own check runs on its thread: the size is checked here, up front */
    for (int i = 0; i < b->n_parts; i++)
        tokens += b->parts[i].n;
    if (tokens > x->prefill_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill lane: a batch of %lld tokens; allowed at most %d (its rows)", tokens,
                x->prefill_rows);
    pthread_mutex_lock(&x->mu);
    bool busy = x->launched;
    if (!busy) {
        memcpy(x->parts, b->parts, sizeof *x->parts * (size_t)b->n_parts);
        x->batch = (gp_batch){.n_parts = b->n_parts, .parts = x->parts};
        x->next = next;
        x->logits = logits;
        x->launched = true;
        x->done = false;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    if (busy)
        GP_FAIL(GP_ERR_STATE, "prefill lane: a batch is launched and not yet polled done; one at a time");
    return GP_OK;
}

static gp_status px_poll(void *ctx, bool wait, bool *done)
{
    gp_pd_exec *x = ctx;
    pthread_mutex_lock(&x->mu);
    if (!x->launched) {
        pthread_mutex_unlock(&x->mu);
        GP_FAIL(GP_ERR_STATE, "prefill lane: nothing launched to poll");
    }
    while (wait && !x->done)
        pthread_cond_wait(&x->cv, &x->mu);
    *done = x->done;
    gp_status st = GP_OK;
    if (x->done) {
        st = x->status;
        if (st != GP_OK)
            gp_set_error("%s", x->error);
        x->launched = x->done = false;
    }
    pthread_mutex_unlock(&x->mu);
    return st;
}

/* The decode rows on the decode lane (max_batch rows), or with idle_whole
 * on every SM while the prefill lane is idle (the launch runs on this
 * thread, so the lane cannot start a batch under the step). */
static gp_status px_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms)
{
    gp_pd_exec *x = ctx;
    uint64_t t0 = gp_now_ns();
    pthread_mutex_lock(&x->mu);
    bool busy = x->launched && !x->done;
    pthread_mutex_unlock(&x->mu);
    bool whole = x->idle_whole && !busy;
    GP_TRY(gp_lane_run_batch(whole ? gp_engine_lane(x->e) : x->decode, b, next, logits));
    if (step_ms)
        *step_ms = (float)((gp_now_ns() - t0) / 1e6);
    return GP_OK;
}

static void px_reset_seq(void *ctx, int seq)
{
    gp_engine_reset_seq(((gp_pd_exec *)ctx)->e, seq);
}

static gp_status px_retain_block(void *ctx, int seq, int index, int *handle)
{
    return gp_engine_kv_retain_block(((gp_pd_exec *)ctx)->e, seq, index, handle);
}

static void px_drop_block(void *ctx, int handle)
{
    gp_engine_kv_drop_block(((gp_pd_exec *)ctx)->e, handle);
}

static gp_status px_attach_blocks(void *ctx, int seq, const int *handles, int n)
{
    return gp_engine_kv_attach(((gp_pd_exec *)ctx)->e, seq, handles, n);
}

static int px_n_splits(void *ctx)
{
    (void)ctx;
    return 1;
}

static void px_split_info(void *ctx, int index, gp_split_info *out)
{
    (void)index;
    *out = ((gp_pd_exec *)ctx)->info;
}

static const gp_session_ops pd_session = {
    .name = "cuda, prefill and decode lanes",
    .run_batch = px_run_batch,
    .reset_seq = px_reset_seq,
    .retain_block = px_retain_block,
    .drop_block = px_drop_block,
    .attach_blocks = px_attach_blocks,
    .prefill_launch = px_launch,
    .prefill_poll = px_poll,
    .n_splits = px_n_splits,
    .split_info = px_split_info,
};

gp_status gp_pd_exec_create(gp_engine *e, const gp_green_pair *pair, int prefill_rows, gp_pd_exec **out)
{
    *out = NULL;
    if (!e || !pair || prefill_rows < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill/decode executor: an engine, a green pair and prefill rows >= 1 (%d)",
                prefill_rows);
    gp_pd_exec *x = calloc(1, sizeof *x);
    if (!x || !(x->parts = calloc((size_t)gp_engine_max_batch(e), sizeof *x->parts))) {
        free(x);
        GP_FAIL(GP_ERR_NO_MEMORY, "prefill/decode executor: out of host memory");
    }
    x->e = e;
    x->prefill_rows = prefill_rows;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    int d_sms = pair->partitioned ? pair->attn_sms : 0, p_sms = pair->partitioned ? pair->ffn_sms : 0;
    x->info = (gp_split_info){.a_req = pair->plan.attn_sms, .f_req = pair->plan.ffn_sms, .a_got = pair->attn_sms,
                              .f_got = pair->ffn_sms, .partitioned = pair->partitioned != 0, .unit = "SMs"};
    gp_status st = gp_lane_create(e, pair->attn_stream, d_sms, gp_engine_max_batch(e), &x->decode);
    if (st == GP_OK)
        st = gp_lane_create(e, pair->ffn_stream, p_sms, prefill_rows, &x->prefill);
    if (st == GP_OK) {
        if (pthread_create(&x->worker, NULL, worker_main, x) != 0) {
            gp_set_error("prefill/decode executor: could not start the prefill lane's thread");
            st = GP_ERR_NO_MEMORY;
        } else {
            x->started = true;
        }
    }
    if (st != GP_OK) {
        gp_pd_exec_destroy(x);
        return st;
    }
    *out = x;
    return GP_OK;
}

void gp_pd_exec_destroy(gp_pd_exec *x)
{
    if (!x)
        return;
    if (x->started) { /* a batch still running ends first: the worker checks stop between batches */
        pthread_mutex_lock(&x->mu);
        x->stop = true;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->worker, NULL);
    }
    gp_lane_destroy(x->decode);
    gp_lane_destroy(x->prefill);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x->parts);
    free(x);
}

void gp_pd_exec_set_idle_whole(gp_pd_exec *x, bool on)
{
    x->idle_whole = on;
}

gp_exec gp_pd_exec_get(gp_pd_exec *x)
{
    return (gp_exec){.step = NULL, .session = &pd_session, .ctx = x};
}
