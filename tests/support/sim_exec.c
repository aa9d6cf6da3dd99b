/* Simulated executor: the CPU executor with synthetic stage costs. It does no
 * math; a caller's cost model gives each stage's duration, and the step's
 * timeline is computed in virtual time on two in-order "streams" with the
 * CUDA executor's dependencies, so the real runner, statistics and rebalancer
 * run end to end in CI with timings that are known exactly. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_exec.h"

struct gp_sim_exec {
    gp_sim_params p;        /* pairs points at `pairs` below */
    gp_split_info *pairs;   /* [n_pairs] */
    int n_pairs;
    int current;            /* pair in force */
    gp_step_plan plan;      /* the step being run */
    bool in_step;
    /* issue flags of the current step, [n_layers][GP_PIPE_MAX_MICRO]: attention
     * flags written by the attention stage's thread and read by the FFN
     * stage's, FFN flags the other way round. The runner already orders each
     * read after its write (ring push/pop, its last-stage counter); release/acquire here keeps the
     * check self-contained and visible to ThreadSanitizer, which does not
     * see ck_ring's fences. */
    atomic_uchar *attn_issued, *ffn_issued;
    double *scratch;        /* [4][n_layers][GP_PIPE_MAX_MICRO]: durations and ends */
    long steps;
};

gp_sim_params gp_sim_default_params(void)
{
    return (gp_sim_params){.n_layers = 0, .sm_count = 132, .granularity = 8, .groups = 15, .pairs = NULL,
                           .n_pairs = 0, .cost = NULL, .user = NULL, .attn_slowdown = 1.0, .ffn_slowdown = 1.0,
                           .begin_ms = 0.0, .end_ms = 0.0, .a2f_bytes_per_row = 16384, .vocab = 0};
}

static int side_sms(const gp_split_info *s, gp_sim_side side)
{
    if (side == GP_SIM_ATTN)
        return s->a_got > 0 ? s->a_got : s->a_req;
    return s->f_got > 0 ? s->f_got : s->f_req;
}

/* Alone-time of one stage from the cost model, checked. */
static gp_status stage_cost(const gp_sim_exec *x, gp_sim_side side, long step, int layer, int micro, int rows,
                            int sms, double *out)
{
    double v = x->p.cost(x->p.user, side, step, layer, micro, rows, sms);
    if (!isfinite(v) || v < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: the cost model gave %g ms for the %s stage of layer %d, "
                "micro-batch %d (%d rows, %d SMs): need a finite value >= 0", v,
                side == GP_SIM_ATTN ? "attention" : "FFN", layer, micro, rows, sms);
    *out = v;
    return GP_OK;
}

/* Fluid simulation of the two streams. A stage has an amount of work equal
 * to its alone-time; it progresses at rate 1 while the other stream is idle
 * and 1/slowdown while the other stream runs a stage too (the partitions
 * share HBM bandwidth and L2; docs/ARCHITECTURE.md section 6 has a GEMM 2.15x and a
 * copy 1.23x slower side by side). Rates are constant between stage starts
 * and ends, so advancing from event to event is exact. */
static gp_status simulate(const gp_sim_exec *x, int L, int M, const double *da, const double *df, double *a_b,
                          double *a_e, double *f_b, double *f_e, double *total)
{
    const int n = L * M;
    const double sa = x->p.attn_slowdown, sf = x->p.ffn_slowdown;
    int ia = 0, jf = 0;          /* next stage each stream starts */
    int ra_i = -1, rf_i = -1;    /* running stage, -1: idle */
    double ra_w = 0, rf_w = 0;   /* its remaining work (alone-ms) */
    int done_a = 0, done_f = 0;
    double now = 0;
    for (int i = 0; i < n; i++)
        a_e[i] = f_e[i] = -1;
    while (done_a < n || done_f < n) {
        /* start what can start: A(i) after F(i - M), F(j) after A(j) */
        if (ra_i < 0 && ia < n && (ia < M || f_e[ia - M] >= 0)) {
            ra_i = ia++;
            ra_w = da[ra_i];
            a_b[ra_i] = now;
        }
        if (rf_i < 0 && jf < n && a_e[jf] >= 0) {
            rf_i = jf++;
            rf_w = df[rf_i];
            f_b[rf_i] = now;
        }
        if (ra_i < 0 && rf_i < 0)
            GP_FAIL(GP_ERR_STATE, "simulated executor: the timeline stalled at attention %d, FFN %d of %d stages "
                    "(broken dependency bookkeeping)", ia, jf, n);
        double rate_a = rf_i >= 0 ? 1.0 / sa : 1.0, rate_f = ra_i >= 0 ? 1.0 / sf : 1.0;
        double ta = ra_i >= 0 ? ra_w / rate_a : INFINITY, tf = rf_i >= 0 ? rf_w / rate_f : INFINITY;
        double dt = fmin(ta, tf);
        now += dt;
        if (ra_i >= 0) {
            if (ta <= dt) {
                a_e[ra_i] = now;
                ra_i = -1;
                done_a++;
            } else {
                ra_w -= dt * rate_a;
            }
        }
        if (rf_i >= 0) {
            if (tf <= dt) {
                f_e[rf_i] = now;
                rf_i = -1;
                done_f++;
            } else {
                rf_w -= dt * rate_f;
            }
        }
    }
    *total = now;
    return GP_OK;
}

static gp_status check_plan(const gp_sim_exec *x, const gp_step_plan *plan)
{
    if (!plan)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: plan is NULL");
    if (plan->n_layers != x->p.n_layers)
        GP_FAIL(GP_ERR_SHAPE, "simulated executor: plan of %d layers, the executor simulates %d", plan->n_layers,
                x->p.n_layers);
    if (plan->M < 1 || plan->M > GP_PIPE_MAX_MICRO)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: %d micro-batches: allowed 1..%d", plan->M,
                GP_PIPE_MAX_MICRO);
    for (int m = 0; m < plan->M; m++)
        if (plan->nb[m] < 1)
            GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: micro-batch %d has %d rows: need >= 1", m, plan->nb[m]);
    return GP_OK;
}

gp_status gp_sim_exec_timeline(gp_sim_exec *x, int index, const gp_step_plan *plan, long step, gp_step_timing *t)
{
    if (!x || !t || !t->begin[0] || !t->end[0] || !t->begin[1] || !t->end[1])
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: timeline needs the executor and four timing arrays");
    if (index < 0 || index >= x->n_pairs)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: pair %d: allowed 0..%d", index, x->n_pairs - 1);
    GP_TRY(check_plan(x, plan));
    const gp_split_info *sp = &x->pairs[index];
    const int L = plan->n_layers, M = plan->M, n = L * M;
    const size_t per = (size_t)L * GP_PIPE_MAX_MICRO;
    double *da = x->scratch, *df = da + per, *ea = df + per, *ef = ea + per;
    /* begin times reuse the caller's float arrays after the durations are read */
    for (int l = 0; l < L; l++)
        for (int m = 0; m < M; m++) {
            GP_TRY(stage_cost(x, GP_SIM_ATTN, step, l, m, plan->nb[m], side_sms(sp, GP_SIM_ATTN), &da[l * M + m]));
            GP_TRY(stage_cost(x, GP_SIM_FFN, step, l, m, plan->nb[m], side_sms(sp, GP_SIM_FFN), &df[l * M + m]));
        }
    double *ba = malloc(sizeof(double) * 2 * (size_t)n);
    if (!ba)
        GP_FAIL(GP_ERR_NO_MEMORY, "simulated executor: out of memory");
    double *bf = ba + n, total = 0;
    gp_status st = simulate(x, L, M, da, df, ba, ea, bf, ef, &total);
    if (st == GP_OK) {
        const double off = x->p.begin_ms;
        for (int i = 0; i < n; i++) {
            t->begin[0][i] = (float)(off + ba[i]);
            t->end[0][i] = (float)(off + ea[i]);
            t->begin[1][i] = (float)(off + bf[i]);
            t->end[1][i] = (float)(off + ef[i]);
        }
        t->step_ms = (float)(off + total + x->p.end_ms);
    }
    free(ba);
    return st;
}

long gp_sim_exec_steps(const gp_sim_exec *x)
{
    return x ? x->steps : 0;
}

/* ------------------------------------------------------------ executor ops */

static gp_status sx_step_begin(void *ctx, const gp_step_plan *plan, const int *seq_ids, const int32_t *tokens)
{
    gp_sim_exec *x = ctx;
    GP_TRY(check_plan(x, plan));
    x->plan = *plan;
    size_t per = (size_t)x->p.n_layers * GP_PIPE_MAX_MICRO;
    /* relaxed: the runner's start handshake (a mutex) publishes these */
    for (size_t i = 0; i < per; i++) {
        atomic_store_explicit(&x->attn_issued[i], 0, memory_order_relaxed);
        atomic_store_explicit(&x->ffn_issued[i], 0, memory_order_relaxed);
    }
    x->in_step = true;
    return GP_OK;
}

static gp_status sx_attn(gp_sim_exec *x, int layer, int micro, gp_payload *out)
{
    const gp_step_plan *pn = &x->plan;
    if (!x->in_step)
        GP_FAIL(GP_ERR_STATE, "simulated executor: attention stage outside a step");
    if (layer < 0 || layer >= pn->n_layers || micro < 0 || micro >= pn->M)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: attention of layer %d micro-batch %d: the step has %d "
                "layers and %d micro-batches", layer, micro, pn->n_layers, pn->M);
    if (layer > 0 &&
        !atomic_load_explicit(&x->ffn_issued[(layer - 1) * GP_PIPE_MAX_MICRO + micro], memory_order_acquire))
        GP_FAIL(GP_ERR_STATE, "simulated executor: attention of layer %d micro-batch %d issued before the FFN of "
                "layer %d it depends on", layer, micro, layer - 1);
    atomic_store_explicit(&x->attn_issued[layer * GP_PIPE_MAX_MICRO + micro], 1, memory_order_release);
    *out = (gp_payload){.tok_begin = pn->b0[micro], .tok_count = pn->nb[micro], .layer = layer, .micro = micro,
                        /* a shape only: the simulator moves no memory */
                        .resid = gp_view_make(NULL, pn->nb[micro], (int)x->p.a2f_bytes_per_row, GP_DTYPE_U8,
                                              GP_DEVICE_HOST)};
    return GP_OK;
}

static gp_status sx_ffn(gp_sim_exec *x, const gp_payload *in)
{
    const gp_step_plan *pn = &x->plan;
    if (!x->in_step || !in)
        GP_FAIL(GP_ERR_STATE, "simulated executor: FFN stage outside a step or without a payload");
    if (in->layer < 0 || in->layer >= pn->n_layers || in->micro < 0 || in->micro >= pn->M)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: FFN of layer %d micro-batch %d: the step has %d layers "
                "and %d micro-batches", in->layer, in->micro, pn->n_layers, pn->M);
    if (!atomic_load_explicit(&x->attn_issued[in->layer * GP_PIPE_MAX_MICRO + in->micro], memory_order_acquire))
        GP_FAIL(GP_ERR_STATE, "simulated executor: FFN of layer %d micro-batch %d before its attention stage",
                in->layer, in->micro);
    atomic_store_explicit(&x->ffn_issued[in->layer * GP_PIPE_MAX_MICRO + in->micro], 1, memory_order_release);
    return GP_OK;
}

static gp_status sx_stage(void *ctx, int stage, int layer, int micro, const gp_payload *in, gp_payload *out)
{
    if (stage == 0)
        return sx_attn(ctx, layer, micro, out);
    return sx_ffn(ctx, in);
}

static gp_status fill_outputs(const gp_sim_exec *x, int B, int32_t *next, float *logits)
{
    if (logits && x->p.vocab < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: logits requested but it was created with vocab %d "
                "(pass NULL, or set gp_sim_params.vocab)", x->p.vocab);
    if (next)
        memset(next, 0, sizeof *next * (size_t)B);
    if (logits)
        memset(logits, 0, sizeof *logits * (size_t)B * (size_t)x->p.vocab);
    return GP_OK;
}

static gp_status sx_step_end(void *ctx, int32_t *next, float *logits, gp_step_timing *t)
{
    gp_sim_exec *x = ctx;
    const gp_step_plan *pn = &x->plan;
    if (!x->in_step)
        GP_FAIL(GP_ERR_STATE, "simulated executor: step_end without step_begin");
    x->in_step = false;
    for (int l = 0; l < pn->n_layers; l++)
        for (int m = 0; m < pn->M; m++)
            if (!atomic_load_explicit(&x->ffn_issued[l * GP_PIPE_MAX_MICRO + m], memory_order_acquire))
                GP_FAIL(GP_ERR_STATE, "simulated executor: step_end before the FFN of layer %d micro-batch %d", l, m);
    GP_TRY(fill_outputs(x, pn->B, next, logits));
    GP_TRY(gp_sim_exec_timeline(x, x->current, pn, x->steps, t));
    x->steps++;
    return GP_OK;
}

static void sx_abort(void *ctx)
{
    ((gp_sim_exec *)ctx)->in_step = false;
}

/* The sequential engine: every stage on all SMs, one after another, nothing
 * overlaps so nothing interferes. */
static gp_status sx_sequential(void *ctx, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                               float *logits, float *step_ms)
{
    gp_sim_exec *x = ctx;
    if (B < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: sequential step of %d rows: need >= 1", B);
    GP_TRY(fill_outputs(x, B, next, logits));
    double total = x->p.begin_ms + x->p.end_ms;
    for (int l = 0; l < x->p.n_layers; l++) {
        double a, f;
        GP_TRY(stage_cost(x, GP_SIM_ATTN, -1, l, -1, B, x->p.sm_count, &a));
        GP_TRY(stage_cost(x, GP_SIM_FFN, -1, l, -1, B, x->p.sm_count, &f));
        total += a + f;
    }
    if (step_ms)
        *step_ms = (float)total;
    return GP_OK;
}

static int sx_n_splits(void *ctx)
{
    return ((gp_sim_exec *)ctx)->n_pairs;
}

static gp_status sx_select(void *ctx, int index)
{
    gp_sim_exec *x = ctx;
    if (x->in_step)
        GP_FAIL(GP_ERR_STATE, "simulated executor: split %d selected inside a step; only between steps", index);
    if (index < 0 || index >= x->n_pairs)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: split %d: allowed 0..%d", index, x->n_pairs - 1);
    x->current = index;
    return GP_OK;
}

static void sx_split_info(void *ctx, int index, gp_split_info *out)
{
    gp_sim_exec *x = ctx;
    if (index < 0 || index >= x->n_pairs)
        index = x->current; /* -1: the pair in force */
    *out = x->pairs[index];
}

static const gp_step_ops sim_step_ops = {
    .name = "sim",
    .graph = {.n_stages = 2, .names = {"attention", "FFN"}},
    .step_begin = sx_step_begin,
    .stage = sx_stage,
    .step_end = sx_step_end,
    .abort_step = sx_abort,
};

static const gp_session_ops sim_session_ops = {
    .name = "sim",
    .sequential_step = sx_sequential,
    .n_splits = sx_n_splits,
    .select_split = sx_select,
    .split_info = sx_split_info,
};

gp_exec gp_sim_exec_get(gp_sim_exec *x)
{
    return (gp_exec){.step = &sim_step_ops, .session = &sim_session_ops, .ctx = x};
}

/* ------------------------------------------------------------ create */

void gp_sim_exec_destroy(gp_sim_exec *x)
{
    if (!x)
        return;
    free(x->pairs);
    free(x->attn_issued);
    free(x->ffn_issued);
    free(x->scratch);
    free(x);
}

static gp_status check_sim_params(const gp_sim_params *p)
{
    if (p->n_layers < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: %d layers: need >= 1", p->n_layers);
    if (!p->cost)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: no cost model (gp_sim_params.cost is NULL)");
    if (!(p->attn_slowdown >= 1) || !(p->ffn_slowdown >= 1) || !isfinite(p->attn_slowdown) ||
        !isfinite(p->ffn_slowdown))
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: slowdowns %g (attention), %g (FFN): need finite >= 1",
                p->attn_slowdown, p->ffn_slowdown);
    if (!(p->begin_ms >= 0) || !(p->end_ms >= 0) || !isfinite(p->begin_ms) || !isfinite(p->end_ms))
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: begin %g ms, end %g ms: need finite >= 0", p->begin_ms,
                p->end_ms);
    if (p->vocab < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: vocab %d: need >= 0", p->vocab);
    if (p->sm_count < 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: device of %d SMs: need >= 2", p->sm_count);
    return GP_OK;
}

/* A = g, 2g, ..., (n - 1) g; F the rest, remainder included (the planner's
 * default side, green/gp_green.h). */
static gp_status make_pairs(gp_sim_exec *x)
{
    const gp_sim_params *p = &x->p;
    if (p->pairs && p->n_pairs > 0) {
        for (int i = 0; i < p->n_pairs; i++)
            if (side_sms(&p->pairs[i], GP_SIM_ATTN) < 1 || side_sms(&p->pairs[i], GP_SIM_FFN) < 1)
                GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: pair %d is %d:%d SMs: both sides need >= 1", i,
                        side_sms(&p->pairs[i], GP_SIM_ATTN), side_sms(&p->pairs[i], GP_SIM_FFN));
        x->n_pairs = p->n_pairs;
        x->pairs = malloc(sizeof *x->pairs * (size_t)x->n_pairs);
        if (!x->pairs)
            GP_FAIL(GP_ERR_NO_MEMORY, "simulated executor: out of memory");
        memcpy(x->pairs, p->pairs, sizeof *x->pairs * (size_t)x->n_pairs);
        return GP_OK;
    }
    int g = p->granularity;
    if (g < 1 || g > p->sm_count)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: granularity %d: allowed 1..%d", g, p->sm_count);
    if (p->groups < 0 || p->groups > p->sm_count / g)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: %d groups: allowed 0 (sm_count / granularity) ..%d",
                p->groups, p->sm_count / g);
    int n = p->groups ? p->groups : p->sm_count / g;
    if (n < 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: %d SMs in %d group(s) of %d: no split possible",
                p->sm_count, n, g);
    x->n_pairs = n - 1;
    x->pairs = calloc((size_t)x->n_pairs, sizeof *x->pairs);
    if (!x->pairs)
        GP_FAIL(GP_ERR_NO_MEMORY, "simulated executor: out of memory");
    for (int k = 1; k < n; k++) {
        int a = k * g, f = p->sm_count - a;
        x->pairs[k - 1] = (gp_split_info){.a_req = a, .f_req = f, .a_got = a, .f_got = f, .partitioned = true,
                                          .unit = "SMs"};
    }
    return GP_OK;
}

gp_status gp_sim_exec_create(const gp_sim_params *p, gp_sim_exec **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: out is NULL");
    *out = NULL;
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "simulated executor: params are NULL (start from gp_sim_default_params)");
    GP_TRY(check_sim_params(p));
    gp_sim_exec *x = calloc(1, sizeof *x);
    if (!x)
        GP_FAIL(GP_ERR_NO_MEMORY, "simulated executor: out of memory");
    x->p = *p;
    gp_status st = make_pairs(x);
    x->p.pairs = x->pairs;
    x->p.n_pairs = x->n_pairs;
    size_t per = (size_t)p->n_layers * GP_PIPE_MAX_MICRO;
    if (st == GP_OK) {
        x->attn_issued = calloc(per, sizeof *x->attn_issued);
        x->ffn_issued = calloc(per, sizeof *x->ffn_issued);
        x->scratch = calloc(4 * per, sizeof(double));
        if (!x->attn_issued || !x->ffn_issued || !x->scratch) {
            gp_set_error("simulated executor: out of memory");
            st = GP_ERR_NO_MEMORY;
        }
    }
    if (st != GP_OK) {
        gp_sim_exec_destroy(x);
        return st;
    }
    *out = x;
    return GP_OK;
}
