/* Batched, chunked prefill of the CUDA engine: the prompts' tokens packed in
 * order and cut into chunks of at most prefill_chunk tokens; each chunk is
 * one forward through the stage API with prefill rows (GEMMs at M = the
 * chunk's tokens, RoPE + K/V into the paged cache, causal tensor-core
 * attention), then each prompt's last row goes through the head. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* Everything that can be checked before any work, by the one input check:
 * nothing changes on failure. */
static gp_status check_prefill(const gp_lane *lane, int S, const gp_prefill_seq *seqs, long long *total)
{
    const gp_engine *e = lane->e;
    if (!seqs || S < 1 || S > e->p.max_batch)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill of %d prompts: allowed 1..%d (the engine's max batch)%s", S,
                e->p.max_batch, seqs ? "" : ", and the prompts must not be NULL");
    for (int s = 0; s < S; s++)
        lane->parts[s] = (gp_batch_part){.seq = seqs[s].seq, .kind = GP_BATCH_PREFILL, .n = seqs[s].n,
                                         .tokens = seqs[s].tokens};
    const gp_batch b = {.n_parts = S, .parts = lane->parts};
    const gp_batch_limits lim = gp_lane_limits(lane, 0);
    return gp_batch_check(&b, &lim, "prefill", total, NULL);
}

/* Reserve every prompt's KV room (all or nothing) and upload the step
 * tables of the call's sequences, row s = seqs[s]. */
static gp_status reserve_and_upload(gp_lane *lane, int S, const gp_prefill_seq *seqs, const int *len0)
{
    gp_engine *e = lane->e;
    int s = 0;
    gp_status st = GP_OK;
    for (; s < S && st == GP_OK; s++)
        st = gp_engine_kv_reserve(e, seqs[s].seq, seqs[s].n);
    if (st != GP_OK)
        return st; /* blocks already reserved stay with their (unchanged) sequences, unused */
    int *ids = malloc(sizeof(int) * (size_t)S);
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)S);
    if (!ids || !lens) {
        free(ids);
        free(lens);
        GP_FAIL(GP_ERR_NO_MEMORY, "prefill: out of host memory for %d block tables", S);
    }
    for (s = 0; s < S; s++) {
        ids[s] = seqs[s].seq;
        lens[s] = len0[s] + seqs[s].n;
    }
    st = gp_lane_upload_tables(lane, S, ids, lens, &lane->batch);
    free(ids);
    free(lens);
    return st;
}

/* Fill staging buffer buf with chunk [c0, c0 + n) of the packed prompts and
 * upload it; sets the chunk's sequence count and longest share. off[s] is
 * prompt s's first index in the packed order. */
static gp_status upload_chunk(gp_lane *lane, int buf, int S, const gp_prefill_seq *seqs, const long long *off,
                              const int *len0, long long c0, int n)
{
    /* the copy that last read this staging buffer (two chunks back) must be done */
    GP_TRY(gp_device_event_wait(lane->pf_ev[buf], "the prefill chunk upload"));
    int32_t *h = lane->pf_h[buf];
    const size_t R = (size_t)lane->rows;
    gp_prefill_seq_desc *d = (gp_prefill_seq_desc *)(h + 3 * R);
    int ns = 0, max_q = 0;
    for (int s = 0; s < S; s++) {
        long long a = off[s] > c0 ? off[s] : c0, b = off[s] + seqs[s].n;
        if (b > c0 + n)
            b = c0 + n;
        if (a >= b)
            continue;
        const int q0 = (int)(a - c0), qn = (int)(b - a), p0 = len0[s] + (int)(a - off[s]);
        d[ns++] = (gp_prefill_seq_desc){.q_start = q0, .q_len = qn, .pos0 = p0, .table_row = s};
        if (qn > max_q)
            max_q = qn;
        for (int i = 0; i < qn; i++) {
            h[q0 + i] = seqs[s].tokens[p0 - len0[s] + i];
            h[R + (size_t)(q0 + i)] = p0 + i;
            h[2 * R + (size_t)(q0 + i)] = s;
        }
    }
    gp_stage_batch *bt = &lane->batch; /* its step tables: reserve_and_upload's */
    bt->rows = bt->prefill_rows = n;
    bt->n_seqs = ns;
    bt->max_q = max_q;
    bt->decode_table0 = S;
    bt->sparse_rows = 0; /* prompt rows: dense */
    bt->km = gp_lane_kv_memory(lane);
    gp_kv_plan_reset(bt->km); /* each sequence of the chunk reads its context and writes the chunk's positions */
    for (int i = 0; i < ns; i++)
        gp_kv_plan_add(bt->km, seqs[d[i].table_row].seq, d[i].pos0 + d[i].q_len, d[i].pos0, d[i].pos0 + d[i].q_len);
    GP_TRY(gp_lane_upload_staged(lane, buf));
    return GP_OK;
}

/* The head over n residual rows (a view), results in the lane's logits
 * and next-token rows [0, n) and, when host is set, logits copied there. */
static gp_status run_head(gp_lane *lane, const gp_tensor_view *resid, float *host)
{
    gp_stage_io io = {.b0 = 0, .nb = (int)resid->rows, .resid = *resid, .batch = &lane->batch};
    GP_TRY(gp_stage_run(lane, GP_STAGE_HEAD, &io));
    if (host)
        GP_CUDA_TRY(cudaMemcpyAsync(host, lane->logits,
                                    sizeof(float) * (size_t)resid->rows * (size_t)lane->e->cfg.vocab,
                                    cudaMemcpyDeviceToHost, lane->stream));
    return GP_OK;
}

/* One chunk through every layer; prompt logits of its rows when asked; the
 * last row of each prompt ending in it kept in head_rows. */
static gp_status run_chunk(gp_lane *lane, int S, const gp_prefill_seq *seqs, const long long *off, long long c0,
                           int n, float *prompt_logits)
{
    gp_engine *e = lane->e;
    gp_stage_io io = {.b0 = 0, .nb = n, .batch = &lane->batch};
    GP_TRY(gp_lane_forward(lane, &io));
    const size_t H = (size_t)e->cfg.hidden;
    for (int s = 0; s < S; s++) {
        long long last = off[s] + seqs[s].n - 1;
        if (last >= c0 && last < c0 + n)
            GP_CUDA_TRY(cudaMemcpyAsync(lane->head_rows + (size_t)s * H, lane->resid + (size_t)(last - c0) * H,
                                        sizeof(float) * H, cudaMemcpyDeviceToDevice, lane->stream));
    }
    if (prompt_logits) /* the logits buffer holds max_batch rows: the chunk in groups of that many */
        for (int g = 0; g < n; g += e->p.max_batch) {
            int gn = n - g < e->p.max_batch ? n - g : e->p.max_batch;
            gp_tensor_view r = gp_view_rows(io.resid, g, gn);
            GP_TRY(run_head(lane, &r, prompt_logits + (size_t)(c0 + g) * (size_t)e->cfg.vocab));
        }
    return GP_OK;
}

/* Models whose head size the prefill attention does not serve: every
 * prompt token by token through decode steps (same results, decode speed). */
static gp_status prefill_by_steps(gp_lane *lane, int S, const gp_prefill_seq *seqs, int32_t *next,
                                  float *last_logits, float *prompt_logits)
{
    const size_t V = (size_t)lane->e->cfg.vocab;
    size_t row = 0;
    for (int s = 0; s < S; s++)
        for (int t = 0; t < seqs[s].n; t++, row++) {
            int32_t tok;
            bool last = t == seqs[s].n - 1;
            float *lg = prompt_logits ? prompt_logits + row * V : last && last_logits ? last_logits + s * V : NULL;
            /* a prompt: dense, as every prefill */
            GP_TRY(gp_lane_step(lane, 1, &seqs[s].seq, &seqs[s].tokens[t], &tok, lg, true));
            if (last && lg && last_logits && lg != last_logits + s * V)
                memcpy(last_logits + s * V, lg, sizeof(float) * V);
            if (last && next)
                next[s] = tok;
        }
    return GP_OK;
}

/* The chunks, then the head over each prompt's last row; results copied
 * back and waited for. */
static gp_status run_all(gp_lane *lane, int S, const gp_prefill_seq *seqs, const long long *off, const int *len0,
                         long long total, int32_t *next, float *last_logits, float *prompt_logits)
{
    gp_engine *e = lane->e;
    const int chunk = e->p.prefill_chunk < lane->rows ? e->p.prefill_chunk : lane->rows;
    if (e->p.gemm_tune > 0) { /* the chunk shapes' GEMMs, before the timed part (it synchronises) */
        const int full = total < chunk ? (int)total : chunk, rest = (int)(total % chunk);
        GP_TRY(gp_lane_tune_gemms(lane, full));
        if (rest && rest != full)
            GP_TRY(gp_lane_tune_gemms(lane, rest));
    }
    GP_TRY(reserve_and_upload(lane, S, seqs, len0));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_pf_begin, lane->stream));
    int buf = 0;
    for (long long c0 = 0; c0 < total; c0 += chunk, buf ^= 1) {
        int n = total - c0 < chunk ? (int)(total - c0) : chunk;
        GP_TRY(upload_chunk(lane, buf, S, seqs, off, len0, c0, n));
        GP_TRY(gp_kv_begin_batch(lane->batch.km, lane->stream)); /* behind the chunk's own uploads */
        GP_TRY(run_chunk(lane, S, seqs, off, c0, n, prompt_logits));
        GP_TRY(gp_kv_end_batch(lane->batch.km, lane->stream));
    }
    lane->batch.rows = 0;
    gp_tensor_view last = gp_view_make(lane->head_rows, S, e->cfg.hidden, GP_DTYPE_F32, e->device);
    GP_TRY(run_head(lane, &last, last_logits));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_pf_end, lane->stream));
    GP_CUDA_TRY(cudaMemcpyAsync(lane->next_h, lane->next_d, sizeof(int32_t) * (size_t)S, cudaMemcpyDeviceToHost,
                                lane->stream));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_done, lane->stream));
    GP_TRY(gp_device_event_wait(lane->ev_done, "the end of the prefill"));
    for (int s = 0; s < S; s++) {
        if (next)
            next[s] = lane->next_h[s];
        GP_TRY(gp_engine_kv_advance(e, seqs[s].seq, seqs[s].n));
    }
    return GP_OK;
}

static gp_status lane_prefill(gp_lane *lane, int S, const gp_prefill_seq *seqs, int32_t *next, float *last_logits,
                              float *prompt_logits)
{
    gp_engine *e = lane->e;
    long long total = 0;
    GP_TRY(check_prefill(lane, S, seqs, &total));
    GP_TRY(gp_device_step_gate(lane->stream)); /* fails fast after a sticky error */
    if (!gp_prefill_attn_supports(e->cfg.head_dim))
        return prefill_by_steps(lane, S, seqs, next, last_logits, prompt_logits);
    int *len0 = malloc(sizeof(int) * (size_t)S);             /* [S] tokens each sequence held before */
    long long *off = malloc(sizeof(long long) * (size_t)S);  /* [S] first index in the packed order */
    gp_status st = GP_OK;
    if (!len0 || !off) {
        gp_set_error("prefill: out of host memory for %d prompts", S);
        st = GP_ERR_NO_MEMORY;
    } else {
        long long o = 0;
        for (int s = 0; s < S; s++) {
            len0[s] = gp_kv_len(e->tables, seqs[s].seq);
            off[s] = o;
            o += seqs[s].n;
        }
        st = run_all(lane, S, seqs, off, len0, total, next, last_logits, prompt_logits);
    }
    lane->batch.rows = 0;
    free(len0);
    free(off);
    return st;
}

gp_status gp_engine_prefill_batch(gp_engine *e, int S, const gp_prefill_seq *seqs, int32_t *next,
                                  float *last_logits, float *prompt_logits)
{
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_prefill_batch: engine is NULL");
    return lane_prefill(&e->lane, S, seqs, next, last_logits, prompt_logits);
}

gp_status gp_lane_prefill_batch(gp_lane *lane, int S, const gp_prefill_seq *seqs, int32_t *next,
                                float *last_logits)
{
    if (!lane)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_lane_prefill_batch: lane is NULL");
    GP_TRY(gp_lane_check_features(lane, "gp_lane_prefill_batch"));
    return lane_prefill(lane, S, seqs, next, last_logits, NULL);
}

gp_status gp_engine_prefill(gp_engine *e, int seq, int n, const int32_t *prompt, int32_t *next,
                            float *last_logits)
{
    gp_prefill_seq p = {.seq = seq, .n = n, .tokens = prompt};
    return gp_engine_prefill_batch(e, 1, &p, next, last_logits, NULL);
}

float gp_engine_last_prefill_ms(const gp_engine *e)
{
    float ms = 0.0f;
    if (!e || cudaEventElapsedTime(&ms, e->lane.ev_pf_begin, e->lane.ev_pf_end) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0f;
    }
    return ms;
}

gp_status gp_engine_prefill_breakdown(gp_engine *e, int S, const gp_prefill_seq *seqs, gp_prefill_breakdown *out)
{
    memset(out, 0, sizeof *out);
    if (!e)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_engine_prefill_breakdown: engine is NULL");
    long long total = 0;
    GP_TRY(check_prefill(&e->lane, S, seqs, &total));
    long long chunks = (total + e->p.prefill_chunk - 1) / e->p.prefill_chunk;
    float acc[GP_K_COUNT] = {0};
    /* per chunk the embedding and every layer; the head once, after the last */
    gp_status st = gp_engine_bd_open(
        &e->lane, (int)(chunks * (GP_BD_MARKS_EMBED + GP_BD_MARKS_LAYER * (long long)e->cfg.n_layers) + GP_BD_MARKS_HEAD + 1));
    if (st == GP_OK)
        st = gp_engine_prefill_batch(e, S, seqs, NULL, NULL, NULL);
    if (st == GP_OK)
        st = gp_engine_bd_sum(&e->lane, e->lane.ev_pf_begin, acc);
    gp_engine_bd_close(&e->lane);
    if (st != GP_OK)
        return st;
    *out = (gp_prefill_breakdown){acc[GP_K_EMBED], acc[GP_K_ATTN_NORM] + acc[GP_K_FFN_NORM], acc[GP_K_QKV],
                                  acc[GP_K_ROPE], acc[GP_K_ATTN], acc[GP_K_O], acc[GP_K_GATE_UP],
                                  acc[GP_K_SWIGLU], acc[GP_K_DOWN], acc[GP_K_HEAD], gp_engine_last_prefill_ms(e)};
    return GP_OK;
}
