/* The choice of the decode-attention kernel for a call, its names, and the
 * checks of the parameters that steer it; the prefill-attention kernels'
 * names. Host-only C, so that the rule can be tested (and printed by
 * reports) without a GPU. */
#include <string.h>

#include "decode_attn_rule.h"

/* Each warp of the streaming kernel must get at least this many items (row,
 * KV head) for the automatic rule to pick it over the split kernels. */
#define GP_ATTN_STREAM_MIN_ITEMS 2

static const char *const k_names[GP_ATTN_KERNEL_COUNT] = {
    [GP_ATTN_KERNEL_AUTO] = "auto",
    [GP_ATTN_KERNEL_CUDACORE] = "cudacore",
    [GP_ATTN_KERNEL_CUDACORE_PIPE] = "cudacore_pipe",
    [GP_ATTN_KERNEL_MMA] = "mma",
    [GP_ATTN_KERNEL_STREAM] = "stream",
};

const char *gp_attn_kernel_name(gp_attn_kernel k)
{
    return (int)k >= 0 && (int)k < GP_ATTN_KERNEL_COUNT ? k_names[k] : "unknown";
}

gp_status gp_attn_kernel_parse(const char *name, gp_attn_kernel *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_attn_kernel_parse: out must not be NULL");
    for (int k = 0; name && k < GP_ATTN_KERNEL_COUNT; k++)
        if (strcmp(name, k_names[k]) == 0) {
            *out = (gp_attn_kernel)k;
            return GP_OK;
        }
    GP_FAIL(GP_ERR_INVALID_ARG, "attention kernel '%s' is not one of auto, cudacore, "
            "cudacore_pipe, mma, stream", name ? name : "(null)");
}

gp_decode_attn_params gp_decode_attn_default_params(void)
{
    gp_decode_attn_params p;
    memset(&p, 0, sizeof p);
    p.kernel = GP_ATTN_KERNEL_AUTO;
    p.stream_warps_cap = 0;
    p.kv_evict_first = 1;
    return p;
}

gp_status gp_attn_check_params(const char *fn, const gp_decode_attn_params *p)
{
    if (p->sm_count < 0 || p->max_splits < 0 || p->ctas_per_sm_hint < 0 || p->force_splits < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: params sm_count = %d, max_splits = %d, ctas_per_sm_hint "
                "= %d, force_splits = %d must not be negative", fn, p->sm_count, p->max_splits,
                p->ctas_per_sm_hint, p->force_splits);
    if (p->force_splits > GP_DECODE_ATTN_MAX_SPLITS || p->max_splits > GP_DECODE_ATTN_MAX_SPLITS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: force_splits = %d / max_splits = %d exceed %d", fn,
                p->force_splits, p->max_splits, GP_DECODE_ATTN_MAX_SPLITS);
    if ((int)p->kernel < 0 || (int)p->kernel >= GP_ATTN_KERNEL_COUNT)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: params kernel = %d is not a gp_attn_kernel: allowed 0..%d "
                "(auto, cudacore, cudacore_pipe, mma, stream)", fn, (int)p->kernel,
                GP_ATTN_KERNEL_COUNT - 1);
    if (p->stream_warps_cap != 0
        && (p->stream_warps_cap < 2 || p->stream_warps_cap > GP_ATTN_STREAM_WARPS_CAP_MAX
            || p->stream_warps_cap % 2))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: params stream_warps_cap = %d: allowed 0 (no cap) or an "
                "even number of warps per SM in 2..%d", fn, p->stream_warps_cap,
                GP_ATTN_STREAM_WARPS_CAP_MAX);
    if (p->kv_evict_first != 0 && p->kv_evict_first != 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: params kv_evict_first = %d: allowed 1 (K/V copies "
                "marked L2 evict_first) or 0 (the usual L2 policy)", fn, p->kv_evict_first);
    return GP_OK;
}

gp_status gp_decode_attn_params_check(const gp_decode_attn_params *p)
{
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_decode_attn_params_check: p is NULL");
    return gp_attn_check_params("decode attention", p);
}

/* The tensor-core kernels are written for head_dim 128 and up to 8 heads
 * per group (the 8 columns of an mma). */
static bool gp_attn_mma_shape(const gp_attn_call *c)
{
    return c->head_dim == 128 && c->group >= 1 && c->group <= 8;
}

/* The streaming kernel runs one split and stores 4-byte pairs of outputs. */
static bool gp_attn_stream_shape(const gp_attn_call *c)
{
    return gp_attn_mma_shape(c) && c->n_splits == 1 && c->out_aligned4;
}

bool gp_attn_stream_candidate(const gp_decode_attn_params *p, const gp_attn_call *c)
{
    return (p->kernel == GP_ATTN_KERNEL_AUTO || p->kernel == GP_ATTN_KERNEL_STREAM)
           && gp_attn_stream_shape(c);
}

gp_status gp_decode_attn_choose(const gp_decode_attn_params *p, const gp_attn_call *c,
                                gp_attn_kernel *kernel, int *stream_warps)
{
    static const char fn[] = "gp_decode_attn_choose";
    if (!c || !kernel)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: c and kernel must not be NULL", fn);
    *kernel = GP_ATTN_KERNEL_AUTO;
    if (stream_warps)
        *stream_warps = 0;
    gp_decode_attn_params dp = gp_decode_attn_default_params();
    if (!p)
        p = &dp;
    GP_TRY(gp_attn_check_params(fn, p));
    if (c->B < 1 || c->n_kv_heads < 1 || c->group < 1 || c->head_dim < 1 || c->n_splits < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d, n_kv_heads = %d, group = %d, head_dim = %d and "
                "n_splits = %d must be positive", fn, c->B, c->n_kv_heads, c->group, c->head_dim,
                c->n_splits);
    if (c->sm_count < 0 || c->stream_warps_per_sm < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: sm_count = %d and stream_warps_per_sm = %d must not be "
                "negative", fn, c->sm_count, c->stream_warps_per_sm);

    if (gp_attn_stream_candidate(p, c) && c->stream_warps_per_sm > 0 && c->sm_count > 0) {
        int per_sm = c->stream_warps_per_sm;
        if (p->stream_warps_cap > 0 && p->stream_warps_cap < per_sm)
            per_sm = p->stream_warps_cap;
        const int64_t items = (int64_t)c->B * c->n_kv_heads;
        const int64_t resident = (int64_t)c->sm_count * per_sm;
        if (p->kernel == GP_ATTN_KERNEL_STREAM || items >= GP_ATTN_STREAM_MIN_ITEMS * resident) {
            *kernel = GP_ATTN_KERNEL_STREAM;
            if (stream_warps)
                *stream_warps = (int)(items < resident ? items : resident);
            return GP_OK;
        }
    }
    if (p->kernel == GP_ATTN_KERNEL_CUDACORE || p->kernel == GP_ATTN_KERNEL_CUDACORE_PIPE) {
        *kernel = p->kernel;
        return GP_OK;
    }
    if (gp_attn_mma_shape(c)) {
        *kernel = GP_ATTN_KERNEL_MMA;
        return GP_OK;
    }
    *kernel = c->n_splits > 1 ? GP_ATTN_KERNEL_CUDACORE_PIPE : GP_ATTN_KERNEL_CUDACORE;
    return GP_OK;
}

static const char *const k_prefill_names[] = {"auto", "mma", "hopper"};
#define PREFILL_KERNELS ((int)(sizeof k_prefill_names / sizeof k_prefill_names[0]))

const char *gp_prefill_attn_kernel_name(gp_prefill_attn_kernel k)
{
    return (int)k >= 0 && (int)k < PREFILL_KERNELS ? k_prefill_names[k] : "unknown";
}

gp_status gp_prefill_attn_kernel_parse(const char *name, gp_prefill_attn_kernel *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_prefill_attn_kernel_parse: out must not be NULL");
    for (int k = 0; name && k < PREFILL_KERNELS; k++)
        if (strcmp(name, k_prefill_names[k]) == 0) {
            *out = (gp_prefill_attn_kernel)k;
            return GP_OK;
        }
    GP_FAIL(GP_ERR_INVALID_ARG, "prefill attention kernel '%s' is not one of " GP_PREFILL_ATTN_KERNEL_NAMES,
            name ? name : "(null)");
}

gp_status gp_prefill_attn_kernel_parse_list(const char *list, gp_prefill_attn_kernel *out, int cap, int *n)
{
    if (!list || !out || !n || cap < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_prefill_attn_kernel_parse_list: list, out and n must not be NULL, cap "
                "%d >= 1", cap);
    char buf[256];
    if (strlen(list) >= sizeof buf)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill attention kernels '%.40s...': a list of at most %zu characters", list,
                sizeof buf - 1);
    strcpy(buf, list);
    int k = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (k == cap)
            GP_FAIL(GP_ERR_INVALID_ARG, "prefill attention kernels '%s': at most %d", list, cap);
        GP_TRY(gp_prefill_attn_kernel_parse(t, &out[k]));
        k++;
    }
    if (k == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "prefill attention kernels '%s': no kernel named", list);
    *n = k;
    return GP_OK;
}
