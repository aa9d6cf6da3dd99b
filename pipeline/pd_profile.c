/* The prefill/decode lanes' start-up profile: decode steps, prefill batches
 * and mixed batches timed on each pair's partitions and on every SM, alone
 * and side by side, over synthetic contexts, as samples for the latency
 * model (gp_pd_model_fit). */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "pd_exec_impl.h"

/* Decode steps a profile point may add to its rows' contexts. */
static int room(int max_context)
{
    return max_context / 2 < 1024 ? max_context / 2 : 1024;
}

gp_pd_profile_params gp_pd_profile_default_params(int prefill_rows, int max_batch, int max_context)
{
    gp_pd_profile_params p = {.reps = 3};
    const int rows[] = {1, 16, 64};
    const int most = max_batch - 1 < prefill_rows - 1 ? max_batch - 1 : prefill_rows - 1;
    for (int i = 0; i < 3; i++)
        if (rows[i] <= most)
            p.rows[p.n_rows++] = rows[i];
    if (p.n_rows < 3 && most >= 1) { /* three batch sizes where the defaults do not fit: the fits need them */
        const int cand[3] = {1, (1 + most) / 2, most};
        p.n_rows = 0;
        for (int i = 0; i < 3; i++)
            if (p.n_rows == 0 || cand[i] > p.rows[p.n_rows - 1])
                p.rows[p.n_rows++] = cand[i];
    }
    const int longest = max_context - room(max_context); /* a point's context; short models scale it down */
    if (longest >= 2048) { /* long contexts too where the server takes them: the narrow partitions' steps grow
                              fastest with them */
        p.context[p.n_context++] = 512;
        p.context[p.n_context++] = 2048;
        if (longest >= 8192)
            p.context[p.n_context++] = 8192;
    } else {
        if (longest / 4 >= 1)
            p.context[p.n_context++] = longest / 4;
        if (longest >= 1)
            p.context[p.n_context++] = longest;
    }
    const int top = prefill_rows < max_context - 1 ? prefill_rows : max_context - 1; /* a prompt fits its sequence */
    const int tokens[3] = {64, top / 4, top};
    for (int i = 0; i < 3; i++)
        if (tokens[i] >= 1 && tokens[i] <= top && (p.n_tokens == 0 || tokens[i] > p.tokens[p.n_tokens - 1]))
            p.tokens[p.n_tokens++] = tokens[i];
    if (p.n_tokens < 3 && top >= 1) { /* three chunk sizes under a small budget too */
        const int cand[3] = {top / 4 > 1 ? top / 4 : 1, top / 2 > 1 ? top / 2 : 1, top};
        p.n_tokens = 0;
        for (int i = 0; i < 3; i++)
            if (p.n_tokens == 0 || cand[i] > p.tokens[p.n_tokens - 1])
                p.tokens[p.n_tokens++] = cand[i];
    }
    if (p.n_tokens > 0) { /* the largest prompt again late in a long one, where the context allows */
        int late = max_context - 1 - p.tokens[p.n_tokens - 1];
        p.position = late >= 1024 ? (late < 8192 ? late : 8192) : 0;
    }
    return p;
}

/* One profile's working state. */
typedef struct prof {
    gp_pd_exec *x;
    const gp_pd_profile_params *pp;
    gp_pd_profile *out;
    int pseq;                 /* the prefill batches' sequence: max_batch - 1 */
    int R, len, len0;         /* the decode rows (sequences 0..R-1), their length now and at the point's start */
    int *ids;
    int32_t *tok, *next, *prompt;
    float *ms;                /* [cap] */
    int cap;
    gp_batch_part *parts;     /* [max_batch] */
} prof;

static gp_status add(prof *p, gp_pd_kind kind, int split, bool corun, int rows, long long ctx, int tokens,
                     int position, float ms)
{
    gp_pd_sample s = {.kind = kind, .split = split, .corun = corun, .rows = rows, .context = ctx, .tokens = tokens,
                      .position = position, .ms = ms};
    return gp_pd_profile_add(p->out, &s);
}

static gp_status decode_step(prof *p, gp_lane *lane, float *ms)
{
    GP_TRY(gp_lane_decode_step(lane, p->R, p->ids, p->tok, p->next, NULL));
    p->len++;
    *ms = gp_lane_last_ms(lane);
    return GP_OK;
}

/* The prompts each prefill point runs: every size at position 0, largest
 * first, then the largest again after pp->position tokens (a later chunk
 * of a long prompt). */
static int n_prompts(const prof *p)
{
    return p->pp->n_tokens + (p->pp->position > 0);
}

static void prompt_at(const prof *p, int k, int *n, int *pos)
{
    const int nt = p->pp->n_tokens;
    *n = p->pp->tokens[k < nt ? nt - 1 - k : nt - 1];
    *pos = k < nt ? 0 : p->pp->position;
}

/* A prompt of n tokens after pos tokens on the prefill sequence, as a batch
 * (with the decode rows: a mixed batch). */
static gp_status prompt_batch(prof *p, int n, int pos, bool with_decode, gp_batch *b)
{
    gp_engine_reset_seq(p->x->e, p->pseq);
    GP_TRY(gp_engine_fill_seq_len(p->x->e, p->pseq, pos));
    p->parts[0] = (gp_batch_part){.seq = p->pseq, .kind = GP_BATCH_PREFILL, .n = n, .tokens = p->prompt};
    int np = 1;
    for (int i = 0; with_decode && i < p->R; i++)
        p->parts[np++] = (gp_batch_part){.seq = i, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &p->tok[i]};
    *b = (gp_batch){.n_parts = np, .parts = p->parts};
    return GP_OK;
}

/* The decode rows back at the point's context: each phase of a point (a
 * lane's steps alone, a pair's co-run, the mixed batches) starts there, so
 * the room a point leaves bounds one phase's steps, not all its phases'
 * together, and every phase's samples lie at the same contexts. */
static gp_status rows_to_start(prof *p)
{
    for (int s = 0; s < p->R; s++)
        GP_TRY(gp_engine_fill_seq_len(p->x->e, s, p->len0));
    p->len = p->len0;
    return GP_OK;
}

/* Decode steps alone on lane (the first captures its graph). */
static gp_status decode_alone(prof *p, gp_lane *lane, int split)
{
    float ms;
    GP_TRY(rows_to_start(p));
    GP_TRY(decode_step(p, lane, &ms));
    int n = 2 * p->pp->reps + 1;
    long long ctx = (long long)p->R * (p->len + n / 2 + 1);
    for (int i = 0; i < n; i++)
        GP_TRY(decode_step(p, lane, &p->ms[i]));
    return add(p, GP_PD_DECODE, split, false, p->R, ctx, 0, 0, gp_median_f(p->ms, n));
}

/* Prefill batches of each prompt back to back on pair i's prefill lane
 * (the next launched as soon as a step finds one done) while decode steps
 * run on its decode lane: reps batch times of each, and, beside the first
 * (the largest), 2 reps + 1 decode steps that ended with a batch still
 * running (a step a batch ended under ran partly alone; the first may have
 * begun before the batch). */
static gp_status corun(prof *p, int i)
{
    gp_pd_exec *x = p->x;
    px_pair *pr = &x->pairs[i];
    gp_pd_lane_time scratch = {0}; /* the profile's batches are not the server's: its accounts stay untouched */
    const int want_steps = 2 * p->pp->reps + 1, room_end = p->len0 + room(gp_engine_max_context(x->e));
    int nd = 0;
    long long ctx = 0;
    float pf[16];
    GP_TRY(rows_to_start(p));
    for (int k = 0; k < n_prompts(p); k++) {
        int n, pos;
        prompt_at(p, k, &n, &pos);
        const bool first = k == 0;
        int np = 0;
        bool done = true, more = true;
        gp_status st = GP_OK;
        for (int step = 0; more && st == GP_OK; step++) {
            if (p->len + 1 >= room_end) {
                gp_set_error("pd profile: split %s, %d decode rows from %d tokens: %d of %d batch times and %d of %d "
                             "decode steps beside them when the decode rows' room (%d tokens) ran out", pr->name,
                             p->R, p->len0, np, p->pp->reps, nd, first ? want_steps : 0, room_end - p->len0);
                st = GP_ERR_STATE;
                break;
            }
            if (done) {
                gp_batch b;
                if ((st = prompt_batch(p, n, pos, false, &b)) != GP_OK ||
                    (st = gp_px_launch_on(x, pr->prefill, &scratch, px_track(x, i, true), &b, NULL, NULL)) != GP_OK)
                    break;
            }
            float ms;
            long long c = (long long)p->R * (p->len + 1);
            if ((st = decode_step(p, pr->decode, &ms)) == GP_OK && (st = gp_px_poll(x, false, &done)) == GP_OK) {
                if (done && np < (int)(sizeof pf / sizeof pf[0]))
                    pf[np++] = gp_lane_last_ms(pr->prefill);
                else if (!done && first && step > 0 && nd < p->cap) {
                    p->ms[nd++] = ms;
                    ctx += c;
                }
            }
            more = np < p->pp->reps || (first && nd < want_steps);
        }
        if (!done) { /* the batch ends before its result is read, whatever happened to the steps */
            gp_status wst = gp_px_poll(x, true, &done);
            st = st != GP_OK ? st : wst;
        }
        GP_TRY(st);
        GP_TRY(add(p, GP_PD_PREFILL, i, true, 0, 0, n, pos, gp_median_f(pf, np)));
    }
    return add(p, GP_PD_DECODE, i, true, p->R, ctx / nd, 0, 0, gp_median_f(p->ms, nd));
}

static gp_status mixed(prof *p)
{
    gp_lane *lane = gp_engine_lane(p->x->e);
    GP_TRY(rows_to_start(p));
    for (int k = 0; k < n_prompts(p); k++) {
        int n, pos;
        prompt_at(p, k, &n, &pos);
        if (n > p->x->prefill_rows - p->R) /* the decode rows and the chunk share the batch's rows */
            n = p->x->prefill_rows - p->R;
        long long ctx = (long long)p->R * (p->len + 1);
        for (int r = 0; r < p->pp->reps; r++) {
            gp_batch b;
            GP_TRY(prompt_batch(p, n, pos, true, &b));
            GP_TRY(gp_lane_run_batch(lane, &b, NULL, NULL));
            p->len++;
            p->ms[r] = gp_lane_last_ms(lane);
        }
        GP_TRY(add(p, GP_PD_MIXED, GP_PD_WHOLE, false, p->R, ctx, n, pos, gp_median_f(p->ms, p->pp->reps)));
    }
    return GP_OK;
}

static gp_status prefill_alone(prof *p, gp_lane *lane, int split)
{
    for (int k = 0; k < n_prompts(p); k++) {
        int n, pos;
        prompt_at(p, k, &n, &pos);
        for (int r = 0; r < p->pp->reps + 1; r++) { /* the first warms the lane's GEMM choices */
            gp_batch b;
            GP_TRY(prompt_batch(p, n, pos, false, &b));
            GP_TRY(gp_lane_run_batch(lane, &b, NULL, NULL));
            if (r > 0)
                p->ms[r - 1] = gp_lane_last_ms(lane);
        }
        GP_TRY(add(p, GP_PD_PREFILL, split, false, 0, 0, n, pos, gp_median_f(p->ms, p->pp->reps)));
    }
    return GP_OK;
}

static gp_status check(const gp_pd_exec *x, const gp_pd_profile_params *pp)
{
    const int mb = gp_engine_max_batch(x->e), mc = gp_engine_max_context(x->e);
    if (mb < 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: max batch %d; at least 2 (decode rows and a prefill sequence)", mb);
    if (pp->n_rows < 1 || pp->n_rows > 4 || pp->n_context < 1 || pp->n_context > 4 || pp->n_tokens < 1 ||
        pp->n_tokens > 4 || pp->reps < 1 || pp->reps > 15)
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: %d rows, %d contexts, %d token counts (1..4 each), %d reps (1..15)",
                pp->n_rows, pp->n_context, pp->n_tokens, pp->reps);
    for (int i = 0; i < pp->n_rows; i++)
        if (pp->rows[i] < 1 || pp->rows[i] > mb - 1 || pp->rows[i] > x->prefill_rows - 1)
            GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: %d decode rows; allowed 1..%d (max batch less the prefill "
                    "sequence, and a mixed batch's rows less one prompt token)", pp->rows[i],
                    mb - 1 < x->prefill_rows - 1 ? mb - 1 : x->prefill_rows - 1);
    for (int i = 0; i < pp->n_context; i++)
        if (pp->context[i] < 1 || pp->context[i] + room(mc) > mc)
            GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: context %d; allowed 1..%d (max context less %d tokens of "
                    "decode steps)", pp->context[i], mc - room(mc), room(mc));
    for (int i = 1; i < pp->n_tokens; i++)
        if (pp->tokens[i] <= pp->tokens[i - 1])
            GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: prefill tokens %d after %d; allowed ascending", pp->tokens[i],
                    pp->tokens[i - 1]);
    for (int i = 0; i < pp->n_tokens; i++)
        if (pp->tokens[i] < 1 || pp->tokens[i] > x->prefill_rows || pp->tokens[i] > mc)
            GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: %d prefill tokens; allowed 1..%d (the prefill lanes' rows)",
                    pp->tokens[i], x->prefill_rows < mc ? x->prefill_rows : mc);
    if (pp->n_tokens > 0 && (pp->position < 0 || pp->position + pp->tokens[pp->n_tokens - 1] > mc - 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "pd profile: position %d; allowed 0..%d (the largest prompt after it fits the "
                "max context)", pp->position, mc - 1 - pp->tokens[pp->n_tokens - 1]);
    return GP_OK;
}

static void describe(const gp_pd_exec *x, gp_pd_profile *out)
{
    struct cudaDeviceProp prop;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(out->device, sizeof out->device, "%.127s", prop.name);
    else
        (void)cudaGetLastError();
    snprintf(out->model, sizeof out->model, "%.100s %s", gp_engine_config(x->e)->name,
             gp_dtype_flag_name(gp_engine_dtype(x->e)));
    out->n_splits = x->n_pairs;
    for (int i = 0; i < x->n_pairs; i++) {
        out->decode_sms[i] = x->pairs[i].info.a_got;
        out->prefill_sms[i] = x->pairs[i].info.f_got;
    }
}

static gp_status run(prof *p)
{
    gp_pd_exec *x = p->x;
    const gp_pd_profile_params *pp = p->pp;
    /* the prefill points first: their untimed first batch of each prompt is also what a lane's first use of a
       shape costs (a GEMM's algorithm search, kernels loaded), which beside decode steps would outlast the
       decode rows' room */
    GP_TRY(prefill_alone(p, x->whole_prefill, GP_PD_WHOLE));
    for (int i = 0; i < x->n_pairs; i++)
        GP_TRY(prefill_alone(p, x->pairs[i].prefill, i));
    for (int c = 0; c < pp->n_context; c++)
        for (int r = 0; r < pp->n_rows; r++) {
            p->R = pp->rows[r];
            p->len = p->len0 = pp->context[c];
            GP_TRY(gp_engine_fill_context(x->e, p->R, p->len, 1234u + (uint64_t)c));
            GP_TRY(decode_alone(p, gp_engine_lane(x->e), GP_PD_WHOLE));
            for (int i = 0; i < x->n_pairs; i++)
                GP_TRY(decode_alone(p, x->pairs[i].decode, i));
            for (int i = 0; i < x->n_pairs; i++)
                GP_TRY(corun(p, i));
            GP_TRY(mixed(p));
        }
    return GP_OK;
}

gp_status gp_pd_exec_profile(gp_pd_exec *x, const gp_pd_profile_params *pp, gp_pd_profile *out)
{
    memset(out, 0, sizeof *out);
    GP_TRY(check(x, pp));
    if (x->launched)
        GP_FAIL(GP_ERR_STATE, "pd profile: a prefill batch is in flight; profile before serving");
    const int mb = gp_engine_max_batch(x->e);
    prof p = {.x = x, .pp = pp, .out = out, .pseq = mb - 1, .cap = 4096};
    p.ids = malloc(sizeof *p.ids * (size_t)mb);
    p.tok = malloc(sizeof *p.tok * (size_t)mb);
    p.next = malloc(sizeof *p.next * (size_t)mb);
    p.prompt = malloc(sizeof *p.prompt * (size_t)x->prefill_rows);
    p.ms = malloc(sizeof *p.ms * (size_t)p.cap);
    p.parts = malloc(sizeof *p.parts * (size_t)mb);
    gp_status st = GP_OK;
    if (!p.ids || !p.tok || !p.next || !p.prompt || !p.ms || !p.parts) {
        gp_set_error("pd profile: out of host memory");
        st = GP_ERR_NO_MEMORY;
    } else {
        const int vocab = gp_engine_config(x->e)->vocab;
        for (int i = 0; i < mb; i++) {
            p.ids[i] = i;
            p.tok[i] = (int32_t)(1 + i % (vocab - 1));
        }
        for (int i = 0; i < x->prefill_rows; i++)
            p.prompt[i] = (int32_t)(1 + (i * 7919) % (vocab - 1));
        describe(x, out);
        st = run(&p);
    }
    for (int i = 0; i < mb; i++)
        gp_engine_reset_seq(x->e, i);
    free(p.ids);
    free(p.tok);
    free(p.next);
    free(p.prompt);
    free(p.ms);
    free(p.parts);
    if (st != GP_OK)
        gp_pd_profile_free(out);
    return st;
}
