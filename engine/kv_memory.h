/* KV memory of an engine, private to engine/: where the cache's blocks live
 * (resident paged blocks on the device, or offloaded ones in host memory,
 * streamed ahead of attention) and the providers that move K/V beside a call
 * (a stored-prefix reload), all driven through one list of per-layer hooks. */
#ifndef GP_KV_MEMORY_H
#define GP_KV_MEMORY_H

#include <cuda_runtime_api.h>

#include "gp_attention.h"
#include "gp_engine.h"

/* What one sequence of the coming call does to its cache: reads positions
 * [0, read_end), writes [w0, w1). */
typedef struct gp_kv_span {
    int seq, read_end, w0, w1;
} gp_kv_span;

typedef struct gp_kv_plan {
    int n;
    gp_kv_span *spans; /* [max_batch] */
} gp_kv_plan;

/* The hooks of a call (a decode step or a prefill chunk), on its stream s.
 * begin_batch: once the call's inputs are enqueued, with its plan;
 * before_attn(layer): before the layer's RoPE + KV append and attention;
 * after_attn(layer): after its attention; end_batch: after the call's last
 * layer. Any may be NULL: nothing to do. A provider's hooks run before the
 * memory's own hook of the same point. */
typedef struct gp_kv_hook_ops {
    gp_status (*begin_batch)(void *self, const gp_kv_plan *plan, cudaStream_t s);
    gp_status (*before_attn)(void *self, int layer, cudaStream_t s);
    gp_status (*after_attn)(void *self, int layer, cudaStream_t s);
    gp_status (*end_batch)(void *self, cudaStream_t s);
} gp_kv_hook_ops;

typedef struct gp_kv_hook {
    const gp_kv_hook_ops *ops;
    void *self;
} gp_kv_hook;

typedef struct gp_kv_memory gp_kv_memory;

/* An implementation: its hooks (self: the memory), and how K/V of
 * positions [pos0, pos0 + n) of sequence seq move between its blocks and
 * two dense device buffers [n][n_kv_heads][head_dim] (gp_kv_copy_tokens'
 * contract; table: the sequence's device block table) on stream s, ordered
 * after whatever the memory itself still has in flight on those blocks;
 * filled_in_place: the device pools of layer were written in place (a
 * benchmark context), so the memory's own copies follow them. */
typedef struct gp_kv_memory_ops {
    gp_kv_hook_ops hooks;
    gp_status (*copy_tokens)(gp_kv_memory *m, int layer, int seq, const int32_t *table, int pos0, int n, void *k,
                             void *v, gp_kv_copy_dir dir, cudaStream_t s);
    gp_status (*filled_in_place)(gp_kv_memory *m, int layer, cudaStream_t s);
    void (*destroy)(gp_kv_memory *m);
} gp_kv_memory_ops;

/* At most this many providers beside the memory (a prompt's reload and the host tier's). */
#define GP_KV_MAX_PROVIDERS 3

struct gp_kv_memory {
    const gp_kv_memory_ops *ops;
    gp_kv_device *kv;   /* borrowed: the pools */
    gp_kv_plan plan;    /* the coming call's */
    /* the providers, then the memory's own when it has any hook: a resident
     * memory without providers runs empty loops */
    gp_kv_hook hooks[GP_KV_MAX_PROVIDERS + 1];
    int n_hooks;
    const gp_kv_offload_plan *offload; /* NULL: resident */
    gp_kv_offload_stats *offload_stats; /* NULL: resident */
};

/* Resident paged blocks: every hook empty, copies straight to the pools. */
gp_status gp_kv_memory_create_resident(gp_kv_device *kv, int max_batch, gp_kv_memory **out);
/* Offloaded blocks (engine_kvoff.c): plan's host blocks in pinned memory,
 * copied into kv's staging windows ahead of attention; block_size and
 * n_layers of the cache. */
gp_status gp_kv_memory_create_offload(gp_kv_device *kv, const gp_kv_offload_plan *plan, int max_batch,
                                      int n_layers, int block_size, gp_kv_memory **out);
void gp_kv_memory_destroy(gp_kv_memory *m);
/* For implementations: the common part of m (its plan for max_batch
 * sequences, its own hook when ops has any) and its release. */
gp_status gp_kv_memory_init(gp_kv_memory *m, const gp_kv_memory_ops *ops, gp_kv_device *kv, int max_batch);
void gp_kv_memory_fini(gp_kv_memory *m);

/* A provider on the hooks, before the memory's own; GP_ERR_STATE when the
 * list is full. detach: by self; absent is fine. */
gp_status gp_kv_memory_attach(gp_kv_memory *m, const gp_kv_hook_ops *ops, void *self);
void gp_kv_memory_detach(gp_kv_memory *m, const void *self);

/* The coming call's plan: reset, then one span per sequence. A NULL
 * memory (a batch that drives no hooks) takes no plan and runs no hook. */
static inline void gp_kv_plan_reset(gp_kv_memory *m)
{
    if (m)
        m->plan.n = 0;
}
static inline void gp_kv_plan_add(gp_kv_memory *m, int seq, int read_end, int w0, int w1)
{
    if (m)
        m->plan.spans[m->plan.n++] = (gp_kv_span){seq, read_end, w0, w1};
}

static inline gp_status gp_kv_begin_batch(gp_kv_memory *m, cudaStream_t s)
{
    for (int i = 0; m && i < m->n_hooks; i++)
        if (m->hooks[i].ops->begin_batch)
            GP_TRY(m->hooks[i].ops->begin_batch(m->hooks[i].self, &m->plan, s));
    return GP_OK;
}

static inline gp_status gp_kv_before_attn(gp_kv_memory *m, int layer, cudaStream_t s)
{
    for (int i = 0; m && i < m->n_hooks; i++)
        if (m->hooks[i].ops->before_attn)
            GP_TRY(m->hooks[i].ops->before_attn(m->hooks[i].self, layer, s));
    return GP_OK;
}

static inline gp_status gp_kv_after_attn(gp_kv_memory *m, int layer, cudaStream_t s)
{
    for (int i = 0; m && i < m->n_hooks; i++)
        if (m->hooks[i].ops->after_attn)
            GP_TRY(m->hooks[i].ops->after_attn(m->hooks[i].self, layer, s));
    return GP_OK;
}

static inline gp_status gp_kv_end_batch(gp_kv_memory *m, cudaStream_t s)
{
    for (int i = 0; m && i < m->n_hooks; i++)
        if (m->hooks[i].ops->end_batch)
            GP_TRY(m->hooks[i].ops->end_batch(m->hooks[i].self, s));
    return GP_OK;
}

static inline gp_status gp_kv_copy_tokens_mem(gp_kv_memory *m, int layer, int seq, const int32_t *table, int pos0,
                                              int n, void *k, void *v, gp_kv_copy_dir dir, cudaStream_t s)
{
    return m->ops->copy_tokens(m, layer, seq, table, pos0, n, k, v, dir, s);
}

static inline gp_status gp_kv_filled_in_place(gp_kv_memory *m, int layer, cudaStream_t s)
{
    return m->ops->filled_in_place ? m->ops->filled_in_place(m, layer, s) : GP_OK;
}

#endif
