/* The pairs of a pool: green contexts cut from one split of the device, each
 * with a stream; plain streams in the fallback; teardown of either. */
#include "green_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_device.h"

/* Driver call inside a function with cleanup: maps the failure (and notes a
 * CUDA_ERROR_NOT_SUPPORTED, which means "fall back", in *unsup; not on a dead
 * context, where falling back would only fail later). */
#define GREEN_CU(pool, call, what, unsup, st, label)                                            \
    do {                                                                                         \
        CUresult gr_r_ = (call);                                                                 \
        if (gr_r_ != CUDA_SUCCESS) {                                                             \
            (st) = gp_green_cu_fail(&(pool)->drv, gr_r_, (what), __FILE__, __LINE__);            \
            if ((st) == GP_ERR_UNSUPPORTED)                                                      \
                *(unsup) = 1;                                                                    \
            goto label;                                                                          \
        }                                                                                        \
    } while (0)

/* ------------------------------------------------------------- teardown */

static void td_note(gp_green_teardown *td, const char *what, const char *detail)
{
    if (!td->failures++)
        snprintf(td->first, sizeof td->first, "%s: %s", what, detail);
}

static void td_rt(gp_green_teardown *td, cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        td_note(td, what, cudaGetErrorName(e));
        (void)cudaGetLastError();
    }
}

static void td_cu(gp_green_teardown *td, const gp_green_driver *d, CUresult r, const char *what)
{
    const char *name = NULL;
    if (r == CUDA_SUCCESS)
        return;
    if (!d->GetErrorName || d->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    td_note(td, what, name);
}

/* Streams first (their work finished, so no kernel is cut off), then the
 * contexts: the driver refuses to destroy a stream of a destroyed context. */
static void slot_release(const gp_green_pool *pool, gp_green_slot *s, gp_green_teardown *td)
{
    cudaStream_t *streams[2] = { &s->attn_stream, &s->ffn_stream };
    CUgreenCtx *ctxs[2] = { &s->attn_ctx, &s->ffn_ctx };
    for (int i = 0; i < 2; i++) {
        if (!*streams[i])
            continue;
        td_rt(td, cudaStreamSynchronize(*streams[i]), "cudaStreamSynchronize");
        if (*ctxs[i])
            td_cu(td, &pool->drv, pool->drv.StreamDestroy((CUstream)*streams[i]), "cuStreamDestroy");
        else
            td_rt(td, cudaStreamDestroy(*streams[i]), "cudaStreamDestroy");
        *streams[i] = NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (*ctxs[i])
            td_cu(td, &pool->drv, pool->drv.GreenCtxDestroy(*ctxs[i]), "cuGreenCtxDestroy");
        *ctxs[i] = NULL;
    }
    s->pub.attn_stream = s->pub.ffn_stream = NULL;
}

void gp_green_pairs_release(gp_green_pool *pool, gp_green_teardown *td)
{
    for (int i = 0; pool->slots && i < pool->n; i++)
        slot_release(pool, &pool->slots[i], td);
    (void)cudaGetLastError();
}

/* ------------------------------------------------------- partitioned pairs */

static void split_name(const gp_green_slot *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%d:%d", s->pub.plan.attn_sms, s->pub.plan.ffn_sms);
}

/* One side's green context and stream from groups [first, first + count)
 * plus, when with_rem, the remainder: all outputs of the same split call, as
 * cuDevResourceGenerateDesc requires for combining SM resources. */
static gp_status build_side(gp_green_pool *pool, CUdevice dev, const CUdevResource *groups,
                            const CUdevResource *rem, int first, int count, int with_rem,
                            CUdevResource *scratch, const char *side, gp_green_slot *s,
                            CUgreenCtx *ctx, cudaStream_t *stream, int *obtained, int *unsup)
{
    gp_status st = GP_OK;
    char split[32], what[128];
    split_name(s, split, sizeof split);
    int k = 0;
    for (int i = first; i < first + count; i++)
        scratch[k++] = groups[i];
    if (with_rem)
        scratch[k++] = *rem;

    CUdevResourceDesc desc = NULL;
    snprintf(what, sizeof what, "cuDevResourceGenerateDesc (%s of split %s, %d resources)", side,
             split, k);
    GREEN_CU(pool, pool->drv.DevResourceGenerateDesc(&desc, scratch, (unsigned)k), what, unsup,
             st, out);
    snprintf(what, sizeof what, "cuGreenCtxCreate (%s of split %s)", side, split);
    /* green contexts and their streams take device memory: counted for
     * GP_FAULT_DEVICE_ALLOC, failing as the driver would when out of it */
    GREEN_CU(pool, gp_fault_alloc_hit(what, 0) ? CUDA_ERROR_OUT_OF_MEMORY
                   : pool->drv.GreenCtxCreate(ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM),
             what, unsup, st, out);

    CUdevResource got;
    memset(&got, 0, sizeof got);
    snprintf(what, sizeof what, "cuGreenCtxGetDevResource (%s of split %s)", side, split);
    GREEN_CU(pool, pool->drv.GreenCtxGetDevResource(*ctx, &got, CU_DEV_RESOURCE_TYPE_SM), what,
             unsup, st, out);
    *obtained = (int)got.sm.smCount;

    CUstream cs = NULL;
    snprintf(what, sizeof what, "cuGreenCtxStreamCreate (%s of split %s)", side, split);
    /* Non-blocking is required by the driver; it also keeps the legacy
     * default stream from serialising the two partitions. */
    GREEN_CU(pool, gp_fault_alloc_hit(what, 0) ? CUDA_ERROR_OUT_OF_MEMORY
                   : pool->drv.GreenCtxStreamCreate(&cs, *ctx, CU_STREAM_NON_BLOCKING, 0),
             what, unsup, st, out);
    *stream = (cudaStream_t)cs; /* the same handle type: the runtime takes it as is */
out:
    return st;
}

/* Checks that the driver cut the device as the planner predicted: the plans
 * (and the messages the user saw) are stated in those numbers. */
static gp_status check_cut(const gp_green_pool *pool, unsigned n, const CUdevResource *groups,
                           const CUdevResource *rem, int g, int n_expect, int r_expect)
{
    if ((int)n != n_expect)
        GP_FAIL(GP_ERR_UNSUPPORTED, "cuDevSmResourceSplitByCount cut %d SMs into %u groups of "
                "%d, the planner expected %d (with %d remainder SMs); use force_fallback to run "
                "unpartitioned", pool->info.sm_count, n, g, n_expect, r_expect);
    for (unsigned i = 0; groups && i < n; i++)
        if ((int)groups[i].sm.smCount != g)
            GP_FAIL(GP_ERR_UNSUPPORTED, "cuDevSmResourceSplitByCount: group %u of %u has %u SMs, "
                    "the planner expected %d", i, n, groups[i].sm.smCount, g);
    if (rem && (int)rem->sm.smCount != r_expect)
        GP_FAIL(GP_ERR_UNSUPPORTED, "cuDevSmResourceSplitByCount left %u remainder SMs, the "
                "planner expected %d", rem->sm.smCount, r_expect);
    if (rem && r_expect && rem->type != CU_DEV_RESOURCE_TYPE_SM)
        GP_FAIL(GP_ERR_UNSUPPORTED, "cuDevSmResourceSplitByCount: the remainder has resource "
                "type %d, not SM", (int)rem->type);
    return GP_OK;
}

/* Cuts the device once, so that every pair's A and F come from the same
 * disjoint groups, then builds each pair. */
gp_status gp_green_pairs_build(gp_green_pool *pool, CUdevice dev, const CUdevResource *all,
                               int *unsup)
{
    gp_status st = GP_OK;
    int g = gp_split_granularity(&pool->info);
    int n_expect = pool->info.groups, r_expect = pool->info.sm_count - n_expect * g;
    CUdevResource *groups = NULL, *scratch = NULL, rem;
    memset(&rem, 0, sizeof rem);

    unsigned n = 0;
    GREEN_CU(pool, pool->drv.DevSmResourceSplitByCount(NULL, &n, all, NULL, 0, (unsigned)g),
             "cuDevSmResourceSplitByCount (count)", unsup, st, out);
    if ((st = check_cut(pool, n, NULL, NULL, g, n_expect, r_expect)) != GP_OK)
        goto out;
    groups = (CUdevResource *)calloc(n, sizeof *groups);
    scratch = (CUdevResource *)calloc((size_t)n + 1, sizeof *scratch);
    if (!groups || !scratch) {
        gp_set_error("green pool: no host memory for %u SM groups", n);
        st = GP_ERR_NO_MEMORY;
        goto out;
    }
    unsigned got = n;
    GREEN_CU(pool, pool->drv.DevSmResourceSplitByCount(groups, &got, all, &rem, 0, (unsigned)g),
             "cuDevSmResourceSplitByCount", unsup, st, out);
    if ((st = check_cut(pool, got, groups, &rem, g, n_expect, r_expect)) != GP_OK)
        goto out;

    for (int i = 0; i < pool->n; i++) {
        gp_green_slot *s = &pool->slots[i];
        const gp_split_plan *p = &s->pub.plan;
        int rem_a = p->remainder > 0 && p->remainder_side == GP_SPLIT_SIDE_A;
        int rem_f = p->remainder > 0 && p->remainder_side == GP_SPLIT_SIDE_F;
        if ((st = build_side(pool, dev, groups, &rem, 0, p->attn_groups, rem_a, scratch, "A", s,
                             &s->attn_ctx, &s->attn_stream, &s->pub.attn_sms, unsup)) != GP_OK
            || (st = build_side(pool, dev, groups, &rem, p->attn_groups, p->ffn_groups, rem_f,
                                scratch, "F", s, &s->ffn_ctx, &s->ffn_stream, &s->pub.ffn_sms,
                                unsup)) != GP_OK)
            goto out;
        s->pub.attn_stream = s->attn_stream;
        s->pub.ffn_stream = s->ffn_stream;
        s->pub.partitioned = 1;
        /* The obtained counts are what the GEMMs are told, so a difference
         * is not fatal, but whoever reads the figures must know. */
        if (s->pub.attn_sms != p->attn_sms || s->pub.ffn_sms != p->ffn_sms)
            fprintf(stderr, "greenpipe: split %d:%d obtained %d:%d SMs from the driver\n",
                    p->attn_sms, p->ffn_sms, s->pub.attn_sms, s->pub.ffn_sms);
    }
out:
    free(groups);
    free(scratch);
    return st;
}

/* ----------------------------------------------------- unpartitioned pairs */

gp_status gp_green_pairs_build_plain(gp_green_pool *pool)
{
    gp_status st = GP_OK;
    for (int i = 0; i < pool->n; i++) {
        gp_green_slot *s = &pool->slots[i];
        char what[96];
        snprintf(what, sizeof what, "attention stream of unpartitioned pair %d", i);
        if ((st = gp_device_stream_create(&s->attn_stream, what)) != GP_OK)
            goto out;
        snprintf(what, sizeof what, "FFN stream of unpartitioned pair %d", i);
        if ((st = gp_device_stream_create(&s->ffn_stream, what)) != GP_OK)
            goto out;
        s->pub.attn_stream = s->attn_stream;
        s->pub.ffn_stream = s->ffn_stream;
        s->pub.attn_sms = s->pub.ffn_sms = pool->device_sms;
        s->pub.partitioned = 0;
    }
out:
    return st;
}
