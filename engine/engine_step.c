/* Decode steps on a lane (the default lane's is the sequential engine's):
 * the one input check, KV bookkeeping, the step body (eager or a replayed
 * CUDA graph per lane), and the benchmark helpers (synthetic context, event
 * timing, per-kernel breakdown). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_prefix_impl.h"

/* The sequential step: every stage on the lane over all B rows, the
 * residual in the lane's own rows. */
static gp_status step_body(gp_lane *lane, int B, int max_len, int splits)
{
    gp_stage_io io = {.b0 = 0, .nb = B, .max_len = max_len, .attn_splits = splits, .batch = &lane->batch};
    GP_TRY(gp_lane_forward(lane, &io));
    return gp_stage_run(lane, GP_STAGE_HEAD, &io);
}

/* Capture the step body for (B, splits) into a graph; the attention split
 * count is fixed so every replay runs the captured launch configuration
 * (the kernels read lengths from device memory, so any context fits). */
static gp_status capture(gp_lane *lane, int B, int max_len, int splits, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    GP_CUDA_TRY(cudaStreamBeginCapture(lane->stream, cudaStreamCaptureModeThreadLocal));
    gp_status st = step_body(lane, B, max_len, splits);
    cudaError_t ce = cudaStreamEndCapture(lane->stream, &graph);
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

static gp_status launch(gp_lane *lane, int B, int max_len)
{
    gp_engine *e = lane->e;
    int splits = 1;
    GP_TRY(gp_lane_attn_splits(lane, B, max_len, &splits));
    /* steps with a CPU share run eager: host callbacks and per-layer copies; so do prompt tokens run
       through steps with sparsity on (dense, unlike the graph of their shape) */
    if (!e->p.use_graphs || lane->bd_ev || gp_engine_cpu_ffn_step(e, lane->batch.sparse_rows) ||
        (e->sp && lane->batch.sparse_rows == 0))
        return step_body(lane, B, max_len, splits);
    gp_graph_entry *g = NULL;
    const unsigned mask = lane->batch.sparse_mask;
    for (int i = 0; i < lane->n_graphs && !g; i++)
        if (lane->graphs[i].B == B && lane->graphs[i].splits == splits && lane->graphs[i].sparse_mask == mask)
            g = &lane->graphs[i];
    if (!g) {
        if (lane->n_graphs == GP_ENGINE_MAX_GRAPHS) { /* many shapes: start over rather than grow */
            for (int i = 0; i < lane->n_graphs; i++)
                cudaGraphExecDestroy(lane->graphs[i].exec);
            lane->n_graphs = 0;
        }
        g = &lane->graphs[lane->n_graphs];
        GP_TRY(gp_lane_tune_gemms(lane, B));
        GP_TRY(capture(lane, B, max_len, splits, &g->exec));
        g->B = B;
        g->splits = splits;
        g->sparse_mask = mask;
        lane->n_graphs++;
    }
    GP_CUDA_TRY(cudaGraphLaunch(g->exec, lane->stream));
    return GP_OK;
}

/* The step's rows as decode parts, through the one input check. */
static gp_status check_step(const gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens)
{
    const gp_engine *e = lane->e;
    if (B < 1 || B > e->p.max_batch || !seq_ids || !tokens)
        GP_FAIL(GP_ERR_INVALID_ARG, "decode step: batch %d: allowed [1, %d] (the engine's max batch)%s", B,
                e->p.max_batch, seq_ids && tokens ? "" : ", with sequence ids and tokens (NULL)");
    for (int i = 0; i < B; i++)
        lane->parts[i] = (gp_batch_part){.seq = seq_ids[i], .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tokens[i]};
    const gp_batch b = {.n_parts = B, .parts = lane->parts};
    const gp_batch_limits lim = gp_lane_limits(lane, 0);
    return gp_batch_check(&b, &lim, "decode step", NULL, NULL);
}

gp_status gp_engine_open_ffn_rows(gp_engine *e, int B)
{
    if (!e || B < 1 || B > e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_open_ffn_rows: %d rows, allowed 1..%d (the engine's max batch)", B,
                e ? e->p.max_batch : 0);
    e->lane.batch = (gp_stage_batch){.rows = B, .ffn_only = true, .logits = e->lane.logits, .next = e->lane.next_d};
    return GP_OK;
}

/* Opens the decode step's batch on the lane: KV room, tokens and step
 * tables uploaded on stream s; with sparsity, the projections it runs
 * sparse (choose: by the per-step choice; else every calibrated one). */
static gp_status lane_prepare(gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens, cudaStream_t s,
                              bool dense, bool choose, int *max_len)
{
    gp_engine *e = lane->e;
    GP_TRY(gp_device_step_gate(s)); /* fails fast after a sticky error; GP_FAULT_TRAP */
    GP_TRY(check_step(lane, B, seq_ids, tokens));
    lane->batch = (gp_stage_batch){.rows = B, .sparse_rows = dense ? 0 : B, .tokens = lane->tok_d,
                                   .logits = lane->logits, .next = lane->next_d};
    if (e->sp && gp_engine_sparse_serves(e, lane->batch.sparse_rows, B)) {
        e->sp->served_steps++;
        GP_TRY(gp_engine_sparse_plan(e, lane, B, choose, &lane->batch.sparse_mask));
    }
    gp_engine_cpu_ffn_begin(e);
    int ml = 0;
    lane->batch.km = gp_lane_kv_memory(lane);
    gp_kv_plan_reset(lane->batch.km);
    for (int i = 0; i < B; i++) {
        GP_TRY(gp_engine_kv_reserve(e, seq_ids[i], 1));
        int len = gp_kv_len(e->tables, seq_ids[i]) + 1;
        if (len > ml)
            ml = len;
        gp_kv_plan_add(lane->batch.km, seq_ids[i], len, len - 1, len); /* reads its context, writes its new token */
    }
    /* tok_h is free: the previous step ended with a host wait on its copy. */
    memcpy(lane->tok_h, tokens, sizeof(int32_t) * (size_t)B);
    GP_CUDA_TRY(cudaMemcpyAsync(lane->tok_d, lane->tok_h, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice, s));
    if (lane->tab_d) { /* a lane's own step tables */
        int32_t *lens = lane->next_h; /* free until the step's results come back */
        for (int i = 0; i < B; i++)
            lens[i] = gp_kv_len(e->tables, seq_ids[i]) + 1;
        GP_TRY(gp_lane_upload_tables(lane, B, seq_ids, lens, &lane->batch));
    } else {
        GP_TRY(gp_kv_device_sync_tables(e->kv, e->tables, B, seq_ids, s));
    }
    GP_TRY(gp_kv_begin_batch(lane->batch.km, s));
    *max_len = ml;
    return GP_OK;
}

static gp_status lane_finish(gp_lane *lane, int B, const int *seq_ids, int32_t *next, float *logits,
                             cudaStream_t s)
{
    gp_engine *e = lane->e;
    GP_TRY(gp_kv_end_batch(lane->batch.km, s));
    GP_CUDA_TRY(cudaMemcpyAsync(lane->next_h, lane->next_d, sizeof(int32_t) * (size_t)B, cudaMemcpyDeviceToHost, s));
    if (logits)
        GP_CUDA_TRY(cudaMemcpyAsync(logits, lane->logits, sizeof(float) * (size_t)B * (size_t)e->cfg.vocab,
                           cudaMemcpyDeviceToHost, s));
    GP_TRY(gp_engine_sparse_snapshot(e, s));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_done, s));
    /* the step's result is needed on the host; bounded, so a hung device is an error */
    GP_TRY(gp_device_event_wait(lane->ev_done, "the end of the decode step"));
    gp_engine_sparse_observe(e);
    memcpy(next, lane->next_h, sizeof(int32_t) * (size_t)B);
    for (int i = 0; i < B; i++)
        GP_TRY(gp_engine_kv_advance(e, seq_ids[i], 1));
    return gp_engine_cpu_ffn_end(e); /* the step's activity is on the host now */
}

gp_status gp_engine_step_prepare(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens, void *stream,
                                 int *max_len)
{
    return lane_prepare(&e->lane, B, seq_ids, tokens, (cudaStream_t)stream, false, false, max_len);
}

gp_status gp_engine_step_finish(gp_engine *e, int B, const int *seq_ids, int32_t *next, float *logits,
                                void *stream)
{
    return lane_finish(&e->lane, B, seq_ids, next, logits, (cudaStream_t)stream);
}

gp_status gp_lane_step(gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                       float *logits, bool dense)
{
    int max_len = 0;
    cudaStream_t s = lane->stream;
    GP_TRY(lane_prepare(lane, B, seq_ids, tokens, s, dense, true, &max_len));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_begin, s));
    GP_TRY(launch(lane, B, max_len));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_end, s));
    return lane_finish(lane, B, seq_ids, next, logits, s);
}

gp_status gp_lane_decode_step(gp_lane *lane, int B, const int *seq_ids, const int32_t *tokens, int32_t *next,
                              float *logits)
{
    if (!lane)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_lane_decode_step: lane is NULL");
    GP_TRY(gp_lane_check_features(lane, "gp_lane_decode_step"));
    return gp_lane_step(lane, B, seq_ids, tokens, next, logits, false);
}

gp_status gp_engine_decode_step(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens,
                                int32_t *next, float *logits)
{
    return gp_lane_step(&e->lane, B, seq_ids, tokens, next, logits, false);
}

float gp_lane_last_ms(const gp_lane *lane)
{
    float ms = 0.0f;
    if (!lane || cudaEventElapsedTime(&ms, lane->ev_begin, lane->ev_end) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0f;
    }
    return ms;
}

float gp_engine_last_step_ms(const gp_engine *e)
{
    return gp_lane_last_ms(&e->lane);
}

void *gp_engine_last_step_event(const gp_engine *e)
{
    return e ? (void *)e->lane.ev_begin : NULL;
}

void gp_engine_reset_seq(gp_engine *e, int seq)
{
    gp_engine_host_forget_seq(e, seq);
    gp_kv_release(e->tables, seq);
}

gp_status gp_engine_truncate_seq(gp_engine *e, int seq, int len)
{
    return gp_kv_truncate(e->tables, seq, len);
}

gp_status gp_engine_kv_retain_block(gp_engine *e, int seq, int index, int *handle)
{
    pthread_mutex_lock(&e->kv_lock);
    gp_status st = gp_kv_block_retain(e->tables, seq, index, handle);
    pthread_mutex_unlock(&e->kv_lock);
    return st;
}

void gp_engine_kv_drop_block(gp_engine *e, int handle)
{
    pthread_mutex_lock(&e->kv_lock);
    (void)gp_kv_block_drop(e->tables, handle); /* a handle this engine gave out: nothing to report */
    pthread_mutex_unlock(&e->kv_lock);
}

gp_status gp_engine_kv_attach(gp_engine *e, int seq, const int *handles, int n)
{
    pthread_mutex_lock(&e->kv_lock);
    gp_status st = gp_kv_attach(e->tables, seq, handles, n);
    pthread_mutex_unlock(&e->kv_lock);
    return st;
}

gp_status gp_engine_fill_seq_len(gp_engine *e, int seq, int C)
{
    if (seq < 0 || seq >= e->p.max_batch || C < 0 || C >= e->p.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "sequence %d of %d tokens: allowed sequences [0, %d), [0, %d] tokens", seq, C,
                e->p.max_batch, e->p.max_context - 1);
    gp_kv_release(e->tables, seq);
    if (C > 0) {
        GP_TRY(gp_kv_reserve(e->tables, seq, C));
        GP_TRY(gp_kv_advance(e->tables, seq, C));
    }
    return GP_OK;
}

gp_status gp_engine_fill_context(gp_engine *e, int B, int C, uint64_t seed)
{
    if (B < 1 || B > e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "batch %d: allowed [1, %d]", B, e->p.max_batch);
    if (C < 0 || C >= e->p.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "context %d: allowed [0, %d] (one token must still fit)", C,
                e->p.max_context - 1);
    for (int s = 0; s < B; s++)
        GP_TRY(gp_engine_fill_seq_len(e, s, C));
    /* Random K/V everywhere (never zeros: they would hide unread slots and
     * can run faster than real data). */
    const gp_kv_layout *l = gp_kv_device_layout(e->kv);
    uint64_t n = gp_kv_layer_elems(l);
    for (int layer = 0; layer < l->n_layers; layer++) {
        GP_TRY(gp_synth_fill_device(gp_kv_device_k(e->kv, layer), e->dtype, n, seed, GP_T_WQKV, layer, 1.0f, e->lane.stream));
        GP_TRY(gp_synth_fill_device(gp_kv_device_v(e->kv, layer), e->dtype, n, seed, GP_T_WO, layer, 1.0f, e->lane.stream));
        GP_TRY(gp_kv_filled_in_place(e->km, layer, e->lane.stream)); /* before the next layer refills the window */
    }
    GP_CUDA_TRY(cudaStreamSynchronize(e->lane.stream)); /* setup, not a step */
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
            cudaError_t ce = cudaEventElapsedTime(&ms[i - warmup], e->lane.ev_begin, e->lane.ev_end);
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

gp_status gp_engine_bd_open(gp_lane *lane, int cap)
{
    lane->bd_ev = calloc((size_t)cap, sizeof(cudaEvent_t));
    lane->bd_class = calloc((size_t)cap, sizeof(int));
    lane->bd_cap = 0;
    lane->bd_n = 0;
    if (!lane->bd_ev || !lane->bd_class)
        GP_FAIL(GP_ERR_NO_MEMORY, "breakdown: out of host memory for %d events", cap);
    for (; lane->bd_cap < cap; lane->bd_cap++)
        GP_TRY(gp_device_event_create(&lane->bd_ev[lane->bd_cap], cudaEventDefault, "breakdown event"));
    return GP_OK;
}

gp_status gp_engine_bd_sum(gp_lane *lane, cudaEvent_t begin, float acc[GP_K_COUNT])
{
    if (lane->bd_n == lane->bd_cap)
        GP_FAIL(GP_ERR_STATE, "breakdown: all %d events were used, later kernels went untimed", lane->bd_cap);
    cudaEvent_t prev = begin;
    for (int i = 0; i < lane->bd_n; i++) {
        float dt = 0;
        GP_CUDA_TRY(cudaEventElapsedTime(&dt, prev, lane->bd_ev[i]));
        acc[lane->bd_class[i]] += dt;
        prev = lane->bd_ev[i];
    }
    return GP_OK;
}

void gp_engine_bd_close(gp_lane *lane)
{
    for (int i = 0; i < lane->bd_cap; i++)
        cudaEventDestroy(lane->bd_ev[i]);
    free(lane->bd_ev);
    free(lane->bd_class);
    lane->bd_ev = NULL;
    lane->bd_class = NULL;
    lane->bd_cap = lane->bd_n = 0;
}

gp_status gp_engine_breakdown(gp_engine *e, int B, gp_step_breakdown *out)
{
    memset(out, 0, sizeof *out);
    float acc[GP_K_COUNT] = {0};
    gp_status st =
        gp_engine_bd_open(&e->lane, GP_BD_MARKS_EMBED + GP_BD_MARKS_LAYER * e->cfg.n_layers + GP_BD_MARKS_HEAD + 1);
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
        st = gp_engine_bd_sum(&e->lane, e->lane.ev_begin, acc);
    gp_engine_bd_close(&e->lane);
    if (st != GP_OK)
        return st;
    *out = (gp_step_breakdown){acc[GP_K_EMBED], acc[GP_K_ATTN_NORM], acc[GP_K_QKV], acc[GP_K_ROPE],
                               acc[GP_K_ATTN], acc[GP_K_O], acc[GP_K_FFN_NORM], acc[GP_K_GATE_UP],
                               acc[GP_K_SWIGLU], acc[GP_K_DOWN], acc[GP_K_HEAD]};
    return GP_OK;
}
