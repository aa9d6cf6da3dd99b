/* The case study's runner: for one workload, the sequential engine row and
 * every (split, M, queue depth) row of the pipeline, timed with device events
 * over repeats; a configuration that fails becomes an error row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "cs_run.h"
#include "gp_attention.h"
#include "gp_engine.h"
#include "gp_kvcache.h"
#include "gp_stage.h"
#include "gp_streaming.h"
#include "gp_weights.h"
#include "kernels.h" /* GP_GEMM_WORKSPACE_BYTES: the memory of each pair's GEMM contexts */

static void row_error(gp_cs_row *r, gp_status st, const char *what)
{
    r->ok = false;
    snprintf(r->error, sizeof r->error, "%s: %s: %s", what, gp_status_str(st), gp_last_error());
}

/* A real prefill of C random tokens per sequence, the first time; later
 * the sequences are cut back to those C tokens (their K/V stays). */
static gp_status prefill_context(cs_workload_run *wr)
{
    const int B = wr->w->B, C = wr->w->C;
    if (wr->prefilled) {
        for (int b = 0; b < B; b++)
            GP_TRY(gp_engine_truncate_seq(wr->engine, b, C));
        return GP_OK;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * (size_t)C);
    gp_prefill_seq *ps = malloc(sizeof *ps * (size_t)B);
    gp_status st = GP_OK;
    if (!tok || !ps) {
        gp_set_error("--context prefill: out of host memory for %d x %d prompt tokens", B, C);
        st = GP_ERR_NO_MEMORY;
    }
    uint64_t x = wr->env->o->seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; st == GP_OK && i < (size_t)B * (size_t)C; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)wr->env->cfg.vocab);
    }
    for (int b = 0; st == GP_OK && b < B; b++) {
        gp_engine_reset_seq(wr->engine, b);
        ps[b] = (gp_prefill_seq){.seq = b, .n = C, .tokens = tok + (size_t)b * C};
    }
    if (st == GP_OK)
        st = gp_engine_prefill_batch(wr->engine, B, ps, NULL, NULL, NULL);
    if (st == GP_OK) {
        float ms = gp_engine_last_prefill_ms(wr->engine);
        fprintf(stderr, "decode_pipeline_case_study: workload %s: contexts prefilled, %d x %d tokens in %.1f ms "
                "(%.0f tokens/s)\n", wr->w->label, B, C, ms, (double)B * C / (ms * 1e-3));
        wr->prefilled = true;
    }
    free(tok);
    free(ps);
    return st;
}

/* Contexts of C tokens (random K/V, or prefilled), and the first inputs. */
static gp_status reset_context(cs_workload_run *wr)
{
    if (wr->env->o->context_prefill)
        GP_TRY(prefill_context(wr));
    else
        GP_TRY(gp_engine_fill_context(wr->engine, wr->w->B, wr->w->C, wr->env->o->seed + 1));
    for (int b = 0; b < wr->w->B; b++)
        wr->tok[b] = (int32_t)(((int64_t)b * 7919 + 13 + (int64_t)wr->env->o->seed) % wr->env->cfg.vocab);
    return GP_OK;
}

typedef gp_status (*step_fn)(cs_workload_run *wr, float *ms);

static gp_status seq_step(cs_workload_run *wr, float *ms)
{
    GP_TRY(gp_engine_decode_step(wr->engine, wr->w->B, wr->ids, wr->tok, wr->next, NULL));
    *ms = gp_engine_last_step_ms(wr->engine);
    memcpy(wr->tok, wr->next, sizeof(int32_t) * (size_t)wr->w->B);
    return GP_OK;
}

static gp_status pipe_step(cs_workload_run *wr, float *ms)
{
    GP_TRY(gp_pipeline_step(wr->pipe, wr->w->B, wr->ids, wr->tok, wr->next, NULL));
    const gp_step_stats *s = gp_pipeline_last_stats(wr->pipe);
    *ms = s->step_ms;
    GP_TRY(gp_stats_window_add(wr->window, s));
    if (wr->reb) {
        int next = wr->pair;
        gp_rebalance_decision d;
        gp_rebalancer_observe(wr->reb, wr->pair, s, &next, &d);
        if (next != wr->pair) {
            gp_exec ex = gp_cuda_exec_get(wr->exec);
            GP_TRY(ex.session->select_split(ex.ctx, next));
            wr->pair = next;
        }
    }
    memcpy(wr->tok, wr->next, sizeof(int32_t) * (size_t)wr->w->B);
    return GP_OK;
}

/* Streaming statistics summed over a row's repeats (each repeat's timed
 * steps only: the contexts are reset between them). */
typedef struct cs_stream_sum {
    uint64_t bytes, hits, misses, prefetches, evictions, peak;
    double copy_s, wait_attn_s, wait_ffn_s;
} cs_stream_sum;

static void stream_add(cs_stream_sum *a, const gp_streamer_stats *s)
{
    a->bytes += s->bytes_streamed;
    a->hits += s->hits;
    a->misses += s->misses;
    a->prefetches += s->prefetches;
    a->evictions += s->evictions;
    a->peak = s->peak_device_bytes > a->peak ? s->peak_device_bytes : a->peak;
    a->copy_s += s->copy_s;
    a->wait_attn_s += s->waited_s[GP_STREAM_ATTN];
    a->wait_ffn_s += s->waited_s[GP_STREAM_FFN];
}

static void stream_row(gp_cs_row *r, const cs_stream_sum *a, int steps)
{
    gp_cs_stream *st = &r->stream;
    const double n = steps > 0 ? steps : 1;
    st->on = true;
    st->steps = steps;
    st->gb_per_step = (double)a->bytes / n / 1e9;
    st->copy_gbps = a->copy_s > 0 ? (double)a->bytes / a->copy_s / 1e9 : 0.0;
    st->copy_ms_per_step = a->copy_s / n * 1e3;
    st->wait_attn_ms_per_step = a->wait_attn_s / n * 1e3;
    st->wait_ffn_ms_per_step = a->wait_ffn_s / n * 1e3;
    st->hits_per_step = (double)a->hits / n;
    st->misses_per_step = (double)a->misses / n;
    st->prefetches_per_step = (double)a->prefetches / n;
    st->evictions_per_step = (double)a->evictions / n;
    st->peak_device_bytes = a->peak;
}

/* The copies that overlap the step just run (the row's traced step), on its
 * clock: the step's start event is the log's reference. A log that cannot
 * be read costs the row its copy track, not its figures. */
static void keep_copies(cs_workload_run *wr, gp_cs_row *r, float step_ms)
{
    void *ref = r->seq ? gp_engine_last_step_event(wr->engine) : gp_cuda_exec_step_event(wr->exec);
    /* a step copies each layer group at most once per micro-batch, and
     * prefetches wrap into the next step: room for all of it */
    int cap = (GP_PIPE_MAX_MICRO + 1) * (2 * wr->env->cfg.n_layers + 1), n = 0, keep = 0;
    gp_stream_copy *log = malloc(sizeof *log * (size_t)cap);
    gp_status st = !log ? GP_ERR_NO_MEMORY : !ref ? GP_ERR_STATE
                 : gp_device_weights_stream_copy_log(wr->env->dw, ref, log, cap, &n);
    if (st != GP_OK) {
        fprintf(stderr, "decode_pipeline_case_study: workload %s: no weight-copy track for this row: %s: %s\n",
                wr->w->label, gp_status_str(st), st == GP_ERR_NO_MEMORY ? "out of host memory" :
                st == GP_ERR_STATE ? "no step event" : gp_last_error());
        free(log);
        return;
    }
    for (int i = 0; i < n; i++)
        keep += log[i].end_ms > 0.0 && log[i].start_ms < step_ms;
    r->copies = keep ? calloc((size_t)keep, sizeof *r->copies) : NULL;
    for (int i = 0; r->copies && i < n; i++) {
        if (!(log[i].end_ms > 0.0 && log[i].start_ms < step_ms))
            continue;
        gp_cs_copy *c = &r->copies[r->n_copies++];
        if (log[i].layer >= 0)
            snprintf(c->group, sizeof c->group, "%s %d", gp_stream_kind_name(log[i].kind), log[i].layer);
        else
            snprintf(c->group, sizeof c->group, "%s", gp_stream_kind_name(log[i].kind));
        c->bytes = log[i].bytes;
        c->begin_ms = (float)log[i].start_ms;
        c->end_ms = (float)log[i].end_ms;
    }
    r->copy_step_ms = step_ms;
    free(log);
}

/* Warm-up once (graphs captured, caches filled), then per repeat: fresh
 * contexts and `steps` timed steps; a repeat's sample is its median step.
 * Streamed weights: their statistics over the timed steps only, and the
 * copies of the last step, the one the trace shows. */
static gp_status time_config(cs_workload_run *wr, step_fn fn, gp_cs_row *r)
{
    const gp_cs_options *o = wr->env->o;
    float ms = 0.0f;
    GP_TRY(reset_context(wr));
    for (int i = 0; o->warmup && i < o->warmup_steps; i++)
        GP_TRY(fn(wr, &ms));
    if (wr->window)
        gp_stats_window_reset(wr->window);
    r->samples_ms = calloc((size_t)o->repeat, sizeof(double));
    double *steps = calloc((size_t)o->steps, sizeof(double));
    if (!r->samples_ms || !steps) {
        free(steps);
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for samples");
    }
    gp_status st = GP_OK;
    const bool streamed = gp_device_weights_is_streamed(wr->env->dw);
    cs_stream_sum sum;
    memset(&sum, 0, sizeof sum);
    gp_streamer_stats ss;
    for (int rep = 0; rep < o->repeat && st == GP_OK; rep++) {
        st = reset_context(wr);
        if (st == GP_OK && streamed) /* from here: this repeat's timed steps */
            st = gp_device_weights_stream_stats(wr->env->dw, &ss, 1);
        for (int s = 0; s < o->steps && st == GP_OK; s++) {
            nvtxRangePushA("decode step");
            st = fn(wr, &ms);
            nvtxRangePop();
            steps[s] = ms;
        }
        if (st == GP_OK && streamed && rep == o->repeat - 1)
            keep_copies(wr, r, ms); /* before the statistics call ends the log's interval */
        if (st == GP_OK && streamed && (st = gp_device_weights_stream_stats(wr->env->dw, &ss, 1)) == GP_OK)
            stream_add(&sum, &ss);
        if (st == GP_OK)
            r->samples_ms[r->n_samples++] = gp_median_d(steps, o->steps);
    }
    free(steps);
    GP_TRY(st);
    if (streamed)
        stream_row(r, &sum, o->repeat * o->steps);
    double *sorted = malloc(sizeof(double) * (size_t)r->n_samples);
    if (!sorted)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for samples");
    memcpy(sorted, r->samples_ms, sizeof(double) * (size_t)r->n_samples);
    r->ms_median = gp_median_d(sorted, r->n_samples);
    r->ms_min = sorted[0];
    r->ms_max = sorted[r->n_samples - 1];
    free(sorted);
    r->tokens_per_s = wr->w->B / (r->ms_median / 1e3);
    gp_step_cost cost;
    gp_step_floor(&wr->env->cfg, wr->w->B, wr->w->C + o->steps / 2.0, r->seq ? 1 : r->M, &cost);
    r->floor_ms = cost.floor_ms;
    r->floor_share = cost.floor_ms / r->ms_median;
    r->ok = true;
    return GP_OK;
}

static void copy_trace(gp_cs_row *r, const gp_step_timing *t, int L, int M)
{
    size_t n = (size_t)L * (size_t)M;
    if (!t || gp_cs_trace_alloc(&r->trace, L, M) != GP_OK)
        return; /* the row keeps no trace; the trace writer skips it */
    r->trace.step_ms = t->step_ms;
    /* the attention -> FFN graph: stage 0 and stage 1 */
    memcpy(r->trace.attn_begin, t->begin[0], sizeof(float) * n);
    memcpy(r->trace.attn_end, t->end[0], sizeof(float) * n);
    memcpy(r->trace.ffn_begin, t->begin[1], sizeof(float) * n);
    memcpy(r->trace.ffn_end, t->end[1], sizeof(float) * n);
}

gp_status cs_run_seq(cs_workload_run *wr, gp_cs_row *r)
{
    r->gemm_tune = cs_engine_params(wr->env->o, wr->w).gemm_tune;
    r->seq = true;
    r->M = 1;
    r->split = (gp_split_info){.a_got = wr->env->sm_count, .f_got = wr->env->sm_count, .partitioned = false,
                               .unit = "SMs"};
    gp_attn_kernel k;
    if (gp_lane_attn_kernel(gp_engine_lane(wr->engine), wr->w->B, wr->w->C + 1, &k) == GP_OK)
        snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", gp_attn_kernel_name(k));
    nvtxRangePushA("seq");
    gp_status st = time_config(wr, seq_step, r);
    nvtxRangePop();
    if (st != GP_OK)
        row_error(r, st, "sequential engine");
    return st;
}

gp_status cs_run_pipelined(cs_workload_run *wr, int pair, int M, unsigned depth, gp_cs_row *r)
{
    const gp_cs_options *o = wr->env->o;
    gp_exec ex = gp_cuda_exec_get(wr->exec);
    r->gemm_tune = cs_engine_params(o, wr->w).gemm_tune;
    r->M = M;
    r->depth = depth;
    r->rebalance = o->rebalance;
    ex.session->split_info(ex.ctx, pair, &r->split);
    gp_pipeline_params p = gp_pipeline_default_params();
    p.micro_batches = M;
    p.ring.depth = depth;
    gp_status st = ex.session->select_split(ex.ctx, pair);
    if (st == GP_OK)
        st = gp_cuda_exec_set_placement(wr->exec, r->placement);
    if (st == GP_OK)
        st = gp_cuda_exec_set_fill_drain(wr->exec, o->fill_drain);
    if (st == GP_OK)
        st = gp_pipeline_set_params(wr->pipe, &p);
    if (st == GP_OK && wr->w->B < M) {
        gp_set_error("batch %d has fewer rows than %d micro-batches", wr->w->B, M);
        st = GP_ERR_INVALID_ARG;
    }
    /* The split as the pipeline makes it, from its own planner and the
     * parameters just set, for the report (uneven when M does not divide B). */
    gp_step_plan plan;
    if (st == GP_OK && gp_pipeline_plan(&p, wr->env->cfg.n_layers, wr->w->B, &plan) == GP_OK) {
        for (int m = 0; m < plan.M && m < GP_PIPE_MAX_MICRO; m++)
            r->micro_rows[m] = plan.nb[m];
        const char *k;
        if (gp_cuda_exec_attn_kernel(wr->exec, pair, plan.nb[0], wr->w->C + 1, &k) == GP_OK)
            snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", k);
    }
    wr->pair = pair;
    wr->reb = NULL;
    if (st == GP_OK && o->rebalance != GP_REBALANCE_OFF) {
        int n = ex.session->n_splits(ex.ctx);
        gp_split_info *infos = calloc((size_t)n, sizeof *infos);
        gp_rebalance_params rp = gp_rebalance_default_params();
        rp.policy = o->rebalance;
        for (int i = 0; infos && i < n; i++)
            ex.session->split_info(ex.ctx, i, &infos[i]);
        st = infos ? gp_rebalancer_create(&rp, infos, n, &wr->reb) : GP_ERR_NO_MEMORY;
        free(infos);
    }
    char name[96];
    snprintf(name, sizeof name, "%s %d:%d M=%d depth %u", wr->w->label, r->split.a_req, r->split.f_req, M, depth);
    nvtxRangePushA(name);
    if (st == GP_OK)
        st = time_config(wr, pipe_step, r);
    nvtxRangePop();
    if (st != GP_OK) {
        row_error(r, st, "pipelined step");
    } else {
        gp_stats_summary s;
        if (gp_stats_window_summary(wr->window, &s) == GP_OK) {
            if (o->stats)
                gp_stats_report_text(stdout, name, &s);
            r->attn_ms_per_layer = s.attn_ms_per_layer;
            r->ffn_ms_per_layer = s.ffn_ms_per_layer;
            r->a2f_mb_per_token = s.a2f_mb_per_token;
            r->ring_occupancy_mean = s.ring_occupancy_mean;
            r->attn_backlog = s.attn_backlog_mean;
            r->ffn_backlog = s.ffn_backlog_mean;
            r->attn_idle_share = s.attn_idle_share;
            r->ffn_idle_share = s.ffn_idle_share;
        }
        copy_trace(r, gp_pipeline_last_timing(wr->pipe), wr->env->cfg.n_layers, M);
    }
    if (wr->reb) {
        const gp_rebalance_decision *log;
        int n = gp_rebalancer_log(wr->reb, &log);
        if (n > 0 && (r->decisions = malloc(sizeof *log * (size_t)n))) {
            memcpy(r->decisions, log, sizeof *log * (size_t)n);
            r->n_decisions = n;
        }
        gp_rebalancer_destroy(wr->reb);
        wr->reb = NULL;
    }
    return st;
}

void cs_workload_close(cs_workload_run *wr)
{
    gp_pipeline_destroy(wr->pipe);
    gp_assembly_close(&wr->as);
    gp_stats_window_destroy(wr->window);
    free(wr->ids);
    free(wr->tok);
    free(wr->next);
    memset(wr, 0, sizeof *wr);
}

gp_engine_params cs_engine_params(const gp_cs_options *o, const gp_cs_workload *w)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = w->B;
    /* contexts restart at C every repeat; the warm-up runs before the first */
    p.max_context = w->C + (o->warmup ? o->warmup_steps : 0) + o->steps + 1;
    /* seq and split rows alike: the comparison stays fair; a profile's row
     * measured with tuned GEMMs sets its workload's (gp_cs_workload) */
    p.gemm_tune = w->gemm_tune > 0 ? w->gemm_tune : o->gemm_tune;
    p.attn_kernel = o->attn_kernel;
    p.attn_stream_warps_cap = o->attn_warps_cap;
    p.attn_kv_evict_first = o->attn_kv_evict_first;
    return p;
}

gp_status cs_workload_memory(const gp_config *cfg, const gp_cs_options *o, const gp_cs_workload *w, int n_pairs,
                             gp_cs_memory *out)
{
    memset(out, 0, sizeof *out);
    gp_engine_params p = cs_engine_params(o, w);
    if (p.max_context > cfg->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "workload %s: context %d plus %d steps exceeds the model's %d positions",
                w->label, w->C, p.max_context - w->C, cfg->max_context);
    /* The engine's and the KV cache's own size functions, so the check and
     * the allocation cannot disagree; the weights as the bf16 parameters
     * (the device layout adds alignment padding of well under a MiB). */
    gp_kv_layout l = {.n_layers = cfg->n_layers, .n_kv_heads = cfg->n_kv_heads, .head_dim = cfg->head_dim,
                      .block_size = p.block_size};
    int blocks = (p.max_context + p.block_size - 1) / p.block_size;
    l.n_blocks = p.max_batch * blocks;
    uint64_t engine = gp_engine_device_bytes(cfg, &p), kv = gp_kv_device_bytes(&l, GP_DTYPE_BF16, p.max_batch, blocks);
    if (engine == 0 || kv == 0 || kv > engine)
        GP_FAIL(GP_ERR_OVERFLOW, "workload %s: the device bytes of batch %d x context %d cannot be computed "
                "(overflow or a device query failed)", w->label, p.max_batch, p.max_context);
    if (o->vram_budget) { /* the streamer holds at most the budget; the rest stays in host memory */
        out->weights = o->vram_budget;
        out->weights_streamed = true;
    } else if (!gp_mul_u64(gp_config_param_count(cfg), sizeof(gp_bf16), &out->weights)) {
        GP_FAIL(GP_ERR_OVERFLOW, "model %s: weight bytes overflow 64 bits", cfg->name);
    }
    out->kv_cache = kv;
    out->activations = engine - kv;
    out->pairs = 2 * (uint64_t)(n_pairs > 0 ? n_pairs : 1) * GP_GEMM_WORKSPACE_BYTES;
    return GP_OK;
}

gp_status cs_workload_open(cs_env *env, const gp_cs_workload *w, cs_workload_run *wr)
{
    memset(wr, 0, sizeof *wr);
    wr->env = env;
    wr->w = w;
    gp_engine_params p = cs_engine_params(env->o, w);
    if (p.max_context > env->cfg.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "workload %s: context %d plus %d steps exceeds the model's %d positions",
                w->label, w->C, p.max_context - w->C, env->cfg.max_context);
    /* every row asks for the same: the CUDA engine with graphs, pipelined
     * where the pool has pairs, on streamed weights with --vram-budget; the
     * assembly decides whether graphs can be used */
    gp_feature_set f = {.cuda = true, .pipelined = env->pool != NULL, .graphs = true,
                        .vram_budget = env->o->vram_budget};
    gp_assembly_params ap = {.features = &f, .engine = &p, .pool = env->pool};
    gp_status st = gp_assemble_engine(env->dw, &ap, &wr->as);
    wr->engine = wr->as.engine;
    wr->exec = wr->as.exec;
    if (st == GP_OK)
        st = gp_pipeline_create(gp_cuda_exec_get(wr->exec), env->cfg.n_layers, NULL, &wr->pipe);
    if (st == GP_OK)
        st = gp_stats_window_create(env->cfg.n_layers, &wr->window);
    wr->ids = malloc(sizeof(int) * (size_t)w->B);
    wr->tok = malloc(sizeof(int32_t) * (size_t)w->B);
    wr->next = malloc(sizeof(int32_t) * (size_t)w->B);
    if (st == GP_OK && (!wr->ids || !wr->tok || !wr->next)) {
        gp_set_error("workload %s: out of host memory", w->label);
        st = GP_ERR_NO_MEMORY;
    }
    if (st != GP_OK) {
        cs_workload_close(wr);
        return st;
    }
    for (int b = 0; b < w->B; b++)
        wr->ids[b] = b;
    return GP_OK;
}
