/* The prefill/decode executor: two lanes over one engine (one model state,
 * one KV cache) on each of several green pairs, the decode lane on one
 * partition and the prefill lane on the other, so a scheduler's prefill
 * batch runs (on a worker thread) while its decode steps go on; a request's
 * blocks pass from one lane to the other with no copy, ordered by the
 * prefill call's end. A planner may choose the pair per prefill launch. */
#include <stdlib.h>
#include <string.h>

#include "pd_exec_impl.h"

void gp_px_account(gp_pd_exec *x, gp_pd_lane_time *acct, int track, const gp_lane *lane, uint64_t t0, int rows)
{
    uint64_t t1 = gp_now_ns();
    float ms = gp_lane_last_ms(lane);
    acct->busy_s += ms > 0 ? ms / 1e3 : 0.0;
    acct->batches++;
    acct->rows += rows;
    if (!x->ev)
        return;
    if (x->n_ev == x->cap_ev) {
        x->dropped++;
        return;
    }
    const char *what = acct == &x->whole_mixed ? "mixed" : track % 2 ? "prefill" : "decode";
    x->ev[x->n_ev++] = (px_event){.t0 = t0, .t1 = t1, .track = track, .rows = rows, .what = what};
}

static int batch_rows(const gp_batch *b)
{
    int rows = 0;
    for (int i = 0; i < b->n_parts; i++)
        rows += b->parts[i].n;
    return rows;
}

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
        uint64_t t0 = gp_now_ns();
        gp_status st = gp_lane_run_batch(x->pf_lane, &x->batch, x->next, x->logits);
        pthread_mutex_lock(&x->mu);
        if (st == GP_OK)
            gp_px_account(x, x->pf_time, x->pf_track, x->pf_lane, t0, batch_rows(&x->batch));
        x->status = st;
        snprintf(x->error, sizeof x->error, "%s", st == GP_OK ? "" : gp_last_error());
        x->done = true;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

gp_status gp_px_launch_on(gp_pd_exec *x, gp_lane *lane, gp_pd_lane_time *acct, int track, const gp_batch *b,
                          int32_t *next, float *logits)
{
    if (!b || b->n_parts < 1 || b->n_parts > gp_engine_max_batch(x->e))
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill lane: a batch of %d parts; allowed 1..%d", b ? b->n_parts : 0,
                gp_engine_max_batch(x->e));
    int tokens = batch_rows(b); /* the lane's own check runs on its thread: the size is checked here, up front */
    if (tokens > x->prefill_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill lane: a batch of %d tokens; allowed at most %d (its rows)", tokens,
                x->prefill_rows);
    pthread_mutex_lock(&x->mu);
    bool busy = x->launched;
    if (!busy) {
        memcpy(x->parts, b->parts, sizeof *x->parts * (size_t)b->n_parts);
        x->batch = (gp_batch){.n_parts = b->n_parts, .parts = x->parts};
        x->next = next;
        x->logits = logits;
        x->pf_lane = lane;
        x->pf_time = acct;
        x->pf_track = track;
        x->launched = true;
        x->done = false;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    if (busy)
        GP_FAIL(GP_ERR_STATE, "prefill lane: a batch is launched and not yet polled done; one at a time");
    return GP_OK;
}

gp_status gp_px_poll(gp_pd_exec *x, bool wait, bool *done)
{
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

/* The planner's lane choice (to_whole), else the selected pair's. */
static gp_status px_launch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    gp_pd_exec *x = ctx;
    bool whole = x->to_whole;
    x->to_whole = false;
    px_pair *p = &x->pairs[x->cur];
    return whole ? gp_px_launch_on(x, x->whole_prefill, &x->whole_prefill_t, px_track(x, GP_PD_WHOLE, true), b, next,
                                   logits)
                 : gp_px_launch_on(x, p->prefill, &p->t_prefill, px_track(x, x->cur, true), b, next, logits);
}

static gp_status px_poll(void *ctx, bool wait, bool *done)
{
    return gp_px_poll(ctx, wait, done);
}

static bool lane_busy(gp_pd_exec *x)
{
    pthread_mutex_lock(&x->mu);
    bool busy = x->launched && !x->done;
    pthread_mutex_unlock(&x->mu);
    return busy;
}

/* Decode rows only: the lane's step, a CUDA graph per (lane, batch size). */
static gp_status decode_only(gp_pd_exec *x, gp_lane *lane, const gp_batch *b, int32_t *next, float *logits)
{
    for (int i = 0; i < b->n_parts; i++) {
        if (b->parts[i].kind != GP_BATCH_DECODE)
            return gp_lane_run_batch(lane, b, next, logits);
        x->ids[i] = b->parts[i].seq;
        x->tok[i] = b->parts[i].tokens[0];
    }
    return gp_lane_decode_step(lane, b->n_parts, x->ids, x->tok, next ? next : x->scratch, logits);
}

/* The decode rows on the selected pair's decode lane while a prefill batch
 * runs; on every SM (the engine's own lane) while none does, with
 * idle_whole or a planner (the launch runs on this thread, so the lane
 * cannot start a batch under the step). A batch with prefill rows (the
 * planner's mixed choice) always runs on every SM. */
static gp_status px_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms)
{
    gp_pd_exec *x = ctx;
    uint64_t t0 = gp_now_ns();
    if (b->n_parts < 1 || b->n_parts > gp_engine_max_batch(x->e))
        GP_FAIL(GP_ERR_INVALID_ARG, "decode lane: a batch of %d parts; allowed 1..%d", b->n_parts,
                gp_engine_max_batch(x->e));
    bool mixed = b->parts[0].kind == GP_BATCH_PREFILL;
    bool whole = mixed || ((x->idle_whole || x->planner) && !lane_busy(x));
    px_pair *p = &x->pairs[x->cur];
    gp_lane *lane = whole ? gp_engine_lane(x->e) : p->decode;
    GP_TRY(decode_only(x, lane, b, next, logits));
    pthread_mutex_lock(&x->mu);
    gp_px_account(x, whole ? (mixed ? &x->whole_mixed : &x->whole_decode) : &p->t_decode,
                  px_track(x, whole ? GP_PD_WHOLE : x->cur, false), lane, t0, batch_rows(b));
    pthread_mutex_unlock(&x->mu);
    const float ms = (float)((gp_now_ns() - t0) / 1e6);
    if (x->planner) /* the planner's window: the steps its choices led to */
        gp_pd_planner_observe(x->planner, ms);
    if (step_ms)
        *step_ms = ms;
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
    return ((gp_pd_exec *)ctx)->n_pairs;
}

/* The pairs' partitions overlap one another (they cut one device), so the
 * selection changes only while no prefill batch runs. */
static gp_status px_select_split(void *ctx, int index)
{
    gp_pd_exec *x = ctx;
    if (index < 0 || index >= x->n_pairs)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill/decode lanes: split %d; allowed 0..%d", index, x->n_pairs - 1);
    pthread_mutex_lock(&x->mu);
    if (x->launched) {
        pthread_mutex_unlock(&x->mu);
        GP_FAIL(GP_ERR_STATE, "prefill/decode lanes: the split changes only while no prefill batch is in flight "
                "(the pairs' partitions overlap)");
    }
    if (index == x->cur) {
        pthread_mutex_unlock(&x->mu);
        return GP_OK;
    }
    uint64_t now = gp_now_ns();
    x->pairs[x->cur].selected_s += (now - x->t_selected) / 1e9;
    x->t_selected = now;
    x->cur = index;
    x->split_changes++;
    pthread_mutex_unlock(&x->mu);
    return GP_OK;
}

static void px_split_info(void *ctx, int index, gp_split_info *out)
{
    gp_pd_exec *x = ctx;
    *out = x->pairs[index < 0 || index >= x->n_pairs ? x->cur : index].info;
}

static gp_status px_plan(void *ctx, const gp_pd_plan_in *in, gp_pd_plan *out)
{
    gp_pd_exec *x = ctx;
    if (!x->planner) { /* a static split: every batch on the lane */
        *out = (gp_pd_plan){.run = GP_PD_RUN_LANE, .tokens = in->token_budget};
        return GP_OK;
    }
    gp_pd_choice c;
    GP_TRY(gp_pd_planner_choose(x->planner, in, &c));
    if (c.run == GP_PD_RUN_LANE && c.split != GP_PD_WHOLE)
        GP_TRY(px_select_split(x, c.split));
    x->to_whole = c.run == GP_PD_RUN_LANE && c.split == GP_PD_WHOLE;
    *out = (gp_pd_plan){.run = c.run, .tokens = c.tokens};
    return GP_OK;
}

static void put(gp_lane_busy *out, int cap, int *n, const char *lane, const char *part, const gp_pd_lane_time *t,
                double selected_s)
{
    if (*n < cap) {
        gp_lane_busy *o = &out[*n];
        *o = (gp_lane_busy){.busy_s = t->busy_s, .selected_s = selected_s, .batches = t->batches, .rows = t->rows};
        snprintf(o->lane, sizeof o->lane, "%s", lane);
        snprintf(o->partition, sizeof o->partition, "%s", part);
    }
    (*n)++;
}

static int px_lane_times(void *ctx, gp_lane_busy *out, int cap)
{
    gp_pd_exec_stats st;
    gp_pd_exec_get_stats(ctx, &st);
    const gp_pd_exec *x = ctx;
    int n = 0;
    for (int i = 0; i < st.n_splits; i++) {
        put(out, cap, &n, "decode", x->pairs[i].name, &st.split[i].decode, st.split[i].selected_s);
        put(out, cap, &n, "prefill", x->pairs[i].name, &st.split[i].prefill, st.split[i].selected_s);
    }
    put(out, cap, &n, "decode", "all", &st.whole_decode, 0);
    put(out, cap, &n, "mixed", "all", &st.whole_mixed, 0);
    put(out, cap, &n, "prefill", "all", &st.whole_prefill, 0);
    return n;
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
    .pd_plan = px_plan,
    .lane_times = px_lane_times,
    .n_splits = px_n_splits,
    .select_split = px_select_split,
    .split_info = px_split_info,
};

static gp_status make_pair(gp_pd_exec *x, const gp_green_pair *g, px_pair *p)
{
    int d_sms = g->partitioned ? g->attn_sms : 0, p_sms = g->partitioned ? g->ffn_sms : 0;
    p->info = (gp_split_info){.a_req = g->plan.attn_sms, .f_req = g->plan.ffn_sms, .a_got = g->attn_sms,
                              .f_got = g->ffn_sms, .partitioned = g->partitioned != 0, .unit = "SMs"};
    snprintf(p->name, sizeof p->name, "%d:%d", g->attn_sms, g->ffn_sms);
    GP_TRY(gp_lane_create(x->e, g->attn_stream, d_sms, gp_engine_max_batch(x->e), &p->decode));
    return gp_lane_create(x->e, g->ffn_stream, p_sms, x->prefill_rows, &p->prefill);
}

gp_status gp_pd_exec_create(gp_engine *e, const gp_green_pair *const *pairs, int n_pairs,
                            const gp_pd_exec_params *p, gp_pd_exec **out)
{
    *out = NULL;
    if (!e || !pairs || n_pairs < 1 || n_pairs > GP_PD_MAX_SPLITS || !p || p->prefill_rows < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill/decode executor: an engine, 1..%d green pairs (%d) and prefill rows "
                ">= 1 (%d)", GP_PD_MAX_SPLITS, n_pairs, p ? p->prefill_rows : 0);
    gp_pd_exec *x = calloc(1, sizeof *x);
    const size_t mb = (size_t)gp_engine_max_batch(e);
    if (!x || !(x->parts = calloc(mb, sizeof *x->parts)) || !(x->pairs = calloc((size_t)n_pairs, sizeof *x->pairs)) ||
        !(x->ids = calloc(mb, sizeof *x->ids)) || !(x->tok = calloc(mb, sizeof *x->tok)) ||
        !(x->scratch = calloc(mb, sizeof *x->scratch))) {
        if (x) {
            free(x->parts);
            free(x->pairs);
            free(x->ids);
            free(x->tok);
        }
        free(x);
        GP_FAIL(GP_ERR_NO_MEMORY, "prefill/decode executor: out of host memory");
    }
    x->e = e;
    x->prefill_rows = p->prefill_rows;
    x->idle_whole = p->idle_whole;
    x->t_create = x->t_selected = gp_now_ns();
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    gp_status st = GP_OK;
    for (int i = 0; i < n_pairs && st == GP_OK; i++, x->n_pairs++)
        st = make_pair(x, pairs[i], &x->pairs[i]);
    if (st == GP_OK)
        st = gp_lane_create(e, NULL, 0, p->prefill_rows, &x->whole_prefill);
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
    for (int i = 0; i < x->n_pairs; i++) {
        gp_lane_destroy(x->pairs[i].decode);
        gp_lane_destroy(x->pairs[i].prefill);
    }
    gp_lane_destroy(x->whole_prefill);
    gp_pd_planner_destroy(x->planner);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x->ev);
    free(x->pairs);
    free(x->parts);
    free(x->ids);
    free(x->tok);
    free(x->scratch);
    free(x);
}

gp_status gp_pd_exec_set_planner(gp_pd_exec *x, const gp_pd_model *m, const gp_pd_planner_params *p)
{
    const gp_pd_profile *pf = gp_pd_model_profile(m);
    if (pf->n_splits != x->n_pairs)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill/decode lanes: the profile has %d splits, the executor %d pairs",
                pf->n_splits, x->n_pairs);
    for (int i = 0; i < x->n_pairs; i++)
        if (pf->decode_sms[i] != x->pairs[i].info.a_got || pf->prefill_sms[i] != x->pairs[i].info.f_got)
            GP_FAIL(GP_ERR_INVALID_ARG, "prefill/decode lanes: the profile's split %d is %d:%d SMs, the executor's "
                    "pair %s; measure the profile on these pairs", i, pf->decode_sms[i], pf->prefill_sms[i],
                    x->pairs[i].name);
    gp_pd_planner *pl = NULL;
    GP_TRY(gp_pd_planner_create(m, p, &pl));
    gp_pd_planner_destroy(x->planner);
    x->planner = pl;
    return GP_OK;
}

void gp_pd_exec_get_stats(gp_pd_exec *x, gp_pd_exec_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&x->mu);
    uint64_t now = gp_now_ns();
    out->n_splits = x->n_pairs;
    for (int i = 0; i < x->n_pairs; i++) {
        const px_pair *p = &x->pairs[i];
        out->split[i].decode_sms = p->info.a_got;
        out->split[i].prefill_sms = p->info.f_got;
        out->split[i].selected_s = p->selected_s + (i == x->cur ? (now - x->t_selected) / 1e9 : 0.0);
        out->split[i].decode = p->t_decode;
        out->split[i].prefill = p->t_prefill;
    }
    out->whole_decode = x->whole_decode;
    out->whole_mixed = x->whole_mixed;
    out->whole_prefill = x->whole_prefill_t;
    out->split_changes = x->split_changes;
    out->wall_s = (now - x->t_create) / 1e9;
    pthread_mutex_unlock(&x->mu);
}

gp_exec gp_pd_exec_get(gp_pd_exec *x)
{
    return (gp_exec){.step = NULL, .session = &pd_session, .ctx = x};
}
