/* Lanes of the CUDA engine: what one execution resource owns (stream, GEMM
 * context, attention workspace, activations, batch staging, graph cache,
 * events) over the model state every lane shares. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* The lane's decode-attention parameters for its SMs. */
static gp_decode_attn_params lane_attn_params(const gp_engine *e, int sm_count)
{
    gp_decode_attn_params ap = gp_engine_attn_params(&e->p);
    ap.sm_count = sm_count ? sm_count : e->sm_count;
    return ap;
}

static size_t tab_words(const gp_engine *e)
{
    return (size_t)e->p.max_batch * (size_t)e->max_blocks + 2 * (size_t)e->p.max_batch;
}

gp_status gp_lane_alloc(gp_lane *lane, int rows)
{
    gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    /* R: activation rows (decode rows or prefill tokens); S: sequences */
    size_t R = (size_t)rows, S = (size_t)e->p.max_batch, H = (size_t)c->hidden, QD = (size_t)c->n_heads * c->head_dim;
    size_t F = (size_t)c->ffn;
    lane->rows = rows;
    lane->own_buffers = true;
    /* Each through gp_device_alloc: an out-of-memory message names the buffer
     * and its bytes, and the caller's destroy frees those already made. */
    GP_TRY(gp_device_alloc((void **)&lane->resid, sizeof(float) * R * H, "lane residual [rows][hidden] fp32"));
    /* 16-bit activations (2 bytes in either engine dtype) */
    GP_TRY(gp_device_alloc((void **)&lane->h_attn, 2 * R * H, "lane h_attn [rows][hidden] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->h_ffn, 2 * R * H, "lane h_ffn [rows][hidden] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->qkv, 2 * R * (size_t)gp_config_qkv_rows(c),
                           "lane qkv [rows][qkv_rows] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->q, 2 * R * QD, "lane q [rows][n_heads*head_dim] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->attn, 2 * R * QD, "lane attn [rows][n_heads*head_dim] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->gu, 2 * R * 2 * F, "lane gate_up [rows][2*ffn] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->act, 2 * R * F, "lane act [rows][ffn] 16-bit"));
    GP_TRY(gp_device_alloc((void **)&lane->logits, sizeof(float) * S * (size_t)c->vocab,
                           "lane logits [max_batch][vocab] fp32"));
    GP_TRY(gp_device_alloc((void **)&lane->tok_d, sizeof(int32_t) * S, "lane tokens [max_batch]"));
    GP_TRY(gp_device_alloc((void **)&lane->next_d, sizeof(int32_t) * S, "lane next tokens [max_batch]"));
    GP_TRY(gp_pinned_alloc((void **)&lane->tok_h, sizeof(int32_t) * S, "lane pinned tokens [max_batch]"));
    GP_TRY(gp_pinned_alloc((void **)&lane->next_h, sizeof(int32_t) * S, "lane pinned next tokens [max_batch]"));
    lane->parts = calloc(S, sizeof *lane->parts);
    if (!lane->parts)
        GP_FAIL(GP_ERR_NO_MEMORY, "lane: out of host memory for %zu batch parts", S);
    GP_TRY(gp_device_alloc((void **)&lane->head_rows, sizeof(float) * S * H,
                           "lane prefill last rows [max_batch][hidden] fp32"));
    lane->pf_words = 3 * R + S * sizeof(gp_prefill_seq_desc) / sizeof(int32_t);
    GP_TRY(gp_device_alloc((void **)&lane->pf_d, sizeof(int32_t) * lane->pf_words,
                           "lane batch inputs [3 x rows + 4 x max_batch] int32"));
    for (int i = 0; i < 2; i++) {
        GP_TRY(gp_pinned_alloc((void **)&lane->pf_h[i], sizeof(int32_t) * lane->pf_words,
                               "lane pinned batch inputs [3 x rows + 4 x max_batch] int32"));
        GP_TRY(gp_device_event_create(&lane->pf_ev[i], cudaEventDisableTiming, "lane batch upload event"));
    }
    if (lane != &e->lane) {
        GP_TRY(gp_device_alloc((void **)&lane->tab_d, sizeof(int32_t) * tab_words(e),
                               "lane step tables [max_batch][max_blocks + 2] int32"));
        GP_TRY(gp_pinned_alloc((void **)&lane->tab_h, sizeof(int32_t) * tab_words(e),
                               "lane pinned step tables [max_batch][max_blocks + 2] int32"));
    }
    GP_TRY(gp_device_event_create(&lane->ev_pf_begin, cudaEventDefault, "lane event ev_pf_begin"));
    GP_TRY(gp_device_event_create(&lane->ev_pf_end, cudaEventDefault, "lane event ev_pf_end"));
    GP_TRY(gp_device_event_create(&lane->ev_begin, cudaEventDefault, "lane event ev_begin"));
    GP_TRY(gp_device_event_create(&lane->ev_end, cudaEventDefault, "lane event ev_end"));
    GP_TRY(gp_device_event_create(&lane->ev_done, cudaEventDisableTiming, "lane event ev_done"));
    GP_TRY(gp_engine_attn_ws_bytes(c, &e->p, &lane->attn_ws_bytes));
    if (lane->attn_ws_bytes)
        GP_TRY(gp_device_alloc(&lane->attn_ws, lane->attn_ws_bytes, "decode-attention split workspace"));
    return GP_OK;
}

static void drop_lane_graphs(gp_lane *lane)
{
    for (int i = 0; i < lane->n_graphs; i++)
        cudaGraphExecDestroy(lane->graphs[i].exec);
    lane->n_graphs = 0;
}

void gp_lane_free(gp_lane *lane)
{
    if (lane->stream)
        cudaStreamSynchronize(lane->stream);
    drop_lane_graphs(lane);
    gp_gemm_ctx_destroy(lane->gemm);
    lane->gemm = NULL;
    if (lane->own_buffers) {
        void *dev[] = {lane->resid, lane->h_attn, lane->h_ffn, lane->qkv, lane->q, lane->attn, lane->gu,
                       lane->act, lane->logits, lane->tok_d, lane->next_d, lane->attn_ws, lane->tune_x,
                       lane->tune_y, lane->pf_d, lane->head_rows, lane->tab_d};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            gp_device_free(dev[i]);
        gp_pinned_free(lane->tok_h);
        gp_pinned_free(lane->next_h);
        gp_pinned_free(lane->tab_h);
        free(lane->parts);
        for (int i = 0; i < 2; i++) {
            gp_pinned_free(lane->pf_h[i]);
            if (lane->pf_ev[i]) cudaEventDestroy(lane->pf_ev[i]);
        }
        cudaEvent_t ev[] = {lane->ev_pf_begin, lane->ev_pf_end, lane->ev_begin, lane->ev_end, lane->ev_done};
        for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
            if (ev[i])
                cudaEventDestroy(ev[i]);
    } else {
        gp_device_free(lane->tune_x);
        gp_device_free(lane->tune_y);
    }
    if (lane->own_stream && lane->stream)
        cudaStreamDestroy(lane->stream);
    lane->stream = NULL;
}

void gp_engine_drop_graphs(gp_engine *e)
{
    drop_lane_graphs(&e->lane);
    for (gp_lane *l = e->lanes; l; l = l->next_lane)
        drop_lane_graphs(l);
}

gp_status gp_lane_gemm_create(const gp_engine *e, void *stream, int sms, gp_gemm_ctx **out)
{
    GP_TRY(gp_gemm_ctx_create(stream, sms, out));
    gp_status st = gp_gemm_set_skinny_max_m(*out, e->p.gemm_skinny_max_m);
    if (st != GP_OK) {
        gp_gemm_ctx_destroy(*out);
        *out = NULL;
    }
    return st;
}

gp_status gp_lane_create(gp_engine *e, void *stream, int sm_count, int rows, gp_lane **out)
{
    *out = NULL;
    if (!e || sm_count < 0 || sm_count > e->sm_count)
        GP_FAIL(GP_ERR_INVALID_ARG, "lane: engine %p, %d SMs (allowed 0..%d, 0: the whole device)", (void *)e,
                sm_count, e ? e->sm_count : 0);
    if (rows < 0 || rows > e->lane.rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "lane of %d rows: allowed 0..%d (max(max_batch, prefill_chunk); 0: the "
                "default lane's buffers)", rows, e->lane.rows);
    gp_lane *lane = calloc(1, sizeof *lane);
    if (!lane)
        GP_FAIL(GP_ERR_NO_MEMORY, "lane: out of host memory");
    gp_status st = GP_OK;
    if (rows == 0) { /* the default lane's buffers, scratch and attention workspace */
        *lane = e->lane;
        lane->own_buffers = false;
        lane->n_graphs = 0;
        lane->bd_ev = NULL, lane->bd_class = NULL, lane->bd_n = lane->bd_cap = 0;
        lane->tune_x = NULL, lane->tune_y = NULL, lane->tune_rows = 0;
    }
    lane->e = e;
    lane->gemm = NULL;
    lane->own_stream = stream == NULL;
    lane->stream = (cudaStream_t)stream;
    lane->ap = lane_attn_params(e, sm_count);
    if (lane->own_stream)
        st = gp_device_stream_create(&lane->stream, "lane stream");
    if (st == GP_OK)
        st = gp_lane_gemm_create(e, lane->stream, sm_count, &lane->gemm);
    if (st == GP_OK && rows > 0)
        st = gp_lane_alloc(lane, rows);
    if (st != GP_OK) {
        gp_lane_free(lane);
        free(lane);
        return st;
    }
    lane->next_lane = e->lanes;
    e->lanes = lane;
    *out = lane;
    return GP_OK;
}

void gp_lane_destroy(gp_lane *lane)
{
    if (!lane || lane == &lane->e->lane)
        return;
    for (gp_lane **p = &lane->e->lanes; *p; p = &(*p)->next_lane)
        if (*p == lane) {
            *p = lane->next_lane;
            break;
        }
    gp_lane_free(lane);
    free(lane);
}

gp_lane *gp_engine_lane(gp_engine *e)
{
    return &e->lane;
}

void *gp_lane_stream(const gp_lane *lane)
{
    return lane->stream;
}

gp_status gp_lane_check_features(const gp_lane *lane, const char *who)
{
    const gp_engine *e = lane->e;
    if (lane == &e->lane)
        return GP_OK;
    if (!lane->own_buffers)
        GP_FAIL(GP_ERR_STATE, "%s: a lane made without rows runs stages handed their views, not batches of its "
                "own; create it with rows >= 1", who);
    if (e->km->n_hooks > 0)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: the KV memory has per-call hooks (an offloaded cache copies each "
                "layer's blocks into one staging window per call, a stored-prefix reload waits per layer); run "
                "this call on the default lane", who);
    if (e->cf)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: the CPU-assisted FFN keeps one step's host staging and activity; run "
                "it on the default lane", who);
    if (e->sp)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: the sparse projections' split workspaces are the model state's, one "
                "per side; run sparse steps on the default lane", who);
    return GP_OK;
}

gp_status gp_lane_upload_tables(gp_lane *lane, int S, const int *seq_ids, const int32_t *lens, gp_stage_batch *b)
{
    gp_engine *e = lane->e;
    const int mb = e->max_blocks;
    if (!lane->tab_d) { /* the default lane: the KV cache's step tables */
        int32_t *tab = malloc(sizeof(int32_t) * (size_t)S * (size_t)mb);
        if (!tab)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %d block tables", S);
        for (int s = 0; s < S; s++)
            memcpy(tab + (size_t)s * mb, gp_kv_block_table(e->tables, seq_ids[s]), sizeof(int32_t) * (size_t)mb);
        gp_status st = gp_kv_device_upload(e->kv, S, tab, mb, lens, lane->stream);
        free(tab);
        b->block_tables = b->lens = b->kv_positions = NULL;
        return st;
    }
    /* the previous call ended with a host wait: the staging is free */
    const size_t MB = (size_t)e->p.max_batch;
    int32_t *h = lane->tab_h, *hl = h + MB * (size_t)mb, *hp = hl + MB;
    for (int s = 0; s < S; s++) {
        memcpy(h + (size_t)s * mb, gp_kv_block_table(e->tables, seq_ids[s]), sizeof(int32_t) * (size_t)mb);
        hl[s] = lens[s];
        hp[s] = lens[s] - 1;
    }
    GP_CUDA_TRY(cudaMemcpyAsync(lane->tab_d, h, sizeof(int32_t) * tab_words(e), cudaMemcpyHostToDevice,
                                lane->stream));
    b->block_tables = lane->tab_d;
    b->lens = lane->tab_d + MB * (size_t)mb;
    b->kv_positions = b->lens + MB;
    return GP_OK;
}

gp_status gp_lane_kv_view(const gp_engine *e, const gp_stage_batch *b, int layer, gp_kv_view *out)
{
    GP_TRY(gp_kv_device_view(e->kv, layer, out));
    if (b->block_tables) {
        out->block_tables = b->block_tables;
        out->lens = b->lens;
        out->positions = b->kv_positions;
        out->n_rows = e->p.max_batch;
        out->max_blocks = e->max_blocks;
    }
    return GP_OK;
}

gp_status gp_engine_kv_reserve(gp_engine *e, int seq, int n)
{
    pthread_mutex_lock(&e->kv_lock);
    gp_status st = gp_kv_reserve(e->tables, seq, n);
    pthread_mutex_unlock(&e->kv_lock);
    return st;
}

gp_status gp_engine_kv_advance(gp_engine *e, int seq, int n)
{
    pthread_mutex_lock(&e->kv_lock);
    gp_status st = gp_kv_advance(e->tables, seq, n);
    pthread_mutex_unlock(&e->kv_lock);
    return st;
}

static int seq_len(const void *tables, int seq)
{
    return gp_kv_len((const gp_kv_tables *)tables, seq);
}

gp_batch_limits gp_lane_limits(const gp_lane *lane, int max_rows)
{
    const gp_engine *e = lane->e;
    return (gp_batch_limits){.max_seqs = e->p.max_batch, .max_rows = max_rows, .vocab = e->cfg.vocab,
                             .max_context = e->p.max_context, .seq_len = seq_len, .ctx = e->tables};
}

static size_t q_dim(const gp_config *c)
{
    return (size_t)c->n_heads * (size_t)c->head_dim;
}

gp_status gp_lane_act_view(const gp_lane *lane, gp_act which, int b0, int nb, gp_tensor_view *out)
{
    const gp_engine *e = lane->e;
    const gp_config *c = &e->cfg;
    if (b0 < 0 || nb < 0 || b0 + nb > lane->rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "lane activation view: rows [%d, %d), allowed within [0, %d)", b0, b0 + nb,
                lane->rows);
    gp_tensor_view all;
    switch (which) {
    case GP_ACT_RESID: all = gp_view_make(lane->resid, lane->rows, c->hidden, GP_DTYPE_F32, e->device); break;
    case GP_ACT_QKV:
        all = gp_view_make(lane->qkv, lane->rows, gp_config_qkv_rows(c), e->dtype, e->device);
        break;
    case GP_ACT_ATTN: all = gp_view_make(lane->attn, lane->rows, (int)q_dim(c), e->dtype, e->device); break;
    default: GP_FAIL(GP_ERR_INVALID_ARG, "lane activation %d: allowed 0..2", (int)which);
    }
    *out = gp_view_rows(all, b0, nb);
    return GP_OK;
}

gp_status gp_engine_act_view(const gp_engine *e, gp_act which, int b0, int nb, gp_tensor_view *out)
{
    return gp_lane_act_view(&e->lane, which, b0, nb, out);
}

gp_status gp_lane_attn_splits(const gp_lane *lane, int rows, int max_len, int *out)
{
    const gp_config *c = &lane->e->cfg;
    gp_decode_attn_params ap = lane->ap;
    ap.force_splits = 0;
    return gp_decode_attn_splits(rows, c->n_heads, c->n_kv_heads, c->head_dim, max_len, &ap, out);
}

gp_status gp_lane_attn_kernel(const gp_lane *lane, int rows, int max_len, gp_attn_kernel *out)
{
    const gp_config *c = &lane->e->cfg;
    return gp_decode_attn_kernel(rows, c->n_heads, c->n_kv_heads, c->head_dim, max_len, &lane->ap, out);
}

gp_status gp_lane_forward(gp_lane *lane, gp_stage_io *io)
{
    GP_TRY(gp_lane_act_view(lane, GP_ACT_RESID, io->b0, io->nb, &io->resid));
    GP_TRY(gp_stage_run(lane, GP_STAGE_EMBED, io));
    for (int l = 0; l < lane->e->cfg.n_layers; l++) {
        io->layer = l;
        GP_TRY(gp_stage_run(lane, GP_STAGE_ATTN, io));
        GP_TRY(gp_stage_run(lane, GP_STAGE_FFN, io));
    }
    return GP_OK;
}

gp_status gp_lane_upload_staged(gp_lane *lane, int buf)
{
    const size_t R = (size_t)lane->rows;
    gp_stage_batch *bt = &lane->batch;
    bt->tokens = lane->pf_d;
    bt->positions = lane->pf_d + R;
    bt->table_rows = lane->pf_d + 2 * R;
    bt->seqs = (const gp_prefill_seq_desc *)(lane->pf_d + 3 * R);
    bt->logits = lane->logits;
    bt->next = lane->next_d;
    GP_CUDA_TRY(cudaMemcpyAsync(lane->pf_d, lane->pf_h[buf], sizeof(int32_t) * lane->pf_words,
                                cudaMemcpyHostToDevice, lane->stream));
    GP_CUDA_TRY(cudaEventRecord(lane->pf_ev[buf], lane->stream));
    return GP_OK;
}
