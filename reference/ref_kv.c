/* A reference sequence's K/V copied out to host memory and into another
 * sequence, and its length set: prefix caching over the CPU reference. */
#include "ref_impl.h"

#include <string.h>

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

/* Out to (k_out, v_out) when they are set, else in from (k_in, v_in). */
static gp_status copy(gp_cpu_model *m, const char *fn, int seq, int p, int n, float *k_out, float *v_out,
                      const float *k_in, const float *v_in)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_seq(m, &c, fn, seq));
    int len = gp_kv_len(c.kv, seq);
    if (p < 0 || n < 0 || (long long)p + n > len)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d of length %d: positions [%d, %d + %d), allowed within [0, %d)",
                fn, seq, len, p, p, n, len);
    if (n > 0 && (k_out ? !v_out : !k_in || !v_in))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: k and v must be non-NULL", fn);
    const gp_kv_layout *L = gp_kv_tables_layout(c.kv);
    const int32_t *table = gp_kv_block_table(c.kv, seq);
    size_t row = (size_t)L->n_kv_heads * (size_t)L->head_dim; /* heads of one slot are contiguous */
    for (int l = 0; l < L->n_layers; l++)
        for (int i = 0; i < n; i++) {
            int t = p + i;
            size_t at = (size_t)l * c.layer_elems + gp_kv_offset(L, table[t / L->block_size], t % L->block_size, 0);
            size_t buf = ((size_t)l * (size_t)n + (size_t)i) * row;
            if (k_out) {
                memcpy(k_out + buf, c.k + at, row * sizeof(float));
                memcpy(v_out + buf, c.v + at, row * sizeof(float));
            } else {
                memcpy(c.k + at, k_in + buf, row * sizeof(float));
                memcpy(c.v + at, v_in + buf, row * sizeof(float));
            }
        }
    return GP_OK;
}

gp_status gp_cpu_kv_read(gp_cpu_model *m, int seq, int p, int n, float *k, float *v)
{
    return copy(m, "gp_cpu_kv_read", seq, p, n, k, v, NULL, NULL);
}

gp_status gp_cpu_kv_write(gp_cpu_model *m, int seq, int p, int n, const float *k, const float *v)
{
    return copy(m, "gp_cpu_kv_write", seq, p, n, NULL, NULL, k, v);
}

gp_status gp_cpu_seq_set_len(gp_cpu_model *m, int seq, int len)
{
    gp_ref_kv c = m ? gp_ref_kv_of(m) : (gp_ref_kv){0};
    GP_TRY(check_seq(m, &c, "gp_cpu_seq_set_len", seq));
    if (len < 0 || len > c.max_context)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cpu_seq_set_len: seq %d: length %d, allowed 0..%d (max_context)", seq, len,
                c.max_context);
    int now = gp_kv_len(c.kv, seq);
    if (len <= now)
        return gp_kv_truncate(c.kv, seq, len);
    GP_TRY(gp_kv_reserve(c.kv, seq, len - now));
    return gp_kv_advance(c.kv, seq, len - now);
}
