/* Float32 CPU reference of Llama decode over the paged KV cache: the oracle
 * every GPU kernel and the whole engine are compared against. */
#include "gp_model.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Matvec rows and attention heads are spread over a small thread pool made in
 * gp_cpu_model_create (online CPUs, at most 16; GP_REF_THREADS=N overrides).
 * Results are bitwise the same for any thread count and any batch
 * composition. One model must not be used from two threads at once. */

/* Below this many multiply-adds a parallel region costs more than it saves;
 * the result does not depend on it (see gp_ref_pool_run). */
#define GP_REF_PAR_MIN_WORK 65536
#define GP_REF_MAX_THREADS 16
/* Sanity caps so sizes computed in int stay far from overflow. */
#define GP_REF_MAX_SEQS (1 << 20)
#define GP_REF_MAX_BLOCK (1 << 20)

/* ------------------------------------------------------------ thread pool */

/* A task processes items [begin, end) on thread `thread` (0 = the caller). */
typedef void (*gp_ref_task)(void *ctx, int begin, int end, int thread);

typedef struct gp_ref_pool gp_ref_pool;
typedef struct gp_ref_worker {
    gp_ref_pool *pool;
    int index; /* 1..n_threads-1; slice 0 belongs to the caller */
} gp_ref_worker;

struct gp_ref_pool {
    int n_threads;             /* workers + the calling thread */
    pthread_t *threads;        /* [n_threads - 1] */
    gp_ref_worker *workers;    /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* workers wait for a new generation */
    pthread_cond_t done;       /* the caller waits for pending == 0 */
    unsigned long generation;  /* bumped once per parallel region */
    int pending;               /* workers still inside the current region */
    bool quit;
    gp_ref_task fn;
    void *ctx;
    int n_items;
    bool mu_ok;
};

/* Thread t always gets the same contiguous slice, so which thread computes an
 * item is fixed; and each item is computed by exactly one thread with the
 * same code, so results are identical for every thread count. */
static void gp_ref_slice(int n_items, int n_threads, int t, int *begin, int *end)
{
    *begin = (int)((long long)n_items * t / n_threads);
    *end = (int)((long long)n_items * (t + 1) / n_threads);
}

static void *gp_ref_worker_main(void *arg)
{
    gp_ref_worker *wk = arg;
    gp_ref_pool *p = wk->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->quit)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        gp_ref_task fn = p->fn;
        void *ctx = p->ctx;
        int n = p->n_items;
        pthread_mutex_unlock(&p->mu);
        int b, e;
        gp_ref_slice(n, p->n_threads, wk->index, &b, &e);
        if (b < e)
            fn(ctx, b, e, wk->index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void gp_ref_pool_destroy(gp_ref_pool *p)
{
    if (!p)
        return;
    if (p->mu_ok) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads - 1; i++)
            pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}

/* Threads: GP_REF_THREADS (1..16) if set, else the online CPUs, capped at 16.
 * A thread that cannot be started only makes the pool smaller. */
static gp_status gp_ref_pool_create(gp_ref_pool **out)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("GP_REF_THREADS");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (*end != '\0' || v < 1 || v > GP_REF_MAX_THREADS)
            GP_FAIL(GP_ERR_INVALID_ARG, "GP_REF_THREADS='%s' is not an integer in 1..%d", env,
                    GP_REF_MAX_THREADS);
        n = v;
    }
    if (n < 1)
        n = 1;
    if (n > GP_REF_MAX_THREADS)
        n = GP_REF_MAX_THREADS;

    gp_ref_pool *p = calloc(1, sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: out of memory");
    p->threads = calloc((size_t)n, sizeof *p->threads);
    p->workers = calloc((size_t)n, sizeof *p->workers);
    if (!p->threads || !p->workers) {
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: out of memory");
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_cond_init failed");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_cond_init failed");
    }
    p->mu_ok = true;
    p->n_threads = 1;
    for (int i = 1; i < n; i++) {
        p->workers[i - 1] = (gp_ref_worker){.pool = p, .index = i};
        /* n_threads is read by workers only after a region starts, by which
         * time it is final. */
        if (pthread_create(&p->threads[i - 1], NULL, gp_ref_worker_main, &p->workers[i - 1]) != 0)
            break;
        p->n_threads = i + 1;
    }
    *out = p;
    return GP_OK;
}

/* Run fn over n_items; in parallel only when work (multiply-adds, roughly)
 * makes it worth waking the workers. */
static void gp_ref_pool_run(gp_ref_pool *p, gp_ref_task fn, void *ctx, int n_items, double work)
{
    if (n_items <= 0)
        return;
    if (p->n_threads == 1 || n_items < p->n_threads || work < GP_REF_PAR_MIN_WORK) {
        fn(ctx, 0, n_items, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    int b, e;
    gp_ref_slice(n_items, p->n_threads, 0, &b, &e);
    if (b < e)
        fn(ctx, b, e, 0);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------------------ operations */

/* Dot product of a bf16 row with a float vector. Sixteen independent partial
 * sums break the add dependency chain and fill four SSE (two AVX) lanes; the
 * row is widened 16 values at a time. The summation order is fixed, so every
 * caller (single vector, batch, any thread) gets the same bits. */
static float gp_ref_dot_bf16(const gp_bf16 *w, const float *x, int n)
{
    float acc[16] = {0}; /* [16] partial sums, lane k takes elements j + k */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        float wf[16]; /* [16] this chunk of the row in f32 */
        for (int k = 0; k < 16; k++)
            wf[k] = gp_bf16_to_f32(w[j + k]);
        for (int k = 0; k < 16; k++)
            acc[k] += wf[k] * x[j + k];
    }
    float tail = 0.0f;
    for (; j < n; j++)
        tail += gp_bf16_to_f32(w[j]) * x[j];
    for (int k = 0; k < 8; k++) /* pairwise fold: 16 -> 8 -> 4 -> 2 -> 1 */
        acc[k] += acc[k + 8];
    for (int k = 0; k < 4; k++)
        acc[k] += acc[k + 4];
    return ((acc[0] + acc[2]) + (acc[1] + acc[3])) + tail;
}

/* Two dot products sharing one widening of the row: batch rows cost one
 * conversion instead of two. Each sum is formed exactly as in
 * gp_ref_dot_bf16 (same lanes, same fold), so a sequence gets the same bits
 * whether it is decoded alone or beside another. */
static void gp_ref_dot2_bf16(const gp_bf16 *w, const float *x0, const float *x1, int n, float *o0,
                             float *o1)
{
    float a0[16] = {0}, a1[16] = {0}; /* [16] partial sums of x0, of x1 */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        float wf[16]; /* [16] this chunk of the row in f32 */
        for (int k = 0; k < 16; k++)
            wf[k] = gp_bf16_to_f32(w[j + k]);
        for (int k = 0; k < 16; k++) {
            a0[k] += wf[k] * x0[j + k];
            a1[k] += wf[k] * x1[j + k];
        }
    }
    float t0 = 0.0f, t1 = 0.0f;
    for (; j < n; j++) {
        float wv = gp_bf16_to_f32(w[j]);
        t0 += wv * x0[j];
        t1 += wv * x1[j];
    }
    for (int k = 0; k < 8; k++)
        a0[k] += a0[k + 8], a1[k] += a1[k + 8];
    for (int k = 0; k < 4; k++)
        a0[k] += a0[k + 4], a1[k] += a1[k + 4];
    *o0 = ((a0[0] + a0[2]) + (a0[1] + a0[3])) + t0;
    *o1 = ((a1[0] + a1[2]) + (a1[1] + a1[3])) + t1;
}

void gp_ref_matvec(float *out, const gp_bf16 *w, const float *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        out[r] = gp_ref_dot_bf16(w + (size_t)r * (size_t)cols, x, cols);
}

/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight. The sum
 * of squares is accumulated in double: a positive sum of up to 8192 terms
 * loses ~1e-4 relative in float, and the oracle should not carry that. */
void gp_ref_rmsnorm(float *out, const float *x, const gp_bf16 *w, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = gp_bf16_to_f32(w[i]) * (x[i] * r);
}

/* HF rotate_half convention: element i pairs with i + head_dim/2 (not the
 * interleaved 2i, 2i+1 of the original paper). The angle is the float32
 * product pos * inv_freq, as HF forms it before taking cos/sin, so the
 * rounding of large angles matches. vec is [n_heads][head_dim], in place. */
void gp_ref_rope(float *vec, int n_heads, int head_dim, int pos, const float *inv_freq)
{
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i];
        float c = cosf(angle), s = sinf(angle);
        for (int h = 0; h < n_heads; h++) {
            float *v = vec + (size_t)h * (size_t)head_dim;
            float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
        }
    }
}

/* silu(gate) * up, silu(g) = g * sigmoid(g). For g below about -88 expf
 * overflows to inf and the quotient is -0, the correct limit. */
void gp_ref_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

/* NaN never compares greater, so NaNs are skipped; an all-NaN vector gives 0.
 * n <= 0 gives -1. */
int32_t gp_argmax(const float *x, int n)
{
    if (!x || n <= 0)
        return -1;
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]))
            continue;
        if (best < 0 || x[i] > x[best])
            best = i;
    }
    return best < 0 ? 0 : best;
}

/* ------------------------------------------------------------ the model */

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
    gp_ref_pool *pool;

    /* scratch, sized for a batch of max_seqs */
    float *x;                  /* [max_seqs][hidden] residual stream */
    float *h;                  /* [max_seqs][hidden] normed input of a block */
    float *qkv;                /* [max_seqs][qkv_rows] q heads, k heads, v heads */
    float *att;                /* [max_seqs][n_heads*head_dim] attention output */
    float *tmp;                /* [max_seqs][hidden] block output before the residual add */
    float *gu;                 /* [max_seqs][2*ffn] gate, then up */
    float *act;                /* [max_seqs][ffn] swiglu output */
    float *scores;             /* [n_threads][max_context] per-thread attention row */
    float *logits1;            /* [vocab] prefill target when the caller passes NULL */
    int *pos;                  /* [max_seqs] position each batch row writes */
    const int32_t **tables;    /* [max_seqs] block table of each batch row */
    unsigned *seen;            /* [max_seqs] duplicate check: stamp of the last step using it */
    unsigned stamp;
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

void gp_cpu_model_destroy(gp_cpu_model *m)
{
    if (!m)
        return;
    gp_ref_pool_destroy(m->pool);
    gp_kv_tables_destroy(m->kv);
    free(m->k_cache);
    free(m->v_cache);
    free(m->inv_freq);
    free(m->x);
    free(m->h);
    free(m->qkv);
    free(m->att);
    free(m->tmp);
    free(m->gu);
    free(m->act);
    free(m->scores);
    free(m->logits1);
    free(m->pos);
    free(m->tables);
    free(m->seen);
    free(m);
}

static gp_status gp_ref_check_weights(const gp_host_weights *w)
{
    if (!w->embed || !w->final_norm || !w->lm_head || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "reference model: host weights are not allocated "
                                    "(embed, final_norm, lm_head and layers must be set)");
    for (int l = 0; l < w->cfg.n_layers; l++) {
        const gp_layer_weights *L = &w->layers[l];
        if (!L->attn_norm || !L->wqkv || !L->wo || !L->ffn_norm || !L->w_gate_up || !L->w_down)
            GP_FAIL(GP_ERR_INVALID_ARG, "reference model: layer %d of the host weights has a "
                                        "NULL tensor", l);
    }
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
    uint64_t layer_elems = 1, cache_elems;
    if (!gp_mul_u64(layer_elems, (uint64_t)n_blocks, &layer_elems) ||
        !gp_mul_u64(layer_elems, (uint64_t)block_size, &layer_elems) ||
        !gp_mul_u64(layer_elems, (uint64_t)c->n_kv_heads, &layer_elems) ||
        !gp_mul_u64(layer_elems, (uint64_t)c->head_dim, &layer_elems) ||
        !gp_mul_u64(layer_elems, (uint64_t)c->n_layers, &cache_elems))
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

    gp_status st = gp_kv_tables_create(&layout, max_seqs, blocks_per_seq, &m->kv);
    if (st != GP_OK) {
        gp_cpu_model_destroy(m);
        return st;
    }
    if ((st = gp_ref_pool_create(&m->pool)) != GP_OK) {
        gp_cpu_model_destroy(m);
        return st;
    }

    uint64_t S = (uint64_t)max_seqs;
    bool ok = true;
    m->k_cache = gp_ref_alloc_floats(cache_elems, &ok);
    m->v_cache = gp_ref_alloc_floats(cache_elems, &ok);
    m->inv_freq = gp_ref_alloc_floats((uint64_t)(c->head_dim / 2), &ok);
    m->x = gp_ref_alloc_floats(S * (uint64_t)c->hidden, &ok);
    m->h = gp_ref_alloc_floats(S * (uint64_t)c->hidden, &ok);
    m->qkv = gp_ref_alloc_floats(S * (uint64_t)gp_config_qkv_rows(c), &ok);
    m->att = gp_ref_alloc_floats(S * (uint64_t)c->n_heads * (uint64_t)c->head_dim, &ok);
    m->tmp = gp_ref_alloc_floats(S * (uint64_t)c->hidden, &ok);
    m->gu = gp_ref_alloc_floats(S * 2u * (uint64_t)c->ffn, &ok);
    m->act = gp_ref_alloc_floats(S * (uint64_t)c->ffn, &ok);
    m->scores = gp_ref_alloc_floats((uint64_t)m->pool->n_threads * (uint64_t)max_context, &ok);
    m->logits1 = gp_ref_alloc_floats((uint64_t)c->vocab, &ok);
    m->pos = calloc(S, sizeof *m->pos);
    m->tables = calloc(S, sizeof *m->tables);
    m->seen = calloc(S, sizeof *m->seen);
    if (!ok || !m->pos || !m->tables || !m->seen) {
        gp_cpu_model_destroy(m);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference model: out of host memory for the KV cache "
                "(%llu floats) and scratch of %d sequences x %d tokens",
                (unsigned long long)(2 * cache_elems), max_seqs, max_context);
    }
    gp_rope_inv_freq(c, m->inv_freq);
    *out = m;
    return GP_OK;
}

/* --- parallel pieces of a step */

typedef struct gp_ref_matmul_ctx {
    float *out;          /* [B][rows] */
    const gp_bf16 *w;    /* [rows][cols] */
    const float *x;      /* [B][cols] */
    int B, rows, cols;
} gp_ref_matmul_ctx;

/* Rows are the parallel items; a row is loaded once and applied to all B
 * vectors while it is in L1, which is where batching pays on the CPU. */
static void gp_ref_matmul_task(void *vctx, int begin, int end, int thread)
{
    const gp_ref_matmul_ctx *c = vctx;
    for (int r = begin; r < end; r++) {
        const gp_bf16 *row = c->w + (size_t)r * (size_t)c->cols;
        int b = 0;
        for (; b + 2 <= c->B; b += 2)
            gp_ref_dot2_bf16(row, c->x + (size_t)b * (size_t)c->cols,
                             c->x + (size_t)(b + 1) * (size_t)c->cols, c->cols,
                             &c->out[(size_t)b * (size_t)c->rows + (size_t)r],
                             &c->out[(size_t)(b + 1) * (size_t)c->rows + (size_t)r]);
        if (b < c->B)
            c->out[(size_t)b * (size_t)c->rows + (size_t)r] =
                gp_ref_dot_bf16(row, c->x + (size_t)b * (size_t)c->cols, c->cols);
    }
}

/* out[B][rows] = x[B][cols] . w[rows][cols]^T */
static void gp_ref_matmul(gp_cpu_model *m, float *out, const gp_bf16 *w, const float *x, int B,
                          int rows, int cols)
{
    gp_ref_matmul_ctx c = {.out = out, .w = w, .x = x, .B = B, .rows = rows, .cols = cols};
    gp_ref_pool_run(m->pool, gp_ref_matmul_task, &c, rows, (double)B * rows * cols);
}

typedef struct gp_ref_attn_ctx {
    gp_cpu_model *m;
    int layer;
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
    float *scores = m->scores + (size_t)thread * (size_t)m->max_context; /* [pos+1] */

    for (int item = begin; item < end; item++) {
        int b = item / c->n_heads, head = item % c->n_heads;
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

/* The step proper, after validation and KV reservation: B rows with
 * positions m->pos[] and block tables m->tables[]. logits may be NULL (prefill
 * of all but the last token), which skips the LM head. */
static void gp_ref_forward(gp_cpu_model *m, int B, const int32_t *tokens, float *logits)
{
    const gp_config *c = &m->cfg;
    const gp_host_weights *w = m->w;
    const gp_kv_layout *L = &m->layout;
    int H = c->hidden, hd = c->head_dim, qkv_rows = gp_config_qkv_rows(c);
    int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;

    for (int b = 0; b < B; b++) {
        const gp_bf16 *e = w->embed + (size_t)tokens[b] * (size_t)H;
        float *x = m->x + (size_t)b * (size_t)H;
        for (int i = 0; i < H; i++)
            x[i] = gp_bf16_to_f32(e[i]);
    }

    long long ctx_total = 0; /* attention work of this step, for the pool */
    for (int b = 0; b < B; b++)
        ctx_total += m->pos[b] + 1;

    for (int l = 0; l < c->n_layers; l++) {
        const gp_layer_weights *lw = &w->layers[l];
        float *kc = m->k_cache + (size_t)l * m->layer_elems;
        float *vc = m->v_cache + (size_t)l * m->layer_elems;

        /* attention half */
        for (int b = 0; b < B; b++)
            gp_ref_rmsnorm(m->h + (size_t)b * H, m->x + (size_t)b * H, lw->attn_norm, H, c->norm_eps);
        gp_ref_matmul(m, m->qkv, lw->wqkv, m->h, B, qkv_rows, H);
        for (int b = 0; b < B; b++) {
            float *q = m->qkv + (size_t)b * (size_t)qkv_rows; /* [n_heads][hd] */
            float *k = q + q_dim;                              /* [n_kv_heads][hd] */
            float *v = k + kv_dim;                             /* [n_kv_heads][hd] */
            int p = m->pos[b];
            gp_ref_rope(q, c->n_heads, hd, p, m->inv_freq);
            gp_ref_rope(k, c->n_kv_heads, hd, p, m->inv_freq);
            int block = m->tables[b][p / L->block_size], slot = p % L->block_size;
            size_t off = gp_kv_offset(L, block, slot, 0); /* heads of one slot are contiguous */
            memcpy(kc + off, k, (size_t)kv_dim * sizeof(float));
            memcpy(vc + off, v, (size_t)kv_dim * sizeof(float));
        }
        gp_ref_attn_ctx actx = {.m = m, .layer = l};
        gp_ref_pool_run(m->pool, gp_ref_attn_task, &actx, B * c->n_heads,
                        2.0 * (double)ctx_total * c->n_heads * hd);
        gp_ref_matmul(m, m->tmp, lw->wo, m->att, B, H, q_dim);
        for (size_t i = 0; i < (size_t)B * H; i++)
            m->x[i] += m->tmp[i];

        /* FFN half */
        for (int b = 0; b < B; b++)
            gp_ref_rmsnorm(m->h + (size_t)b * H, m->x + (size_t)b * H, lw->ffn_norm, H, c->norm_eps);
        gp_ref_matmul(m, m->gu, lw->w_gate_up, m->h, B, 2 * c->ffn, H);
        for (int b = 0; b < B; b++) {
            const float *gate = m->gu + (size_t)b * 2 * (size_t)c->ffn;
            gp_ref_swiglu(m->act + (size_t)b * (size_t)c->ffn, gate, gate + c->ffn, c->ffn);
        }
        gp_ref_matmul(m, m->tmp, lw->w_down, m->act, B, H, c->ffn);
        for (size_t i = 0; i < (size_t)B * H; i++)
            m->x[i] += m->tmp[i];
    }

    if (!logits)
        return;
    for (int b = 0; b < B; b++)
        gp_ref_rmsnorm(m->h + (size_t)b * H, m->x + (size_t)b * H, w->final_norm, H, c->norm_eps);
    gp_ref_matmul(m, logits, w->lm_head, m->h, B, c->vocab, H);
}

static gp_status gp_ref_check_seq(const gp_cpu_model *m, int seq)
{
    if (seq < 0 || seq >= m->max_seqs)
        GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d is out of range: allowed 0..%d", seq,
                m->max_seqs - 1);
    return GP_OK;
}

static gp_status gp_ref_check_token(const gp_cpu_model *m, int32_t token, const char *where, int i)
{
    if (token < 0 || token >= m->cfg.vocab)
        GP_FAIL(GP_ERR_INVALID_ARG, "token %d at %s %d is outside the vocabulary: allowed 0..%d",
                (int)token, where, i, m->cfg.vocab - 1);
    return GP_OK;
}

/* Validates everything and reserves KV room before any state changes, so a
 * failing step leaves every sequence as it was (reserved blocks stay with
 * their sequence and are reused by its next step). */
static gp_status gp_ref_step(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens,
                             float *logits)
{
    if (++m->stamp == 0) { /* wrapped: clear so old stamps cannot match */
        memset(m->seen, 0, (size_t)m->max_seqs * sizeof *m->seen);
        m->stamp = 1;
    }
    for (int b = 0; b < B; b++) {
        int s = seq_ids[b];
        GP_TRY(gp_ref_check_seq(m, s));
        if (m->seen[s] == m->stamp)
            GP_FAIL(GP_ERR_INVALID_ARG, "sequence id %d appears twice in one step (batch row %d): "
                    "each sequence may advance by one token per step", s, b);
        m->seen[s] = m->stamp;
        GP_TRY(gp_ref_check_token(m, tokens[b], "batch row", b));
        int len = gp_kv_len(m->kv, s);
        if (len >= m->max_context)
            GP_FAIL(GP_ERR_STATE, "sequence %d is full: it holds %d tokens and max_context is %d",
                    s, len, m->max_context);
    }
    for (int b = 0; b < B; b++) {
        int s = seq_ids[b];
        GP_TRY(gp_kv_reserve(m->kv, s, 1));
        m->pos[b] = gp_kv_len(m->kv, s);
        m->tables[b] = gp_kv_block_table(m->kv, s);
    }
    gp_ref_forward(m, B, tokens, logits);
    for (int b = 0; b < B; b++)
        GP_TRY(gp_kv_advance(m->kv, seq_ids[b], 1));
    return GP_OK;
}

gp_status gp_cpu_decode_step(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens,
                             float *logits)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_decode_step: model is NULL");
    if (B < 1 || B > m->max_seqs)
        GP_FAIL(GP_ERR_INVALID_ARG, "batch size %d is out of range: allowed 1..%d (max_seqs)", B,
                m->max_seqs);
    if (!seq_ids || !tokens || !logits)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_decode_step: seq_ids, tokens and logits must not be NULL");
    return gp_ref_step(m, B, seq_ids, tokens, logits);
}

gp_status gp_cpu_prefill(gp_cpu_model *m, int seq, int n, const int32_t *prompt, float *last_logits)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_prefill: model is NULL");
    GP_TRY(gp_ref_check_seq(m, seq));
    if (n < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "prompt length %d for sequence %d: allowed 1..%d", n, seq,
                m->max_context);
    if (!prompt)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_prefill: prompt is NULL");
    for (int i = 0; i < n; i++)
        GP_TRY(gp_ref_check_token(m, prompt[i], "prompt position", i));
    /* checked up front so a prompt that does not fit leaves the cache untouched */
    int len = gp_kv_len(m->kv, seq);
    if ((long long)len + n > m->max_context)
        GP_FAIL(GP_ERR_STATE, "prompt of %d tokens does not fit sequence %d: it holds %d tokens "
                "and max_context is %d", n, seq, len, m->max_context);
    for (int i = 0; i < n; i++) {
        float *dst = i == n - 1 ? (last_logits ? last_logits : m->logits1) : NULL;
        GP_TRY(gp_ref_step(m, 1, &seq, &prompt[i], dst));
    }
    return GP_OK;
}

void gp_cpu_reset_seq(gp_cpu_model *m, int seq)
{
    if (!m || seq < 0 || seq >= m->max_seqs)
        return;
    gp_kv_release(m->kv, seq);
}
