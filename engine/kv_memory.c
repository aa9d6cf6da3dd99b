/* The KV memory's hook list and its resident implementation: paged blocks
 * on the device, which need nothing around attention. */
#include <stdlib.h>

#include "kv_memory.h"

gp_status gp_kv_memory_init(gp_kv_memory *m, const gp_kv_memory_ops *ops, gp_kv_device *kv, int max_batch)
{
    m->ops = ops;
    m->kv = kv;
    m->plan.spans = calloc((size_t)max_batch, sizeof *m->plan.spans);
    if (!m->plan.spans)
        GP_FAIL(GP_ERR_NO_MEMORY, "KV memory: out of host memory for a plan of %d sequences", max_batch);
    const gp_kv_hook_ops *h = &ops->hooks;
    if (h->begin_batch || h->before_attn || h->after_attn || h->end_batch)
        m->hooks[m->n_hooks++] = (gp_kv_hook){h, m};
    return GP_OK;
}

void gp_kv_memory_fini(gp_kv_memory *m)
{
    free(m->plan.spans);
    m->plan.spans = NULL;
}

void gp_kv_memory_destroy(gp_kv_memory *m)
{
    if (m)
        m->ops->destroy(m);
}

gp_status gp_kv_memory_attach(gp_kv_memory *m, const gp_kv_hook_ops *ops, void *self)
{
    /* the memory's own hook, if any, stays last */
    const bool own = m->n_hooks > 0 && m->hooks[m->n_hooks - 1].self == m;
    const int at = own ? m->n_hooks - 1 : m->n_hooks; /* the providers attached so far */
    if (at >= GP_KV_MAX_PROVIDERS)
        GP_FAIL(GP_ERR_STATE, "KV memory: %d providers attached already, allowed at most %d", at,
                GP_KV_MAX_PROVIDERS);
    if (own)
        m->hooks[m->n_hooks] = m->hooks[at];
    m->hooks[at] = (gp_kv_hook){ops, self};
    m->n_hooks++;
    return GP_OK;
}

void gp_kv_memory_detach(gp_kv_memory *m, const void *self)
{
    for (int i = 0; i < m->n_hooks; i++)
        if (m->hooks[i].self == self) {
            for (int j = i + 1; j < m->n_hooks; j++)
                m->hooks[j - 1] = m->hooks[j];
            m->n_hooks--;
            return;
        }
}

static gp_status resident_copy(gp_kv_memory *m, int layer, int seq, const int32_t *table, int pos0, int n, void *k,
                               void *v, gp_kv_copy_dir dir, cudaStream_t s)
{
    (void)seq;
    return gp_kv_copy_tokens(gp_kv_device_layout(m->kv), gp_kv_device_k(m->kv, layer), gp_kv_device_v(m->kv, layer),
                             table, pos0, n, k, v, dir, s);
}

static void resident_destroy(gp_kv_memory *m)
{
    gp_kv_memory_fini(m);
    free(m);
}

static const gp_kv_memory_ops resident_ops = {.copy_tokens = resident_copy, .destroy = resident_destroy};

gp_status gp_kv_memory_create_resident(gp_kv_device *kv, int max_batch, gp_kv_memory **out)
{
    *out = NULL;
    gp_kv_memory *m = calloc(1, sizeof *m);
    if (!m)
        GP_FAIL(GP_ERR_NO_MEMORY, "KV memory: out of host memory");
    gp_status st = gp_kv_memory_init(m, &resident_ops, kv, max_batch);
    if (st != GP_OK) {
        resident_destroy(m);
        return st;
    }
    *out = m;
    return GP_OK;
}
