/* Mixed batches on a lane: prefill-chunk rows of some sequences and decode
 * rows of others in one forward (every GEMM over all rows; the prefill
 * attention over the prefill rows, the decode attention over the decode
 * rows), then the head over each part's last row. The decode step and the
 * prefill chunk are its two pure cases, kept on paths of their own (the
 * step's captured graph, the prefill's chunking) over the same stages. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* The batch's inputs into staging buffer 0 and up: tokens, positions and
 * step-table rows of every row, descriptors of the prefill parts (part i
 * reads step-table row i). Returns the longest decode context. */
static gp_status upload_rows(gp_lane *lane, const gp_batch *b, const int *len0, int *max_len)
{
    GP_TRY(gp_device_event_wait(lane->pf_ev[0], "the batch upload"));
    int32_t *h = lane->pf_h[0];
    const size_t R = (size_t)lane->rows;
    gp_prefill_seq_desc *d = (gp_prefill_seq_desc *)(h + 3 * R);
    gp_stage_batch *bt = &lane->batch;
    int row = 0, ns = 0, max_q = 0, ml = 0;
    for (int i = 0; i < b->n_parts; i++) {
        const gp_batch_part *p = &b->parts[i];
        if (p->kind == GP_BATCH_PREFILL) {
            d[ns++] = (gp_prefill_seq_desc){.q_start = row, .q_len = p->n, .pos0 = len0[i], .table_row = i};
            max_q = p->n > max_q ? p->n : max_q;
        } else {
            ml = len0[i] + 1 > ml ? len0[i] + 1 : ml;
        }
        for (int t = 0; t < p->n; t++, row++) {
            h[row] = p->tokens[t];
            h[R + (size_t)row] = len0[i] + t;
            h[2 * R + (size_t)row] = i;
        }
    }
    bt->rows = row;
    bt->n_seqs = ns;
    bt->prefill_rows = ns ? d[ns - 1].q_start + d[ns - 1].q_len : 0;
    bt->max_q = max_q;
    bt->decode_table0 = ns;
    bt->sparse_rows = 0; /* every projection dense: the sparse kernels serve decode steps */
    GP_TRY(gp_lane_upload_staged(lane, 0));
    *max_len = ml;
    return GP_OK;
}

/* The forward over every row, each part's last row gathered for the head. */
static gp_status forward(gp_lane *lane, const gp_batch *b, int max_len)
{
    gp_engine *e = lane->e;
    const gp_stage_batch *bt = &lane->batch;
    gp_stage_io io = {.b0 = 0, .nb = bt->rows, .max_len = max_len, .batch = bt};
    if (bt->rows > bt->prefill_rows)
        GP_TRY(gp_lane_attn_splits(lane, bt->rows - bt->prefill_rows, max_len, &io.attn_splits));
    GP_TRY(gp_lane_forward(lane, &io));
    const size_t H = (size_t)e->cfg.hidden;
    int row = 0;
    for (int i = 0; i < b->n_parts; i++) {
        row += b->parts[i].n;
        GP_CUDA_TRY(cudaMemcpyAsync(lane->head_rows + (size_t)i * H, lane->resid + (size_t)(row - 1) * H,
                                    sizeof(float) * H, cudaMemcpyDeviceToDevice, lane->stream));
    }
    gp_stage_io head = {.b0 = 0, .nb = b->n_parts, .batch = bt,
                        .resid = gp_view_make(lane->head_rows, b->n_parts, e->cfg.hidden, GP_DTYPE_F32, e->device)};
    return gp_stage_run(lane, GP_STAGE_HEAD, &head);
}

static gp_status run(gp_lane *lane, const gp_batch *b, int *len0, int *ids, int32_t *lens, int32_t *next,
                     float *logits)
{
    gp_engine *e = lane->e;
    const int n = b->n_parts;
    for (int i = 0; i < n; i++) {
        ids[i] = b->parts[i].seq;
        len0[i] = gp_kv_len(e->tables, ids[i]);
        lens[i] = len0[i] + b->parts[i].n;
    }
    for (int i = 0; i < n; i++) /* blocks already reserved stay with their (unchanged) sequences, unused */
        GP_TRY(gp_engine_kv_reserve(e, ids[i], b->parts[i].n));
    gp_kv_memory *km = gp_lane_kv_memory(lane);
    gp_kv_plan_reset(km); /* each part reads its context and writes its new tokens' K/V */
    for (int i = 0; i < n; i++)
        gp_kv_plan_add(km, ids[i], lens[i], len0[i], lens[i]);
    GP_TRY(gp_lane_upload_tables(lane, n, ids, lens, &lane->batch));
    int max_len = 0;
    GP_TRY(upload_rows(lane, b, len0, &max_len));
    lane->batch.km = km;
    GP_TRY(gp_kv_begin_batch(km, lane->stream)); /* behind the batch's own uploads */
    GP_CUDA_TRY(cudaEventRecord(lane->ev_begin, lane->stream));
    GP_TRY(forward(lane, b, max_len));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_end, lane->stream));
    GP_TRY(gp_kv_end_batch(km, lane->stream));
    GP_CUDA_TRY(cudaMemcpyAsync(lane->next_h, lane->next_d, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost,
                                lane->stream));
    if (logits)
        GP_CUDA_TRY(cudaMemcpyAsync(logits, lane->logits, sizeof(float) * (size_t)n * (size_t)e->cfg.vocab,
                                    cudaMemcpyDeviceToHost, lane->stream));
    GP_CUDA_TRY(cudaEventRecord(lane->ev_done, lane->stream));
    GP_TRY(gp_device_event_wait(lane->ev_done, "the end of the mixed batch"));
    for (int i = 0; i < n; i++) {
        if (next)
            next[i] = lane->next_h[i];
        GP_TRY(gp_engine_kv_advance(e, ids[i], b->parts[i].n));
    }
    return GP_OK;
}

gp_status gp_lane_run_batch(gp_lane *lane, const gp_batch *b, int32_t *next, float *logits)
{
    if (!lane)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_lane_run_batch: lane is NULL");
    gp_engine *e = lane->e;
    GP_TRY(gp_lane_check_features(lane, "gp_lane_run_batch"));
    if (e->cf)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_lane_run_batch: the CPU-assisted FFN serves decode steps; a mixed batch "
                "runs every projection dense and would not feed its activity");
    const gp_batch_limits lim = gp_lane_limits(lane, lane->rows);
    long long rows = 0, pre = 0;
    GP_TRY(gp_batch_check(b, &lim, "mixed batch", &rows, &pre));
    if (pre > 0 && !gp_prefill_attn_supports(e->cfg.head_dim))
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_lane_run_batch: prefill parts need the prefill attention, which serves "
                "head sizes " GP_PREFILL_ATTN_HEAD_DIMS ", not %d; prefill them with gp_engine_prefill_batch",
                e->cfg.head_dim);
    GP_TRY(gp_device_step_gate(lane->stream)); /* fails fast after a sticky error */
    const size_t n = (size_t)b->n_parts;
    int *len0 = malloc(sizeof(int) * n), *ids = malloc(sizeof(int) * n);
    int32_t *lens = malloc(sizeof(int32_t) * n);
    gp_status st;
    if (!len0 || !ids || !lens) {
        gp_set_error("mixed batch: out of host memory for %zu parts", n);
        st = GP_ERR_NO_MEMORY;
    } else {
        st = run(lane, b, len0, ids, lens, next, logits);
    }
    lane->batch.rows = 0;
    free(len0);
    free(ids);
    free(lens);
    return st;
}
