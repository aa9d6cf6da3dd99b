/* KV blocks shared between the reference's sequences (prefix caching over
 * the CPU reference): its paged cache's tables count each block's holders;
 * and the copies of whole blocks to and from a host tier's payloads. */
#include <string.h>

#include "ref_impl.h"

static gp_status check_idle(const gp_cpu_model *m, const gp_ref_kv *c, const char *fn)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (c->stepping)
        GP_FAIL(GP_ERR_STATE, "%s: a step is in progress", fn);
    return GP_OK;
}

static gp_status check_seq(const gp_cpu_model *m, const gp_ref_kv *c, const char *fn, int seq)
{
    GP_TRY(check_idle(m, c, fn));
    if (seq < 0 || seq >= c->max_seqs)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d, allowed [0, %d)", fn, seq, c->max_seqs);
    return GP_OK;
}

gp_status gp_cpu_kv_retain_block(gp_cpu_model *m, int seq, int index, int *handle)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_seq(m, &c, "gp_cpu_kv_retain_block", seq));
    return gp_kv_block_retain(c.kv, seq, index, handle);
}

gp_status gp_cpu_kv_drop_block(gp_cpu_model *m, int handle)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_idle(m, &c, "gp_cpu_kv_drop_block"));
    return gp_kv_block_drop(c.kv, handle);
}

gp_status gp_cpu_kv_attach(gp_cpu_model *m, int seq, const int *handles, int n)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_seq(m, &c, "gp_cpu_kv_attach", seq));
    return gp_kv_attach(c.kv, seq, handles, n);
}

void gp_cpu_kv_blocks(gp_cpu_model *m, int *free_blocks, int *total)
{
    gp_ref_kv c = gp_ref_kv_of(m);
    *free_blocks = gp_kv_free_blocks(c.kv);
    *total = c.max_seqs * gp_kv_max_blocks_per_seq(c.kv);
}

/* Block `block` of every layer's K and V into payload `to`, or from
 * payload `from` when `to` is NULL: one block is contiguous in each pool
 * (gp_kv_offset), so a payload is 2 x n_layers copies. */
static void copy_block(const gp_ref_kv *c, int block, float *to, const float *from)
{
    const gp_kv_layout *L = gp_kv_tables_layout(c->kv);
    size_t elems = (size_t)L->block_size * (size_t)L->n_kv_heads * (size_t)L->head_dim;
    size_t at = gp_kv_offset(L, block, 0, 0);
    for (int l = 0; l < L->n_layers; l++)
        for (int part = 0; part < 2; part++) {
            float *pool = (part ? c->v : c->k) + (size_t)l * c->layer_elems + at;
            size_t p = ((size_t)l * 2 + (size_t)part) * elems;
            if (to)
                memcpy(to + p, pool, elems * sizeof(float));
            else
                memcpy(pool, from + p, elems * sizeof(float));
        }
}

gp_status gp_cpu_kv_read_block(gp_cpu_model *m, int handle, void *payload)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_idle(m, &c, "gp_cpu_kv_read_block"));
    int n_blocks = gp_kv_tables_layout(c.kv)->n_blocks;
    if (handle < 0 || handle >= n_blocks)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_kv_read_block: handle %d, allowed [0, %d) (the pool's blocks)", handle,
                n_blocks);
    if (!payload)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_kv_read_block: payload is NULL");
    copy_block(&c, handle, payload, NULL);
    return GP_OK;
}

gp_status gp_cpu_kv_append_blocks(gp_cpu_model *m, int seq, const void *const *payloads, int n)
{
    static const char fn[] = "gp_cpu_kv_append_blocks";
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_seq(m, &c, fn, seq));
    if (n < 0 || (n > 0 && !payloads))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d: %d blocks%s, allowed n >= 0 with non-NULL payloads", fn, seq, n,
                payloads ? "" : " (payloads NULL)");
    for (int i = 0; i < n; i++)
        if (!payloads[i])
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d: payload %d of %d is NULL", fn, seq, i, n);
    int bs = gp_kv_tables_layout(c.kv)->block_size, len = gp_kv_len(c.kv, seq), first = len / bs;
    const int32_t *table = gp_kv_block_table(c.kv, seq);
    /* a block reserved past the length would sit between the old tokens and the appended ones */
    if (len % bs || (first < gp_kv_max_blocks_per_seq(c.kv) && table[first] >= 0))
        GP_FAIL(GP_ERR_STATE, "%s: seq %d holds %d tokens, not a whole number of blocks of %d with none reserved "
                "past them", fn, seq, len, bs);
    if ((long long)len + (long long)n * bs > c.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d at length %d: %d blocks of %d tokens would pass max_context %d", fn,
                seq, len, n, bs, c.max_context);
    if (n > gp_kv_free_blocks(c.kv))
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: seq %d: %d blocks asked for, the pool has %d free", fn, seq, n,
                gp_kv_free_blocks(c.kv));
    GP_TRY(gp_kv_reserve(c.kv, seq, n * bs));
    for (int i = 0; i < n; i++)
        copy_block(&c, table[first + i], NULL, payloads[i]);
    return gp_kv_advance(c.kv, seq, n * bs);
}
