/* KV blocks shared between the reference's sequences (prefix caching over
 * the CPU reference): its paged cache's tables count each block's holders. */
#include "ref_impl.h"


static gp_status check_seq(const gp_cpu_model *m, const gp_ref_kv *c, const char *fn, int seq)
{
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (c->stepping)
        GP_FAIL(GP_ERR_STATE, "%s: a step is in progress", fn);
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
    if (!m)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_kv_drop_block: model is NULL");
    if (c.stepping)
        GP_FAIL(GP_ERR_STATE, "gp_cpu_kv_drop_block: a step is in progress");
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
