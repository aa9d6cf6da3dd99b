/* Decode steps of the sequential engine: input checks, KV bookkeeping, the
 * step body (eager or a replayed CUDA graph), and the benchmark
 * helpers (synthetic context, event timing, per-kernel breakdown). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* The sequential step: every stage on the whole GPU over all B rows, the
 * residual in the engine's own rows. */
static gp_status step_body(gp_engine *e, int B, int max_len, int splits)
{
    gp_stage_io io = {.b0 = 0, .nb = B, .max_len = max_len, .attn_splits = splits};
    GP_TRY(gp_engine_act_view(e, GP_ACT_RESID, 0, B, &io.resid));
    GP_TRY(gp_engine_stage(e, GP_STAGE_EMBED, &io, &e->sc));
    for (int l = 0; l < e->cfg.n_layers; l++) {
        io.layer = l;
        GP_TRY(gp_engine_stage(e, GP_STAGE_ATTN, &io, &e->sc));
        GP_TRY(gp_engine_stage(e, GP_STAGE_FFN, &io, &e->sc));
    }
    return gp_engine_stage(e, GP_STAGE_HEAD, &io, &e->sc);
}

/* Capture the step body for (B, splits) into a graph; the attention split
 * count is fixed so every replay runs the captured launch configuration
 * (the kernels read lengths from device memory, so any context fits). */
static gp_status capture(gp_engine *e, int B, int max_len, int splits, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    GP_CUDA_TRY(cudaStreamBeginCapture(e->sc.stream, cudaStreamCaptureModeThreadLocal));
    gp_status st = step_body(e, B, max_len, splits);
    cudaError_t ce = cudaStreamEndCapture(e->sc.stream, &graph);
    if (st != GP_OK) {
        if (graph)
            cudaGraphDestroy(graph);
        return st;
    }
    if (ce != cudaSuccess) /* gp_cuda_fail: a sticky error must stay GP_ERR_DEVICE_FAULT */
        return gp_cuda_fail(ce, "cudaStreamEndCapture (the decode step)", __FILE__, __LINE__);
    char what[64];
    snprintf(what, sizeof what, "the decode-step graph (batch %d)", B);
    st = gp_device_graph_instantiate(exec, graph, what);
    cudaGraphDestroy(graph);
    return st;
}

static gp_status launch(gp_engine *e, int B, int max_len)
{
    int splits = 1;
    GP_TRY(gp_engine_attn_splits(e, &e->sc, B, max_len, &splits));
    /* steps with a CPU share run eager: host callbacks and per-layer copies */
    if (!e->p.use_graphs || e->bd_ev || gp_engine_cpu_ffn_step(e, false))
        return step_body(e, B, max_len, splits);
    gp_graph_entry *g = NULL;
    for (int i = 0; i < e->n_graphs && !g; i++)
        if (e->graphs[i].B == B && e->graphs[i].splits == splits)
            g = &e->graphs[i];
    if (!g) {
        if (e->n_graphs == GP_ENGINE_MAX_GRAPHS) { /* many shapes: start over rather than grow */
            for (int i = 0; i < e->n_graphs; i++)
                cudaGraphExecDestroy(e->graphs[i].exec);
            e->n_graphs = 0;
        }
        g = &e->graphs[e->n_graphs];
        GP_TRY(gp_engine_tune_gemms(e, &e->sc, B));
        GP_TRY(capture(e, B, max_len, splits, &g->exec));
        g->B = B;
        g->splits = splits;
        e->n_graphs++;
    }
    GP_CUDA_TRY(cudaGraphLaunch(g->exec, e->sc.stream));
    return GP_OK;
}

static gp_status check_step(const gp_engine *e, int B, const int *seq_ids, const int32_t *tokens)
{
    if (B < 1 || B > e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "batch %d: allowed [1, %d] (the engine's max batch)", B, e->p.max_batch);
    for (int i = 0; i < B; i++) {
        if (seq_ids[i] < 0 || seq_ids[i] >= e->p.max_batch)
            GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d: allowed [0, %d]", seq_ids[i], e->p.max_batch - 1);
        for (int j = 0; j < i; j++)
            if (seq_ids[j] == seq_ids[i])
                GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d appears twice in one step", seq_ids[i]);
        if (tokens[i] < 0 || tokens[i] >= e->cfg.vocab)
            GP_FAIL(GP_ERR_INVALID_ARG, "token %d of sequence %d: allowed [0, %d]", tokens[i], seq_ids[i],
                    e->cfg.vocab - 1);
        if (gp_kv_len(e->tables, seq_ids[i]) + 1 > e->p.max_context)
            GP_FAIL(GP_ERR_STATE, "sequence %d is full: %d tokens, the engine's max context is %d",
                    seq_ids[i], gp_kv_len(e->tables, seq_ids[i]), e->p.max_context);
    }
    return GP_OK;
}

gp_status gp_engine_step_prepare(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens, void *stream,
                                 int *max_len)
{
    cudaStream_t s = (cudaStream_t)stream;
    GP_TRY(gp_device_step_gate(s)); /* fails fast after a sticky error; GP_FAULT_TRAP */
    GP_TRY(check_step(e, B, seq_ids, tokens));
    e->step_rows = B;
    if (e->sp && gp_engine_sparse_serves(e, false, B))
        e->sp->served_steps++;
    gp_engine_cpu_ffn_begin(e);
    int ml = 0;
    gp_kv_plan_reset(e->km);
    for (int i = 0; i < B; i++) {
        GP_TRY(gp_kv_reserve(e->tables, seq_ids[i], 1));
        int len = gp_kv_len(e->tables, seq_ids[i]) + 1;
        if (len > ml)
            ml = len;
        gp_kv_plan_add(e->km, seq_ids[i], len, len - 1, len); /* reads its context, writes its new token */
    }
    /* tok_h is free: the previous step ended with a host wait on its copy. */
    memcpy(e->tok_h, tokens, sizeof(int32_t) * (size_t)B);
    GP_CUDA_TRY(cudaMemcpyAsync(e->tok_d, e->tok_h, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice, s));
    GP_TRY(gp_kv_device_sync_tables(e->kv, e->tables, B, seq_ids, s));
    GP_TRY(gp_kv_begin_batch(e->km, s));
    *max_len = ml;
    return GP_OK;
}

gp_status gp_engine_step_finish(gp_engine *e, int B, const int *seq_ids, int32_t *next, float *logits,
                                void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    GP_TRY(gp_kv_end_batch(e->km, s));
    GP_CUDA_TRY(cudaMemcpyAsync(e->next_h, e->next_d, sizeof(int32_t) * (size_t)B, cudaMemcpyDeviceToHost, s));
    if (logits)
        GP_CUDA_TRY(cudaMemcpyAsync(logits, e->logits, sizeof(float) * (size_t)B * (size_t)e->cfg.vocab,
                           cudaMemcpyDeviceToHost, s));
    GP_CUDA_TRY(cudaEventRecord(e->ev_done, s));
    /* the step's result is needed on the host; bounded, so a hung device is an error */
    GP_TRY(gp_device_event_wait(e->ev_done, "the end of the decode step"));
    memcpy(next, e->next_h, sizeof(int32_t) * (size_t)B);
    for (int i = 0; i < B; i++)
        GP_TRY(gp_kv_advance(e->tables, seq_ids[i], 1));
    return gp_engine_cpu_ffn_end(e); /* the step's activity is on the host now */
}

gp_status gp_engine_decode_step(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens,
                                int32_t *next, float *logits)
{
    int max_len = 0;
    cudaStream_t s = e->sc.stream;
    GP_TRY(gp_engine_step_prepare(e, B, seq_ids, tokens, s, &max_len));
    GP_CUDA_TRY(cudaEventRecord(e->ev_begin, s));
    GP_TRY(launch(e, B, max_len));
    GP_CUDA_TRY(cudaEventRecord(e->ev_end, s));
    return gp_engine_step_finish(e, B, seq_ids, next, logits, s);
}

float gp_engine_last_step_ms(const gp_engine *e)
{
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, e->ev_begin, e->ev_end) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0f;
    }
    return ms;
}

void *gp_engine_last_step_event(const gp_engine *e)
{
    return e ? (void *)e->ev_begin : NULL;
}

void gp_engine_reset_seq(gp_engine *e, int seq)
{
    gp_kv_release(e->tables, seq);
}

gp_status gp_engine_truncate_seq(gp_engine *e, int seq, int len)
{
    return gp_kv_truncate(e->tables, seq, len);
}

gp_status gp_engine_fill_context(gp_engine *e, int B, int C, uint64_t seed)
{
    if (B < 1 || B > e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "batch %d: allowed [1, %d]", B, e->p.max_batch);
    if (C < 0 || C >= e->p.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "context %d: allowed [0, %d] (one token must still fit)", C,
                e->p.max_context - 1);
    for (int s = 0; s < B; s++) {
        gp_kv_release(e->tables, s);
        if (C > 0) {
            GP_TRY(gp_kv_reserve(e->tables, s, C));
            GP_TRY(gp_kv_advance(e->tables, s, C));
        }
    }
    /* Random K/V everywhere (never zeros: they would hide unread slots and
     * can run faster than real data). */
    const gp_kv_layout *l = gp_kv_device_layout(e->kv);
    uint64_t n = gp_kv_layer_elems(l);
    for (int layer = 0; layer < l->n_layers; layer++) {
        GP_TRY(gp_synth_fill_device(gp_kv_device_k(e->kv, layer), e->dtype, n, seed, GP_T_WQKV, layer, 1.0f, e->sc.stream));
        GP_TRY(gp_synth_fill_device(gp_kv_device_v(e->kv, layer), e->dtype, n, seed, GP_T_WO, layer, 1.0f, e->sc.stream));
        GP_TRY(gp_kv_filled_in_place(e->km, layer, e->sc.stream)); /* before the next layer refills the window */
    }
    GP_CUDA_TRY(cudaStreamSynchronize(e->sc.stream)); /* setup, not a step */
    return GP_OK;
}

gp_status gp_engine_time_steps(gp_engine *e, int B, int warmup, int n_steps, float *ms, double *wall_ms)
{
    if (B < 1 || B > e->p.max_batch || warmup < 0 || n_steps < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "time_steps: batch %d (allowed [1, %d]), warmup %d, steps %d (>= 1)",
                B, e->p.max_batch, warmup, n_steps);
    int *ids = malloc(sizeof(int) * (size_t)B);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B), *next = malloc(sizeof(int32_t) * (size_t)B);
    gp_status st = GP_OK;
    if (!ids || !tok || !next) {
        gp_set_error("time_steps: out of host memory");
        st = GP_ERR_NO_MEMORY;
        goto out;
    }
    for (int i = 0; i < B; i++) {
        ids[i] = i;
        tok[i] = (int32_t)(((int64_t)i * 7919 + 13) % e->cfg.vocab);
    }
    double t0 = 0.0;
    for (int i = 0; i < warmup + n_steps && st == GP_OK; i++) {
        if (i == warmup)
            t0 = gp_now_s(); /* each step ends with its tokens on the host: the previous one is done */
        st = gp_engine_decode_step(e, B, ids, tok, next, NULL);
        if (st == GP_OK && i >= warmup) {
            cudaError_t ce = cudaEventElapsedTime(&ms[i - warmup], e->ev_begin, e->ev_end);
            if (ce != cudaSuccess) {
                gp_set_error("cudaEventElapsedTime: %s", cudaGetErrorString(ce));
                st = GP_ERR_CUDA;
            }
        }
        memcpy(tok, next, sizeof(int32_t) * (size_t)B);
    }
    if (st == GP_OK && wall_ms)
        *wall_ms = (gp_now_s() - t0) * 1e3 / n_steps;
out:
    free(ids);
    free(tok);
    free(next);
    return st;
}

gp_status gp_engine_bd_open(gp_engine *e, int cap)
{
    e->bd_ev = calloc((size_t)cap, sizeof(cudaEvent_t));
    e->bd_class = calloc((size_t)cap, sizeof(int));
    e->bd_cap = 0;
    e->bd_n = 0;
    if (!e->bd_ev || !e->bd_class)
        GP_FAIL(GP_ERR_NO_MEMORY, "breakdown: out of host memory for %d events", cap);
    for (; e->bd_cap < cap; e->bd_cap++)
        GP_TRY(gp_device_event_create(&e->bd_ev[e->bd_cap], cudaEventDefault, "breakdown event"));
    return GP_OK;
}

gp_status gp_engine_bd_sum(gp_engine *e, cudaEvent_t begin, float acc[GP_K_COUNT])
{
    if (e->bd_n == e->bd_cap)
        GP_FAIL(GP_ERR_STATE, "breakdown: all %d events were used, later kernels went untimed", e->bd_cap);
    cudaEvent_t prev = begin;
    for (int i = 0; i < e->bd_n; i++) {
        float dt = 0;
        GP_CUDA_TRY(cudaEventElapsedTime(&dt, prev, e->bd_ev[i]));
        acc[e->bd_class[i]] += dt;
        prev = e->bd_ev[i];
    }
    return GP_OK;
}

void gp_engine_bd_close(gp_engine *e)
{
    for (int i = 0; i < e->bd_cap; i++)
        cudaEventDestroy(e->bd_ev[i]);
    free(e->bd_ev);
    free(e->bd_class);
    e->bd_ev = NULL;
    e->bd_class = NULL;
    e->bd_cap = e->bd_n = 0;
}

gp_status gp_engine_breakdown(gp_engine *e, int B, gp_step_breakdown *out)
{
    memset(out, 0, sizeof *out);
    float acc[GP_K_COUNT] = {0};
    gp_status st =
        gp_engine_bd_open(e, GP_BD_MARKS_EMBED + GP_BD_MARKS_LAYER * e->cfg.n_layers + GP_BD_MARKS_HEAD + 1);
    int *ids = malloc(sizeof(int) * (size_t)B);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B), *next = malloc(sizeof(int32_t) * (size_t)B);
    if (st == GP_OK && (!ids || !tok || !next)) {
        gp_set_error("breakdown: out of host memory");
        st = GP_ERR_NO_MEMORY;
    }
    if (st == GP_OK) {
        for (int i = 0; i < B; i++) {
            ids[i] = i;
            tok[i] = (int32_t)(i % e->cfg.vocab);
        }
        st = gp_engine_decode_step(e, B, ids, tok, next, NULL);
    }
    free(ids);
    free(tok);
    free(next);
    if (st == GP_OK)
        st = gp_engine_bd_sum(e, e->ev_begin, acc);
    gp_engine_bd_close(e);
    if (st != GP_OK)
        return st;
    *out = (gp_step_breakdown){acc[GP_K_EMBED], acc[GP_K_ATTN_NORM], acc[GP_K_QKV], acc[GP_K_ROPE],
                               acc[GP_K_ATTN], acc[GP_K_O], acc[GP_K_FFN_NORM], acc[GP_K_GATE_UP],
                               acc[GP_K_SWIGLU], acc[GP_K_DOWN], acc[GP_K_HEAD]};
    return GP_OK;
}
