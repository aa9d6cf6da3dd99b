/* Float32 CPU reference of Llama-family decode over the paged KV cache, over
 * weights held exactly as the checkpoint stores them (F32, BF16 or F16): the
 * oracle every GPU kernel and the whole engine are compared against. A step
 * is one forward over the rows of a mixed batch (prefill chunks and decode
 * rows of many sequences), also offered as stages over batch-row ranges, so
 * the pipeline's CPU executor can run attention and FFN of different
 * micro-batches on different threads.
 * Activation sparsity's oracle too: decode steps may mask the projection
 * inputs, and a hook sees them for calibration. */
#include "ref_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Sanity caps so sizes computed in int stay far from overflow. */
#define GP_REF_MAX_SEQS (1 << 20)
#define GP_REF_MAX_BLOCK (1 << 20)

/* Threads and per-thread scratch of one caller. Each thread that runs stages
 * has its own, because a pool serves one caller at a time. */
struct gp_cpu_worker {
    gp_ref_pool *pool;
    int max_context;
    float *scores; /* [n_threads][max_context] per-thread attention row */
};

struct gp_cpu_model {
    const gp_host_weights *w;  /* borrowed */
    gp_config cfg;
    int max_seqs;
    int max_context;           /* tokens per sequence */
    gp_kv_layout layout;
    gp_kv_tables *kv;
    size_t layer_elems;        /* elements of one layer's K (or V) pool */
    float *k_cache;            /* [n_layers][n_blocks][block_size][n_kv_heads][head_dim] */
    float *v_cache;            /* [n_layers][n_blocks][block_size][n_kv_heads][head_dim] */
    float *inv_freq;           /* [head_dim/2] */
    float attn_scale;          /* 1/sqrt(head_dim) rounded to float, as HF */
    gp_dtype act_dt;           /* F32: exact; BF16/F16: round activations where the CUDA engine
                                  stores them in that dtype */
    gp_cpu_worker *worker;     /* used by the whole-step calls */
    float *sparse_t;           /* [n_layers][GP_CPU_PROJ_COUNT] masking thresholds */
    bool sparse_on;            /* gp_cpu_model_set_sparsity gave thresholds */
    gp_cpu_capture_fn capture; /* NULL: none */
    void *capture_ctx;
    gp_cpu_tp tp;              /* tensor parallel: sums the ranks' embeddings and o and down outputs,
                                  gathers their logits; tp 1: one rank */

    /* per-row scratch of rows_cap rows (max_seqs at first, grown by a batch
     * of more rows before it changes anything); stages touch only their rows */
    int rows_cap;
    float *x;                  /* [rows_cap][hidden] residual stream */
    float *h;                  /* [rows_cap][hidden] normed input of a block */
    float *qkv;                /* [rows_cap][qkv_rows] q heads, k heads, v heads */
    float *att;                /* [rows_cap][n_heads*head_dim] attention output */
    float *tmp;                /* [rows_cap][hidden] block output before the residual add */
    float *gu;                 /* [rows_cap][2*ffn] gate, then up */
    float *act;                /* [rows_cap][ffn] swiglu output */
    int *pos;                  /* [rows_cap] position each batch row writes */
    const int32_t **tables;    /* [rows_cap] block table of each batch row */
    int *step_ids;             /* [rows_cap] sequence of each row of the step in progress */
    gp_batch_part *parts;      /* [max_seqs] the batch a decode step or a prefill position builds */

    /* the step in progress, between gp_ref_step_begin and its end */
    int step_B;                /* rows; 0: none */
    int step_parts;            /* parts (sequences) */
    bool step_prefill;         /* it has prefill rows: never masked */
    int *head_rows;            /* [max_seqs] last row of each part: where its logits come from */
};

static void *gp_ref_alloc_floats(uint64_t n, bool *ok)
{
    uint64_t bytes;
    if (!gp_mul_u64(n, sizeof(float), &bytes) || bytes > SIZE_MAX) {
        *ok = false;
        return NULL;
    }
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p)
        *ok = false;
    return p;
}

/* ------------------------------------------------------------ workers */

void gp_cpu_worker_destroy(gp_cpu_worker *wk)
{
    if (!wk)
        return;
    gp_ref_pool_destroy(wk->pool);
    free(wk->scores);
    free(wk);
}

gp_status gp_cpu_worker_create(const gp_cpu_model *m, int n_threads, gp_cpu_worker **out)
{
    if (!m || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_worker_create: model and out are required");
    *out = NULL;
    if (n_threads < 0 || n_threads > GP_REF_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "reference worker threads %d: allowed 0 (default) or 1..%d", n_threads,
                GP_REF_MAX_THREADS);
    gp_cpu_worker *wk = calloc(1, sizeof *wk);
    if (!wk)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference worker: out of memory");
    gp_status st = gp_ref_pool_create(n_threads, &wk->pool);
    if (st != GP_OK) {
        gp_cpu_worker_destroy(wk);
        return st;
    }
    bool ok = true;
    wk->max_context = m->max_context;
    wk->scores = gp_ref_alloc_floats((uint64_t)gp_ref_pool_threads(wk->pool) * (uint64_t)m->max_context, &ok);
    if (!ok) {
        gp_cpu_worker_destroy(wk);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference worker: out of memory for attention scratch");
    }
    *out = wk;
    return GP_OK;
}

/* ------------------------------------------------------------ the model */

void gp_cpu_model_destroy(gp_cpu_model *m)
{
    if (!m)
        return;
    gp_cpu_worker_destroy(m->worker);
    gp_kv_tables_destroy(m->kv);
    void *bufs[] = {m->k_cache, m->v_cache, m->inv_freq, m->x,         m->h,     m->qkv,
                    m->att,     m->tmp,     m->gu,       m->act,       m->pos,   (void *)m->tables,
                    m->step_ids, m->parts,  m->head_rows, m->sparse_t};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(m);
}

static gp_status gp_ref_check_weights(const gp_host_weights *w)
{
    if (!w->embed || !w->final_norm || !w->lm_head || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "reference model: host weights are not allocated "
                                    "(embed, final_norm, lm_head and layers must be set)");
    if (w->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(w->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "reference model: weights dtype %s; allowed F32, BF16 or F16",
                gp_dtype_name(w->dtype));
    for (int l = 0; l < w->cfg.n_layers; l++) {
        const gp_layer_weights *L = &w->layers[l];
        if (!L->attn_norm || !L->wqkv || !L->wo || !L->ffn_norm || !L->w_gate_up || !L->w_down)
            GP_FAIL(GP_ERR_INVALID_ARG, "reference model: layer %d of the host weights has a "
                                        "NULL tensor", l);
        if (w->cfg.qkv_bias && !L->bqkv)
            GP_FAIL(GP_ERR_INVALID_ARG, "reference model: config %s has q/k/v biases but layer %d "
                    "of the host weights has no bqkv", w->cfg.name, l);
    }
    return GP_OK;
}

/* Floats of one layer's K (or V) pool and of all layers' K pools: n_blocks
 * blocks of block_size tokens; 0 on overflow. The one formula of the
 * cache's size, for its allocation and for gp_cpu_model_kv_bytes. */
static int gp_ref_cache_elems(const gp_config *c, uint64_t n_blocks, int block_size, uint64_t *layer_elems,
                              uint64_t *cache_elems)
{
    uint64_t e = 1;
    return gp_mul_u64(e, n_blocks, &e) && gp_mul_u64(e, (uint64_t)block_size, &e) &&
           gp_mul_u64(e, (uint64_t)c->n_kv_heads, &e) && gp_mul_u64(e, (uint64_t)c->head_dim, &e) &&
           (*layer_elems = e, gp_mul_u64(e, (uint64_t)c->n_layers, cache_elems));
}

uint64_t gp_cpu_model_kv_bytes(const gp_config *c, int max_seqs, int max_context, int block_size)
{
    if (!c || max_seqs < 1 || max_context < 1 || block_size < 1)
        return 0;
    uint64_t blocks = (uint64_t)max_seqs * (((uint64_t)max_context + (uint64_t)block_size - 1) / (uint64_t)block_size);
    uint64_t layer, cache, bytes;
    /* K and V, floats */
    if (!gp_ref_cache_elems(c, blocks, block_size, &layer, &cache) || !gp_mul_u64(cache, 2 * sizeof(float), &bytes))
        return UINT64_MAX;
    return bytes;
}

/* One per-row scratch array grown to rows of elem bytes each; on failure
 * the old one stays. */
static bool gp_ref_grow(void **p, int rows, uint64_t elem)
{
    uint64_t bytes;
    if (!gp_mul_u64((uint64_t)rows, elem, &bytes) || bytes > SIZE_MAX)
        return false;
    void *q = realloc(*p, bytes ? (size_t)bytes : 1);
    if (!q)
        return false;
    *p = q;
    return true;
}

/* Per-row scratch for a step of rows rows, grown before the step changes
 * anything (a failure leaves the model as it was). */
static gp_status gp_ref_reserve_rows(gp_cpu_model *m, int rows)
{
    if (rows <= m->rows_cap)
        return GP_OK;
    const gp_config *c = &m->cfg;
    const uint64_t f = sizeof(float);
    bool ok = gp_ref_grow((void **)&m->x, rows, f * (uint64_t)c->hidden) &&
              gp_ref_grow((void **)&m->h, rows, f * (uint64_t)c->hidden) &&
              gp_ref_grow((void **)&m->tmp, rows, f * (uint64_t)c->hidden) &&
              gp_ref_grow((void **)&m->qkv, rows, f * (uint64_t)gp_config_qkv_rows(c)) &&
              gp_ref_grow((void **)&m->att, rows, f * (uint64_t)c->n_heads * (uint64_t)c->head_dim) &&
              gp_ref_grow((void **)&m->gu, rows, f * 2u * (uint64_t)c->ffn) &&
              gp_ref_grow((void **)&m->act, rows, f * (uint64_t)c->ffn) &&
              gp_ref_grow((void **)&m->pos, rows, sizeof *m->pos) &&
              gp_ref_grow((void **)&m->tables, rows, sizeof *m->tables) &&
              gp_ref_grow((void **)&m->step_ids, rows, sizeof *m->step_ids);
    if (!ok)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference model: out of host memory for the scratch of a batch of %d rows "
                "(it holds %d)", rows, m->rows_cap);
    m->rows_cap = rows;
    return GP_OK;
}

gp_status gp_cpu_model_create(const gp_host_weights *w, int max_seqs, int max_context,
                              int block_size, gp_cpu_model **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_model_create: out is NULL");
    *out = NULL;
    if (!w)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_model_create: weights are NULL");
    GP_TRY(gp_config_validate(&w->cfg));
    GP_TRY(gp_ref_check_weights(w));
    const gp_config *c = &w->cfg;
    if (max_seqs < 1 || max_seqs > GP_REF_MAX_SEQS)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_seqs %d is out of range: allowed 1..%d", max_seqs,
                GP_REF_MAX_SEQS);
    if (max_context < 1 || max_context > c->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "max_context %d is out of range: allowed 1..%d (the model's "
                "max_position_embeddings)", max_context, c->max_context);
    if (block_size < 1 || block_size > GP_REF_MAX_BLOCK)
        GP_FAIL(GP_ERR_INVALID_ARG, "block_size %d is out of range: allowed 1..%d", block_size,
                GP_REF_MAX_BLOCK);

    int blocks_per_seq = (int)(((long long)max_context + block_size - 1) / block_size);
    long long n_blocks = (long long)max_seqs * blocks_per_seq;
    if (n_blocks > INT32_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "KV pool of %d sequences x %d blocks does not fit int32 block ids",
                max_seqs, blocks_per_seq);
    gp_kv_layout layout = {
        .n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
        .block_size = block_size, .n_blocks = (int)n_blocks,
    };
    uint64_t layer_elems, cache_elems;
    if (!gp_ref_cache_elems(c, (uint64_t)n_blocks, block_size, &layer_elems, &cache_elems))
        GP_FAIL(GP_ERR_OVERFLOW, "KV cache of %d sequences x %d tokens overflows", max_seqs,
                max_context);

    gp_cpu_model *m = calloc(1, sizeof *m);
    if (!m)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference model: out of memory");
    m->w = w;
    m->cfg = *c;
    m->max_seqs = max_seqs;
    m->max_context = max_context;
    m->layout = layout;
    m->layer_elems = (size_t)layer_elems;
    m->attn_scale = (float)(1.0 / sqrt((double)c->head_dim));
    m->act_dt = GP_DTYPE_F32;

    gp_status st = gp_kv_tables_create(&layout, max_seqs, blocks_per_seq, &m->kv);
    if (st == GP_OK)
        st = gp_cpu_worker_create(m, 0, &m->worker);
    if (st != GP_OK) {
        gp_cpu_model_destroy(m);
        return st;
    }

    uint64_t S = (uint64_t)max_seqs;
    bool ok = true;
    m->k_cache = gp_ref_alloc_floats(cache_elems, &ok);
    m->v_cache = gp_ref_alloc_floats(cache_elems, &ok);
    m->inv_freq = gp_ref_alloc_floats((uint64_t)(c->head_dim / 2), &ok);
    m->parts = calloc(S, sizeof *m->parts);
    m->head_rows = calloc(S, sizeof *m->head_rows);
    /* allocated here so that turning sparsity on cannot fail */
    m->sparse_t = calloc((size_t)c->n_layers * GP_CPU_PROJ_COUNT, sizeof *m->sparse_t);
    if (ok && m->parts && m->head_rows && m->sparse_t && gp_ref_reserve_rows(m, max_seqs) != GP_OK)
        ok = false;
    if (!ok || !m->parts || !m->head_rows || !m->sparse_t) {
        gp_cpu_model_destroy(m);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference model: out of host memory for the KV cache "
                "(%llu floats) and scratch of %d sequences x %d tokens",
                (unsigned long long)(2 * cache_elems), max_seqs, max_context);
    }
    gp_rope_inv_freq(c, m->inv_freq);
    *out = m;
    return GP_OK;
}

gp_status gp_cpu_model_set_tp(gp_cpu_model *m, const gp_cpu_tp *tp)
{
    if (!m || !tp)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_model_set_tp: model or settings NULL");
    const int parts = gp_config_vocab_parts(&m->cfg);
    if (tp->tp < 1 || tp->rank < 0 || tp->rank >= tp->tp || (tp->tp > 1 && (!tp->sum || !tp->gather)) ||
        parts != tp->tp)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_model_set_tp: rank %d of %d: allowed rank 0..tp-1, sum and gather when tp "
                "> 1, and weights cut into tp parts of the vocabulary (these: %d)", tp->rank, tp->tp, parts);
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_model_set_tp: a step of %d rows is in progress", m->step_B);
    m->tp = *tp;
    return GP_OK;
}

void gp_cpu_model_set_act_dtype(gp_cpu_model *m, gp_dtype dt)
{
    if (m && (dt == GP_DTYPE_F32 || gp_dtype_is_half(dt)))
        m->act_dt = dt;
}

gp_status gp_cpu_model_set_threads(gp_cpu_model *m, int n_threads)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_model_set_threads: model is NULL");
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_model_set_threads during a step of %d sequences", m->step_B);
    gp_cpu_worker *wk;
    GP_TRY(gp_cpu_worker_create(m, n_threads, &wk));
    gp_cpu_worker_destroy(m->worker);
    m->worker = wk;
    return GP_OK;
}

int gp_cpu_model_threads(const gp_cpu_model *m)
{
    return m && m->worker ? gp_ref_pool_threads(m->worker->pool) : 0;
}

void gp_cpu_model_set_sparsity(gp_cpu_model *m, const float *thresholds)
{
    if (!m)
        return;
    m->sparse_on = thresholds != NULL;
    if (thresholds)
        memcpy(m->sparse_t, thresholds, (size_t)m->cfg.n_layers * GP_CPU_PROJ_COUNT * sizeof *m->sparse_t);
}

void gp_cpu_model_set_capture(gp_cpu_model *m, gp_cpu_capture_fn fn, void *ctx)
{
    if (!m)
        return;
    m->capture = fn;
    m->capture_ctx = fn ? ctx : NULL;
}

/* --- parallel pieces of a step */

/* gp_sparse_proj's numbering (gp_model.h, GP_CPU_PROJ_COUNT). */
enum { GP_REF_PROJ_QKV = 0, GP_REF_PROJ_O = 1, GP_REF_PROJ_GATE_UP = 2, GP_REF_PROJ_DOWN = 3 };

/* sparse/gp_sparse.h's rule: x takes part iff |x| > t, else it is 0. With
 * t = 0 only zeros and NaNs change (-0 becomes +0), and a zero's product
 * adds nothing to gp_ref_dot's sums either way: each partial sum starts at
 * +0 and, rounding to nearest, a sum of values not all -0 is never -0, so
 * adding w * (+-0) (+-0 for a finite w) leaves it as it was. Hence all-zero
 * thresholds give the dense logits bit for bit, NaN inputs apart. */
static void gp_ref_mask(float *x, size_t n, float t)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(x[i]) > t))
            x[i] = 0.0f;
}

/* A projection's input rows x [rows][width], just before its matmul: seen
 * by the capture hook as they are, then masked in a sparse decode step. */
static void gp_ref_proj_input(const gp_cpu_model *m, int layer, int proj, float *x, int rows, int width)
{
    if (m->capture)
        m->capture(m->capture_ctx, layer, proj, rows, width, x);
    if (m->sparse_on && !m->step_prefill && m->step_B <= GP_CPU_SPARSE_MAX_B)
        gp_ref_mask(x, (size_t)rows * (size_t)width, m->sparse_t[(size_t)layer * GP_CPU_PROJ_COUNT + proj]);
}

/* In a 16-bit activation mode, round x[n] as the CUDA engine stores it. */
static void gp_ref_round(const gp_cpu_model *m, float *x, size_t n)
{
    if (m->act_dt == GP_DTYPE_F32)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = gp_round_to(x[i], m->act_dt);
}

typedef struct gp_ref_matmul_ctx {
    float *out;          /* [B][rows] */
    const void *w;       /* [rows][cols] of wdt */
    gp_dtype wdt;
    const float *x;      /* [B][cols] */
    int B, rows, cols;
} gp_ref_matmul_ctx;

/* Rows are the parallel items; a row is loaded once and applied to all B
 * vectors while it is in L1, which is where batching pays on the CPU. */
static void gp_ref_matmul_task(void *vctx, int begin, int end, int thread)
{
    const gp_ref_matmul_ctx *c = vctx;
    size_t rb = (size_t)c->cols * gp_dtype_size(c->wdt); /* bytes of one row */
    for (int r = begin; r < end; r++) {
        const void *row = (const char *)c->w + (size_t)r * rb;
        int b = 0;
        for (; b + 2 <= c->B; b += 2)
            gp_ref_dot2(row, c->wdt, c->x + (size_t)b * (size_t)c->cols,
                        c->x + (size_t)(b + 1) * (size_t)c->cols, c->cols,
                        &c->out[(size_t)b * (size_t)c->rows + (size_t)r],
                        &c->out[(size_t)(b + 1) * (size_t)c->rows + (size_t)r]);
        if (b < c->B)
            c->out[(size_t)b * (size_t)c->rows + (size_t)r] =
                gp_ref_dot(row, c->wdt, c->x + (size_t)b * (size_t)c->cols, c->cols);
    }
}

/* out[B][rows] = x[B][cols] . w[rows][cols]^T */
static void gp_ref_matmul(gp_cpu_worker *wk, float *out, const void *w, gp_dtype wdt, const float *x, int B,
                          int rows, int cols)
{
    gp_ref_matmul_ctx c = {.out = out, .w = w, .wdt = wdt, .x = x, .B = B, .rows = rows, .cols = cols};
    gp_ref_pool_run(wk->pool, gp_ref_matmul_task, &c, rows, (double)B * rows * cols);
}

typedef struct gp_ref_attn_ctx {
    gp_cpu_model *m;
    gp_cpu_worker *wk;
    int layer;
    int b0;              /* first batch row of the stage */
} gp_ref_attn_ctx;

/* One item = one (batch row, query head): softmax(q.K^T * scale) . V over
 * positions 0..pos, reading K/V through the block table. */
static void gp_ref_attn_task(void *vctx, int begin, int end, int thread)
{
    const gp_ref_attn_ctx *a = vctx;
    gp_cpu_model *m = a->m;
    const gp_config *c = &m->cfg;
    const gp_kv_layout *L = &m->layout;
    int hd = c->head_dim, qkv_rows = gp_config_qkv_rows(c);
    int group = c->n_heads / c->n_kv_heads; /* query heads per KV head */
    const float *kc = m->k_cache + (size_t)a->layer * m->layer_elems;
    const float *vc = m->v_cache + (size_t)a->layer * m->layer_elems;
    float *scores = a->wk->scores + (size_t)thread * (size_t)a->wk->max_context; /* [pos+1] */

    for (int item = begin; item < end; item++) {
        int b = a->b0 + item / c->n_heads, head = item % c->n_heads;
        int kvh = head / group;
        int pos = m->pos[b];
        const int32_t *table = m->tables[b];
        const float *q = m->qkv + (size_t)b * (size_t)qkv_rows + (size_t)head * (size_t)hd;
        float *o = m->att + ((size_t)b * (size_t)c->n_heads + (size_t)head) * (size_t)hd;

        float mx = -INFINITY;
        for (int t = 0; t <= pos; t++) {
            const float *k = kc + gp_kv_offset(L, table[t / L->block_size], t % L->block_size, kvh);
            float s = 0.0f;
            for (int d = 0; d < hd; d++)
                s += q[d] * k[d];
            s *= m->attn_scale;
            scores[t] = s;
            if (s > mx)
                mx = s;
        }
        /* max subtraction keeps expf in range; the denominator is a sum of
         * positives, accumulated in double for the same reason as rmsnorm */
        double sum = 0.0;
        for (int t = 0; t <= pos; t++) {
            scores[t] = expf(scores[t] - mx);
            sum += scores[t];
        }
        float inv = (float)(1.0 / sum);
        for (int d = 0; d < hd; d++)
            o[d] = 0.0f;
        for (int t = 0; t <= pos; t++) {
            const float *v = vc + gp_kv_offset(L, table[t / L->block_size], t % L->block_size, kvh);
            float p = scores[t] * inv;
            for (int d = 0; d < hd; d++)
                o[d] += p * v[d];
        }
    }
}

/* ------------------------------------------------------------ stages */

static void gp_ref_add_rows(const gp_tensor_view *v, const float *add, int nb, int H)
{
    for (int b = 0; b < nb; b++) {
        float *x = (float *)v->data + (size_t)b * (size_t)v->row_stride;
        for (int i = 0; i < H; i++)
            x[i] += add[(size_t)b * H + i];
    }
}

static gp_status gp_ref_check_rows(const gp_cpu_model *m, gp_cpu_worker *wk, int layer, int b0, int nb,
                                   const char *stage)
{
    if (!m || !wk)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s stage: model and worker are required", stage);
    if (m->step_B == 0)
        GP_FAIL(GP_ERR_STATE, "%s stage outside a step: call gp_cpu_step_begin first", stage);
    if (layer < 0 || layer >= m->cfg.n_layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s stage: layer %d, allowed 0..%d", stage, layer, m->cfg.n_layers - 1);
    if (b0 < 0 || nb < 1 || b0 + nb > m->step_B)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s stage: rows [%d, %d) outside the step's batch of %d", stage, b0,
                b0 + nb, m->step_B);
    if (wk->max_context < m->max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s stage: worker made for context %d, model holds %d", stage,
                wk->max_context, m->max_context);
    return GP_OK;
}

/* The residual rows a stage was handed: host f32 [nb][hidden], rows may be
 * strided. */
static gp_status gp_ref_check_resid(const gp_cpu_model *m, const gp_tensor_view *v, int nb, const char *stage)
{
    char who[48];
    snprintf(who, sizeof who, "CPU %s stage", stage);
    return gp_view_check(v, who, "residual", nb, m->cfg.hidden, GP_DTYPE_F32, GP_DEVICE_HOST, false);
}

static float *gp_ref_row(const gp_tensor_view *v, int r)
{
    return (float *)v->data + (size_t)r * (size_t)v->row_stride;
}

static gp_status gp_cpu_attn_stage(gp_cpu_model *m, gp_cpu_worker *wk, const gp_stage_io *io)
{
    const int layer = io->layer, b0 = io->b0, nb = io->nb;
    GP_TRY(gp_ref_check_rows(m, wk, layer, b0, nb, "attention"));
    GP_TRY(gp_ref_check_resid(m, &io->resid, nb, "attention"));
    const gp_config *c = &m->cfg;
    const gp_layer_weights *lw = &m->w->layers[layer];
    const gp_dtype wdt = m->w->dtype;
    const gp_kv_layout *L = &m->layout;
    int H = c->hidden, hd = c->head_dim, qkv_rows = gp_config_qkv_rows(c);
    int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    float *kc = m->k_cache + (size_t)layer * m->layer_elems;
    float *vc = m->v_cache + (size_t)layer * m->layer_elems;
    float *h = m->h + (size_t)b0 * H, *qkv = m->qkv + (size_t)b0 * qkv_rows;
    float *att = m->att + (size_t)b0 * q_dim, *tmp = m->tmp + (size_t)b0 * H;

    for (int b = 0; b < nb; b++)
        gp_ref_rmsnorm(h + (size_t)b * H, gp_ref_row(&io->resid, b), lw->attn_norm, wdt, H, c->norm_eps);
    gp_ref_round(m, h, (size_t)nb * H);
    gp_ref_proj_input(m, layer, GP_REF_PROJ_QKV, h, nb, H);
    gp_ref_matmul(wk, qkv, lw->wqkv, wdt, h, nb, qkv_rows, H);
    gp_ref_round(m, qkv, (size_t)nb * qkv_rows);
    if (c->qkv_bias) {
        /* HF: the Linear's bias added in fp32 to the projection, before RoPE.
         * The engine rounds the GEMM output (above) and adds the bias inside
         * its RoPE + KV append kernel: q and k are rounded once, after RoPE
         * (below), v once after the add: round(round(Wx) + b). */
        for (int b = 0; b < nb; b++) {
            float *row = qkv + (size_t)b * (size_t)qkv_rows;
            for (int i = 0; i < qkv_rows; i++)
                row[i] += gp_ref_weight(lw->bqkv, wdt, (size_t)i);
            gp_ref_round(m, row + q_dim + kv_dim, (size_t)kv_dim);
        }
    }
    long long ctx_total = 0; /* attention work of this stage, for the pool */
    for (int b = b0; b < b0 + nb; b++) {
        float *q = m->qkv + (size_t)b * (size_t)qkv_rows; /* [n_heads][hd] */
        float *k = q + q_dim;                              /* [n_kv_heads][hd] */
        float *v = k + kv_dim;                             /* [n_kv_heads][hd] */
        int p = m->pos[b];
        gp_ref_rope(q, c->n_heads, hd, p, m->inv_freq);
        gp_ref_rope(k, c->n_kv_heads, hd, p, m->inv_freq);
        gp_ref_round(m, q, (size_t)q_dim + (size_t)kv_dim); /* q and k, as the RoPE kernel writes them */
        int block = m->tables[b][p / L->block_size], slot = p % L->block_size;
        size_t off = gp_kv_offset(L, block, slot, 0); /* heads of one slot are contiguous */
        memcpy(kc + off, k, (size_t)kv_dim * sizeof(float));
        memcpy(vc + off, v, (size_t)kv_dim * sizeof(float));
        ctx_total += p + 1;
    }
    gp_ref_attn_ctx actx = {.m = m, .wk = wk, .layer = layer, .b0 = b0};
    gp_ref_pool_run(wk->pool, gp_ref_attn_task, &actx, nb * c->n_heads, 2.0 * (double)ctx_total * c->n_heads * hd);
    gp_ref_round(m, att, (size_t)nb * q_dim);
    gp_ref_proj_input(m, layer, GP_REF_PROJ_O, att, nb, q_dim);
    gp_ref_matmul(wk, tmp, lw->wo, wdt, att, nb, H, q_dim);
    if (m->tp.tp > 1)
        GP_TRY(m->tp.sum(m->tp.ctx, tmp, (size_t)nb * (size_t)H));
    gp_ref_add_rows(&io->resid, tmp, nb, H);
    return GP_OK;
}

static gp_status gp_cpu_ffn_stage(gp_cpu_model *m, gp_cpu_worker *wk, const gp_stage_io *io)
{
    const int layer = io->layer, b0 = io->b0, nb = io->nb;
    GP_TRY(gp_ref_check_rows(m, wk, layer, b0, nb, "FFN"));
    GP_TRY(gp_ref_check_resid(m, &io->resid, nb, "FFN"));
    const gp_config *c = &m->cfg;
    const gp_layer_weights *lw = &m->w->layers[layer];
    const gp_dtype wdt = m->w->dtype;
    int H = c->hidden, F = c->ffn;
    float *h = m->h + (size_t)b0 * H, *tmp = m->tmp + (size_t)b0 * H;
    float *gu = m->gu + (size_t)b0 * 2 * F, *act = m->act + (size_t)b0 * F;

    for (int b = 0; b < nb; b++)
        gp_ref_rmsnorm(h + (size_t)b * H, gp_ref_row(&io->resid, b), lw->ffn_norm, wdt, H, c->norm_eps);
    gp_ref_round(m, h, (size_t)nb * H);
    gp_ref_proj_input(m, layer, GP_REF_PROJ_GATE_UP, h, nb, H);
    gp_ref_matmul(wk, gu, lw->w_gate_up, wdt, h, nb, 2 * F, H);
    gp_ref_round(m, gu, (size_t)nb * 2 * F);
    for (int b = 0; b < nb; b++) {
        const float *gate = gu + (size_t)b * 2 * (size_t)F;
        gp_ref_swiglu(act + (size_t)b * (size_t)F, gate, gate + F, F);
    }
    gp_ref_round(m, act, (size_t)nb * F);
    gp_ref_proj_input(m, layer, GP_REF_PROJ_DOWN, act, nb, F);
    gp_ref_matmul(wk, tmp, lw->w_down, wdt, act, nb, H, F);
    if (m->tp.tp > 1)
        GP_TRY(m->tp.sum(m->tp.ctx, tmp, (size_t)nb * (size_t)H));
    gp_ref_add_rows(&io->resid, tmp, nb, H);
    return GP_OK;
}

gp_status gp_cpu_stage(gp_cpu_model *m, gp_cpu_worker *wk, gp_stage_kind kind, const gp_stage_io *io)
{
    if (!io)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_stage: io is NULL");
    if (io->x.rows || io->y.rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU %s stage: it reads and writes the residual only; x has %d rows and y "
                "%d (both must be empty)", gp_stage_kind_name(kind), (int)io->x.rows, (int)io->y.rows);
    switch (kind) {
    case GP_STAGE_ATTN: return gp_cpu_attn_stage(m, wk, io);
    case GP_STAGE_FFN: return gp_cpu_ffn_stage(m, wk, io);
    default:
        GP_FAIL(GP_ERR_UNSUPPORTED, "CPU reference: stage '%s' is not a CPU stage (attn and ffn are; the step's "
                "ends are gp_cpu_step_begin and gp_cpu_step_end)", gp_stage_kind_name(kind));
    }
}

gp_status gp_cpu_resid_view(const gp_cpu_model *m, int b0, int nb, gp_tensor_view *out)
{
    if (!m || !out || b0 < 0 || nb < 0 || b0 + nb > m->rows_cap)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_resid_view: rows [%d, %d) of a model whose scratch holds %d rows",
                b0, b0 + nb, m ? m->rows_cap : 0);
    *out = gp_view_rows(gp_view_make(m->x, m->rows_cap, m->cfg.hidden, GP_DTYPE_F32, GP_DEVICE_HOST), b0, nb);
    return GP_OK;
}

static int gp_ref_seq_len(const void *ctx, int seq)
{
    return gp_kv_len(((const gp_cpu_model *)ctx)->kv, seq);
}

/* The one input check (gp_batch_check) against this model: max_rows 0 for
 * a batch whose rows are not held at once (a prefill runs position by
 * position), else the most rows a batch may have: each part fits its
 * sequence, so max_seqs x max_context at most, capped to int. */
static gp_status gp_ref_batch_check(const gp_cpu_model *m, const gp_batch *b, const char *who, bool rows_held,
                                    long long *rows, long long *prefill_rows)
{
    long long cap = (long long)m->max_seqs * m->max_context;
    gp_batch_limits lim = {.max_seqs = m->max_seqs, .max_rows = !rows_held ? 0 : cap > INT32_MAX ? INT32_MAX : (int)cap,
                           .vocab = m->cfg.vocab, .max_context = m->max_context, .seq_len = gp_ref_seq_len,
                           .ctx = m};
    return gp_batch_check(b, &lim, who, rows, prefill_rows);
}

/* Checks the batch and grows the scratch before any state changes, so a
 * refused batch leaves every sequence as it was; then reserves KV room
 * (reserved blocks stay with their sequence and are reused by its next
 * step), lays the rows out (row r of a part of sequence s at position
 * len(s) + r) and embeds them. A batch with prefill rows is never masked. */
static gp_status gp_ref_step_begin(gp_cpu_model *m, const gp_batch *b, const char *who)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model is NULL", who);
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "%s: a step of %d rows is in progress: end or abort it first", who, m->step_B);
    long long rows, pre;
    GP_TRY(gp_ref_batch_check(m, b, who, true, &rows, &pre));
    GP_TRY(gp_ref_reserve_rows(m, (int)rows));
    if (m->cfg.vocab_parts > 1 && m->tp.tp != m->cfg.vocab_parts)
        GP_FAIL(GP_ERR_STATE, "%s: the weights hold one of %d parts of the vocabulary, but the model runs as rank %d "
                "of %d (gp_cpu_model_set_tp)", who, m->cfg.vocab_parts, m->tp.rank, m->tp.tp);
    const int H = m->cfg.hidden, vrows = gp_config_vocab_rows(&m->cfg);
    const long long lo = (long long)m->tp.rank * vrows;
    int r = 0;
    for (int i = 0; i < b->n_parts; i++) {
        const gp_batch_part *p = &b->parts[i];
        GP_TRY(gp_kv_reserve(m->kv, p->seq, p->n));
        const int len = gp_kv_len(m->kv, p->seq);
        const int32_t *table = gp_kv_block_table(m->kv, p->seq);
        for (int t = 0; t < p->n; t++, r++) {
            m->pos[r] = len + t;
            m->tables[r] = table;
            m->step_ids[r] = p->seq;
            const long long id = (long long)p->tokens[t] - lo; /* the row in this part of the vocabulary */
            float *x = m->x + (size_t)r * (size_t)H;
            for (int k = 0; k < H; k++)
                x[k] = id < 0 || id >= vrows ? 0.0f : gp_ref_weight(m->w->embed, m->w->dtype, (size_t)id * H + k);
        }
        m->head_rows[i] = r - 1;
    }
    if (m->tp.tp > 1) /* each rank embedded its part's tokens alone */
        GP_TRY(m->tp.sum(m->tp.ctx, m->x, (size_t)rows * (size_t)H));
    m->step_B = (int)rows;
    m->step_parts = b->n_parts;
    m->step_prefill = pre > 0;
    return GP_OK;
}

gp_status gp_cpu_step_begin_batch(gp_cpu_model *m, const gp_batch *b)
{
    return gp_ref_step_begin(m, b, "gp_cpu_step_begin_batch");
}

/* One part per row of a decode step, in the model's parts array. */
static gp_batch gp_ref_decode_batch(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens)
{
    int n = B < 0 ? 0 : B > m->max_seqs ? m->max_seqs : B;
    for (int i = 0; i < n && seq_ids && tokens; i++)
        m->parts[i] = (gp_batch_part){.seq = seq_ids[i], .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tokens[i]};
    /* an out-of-range B or a NULL array is refused by the check without reading the parts */
    return (gp_batch){.n_parts = B, .parts = seq_ids && tokens ? m->parts : NULL};
}

gp_status gp_cpu_step_begin(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_step_begin: model is NULL");
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_step_begin: a step of %d rows is in progress: end or abort it first",
                m->step_B);
    gp_batch b = gp_ref_decode_batch(m, B, seq_ids, tokens);
    return gp_ref_step_begin(m, &b, "gp_cpu_step_begin");
}

/* Tensor parallel head: this rank's part of the vocabulary's logits of
 * n_head rows into its segment, every rank's gathered, then in vocabulary
 * order into logits [n_head][vocab]. */
static gp_status gp_ref_head_part(gp_cpu_model *m, gp_cpu_worker *wk, int n_head, float *logits)
{
    const gp_config *c = &m->cfg;
    const size_t seg = (size_t)n_head * (size_t)gp_config_vocab_rows(c);
    /* the last part's tail rows are padding: its logits stop at the vocabulary's end */
    const int n = gp_vocab_part_tokens(c->vocab, m->tp.tp, m->tp.rank);
    float *buf = calloc((size_t)m->tp.tp * seg, sizeof *buf);
    if (!buf)
        GP_FAIL(GP_ERR_NO_MEMORY, "tensor parallel head: %zu logits", (size_t)m->tp.tp * seg);
    gp_ref_matmul(wk, buf + (size_t)m->tp.rank * seg, m->w->lm_head, m->w->dtype, m->h, n_head, n, c->hidden);
    gp_status st = m->tp.gather(m->tp.ctx, buf, seg);
    if (st == GP_OK)
        gp_vocab_in_order(buf, logits, n_head, c->vocab, m->tp.tp);
    free(buf);
    return st;
}

/* Closes the step: the LM head over the last rows of its first n_head parts
 * into logits [n_head][vocab] (a prefill position puts the parts whose
 * logits it keeps first), then every row's KV length advanced. */
static gp_status gp_ref_step_finish(gp_cpu_model *m, gp_cpu_worker *wk, const gp_tensor_view *resid, int n_head,
                                    float *logits)
{
    const gp_config *c = &m->cfg;
    int B = m->step_B, H = c->hidden;
    GP_TRY(gp_ref_check_resid(m, resid, B, "head"));
    if (n_head > 0) {
        for (int i = 0; i < n_head; i++)
            gp_ref_rmsnorm(m->h + (size_t)i * H, gp_ref_row(resid, m->head_rows[i]), m->w->final_norm,
                           m->w->dtype, H, c->norm_eps);
        gp_ref_round(m, m->h, (size_t)n_head * H);
        if (m->tp.tp > 1)
            GP_TRY(gp_ref_head_part(m, wk, n_head, logits));
        else
            gp_ref_matmul(wk, logits, m->w->lm_head, m->w->dtype, m->h, n_head, c->vocab, H);
    }
    m->step_B = 0;
    for (int b = 0; b < B; b++)
        GP_TRY(gp_kv_advance(m->kv, m->step_ids[b], 1));
    return GP_OK;
}

gp_status gp_cpu_step_end(gp_cpu_model *m, gp_cpu_worker *wk, const gp_tensor_view *resid, float *logits)
{
    if (!m || !wk || !resid)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_step_end: model, worker and residual view are required");
    if (!m->step_B)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_step_end without a step in progress");
    return gp_ref_step_finish(m, wk, resid, logits ? m->step_parts : 0, logits);
}

void gp_cpu_step_abort(gp_cpu_model *m)
{
    if (m)
        m->step_B = 0;
}

/* The whole step on the model's own worker; the LM head runs over the last
 * rows of the first n_head parts only (none for a prefill position that
 * keeps no logits). */
static gp_status gp_ref_step(gp_cpu_model *m, const gp_batch *b, const char *who, int n_head, float *logits)
{
    GP_TRY(gp_ref_step_begin(m, b, who));
    gp_stage_io io = {.b0 = 0, .nb = m->step_B};
    gp_status st = gp_cpu_resid_view(m, 0, m->step_B, &io.resid);
    for (int l = 0; l < m->cfg.n_layers && st == GP_OK; l++) {
        io.layer = l;
        st = gp_cpu_attn_stage(m, m->worker, &io);
        if (st == GP_OK)
            st = gp_cpu_ffn_stage(m, m->worker, &io);
    }
    if (st != GP_OK) {
        gp_cpu_step_abort(m);
        return st;
    }
    return gp_ref_step_finish(m, m->worker, &io.resid, n_head, logits);
}

gp_status gp_cpu_decode_step(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens,
                             float *logits)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_decode_step: model is NULL");
    if (!logits)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_decode_step: logits must not be NULL");
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_decode_step: a step of %d rows is in progress: end or abort it first",
                m->step_B);
    gp_batch b = gp_ref_decode_batch(m, B, seq_ids, tokens);
    return gp_ref_step(m, &b, "gp_cpu_decode_step", B, logits);
}

gp_status gp_cpu_run_batch(gp_cpu_model *m, const gp_batch *b, int32_t *next, float *logits)
{
    const char *who = "gp_cpu_run_batch";
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model is NULL", who);
    /* the logits the greedy tokens come from, kept or not: scratch taken
     * before the step so that running out of it changes nothing */
    float *lg = logits;
    if (!lg && next) {
        bool ok = true;
        int n = b && b->n_parts > 0 && b->n_parts <= m->max_seqs ? b->n_parts : 1;
        lg = gp_ref_alloc_floats((uint64_t)n * (uint64_t)m->cfg.vocab, &ok);
        if (!ok)
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of host memory for %d x %d logits", who, n, m->cfg.vocab);
    }
    gp_status st = gp_ref_step(m, b, who, lg && b ? b->n_parts : 0, lg);
    for (int i = 0; st == GP_OK && next && i < b->n_parts; i++)
        next[i] = gp_argmax(lg + (size_t)i * (size_t)m->cfg.vocab, m->cfg.vocab);
    if (lg != logits)
        free(lg);
    return st;
}

/* Position by position: step i batches every prompt that has a token at i,
 * each a prefill part of one token. Rows of a batch never mix
 * (gp_ref_pool_run, gp_ref_dot2), so each prompt's logits are those of its
 * own prefill bit for bit. */
gp_status gp_cpu_prefill_batch(gp_cpu_model *m, int S, const gp_prefill_seq *seqs, float *last_logits,
                               float *prompt_logits)
{
    const char *who = "gp_cpu_prefill_batch";
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model is NULL", who);
    if (m->step_B)
        GP_FAIL(GP_ERR_STATE, "%s: a step of %d rows is in progress: end or abort it first", who, m->step_B);
    /* everything is checked before anything changes, so a refused call
     * leaves every sequence as it was */
    int max_n = 0;
    {
        bool in_range = S >= 1 && S <= m->max_seqs && seqs;
        for (int s = 0; in_range && s < S; s++) {
            m->parts[s] = (gp_batch_part){.seq = seqs[s].seq, .kind = GP_BATCH_PREFILL, .n = seqs[s].n,
                                          .tokens = seqs[s].tokens};
            if (seqs[s].n > max_n)
                max_n = seqs[s].n;
        }
        gp_batch all = {.n_parts = S, .parts = seqs ? m->parts : NULL}; /* parts read only when S is in range */
        GP_TRY(gp_ref_batch_check(m, &all, who, false, NULL, NULL));
    }
    const size_t V = (size_t)m->cfg.vocab;
    bool ok = true;
    int *row_prompt = malloc((size_t)S * sizeof *row_prompt); /* [S] prompt of each part of a position */
    size_t *first = malloc((size_t)S * sizeof *first);    /* [S] prompt_logits row of each prompt's token 0 */
    float *lg = last_logits || prompt_logits ? gp_ref_alloc_floats((uint64_t)S * V, &ok) : NULL; /* [S][vocab] */
    gp_status st = GP_OK;
    if (!ok || !row_prompt || !first) {
        gp_set_error("%s of %d prompts: out of host memory for its %d x %zu logits scratch", who, S, S, V);
        st = GP_ERR_NO_MEMORY;
    }
    /* room for whole prompts up front: no step can then run out of it midway */
    size_t row = 0;
    for (int s = 0; s < S && st == GP_OK; s++) {
        first[s] = row;
        row += (size_t)seqs[s].n;
        st = gp_kv_reserve(m->kv, seqs[s].seq, seqs[s].n);
    }
    for (int i = 0; i < max_n && st == GP_OK; i++) {
        /* parts whose logits are kept first: the head runs over a leading range */
        int B = 0, n_head = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int s = 0; s < S; s++) {
                if (seqs[s].n <= i)
                    continue;
                bool head = prompt_logits || (last_logits && i == seqs[s].n - 1);
                if (head != (pass == 0))
                    continue;
                m->parts[B] = (gp_batch_part){.seq = seqs[s].seq, .kind = GP_BATCH_PREFILL, .n = 1,
                                              .tokens = &seqs[s].tokens[i]};
                row_prompt[B++] = s;
                n_head += head;
            }
        gp_batch pos = {.n_parts = B, .parts = m->parts};
        st = gp_ref_step(m, &pos, who, n_head, lg);
        for (int b = 0; b < n_head && st == GP_OK; b++) {
            int s = row_prompt[b];
            const float *src = lg + (size_t)b * V;
            if (prompt_logits)
                memcpy(prompt_logits + (first[s] + (size_t)i) * V, src, V * sizeof *src);
            if (last_logits && i == seqs[s].n - 1)
                memcpy(last_logits + (size_t)s * V, src, V * sizeof *src);
        }
    }
    free(row_prompt), free(first), free(lg);
    return st;
}

gp_status gp_cpu_prefill(gp_cpu_model *m, int seq, int n, const int32_t *prompt, float *last_logits)
{
    gp_prefill_seq p = {.seq = seq, .n = n, .tokens = prompt};
    return gp_cpu_prefill_batch(m, 1, &p, last_logits, NULL);
}

void gp_cpu_reset_seq(gp_cpu_model *m, int seq)
{
    if (!m || seq < 0 || seq >= m->max_seqs)
        return;
    gp_kv_release(m->kv, seq);
}

gp_ref_kv gp_ref_kv_of(gp_cpu_model *m)
{
    return (gp_ref_kv){.kv = m->kv, .k = m->k_cache, .v = m->v_cache, .layer_elems = m->layer_elems,
                       .max_seqs = m->max_seqs, .max_context = m->max_context, .stepping = m->step_B != 0};
}

const gp_config *gp_cpu_model_config(const gp_cpu_model *m)
{
    return &m->cfg;
}

int gp_cpu_model_max_seqs(const gp_cpu_model *m)
{
    return m->max_seqs;
}
