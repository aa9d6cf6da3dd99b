/* The scheduler's backend ops over the CPU reference (gp_cpu_run_batch and
 * gp_cpu_reset_seq), and retained blocks as host copies of their K/V. */
#include "sched_cpu.h"

#include <stdlib.h>

static gp_status cpu_run_batch(void *ctx, const gp_batch *b, float *logits)
{
    return gp_cpu_run_batch(ctx, b, NULL, logits);
}

static void cpu_reset_seq(void *ctx, int seq)
{
    gp_cpu_reset_seq(ctx, seq);
}

gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m)
{
    return (gp_sched_ops){.run_batch = cpu_run_batch, .reset_seq = cpu_reset_seq, .sample = NULL, .ctx = m};
}

struct gp_sched_cpu_cache {
    gp_cpu_model *m;
    int block_size;
    size_t half;     /* floats of K (or V) of one block: n_layers x block_size x n_kv_heads x head_dim */
    float **copy;    /* [cap]: K then V of handle i, NULL while free */
    int *free_ids;   /* [cap]: stack of free handles */
    int cap, n_free, held;
};

gp_status gp_sched_cpu_cache_create(gp_cpu_model *m, int block_size, gp_sched_cpu_cache **out)
{
    if (!m || !out || block_size < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sched_cpu_cache_create: model %s, out %s, block_size %d; allowed non-NULL "
                "and block_size >= 1", m ? "set" : "NULL", out ? "set" : "NULL", block_size);
    gp_sched_cpu_cache *c = calloc(1, sizeof(*c));
    if (!c)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_sched_cpu_cache_create: out of host memory");
    const gp_config *cfg = gp_cpu_model_config(m);
    c->m = m;
    c->block_size = block_size;
    c->half = (size_t)cfg->n_layers * (size_t)block_size * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;
    *out = c;
    return GP_OK;
}

void gp_sched_cpu_cache_destroy(gp_sched_cpu_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->cap; i++)
        free(c->copy[i]);
    free(c->copy);
    free(c->free_ids);
    free(c);
}

static gp_status cpu_retain(void *ctx, int seq, int index, int *handle)
{
    gp_sched_cpu_cache *c = ctx;
    if (c->n_free == 0) {
        int cap = c->cap ? 2 * c->cap : 16;
        float **copy = realloc(c->copy, sizeof(*copy) * (size_t)cap);
        if (copy)
            c->copy = copy;
        int *ids = copy ? realloc(c->free_ids, sizeof(*ids) * (size_t)cap) : NULL;
        if (!ids)
            GP_FAIL(GP_ERR_NO_MEMORY, "retain_block: out of host memory for %d handles", cap);
        c->free_ids = ids;
        for (int i = cap - 1; i >= c->cap; i--) {
            c->copy[i] = NULL;
            c->free_ids[c->n_free++] = i;
        }
        c->cap = cap;
    }
    int h = c->free_ids[c->n_free - 1];
    float *kv = malloc(2 * c->half * sizeof(float));
    if (!kv)
        GP_FAIL(GP_ERR_NO_MEMORY, "retain_block: out of host memory for a block of %zu floats", 2 * c->half);
    gp_status st = gp_cpu_kv_read(c->m, seq, index * c->block_size, c->block_size, kv, kv + c->half);
    if (st != GP_OK) {
        free(kv);
        return st;
    }
    c->n_free--;
    c->copy[h] = kv;
    c->held++;
    *handle = h;
    return GP_OK;
}

static void cpu_drop(void *ctx, int handle)
{
    gp_sched_cpu_cache *c = ctx;
    if (handle < 0 || handle >= c->cap || !c->copy[handle])
        return; /* not held: nothing to give back */
    free(c->copy[handle]);
    c->copy[handle] = NULL;
    c->free_ids[c->n_free++] = handle;
    c->held--;
}

static gp_status cpu_attach(void *ctx, int seq, const int *handles, int n)
{
    gp_sched_cpu_cache *c = ctx;
    for (int i = 0; i < n; i++)
        if (handles[i] < 0 || handles[i] >= c->cap || !c->copy[handles[i]])
            GP_FAIL(GP_ERR_INVALID_ARG, "attach_blocks: handles[%d] = %d is not held", i, handles[i]);
    GP_TRY(gp_cpu_seq_set_len(c->m, seq, n * c->block_size));
    for (int i = 0; i < n; i++) {
        const float *kv = c->copy[handles[i]];
        gp_status st = gp_cpu_kv_write(c->m, seq, i * c->block_size, c->block_size, kv, kv + c->half);
        if (st != GP_OK) {
            gp_cpu_reset_seq(c->m, seq);
            return st;
        }
    }
    return GP_OK;
}

static gp_status cache_run_batch(void *ctx, const gp_batch *b, float *logits)
{
    return cpu_run_batch(((gp_sched_cpu_cache *)ctx)->m, b, logits);
}

static void cache_reset_seq(void *ctx, int seq)
{
    cpu_reset_seq(((gp_sched_cpu_cache *)ctx)->m, seq);
}

gp_sched_ops gp_sched_cpu_cache_ops(gp_sched_cpu_cache *c)
{
    return (gp_sched_ops){.run_batch = cache_run_batch, .reset_seq = cache_reset_seq, .sample = NULL,
                          .retain_block = cpu_retain, .drop_block = cpu_drop, .attach_blocks = cpu_attach,
                          .ctx = c};
}

int gp_sched_cpu_cache_held(const gp_sched_cpu_cache *c)
{
    return c->held;
}
