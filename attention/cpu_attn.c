/* CPU partial decode attention over host KV blocks (issue #18): the call's
 * checks, its split into (row, KV head, position chunk) items run by the
 * thread pool, and the fixed-order combine of each row's chunks. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attn_impl.h"

#define GP_CPU_ATTN_MIN_CHUNK 16
#define GP_CPU_ATTN_MAX_CHUNK 4096

typedef struct gp_cpu_attn_item {
    int b, kv_head, t0, t1;
} gp_cpu_attn_item;

struct gp_cpu_attn {
    gp_cpu_attn_params p;
    gp_pool *pool;
    int simd;
    float *scores[GP_POOL_MAX_THREADS]; /* per thread [GP_CPU_ATTN_MAX_GROUP][chunk_positions] */
    gp_cpu_attn_item *items;
    size_t items_cap;
    float *part; /* per item [G] m, [G] l, [G][head_dim] acc */
    size_t part_cap;
    int *row_first; /* [B]: index of the row's first item */
    size_t rows_cap;

    /* the call in flight */
    atomic_int next;
    int n_items, n_pairs;
    const gp_kv_layout *l;
    gp_dtype dtype;
    const uint16_t *k_pool, *v_pool;
    const int32_t *tables;
    const int32_t *lens;
    int max_blocks, n_heads, G;
    const float *q;
    float *o, *lse;
};

gp_cpu_attn_params gp_cpu_attn_default_params(void)
{
    gp_cpu_attn_params p = {.n_threads = 0, .chunk_positions = 256, .simd = 1};
    return p;
}

gp_status gp_cpu_attn_create(const gp_cpu_attn_params *p, gp_cpu_attn **out)
{
    if (!p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_attn_create: p and out must not be NULL");
    if (p->n_threads < 0 || p->n_threads > GP_POOL_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU attention params: n_threads %d (allowed 0 for the online CPUs up to %d, "
                "or 1..%d)", p->n_threads, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS);
    if (p->chunk_positions < GP_CPU_ATTN_MIN_CHUNK || p->chunk_positions > GP_CPU_ATTN_MAX_CHUNK)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU attention params: chunk_positions %d (allowed %d..%d)", p->chunk_positions,
                GP_CPU_ATTN_MIN_CHUNK, GP_CPU_ATTN_MAX_CHUNK);
    if (p->simd != 0 && p->simd != 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "CPU attention params: simd %d (allowed 0 or 1)", p->simd);
    const int T = gp_pool_threads_for(p->n_threads);
    gp_cpu_attn *a = calloc(1, sizeof *a);
    if (!a)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cpu_attn_create: out of memory");
    a->p = *p;
    a->simd = p->simd && gp_cpu_attn_have_avx2();
    gp_status st = gp_pool_create(T, &a->pool);
    if (st != GP_OK) {
        free(a);
        return st;
    }
    for (int t = 0; t < gp_pool_threads(a->pool); t++) {
        a->scores[t] = malloc(sizeof(float) * GP_CPU_ATTN_MAX_GROUP * (size_t)p->chunk_positions);
        if (!a->scores[t]) {
            gp_cpu_attn_destroy(a);
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_cpu_attn_create: out of memory");
        }
    }
    *out = a;
    return GP_OK;
}

void gp_cpu_attn_destroy(gp_cpu_attn *a)
{
    if (!a)
        return;
    gp_pool_destroy(a->pool);
    for (int t = 0; t < GP_POOL_MAX_THREADS; t++)
        free(a->scores[t]);
    free(a->items);
    free(a->part);
    free(a->row_first);
    free(a);
}

int gp_cpu_attn_threads(const gp_cpu_attn *a)
{
    return a ? gp_pool_threads(a->pool) : 0;
}

int gp_cpu_attn_uses_simd(const gp_cpu_attn *a)
{
    return a ? a->simd : 0;
}

static size_t part_stride(const gp_cpu_attn *a)
{
    return (size_t)a->G * (size_t)(a->l->head_dim + 2);
}

static void run_items(void *ctx, int thread)
{
    gp_cpu_attn *a = ctx;
    const gp_kv_layout *l = a->l;
    const int hd = l->head_dim;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (i >= a->n_items)
            break;
        const gp_cpu_attn_item *it = &a->items[i];
        float *part = a->part + (size_t)i * part_stride(a);
        const gp_cpu_attn_item_args args = {
            .dtype = a->dtype, .k_pool = a->k_pool, .v_pool = a->v_pool,
            .table = a->tables + (size_t)it->b * (size_t)a->max_blocks,
            .t0 = it->t0, .t1 = it->t1, .block_size = l->block_size, .kv_stride = l->n_kv_heads * hd,
            .kv_head = it->kv_head, .head_dim = hd, .G = a->G,
            .q = a->q + ((size_t)it->b * a->n_heads + (size_t)it->kv_head * a->G) * hd,
            .scale = 1.0f / sqrtf((float)hd), .scores = a->scores[thread],
            .m = part, .l = part + a->G, .acc = part + 2 * a->G,
        };
        if (a->simd)
            gp_cpu_attn_item_avx2(&args);
        else
            gp_cpu_attn_item_plain(&args);
    }
}

/* One (row, KV head) pair: its chunks' partials summed in chunk order,
 * whichever threads computed them. */
static void combine_pair(gp_cpu_attn *a, int pair)
{
    const int n_kv = a->l->n_kv_heads, hd = a->l->head_dim, G = a->G;
    const int b = pair / n_kv, kvh = pair % n_kv, len = a->lens[b];
    const int chunk = a->p.chunk_positions, n_ch = (len + chunk - 1) / chunk;
    const size_t stride = part_stride(a);
    const float *first = a->part + (size_t)(a->row_first[b] + kvh * n_ch) * stride;
    for (int g = 0; g < G; g++) {
        const int h = kvh * G + g;
        float *o = a->o + ((size_t)b * a->n_heads + h) * hd;
        if (n_ch == 0) {
            memset(o, 0, sizeof(float) * hd);
            a->lse[(size_t)b * a->n_heads + h] = -INFINITY;
            continue;
        }
        float m = -INFINITY;
        for (int c = 0; c < n_ch; c++)
            m = fmaxf(m, first[c * stride + g]);
        float l = 0.0f;
        memset(o, 0, sizeof(float) * hd);
        for (int c = 0; c < n_ch; c++) {
            const float *part = first + c * stride;
            const float w = expf(part[g] - m);
            l += w * part[G + g];
            const float *acc = part + 2 * G + (size_t)g * hd;
            for (int d = 0; d < hd; d++)
                o[d] += w * acc[d];
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; d++)
            o[d] *= inv;
        a->lse[(size_t)b * a->n_heads + h] = m + logf(l);
    }
}

static void run_combine(void *ctx, int thread)
{
    gp_cpu_attn *a = ctx;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (i >= a->n_pairs)
            break;
        combine_pair(a, i);
    }
}

static gp_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return GP_OK;
    void *n = realloc(*p, need * elem);
    if (!n)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cpu_attn_partial: out of memory (%zu bytes of scratch)", need * elem);
    *p = n;
    *cap = need;
    return GP_OK;
}

static gp_status check_call(const gp_cpu_attn *a, const gp_kv_layout *l, gp_dtype dtype, const uint16_t *k_pool,
                            const uint16_t *v_pool, const int32_t *tables, int max_blocks, const int32_t *lens,
                            int B, int n_heads, const float *q, const float *o, const float *lse)
{
#define W "gp_cpu_attn_partial: "
    if (!a || !l)
        GP_FAIL(GP_ERR_INVALID_ARG, W "the handle and the layout must not be NULL");
    if (B < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, W "B %d (allowed >= 0)", B);
    if (dtype != GP_DTYPE_BF16 && dtype != GP_DTYPE_F16)
        GP_FAIL(GP_ERR_INVALID_ARG, W "dtype %s (allowed BF16 or F16)", gp_dtype_name(dtype));
    if (l->n_kv_heads < 1 || l->block_size < 1 || l->n_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, W "layout n_kv_heads %d, block_size %d, n_blocks %d (each must be >= 1)",
                l->n_kv_heads, l->block_size, l->n_blocks);
    if (l->head_dim < 16 || l->head_dim > GP_CPU_ATTN_MAX_HEAD_DIM || l->head_dim % 16)
        GP_FAIL(GP_ERR_INVALID_ARG, W "head_dim %d (allowed a multiple of 16 in 16..%d)", l->head_dim,
                GP_CPU_ATTN_MAX_HEAD_DIM);
    if (n_heads < 1 || n_heads % l->n_kv_heads || n_heads / l->n_kv_heads > GP_CPU_ATTN_MAX_GROUP)
        GP_FAIL(GP_ERR_INVALID_ARG, W "n_heads %d over n_kv_heads %d (allowed a multiple of n_kv_heads, at most "
                "%d query heads per KV head)", n_heads, l->n_kv_heads, GP_CPU_ATTN_MAX_GROUP);
    if (max_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, W "max_blocks %d (allowed >= 1)", max_blocks);
    if (B == 0)
        return GP_OK;
    if (!k_pool || !v_pool || !tables || !lens || !q || !o || !lse)
        GP_FAIL(GP_ERR_INVALID_ARG, W "NULL pointer (k_pool %p, v_pool %p, block_tables %p, lens %p, q %p, o %p, "
                "lse %p)", (const void *)k_pool, (const void *)v_pool, (const void *)tables, (const void *)lens,
                (const void *)q, (const void *)o, (const void *)lse);
    const int64_t cap = (int64_t)max_blocks * l->block_size;
    for (int b = 0; b < B; b++) {
        if (lens[b] < 0 || lens[b] > cap)
            GP_FAIL(GP_ERR_INVALID_ARG, W "lens[%d] = %d (allowed 0..%lld = max_blocks %d x block_size %d)", b,
                    (int)lens[b], (long long)cap, max_blocks, l->block_size);
        const int nb = (lens[b] + l->block_size - 1) / l->block_size;
        for (int j = 0; j < nb; j++) {
            const int32_t id = tables[(size_t)b * max_blocks + j];
            if (id < 0 || id >= l->n_blocks)
                GP_FAIL(GP_ERR_INVALID_ARG, W "block_tables[%d][%d] = %d, reached by lens[%d] = %d (allowed "
                        "0..%d, the pool's n_blocks %d)", b, j, (int)id, b, (int)lens[b], l->n_blocks - 1,
                        l->n_blocks);
        }
    }
    return GP_OK;
#undef W
}

gp_status gp_cpu_attn_partial(gp_cpu_attn *a, const gp_kv_layout *l, gp_dtype dtype, const uint16_t *k_pool,
                              const uint16_t *v_pool, const int32_t *block_tables, int max_blocks,
                              const int32_t *lens, int B, int n_heads, const float *q, float *o, float *lse)
{
    GP_TRY(check_call(a, l, dtype, k_pool, v_pool, block_tables, max_blocks, lens, B, n_heads, q, o, lse));
    if (B == 0)
        return GP_OK;
    const int chunk = a->p.chunk_positions, n_kv = l->n_kv_heads;
    a->l = l;
    a->G = n_heads / n_kv;
    size_t n_items = 0;
    GP_TRY(grow((void **)&a->row_first, &a->rows_cap, (size_t)B, sizeof *a->row_first));
    for (int b = 0; b < B; b++) {
        a->row_first[b] = (int)n_items;
        n_items += (size_t)n_kv * (size_t)((lens[b] + chunk - 1) / chunk);
    }
    if (n_items > (size_t)INT32_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "gp_cpu_attn_partial: %zu work items (at most %d)", n_items, INT32_MAX);
    GP_TRY(grow((void **)&a->items, &a->items_cap, n_items, sizeof *a->items));
    GP_TRY(grow((void **)&a->part, &a->part_cap, n_items * part_stride(a), sizeof *a->part));
    size_t i = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < n_kv; h++)
            for (int t0 = 0; t0 < lens[b]; t0 += chunk)
                a->items[i++] = (gp_cpu_attn_item){
                    .b = b, .kv_head = h, .t0 = t0, .t1 = lens[b] - t0 < chunk ? lens[b] : t0 + chunk};
    a->n_items = (int)n_items;
    a->n_pairs = B * n_kv;
    a->dtype = dtype;
    a->k_pool = k_pool, a->v_pool = v_pool;
    a->tables = block_tables, a->lens = lens, a->max_blocks = max_blocks;
    a->n_heads = n_heads;
    a->q = q, a->o = o, a->lse = lse;
    atomic_store(&a->next, 0);
    gp_pool_run(a->pool, run_items, a);
    atomic_store(&a->next, 0);
    gp_pool_run(a->pool, run_combine, a);
    return GP_OK;
}
